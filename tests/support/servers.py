"""Real SGLang servers for tests of the shim inside the engine: launched ahead and shared by a test
module's tests (ServerPool), driven with prompts, and their frames checked against what SGLang itself
reports per request (``meta_info``)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from eagle3scope.analysis import analyse
from eagle3scope.demo.server import SGLangServer
from eagle3scope.wire.endpoints import fresh_ipc_endpoint

PROMPTS = ["hello world", "the quick brown fox", "one two three four", "a b c"]
MAX_NEW = 24


def launch(target, draft, env, *, algorithm="EAGLE3", **server):
    """Subscribe, then spawn the server without waiting for it: (subscriber, server), for :func:`drive`.
    ``server``: more SGLangServer arguments (topk, num_draft_tokens, extra_args, ...)."""
    from eagle3scope.live.subscriber import Subscriber

    endpoint = fresh_ipc_endpoint()
    sub = Subscriber([endpoint])
    try:
        srv = SGLangServer(target, draft, algorithm=algorithm, env={"EAGLE3SCOPE_ENDPOINT": endpoint, **env}, **server)
        return sub, srv.launch()
    except BaseException:
        sub.close()
        raise


def drive(launched, *, concurrent=False, temperatures=(0.0,), prompts=PROMPTS, max_new=MAX_NEW, publishers=1):
    """Run the prompts at each temperature (greedy first) on a launched server once it is ready, with
    the shim publishing; stop it, close the subscriber and return (frames, responses). Requests start
    once ``publishers`` hellos arrived (DP ranks found from the first one's, tests/engine/test_parallel_engine.py)."""
    sub, srv = launched
    frames = []
    try:
        srv.wait_ready()
        frames += sub.poll(timeout_ms=200)
        deadline = time.monotonic() + 30
        while len({f.src for f in frames if f.kind == "hello"}) < publishers and time.monotonic() < deadline:
            frames += sub.poll(timeout_ms=200)

        def ask(request):
            prompt, temperature = request
            params = {"max_new_tokens": max_new, "temperature": temperature, "ignore_eos": True}
            return srv.post("/generate", {"text": prompt, "sampling_params": params})

        requests = [(p, t) for t in temperatures for p in prompts]
        if concurrent:
            with ThreadPoolExecutor(len(prompts)) as pool:
                responses = list(pool.map(ask, requests))
        else:
            responses = [ask(r) for r in requests]
        frames += until_quiet(sub)
    finally:
        srv.stop()  # not ``with srv``: entering a server starts it (it was launched already)
        sub.close()
    return frames, responses


def until_quiet(sub, quiet_s: float = 1.5) -> list:
    """The frames still arriving once the requests are answered, until no step came for ``quiet_s``."""
    frames = []
    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < quiet_s:
        new = sub.poll(timeout_ms=200)
        frames += new
        if any(f.kind == "step" for f in new):
            quiet_since = time.monotonic()
    return frames


class ServerPool:
    """The servers of one test module, started ahead: taking one's results launches the next ones
    (``AHEAD`` alive at once), so one server's startup overlaps another's startup or requests instead
    of following them. ``jobs``: fixture name -> ((:func:`launch` args, kwargs), :func:`drive` kwargs);
    a job runs when a selected test of the module uses its fixture or is parametrised with its name,
    in the order the tests ask for them (a ``-k`` run starts only what it needs)."""

    AHEAD = 2  # servers alive at once: the two cores of the test machine
    STARTUP_TIMEOUT = 600.0  # counted from the launch, which may now come while another server runs

    def __init__(self, request, jobs: dict):
        order = []
        for item in request.session.items:
            if getattr(item, "module", None) is not request.module:
                continue
            callspec = getattr(item, "callspec", None)
            for name in (*item.fixturenames, *(callspec.params.values() if callspec else ())):
                if isinstance(name, str) and name in jobs and name not in order:
                    order.append(name)
        self.jobs = {name: jobs[name] for name in order}
        self.launched: dict = {}
        request.addfinalizer(self.close)

    def take(self, name: str):
        """(frames, responses) of the job ``name``; launches it and the next jobs first."""
        order = list(self.jobs)
        for ahead in order[order.index(name):][: self.AHEAD]:
            if ahead not in self.launched:
                (args, kwargs), _ = self.jobs[ahead]
                self.launched[ahead] = launch(*args, startup_timeout=self.STARTUP_TIMEOUT, **kwargs)
        _, driving = self.jobs.pop(name)
        return drive(self.launched.pop(name), **driving)

    def close(self) -> None:
        """Stop servers launched ahead for tests that did not run (a failure, -x)."""
        for sub, srv in self.launched.values():
            srv.stop()
            sub.close()
        self.launched.clear()


def pooled(name: str, pool: str = "pool"):
    """A module fixture with the (frames, responses) of the job ``name`` of the module's fixture ``pool``
    (a ServerPool; a module may have several, e.g. one for each set of models)."""
    @pytest.fixture(scope="module", name=name)
    def results(request):
        return request.getfixturevalue(pool).take(name)

    return results


#: The sync guard around every hot hook body (eagle3scope_shim.syncguard): a sync would be a failed hook.
GUARDED = {"EAGLE3SCOPE_SYNC_GUARD": "1"}


def failed_hooks(frames) -> list:
    return [b for b in bodies(frames, "hook") if b["status"] == "failed"]


def bodies(frames, kind):
    """The bodies of the frames of one kind, in arrival order."""
    return [f.body for f in frames if f.kind == kind]


def last_body(frames, kind):
    """The last body of one kind; there must be one."""
    found = bodies(frames, kind)
    assert found, f"no {kind} event"
    return found[-1]


def check_agreement(frames, responses, proposals=3):
    """Per request: the shim's steps are exactly the rounds SGLang counted (a finished request's extra
    round, which SGLang discards, is not published for it: the commit seam) and add up to what SGLang
    itself reports in meta_info, histogram included (update_spec_correct_drafts_histogram,
    managers/schedule_batch.py, 0.5.23). ``proposals``: draft tokens per request per step, None: any."""
    steps = sorted(bodies(frames, "step"), key=lambda b: b["seq"])
    for response in responses:
        meta, rid = response["meta_info"], response["meta_info"]["id"]
        mine = [(b["accepted"][i], b["bonus"][i], b["accepted_ids"][i], b["draft_ids"][i])
                for b in steps if b["mode"] == "decode" for i, r in enumerate(b["rids"]) if r == rid]
        verify_ct = meta["spec_verify_ct"]
        assert len(mine) == verify_ct, (rid, verify_ct, len(mine))
        assert sum(a for a, _, _, _ in mine) == meta["spec_num_correct_drafts"]  # bonus excluded
        hist = [0] * (max((a for a, *_ in mine), default=-1) + 1)
        for a, *_ in mine:
            hist[a] += 1
        assert hist == meta["spec_correct_drafts_histogram"], (rid, hist, meta["spec_correct_drafts_histogram"])
        committed = [t for _, _, ids, _ in mine for t in ids]
        assert all(len(ids) == a + b for a, b, ids, _ in mine)
        assert 1 + sum(a + b for a, b, _, _ in mine[:-1]) < meta["completion_tokens"] <= 1 + len(committed)
        assert response["output_ids"][1:] == committed[: meta["completion_tokens"] - 1]
        assert proposals is None or all(len(d) == proposals for *_, d in mine)  # num_draft_tokens - 1 per request
    check_finished(frames, responses)


def check_finished(frames, responses):
    """Every request SGLang finished is published once (the finish frame) with the counts meta_info
    reports, and the viewer, which tallies each request from its steps, agrees on every one it judged:
    accounting-mismatch stays silent."""
    finished = [r for b in bodies(frames, "finish") for r in b["requests"]]
    assert len({r["rid"] for r in finished}) == len(finished), "a request was published as finished twice"
    by_rid = {r["rid"]: r for r in finished}
    for response in responses:
        meta = response["meta_info"]
        assert by_rid.get(meta["id"]) == {"rid": meta["id"], "verify_ct": meta["spec_verify_ct"],
                                          "correct_drafts": meta["spec_num_correct_drafts"],
                                          "histogram": meta["spec_correct_drafts_histogram"]}, meta["id"]
    state = analyse(frames)
    accounts = [pub.accounting for pub in state.runs()]
    assert sum(a.compared for a in accounts) >= len(responses)  # SGLang's warm-up request may add one
    assert sum(a.mismatched + a.unverifiable for a in accounts) == 0, [a.examples for a in accounts]
    assert "accounting-mismatch" not in {v.id for v in state.violations()}
