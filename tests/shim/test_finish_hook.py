"""The finish hook (eagle3scope_shim/finish.py) around SGLang's emitting of a request's output: each
request SGLang finishes is published once with SGLang's own counts (0.5.23's and 0.5.10's attribute
names), nothing else is, and a hook that breaks changes nothing SGLang does."""

from __future__ import annotations

import pytest
from support.declared import undeclared

from eagle3scope.wire import bodies, decode_frame, encode_frame
from eagle3scope_shim import hooks, seams

SEAM = "finish.output"


class Pub:
    """What the hooks use of the publisher: submit, and the dropped-frames and hook-failure counters."""

    def __init__(self, dropped=0):
        self.dropped, self.hook_failures, self.sent = dropped, 0, []

    def submit(self, kind, payload, finalize=None):
        self.sent.append((kind, payload))
        return True


class Req:
    """A ``Req`` as 0.5.23 keeps its speculative counts (managers/schedule_batch.py)."""

    def __init__(self, rid, verify_ct=0, correct=0, hist=(), finished=False):
        self.rid, self.finished_output, self.finished_reason = rid, None, "length" if finished else None
        self.spec_verify_ct, self.spec_num_correct_drafts, self.spec_correct_drafts_histogram = verify_ct, correct, list(hist)

    def finished(self):
        return self.finished_reason is not None


class OldReq(Req):
    """0.5.10's names: spec_accepted_tokens, spec_acceptance_histogram."""

    def __init__(self, rid, verify_ct=0, correct=0, hist=(), finished=False):
        super().__init__(rid, verify_ct, correct, hist, finished)
        self.spec_accepted_tokens = self.spec_num_correct_drafts
        self.spec_acceptance_histogram = self.spec_correct_drafts_histogram
        del self.spec_num_correct_drafts, self.spec_correct_drafts_histogram


def stream_output_generation(streamer, reqs, return_logprob, skip_req=None, is_idle_batch=False):
    """SGLang's loop as far as finishing goes (0.5.23 output_streamer.py): a finished request is
    emitted once and marked, skipped on the overlap loop's extra tick; skip_req is not emitted."""
    for req in reqs:
        if req is skip_req or (req.finished() and req.finished_output):
            continue
        if req.finished():
            req.finished_output = True
    return "sent"


@pytest.fixture
def pub(shim, monkeypatch):
    shim.seq = 41
    shim.publisher = Pub(dropped=3)
    return shim.publisher


def test_the_seam_is_in_the_hook_plan_for_both_scheduler_layouts():
    (seam,) = [s for a in seams.ADAPTERS if a.name == "finish" for s in a.seams]
    assert seam.name == SEAM and hooks.FACTORIES[seam.hook].__name__ == "make_finish"
    assert [t[1] for t in seam.targets] == ["SchedulerOutputStreamer._stream_output_generation",
                                            "SchedulerOutputProcessorMixin.stream_output_generation"]


@pytest.mark.parametrize("version, target", [
    ("0.5.10", ("sglang.srt.managers.scheduler_output_processor_mixin", "SchedulerOutputProcessorMixin.stream_output_generation")),
    ("0.5.23", ("sglang.srt.managers.scheduler_components.output_streamer", "SchedulerOutputStreamer._stream_output_generation")),
])
def test_the_seam_resolves_in_the_installed_engines(version, target):
    """Both engine venvs' sources (0.5.10: v1 and v2 workers): the finish seam attaches where each release emits output."""
    from support.engine import engine_missing

    from eagle3scope.demo.server import cache_dir

    root = cache_dir() / f"venv-sglang-{version}" / "lib" / "python3.11" / "site-packages"
    if not (root / "sglang").is_dir():
        engine_missing(f"the SGLang {version} venv is not built")
    (resolved,) = [r for adapter, r in seams.choose(seams.source_lookup(str(root))) if adapter.name == "finish"]
    assert resolved[0][1] == target


@pytest.mark.parametrize("cls", [Req, OldReq])
def test_each_finished_request_is_published_once_with_sglangs_counts(shim, pub, cls):
    hook = hooks.FACTORIES["finish"](shim, SEAM)
    done = cls("a", verify_ct=7, correct=9, hist=[1, 3, 2, 1], finished=True)
    running, chunked = cls("b", verify_ct=2, correct=1, hist=[1, 1]), cls("c", finished=True)
    assert hook(stream_output_generation, object(), [done, running, chunked], False, chunked) == "sent"
    (kind, body), = pub.sent
    assert kind == "finish" and body["seq"] == 41 and body["dropped"] == 3
    assert body["requests"] == [{"rid": "a", "verify_ct": 7, "correct_drafts": 9, "histogram": [1, 3, 2, 1]}]
    assert undeclared(body, bodies.Finish) == []
    assert decode_frame(encode_frame("finish", body, src="s", n=0, t=1)).body == body
    hook(stream_output_generation, object(), [done, running], False)  # the overlap loop's extra tick
    assert len(pub.sent) == 1


def test_nothing_is_sent_without_a_publisher_or_a_finished_request(shim, pub, monkeypatch):
    hook = hooks.FACTORIES["finish"](shim, SEAM)
    hook(stream_output_generation, object(), [Req("a"), Req("b")], False)
    assert pub.sent == []
    shim.publisher = None
    req = Req("a", finished=True)
    hook(stream_output_generation, object(), [req], False)
    assert req.finished_output is True and pub.sent == []


def test_a_histogram_past_the_wire_bound_is_left_out(shim, pub):
    long = [1] * (bodies.MAX_DRAFT_TOKENS + 2)
    hooks.FACTORIES["finish"](shim, SEAM)(stream_output_generation, object(), [Req("a", 3, 1, long, finished=True)], False)
    assert pub.sent[0][1]["requests"] == [{"rid": "a", "verify_ct": 3, "correct_drafts": 1}]


def test_a_request_without_the_fields_fails_the_hook_closed(shim, pub):
    class Bare:
        rid = "x"

        def finished(self):
            return True

    hook = hooks.FACTORIES["finish"](shim, SEAM)
    assert hook(lambda streamer, reqs, lp: "sent", object(), [Bare()], False) == "sent"
    assert SEAM in shim.seams.disabled and shim.seams.status[SEAM] == "failed" and pub.hook_failures == 1
    assert [kind for kind, _ in pub.sent] == ["hook"]
