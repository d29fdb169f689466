"""The tool checks its own counts against SGLang's: the shim's ``finish`` frames carry SGLang's
per-request counts (meta_info's spec_verify_ct, spec_num_correct_drafts, spec_correct_drafts_histogram),
the viewer tallies each request from its steps, and ``accounting-mismatch`` fires on any difference,
in ``check`` (text, ``--json``, ``--junit``) as every rule does. Requests whose start the viewer did
not see, during which frames were lost, or still running at the end are not judged."""

from __future__ import annotations

import json
import random
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given, settings, strategies as st

from benchmarks.support.analysis_streams import K, Stream, healthy_load, hello, step
from support.cli import invoke
from support.recordings import record
from eagle3scope.analysis import analyse
from eagle3scope.wire import Frame, FrameError, decode_frame, encode_frame
from eagle3scope.wire.bodies import read

RULE = "accounting-mismatch"


def served(n_requests: int = 6, *, rounds: int = 5, bs: int = 2, seed: int = 0, miscount=None, finish=True,
           gap_in: str | None = None, shim_drop_in: str | None = None) -> tuple[list, dict]:
    """Frames of a server answering ``n_requests`` requests ``bs`` at a time, as the shim sends them: a
    prefill step per batch, ``rounds`` decode steps, then a finish frame with SGLang's own counts (the
    truth the test chose). ``miscount(seq, rids, accepted) -> accepted`` plants a miscount in the steps
    the shim publishes; ``gap_in``: a frame of that request's life is lost in transit; ``shim_drop_in``:
    the shim drops a frame during it (its finish frame's ``dropped`` says so). Returns (frames, truth)."""
    rng = random.Random(seed)
    s = Stream()
    frames = [s.frame("hello", hello()), s.frame("load", healthy_load())]
    truth, seq, dropped = {}, 0, 0
    for first in range(0, n_requests, bs):
        rids = [f"req-{i}" for i in range(first, min(first + bs, n_requests))]
        prefill = step(seq, s.t, [0] * len(rids)) | {"mode": "prefill", "rids": rids, "draft_ids": [[] for _ in rids],
                                                     "accepted_ids": [[] for _ in rids], "bonus": [0] * len(rids)}
        frames.append(s.frame("step", prefill))
        seq += 1
        for _ in range(rounds):
            accepted = [rng.randint(0, K) for _ in rids]
            for rid, a in zip(rids, accepted):
                t = truth.setdefault(rid, {"verify_ct": 0, "correct_drafts": 0, "histogram": [0] * (K + 1)})
                t["verify_ct"] += 1
                t["correct_drafts"] += a
                t["histogram"][a] += 1
            shown = miscount(seq, rids, accepted) if miscount else accepted
            kept = [(rid, a) for rid, a in zip(rids, shown) if a is not None]  # None: a round the shim left out
            body = step(seq, s.t, [a for _, a in kept]) | {"rids": [rid for rid, _ in kept]}
            frames.append(s.frame("step", body))
            seq += 1
        if gap_in in rids:
            s.n += 1  # a frame the reader never gets
        if shim_drop_in in rids:
            dropped += 1
        if finish:
            requests = [{"rid": rid, **truth[rid], "histogram": _sglang_hist(truth[rid]["histogram"])} for rid in rids]
            frames.append(s.frame("finish", {"seq": seq - 1, "dropped": dropped, "requests": requests}))
    return frames, truth


def _sglang_hist(hist: list) -> list:
    """SGLang's histogram list ends at the highest number of accepted drafts seen (update_spec_correct_drafts_histogram)."""
    end = max((i for i, n in enumerate(hist) if n), default=-1) + 1
    return hist[:end]


def _violation(state):
    return next((v for v in state.violations() if v.id == RULE), None)


def test_agreeing_counts_fire_nothing_and_every_finished_request_is_compared():
    frames, truth = served(8)
    state = analyse(frames)
    assert _violation(state) is None
    (pub,) = state.publishers.values()
    assert (pub.accounting.compared, pub.accounting.mismatched) == (len(truth), 0)
    assert pub.accounting.open == {}


def test_a_round_the_shim_never_published_fires_with_both_counts():
    """The planted miscount: one step the shim publishes leaves one request's round out (as a failed
    hook or a round mislabelled prefill would)."""
    frames, truth = served(4, miscount=lambda seq, rids, acc: [None, *acc[1:]] if seq == 3 else acc)
    v = _violation(analyse(frames))
    assert v is not None and v.severity == "error" and v.active
    assert v.evidence["requests_mismatched"] == 1 and v.evidence["requests_compared"] == len(truth)
    (example,) = v.evidence["examples"]
    assert example["rid"] == "req-0"
    assert example["sglang"]["verify_ct"] == truth["req-0"]["verify_ct"] == example["eagle3scope"]["verify_ct"] + 1
    assert v.first_seq == 5  # the last step before the finish that showed it
    assert "hook-failed" in v.fix


def test_an_accepted_count_off_by_one_fires():
    frames, truth = served(4, miscount=lambda seq, rids, acc: [min(a + 1, K) if seq == 2 else a for a in acc])
    v = _violation(analyse(frames))
    assert v is not None and v.evidence["requests_mismatched"] >= 1
    for example in v.evidence["examples"]:
        rid = example["rid"]
        assert example["sglang"]["correct_drafts"] == truth[rid]["correct_drafts"] != example["eagle3scope"]["correct_drafts"]


def _then(frames: list, body: dict) -> list:
    """``frames`` and one more step frame after them."""
    last = frames[-1]
    return [*frames, Frame("step", last.src, last.n + 1, last.t + 1, body)]


def test_a_round_counted_after_the_finish_fires_where_sglang_discards_it():
    """A finished request's extra overlap tick, published as a counted round (not in ``discarded``):
    from SGLang 0.5.12 the scheduler discards it, so the tool overcounts; 0.5.5-0.5.10 count it themselves."""
    frames, _ = served(2, rounds=3)
    tick = step(4, frames[-1].t, [1, 0]) | {"rids": ["req-0", "req-1"]}
    v = _violation(analyse(_then(frames, tick)))
    assert v is not None and v.evidence["rounds_after_finish"] == 2 and v.evidence["requests_mismatched"] == 0
    assert v.first_seq == 4 and v.evidence["after_finish_examples"][0] == {"rid": "req-0", "seq": 4}
    discarded = step(4, frames[-1].t, [1]) | {"rids": ["req-9"], "discarded": ["req-0", "req-1"]}
    assert _violation(analyse(_then(frames, discarded))) is None
    again = step(4, frames[-1].t, [0]) | {"mode": "prefill", "rids": ["req-0"], "draft_ids": [[]], "accepted_ids": [[]],
                                           "bonus": [0]}
    reused = step(5, frames[-1].t, [1]) | {"rids": ["req-0"]}
    assert _violation(analyse(_then(_then(frames, again), reused))) is None  # a client's own rid used again
    old = frames[0]
    frames[0] = Frame(old.kind, old.src, old.n, old.t, {**old.body, "sglang_version": "0.5.10"})
    assert _violation(analyse(_then(frames, tick))) is None


def test_requests_the_viewer_could_not_see_whole_are_not_judged():
    """No prefill seen (the recording began later), a frame lost in transit or dropped by the shim
    while the request ran, or no finish (still in flight): miscounts there say nothing about the tool."""
    wrong = lambda seq, rids, acc: [0 for _ in acc]  # every round shown as nothing accepted
    frames, _ = served(4, seed=3, miscount=wrong)
    assert _violation(analyse(frames)) is not None  # judged, these steps would fire
    late = [f for f in frames if not (f.kind == "step" and f.body["mode"] == "prefill")]
    state = analyse(late)
    (pub,) = state.publishers.values()
    assert _violation(state) is None and pub.accounting.start_unseen == 4 and pub.accounting.compared == 0
    for lost in ({"gap_in": "req-0"}, {"shim_drop_in": "req-0"}):
        frames, _ = served(2, seed=3, miscount=wrong, **lost)
        state = analyse(frames)
        (pub,) = state.publishers.values()
        assert _violation(state) is None and pub.accounting.unverifiable == 2, lost
    frames, _ = served(4, seed=3, miscount=wrong, finish=False)
    state = analyse(frames)
    assert _violation(state) is None and len(next(iter(state.publishers.values())).accounting.open) == 4


def test_check_shows_the_mismatch_as_text_json_and_junit(tmp_path):
    off_by_one = lambda seq, rids, acc: [(acc[0] + 1) % (K + 1), *acc[1:]] if seq == 4 else acc  # req-0's round
    frames, truth = served(4, miscount=off_by_one)
    path = record(tmp_path / "miscount.e3s", frames)
    text = invoke("check", path)
    assert text.exit_code == 1 and f"ERROR   {RULE}" in text.output, text.output
    out = json.loads(invoke("check", path, "--json").output)
    assert out["summary"]["requests_checked"] == {"compared": 4, "mismatched": 1, "not_compared": 0}
    (v,) = [v for v in out["violations"] if v["id"] == RULE]
    assert v["severity"] == "error" and v["evidence"]["examples"] and v["fix"]
    for example in v["evidence"]["examples"]:
        assert example["sglang"]["correct_drafts"] == truth[example["rid"]]["correct_drafts"]
    junit = tmp_path / "check.xml"
    assert invoke("check", path, "--junit", junit).exit_code == 1
    case = next(c for c in ET.parse(junit).getroot().iter("testcase") if RULE in c.get("name"))
    assert case.find("failure") is not None
    healthy = record(tmp_path / "ok.e3s", served(4)[0])
    assert invoke("check", healthy).exit_code == 0


def test_a_hostile_request_id_in_the_evidence_is_cut_and_the_open_tallies_are_bounded():
    from eagle3scope.analysis import accounting

    acct = accounting.Accounting()
    acct.start([f"r{i}" for i in range(accounting.MAX_OPEN + 10)], (0, 0))
    assert len(acct.open) == accounting.MAX_OPEN and acct.forgotten == 10
    long_rid = "x" * 4000
    acct.start([long_rid], (0, 0))
    acct.count([long_rid], [2], 0)
    assert acct.finish(read("finish", {"seq": 1, "requests": [{"rid": long_rid, "verify_ct": 9}]}), 0, 0) is True
    assert len(acct.examples[0]["rid"]) == accounting.MAX_RID


@settings(max_examples=60, deadline=None)
@given(st.fixed_dictionaries({}, optional={
    "verify_ct": st.one_of(st.integers(-5, 2**64 - 1), st.text(max_size=3), st.none()),
    "correct_drafts": st.one_of(st.integers(-5, 2**64 - 1), st.floats(), st.none()),
    "histogram": st.one_of(st.lists(st.integers(-3, 2**63), max_size=1100), st.text(max_size=3), st.none()),
    "rid": st.one_of(st.text(max_size=20), st.integers(-2**63, 2**63 - 1), st.none()),
}))
def test_finish_bodies_are_bounded_on_the_wire(request_body):
    """A finish frame decodes only with counts that are non-negative 64-bit integers, a histogram of at
    most MAX_DRAFT_TOKENS + 1 of them, a rid that is a name; anything else is refused as a bad frame."""
    from eagle3scope.wire import bodies

    hist = request_body.get("histogram")
    ok = all(v is None or (type(v) is int and 0 <= v < 2**63) for k, v in request_body.items() if k in ("verify_ct", "correct_drafts"))
    ok &= hist is None or (type(hist) is list and len(hist) <= bodies.MAX_DRAFT_TOKENS + 1
                           and all(0 <= x < 2**63 for x in hist))
    ok &= request_body.get("rid") is None or type(request_body["rid"]) is str
    data = encode_frame("finish", {"seq": 3, "dropped": 0, "requests": [request_body]}, src="s", n=0, t=1)
    if ok:
        assert decode_frame(data).body["requests"] == [request_body]
    else:
        with pytest.raises(FrameError):
            decode_frame(data)


def _planted() -> list:
    """A planted miscount in the first batch's rounds (the request req-0 loses one round)."""
    return served(4, miscount=lambda seq, rids, acc: [None, *acc[1:]] if seq == 3 else acc)[0]


def test_the_exporter_serves_it_as_every_rule():
    from support.exporter_support import by, feed, renamed

    src = "host-a:1:dp0"
    exporter, fams = feed({src: renamed(_planted(), src)})
    exporter.close()
    active = by(fams["eagle3scope_violation_active"], "eagle3scope_violation_active", publisher=src)
    assert active == {(("rule", RULE), ("severity", "error")): 1.0}


def test_gate_fails_a_live_stream_with_a_miscount(tmp_path):
    from support.gating import Publisher, failed, gate, junit_cases

    with Publisher(_planted()) as pub:
        done = gate("--connect", pub.endpoint, "--steps", "8", "--timeout", "30", "--junit", str(tmp_path / "g.xml"))
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"ERROR   {RULE}" in done.stdout
    assert failed(junit_cases(tmp_path / "g.xml")) == {RULE}


def test_the_tui_lists_it_on_replay(tmp_path):
    pytest.importorskip("textual")
    import asyncio

    from benchmarks.support.tui_support import paused_app, play_to_end

    async def final_screen():
        app = paused_app(record(tmp_path / "miscount.e3s", _planted()), speed=64.0)
        async with app.run_test(size=(140, 40)) as pilot:
            return await play_to_end(app, pilot)

    assert RULE in asyncio.run(final_screen())
