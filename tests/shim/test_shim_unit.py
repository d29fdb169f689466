"""The shim's own logic without SGLang: bonus normalisation of both worker eras, per-request
splitting, the fail-closed wrapper, and the per-data-parallel-rank endpoints."""

from __future__ import annotations

import pytest
from benchmarks.support.device_events import CpuTensor

from eagle3scope.analysis import analyse
from eagle3scope.wire import decode_frame, encode_frame
from eagle3scope.wire.endpoints import endpoint_for_dp_rank
from eagle3scope_shim import detach_plan, hooks, shim_state, step_body
from eagle3scope_shim.ring import HostRing
from eagle3scope_shim.guard import around
from eagle3scope_shim.shim_state import Step
from support.shim_state import ended, recording_publisher


class Host(list):
    """A host-side stand-in for a snapshotted tensor: what finalize calls is ``tolist``."""

    def tolist(self):
        return list(self)


def _decode_step(shim, verify, draft=None, bs=3):
    step = Step()
    step.draft, step.verify = draft, verify
    step.passes = [("decode", 128, False, 2, None), ("draft_extend_v2", 384, True, 1, None)]
    body = step_body.finalize_step(shim, ended(step, seq=7, rids=[f"r{i}" for i in range(bs)], t_ns=123, capture={"on": True, "layers": [1, 2, 3]}))
    assert decode_frame(encode_frame("step", body, src="t", n=0)).body == body  # a valid wire step
    return body


def test_v2_accept_lens_include_the_bonus(shim):
    # 3 requests, 4 draft tokens each: row = [last verified token, 3 drafts]; predict strided by 4
    draft = Host([5, 10, 11, 12, 6, 20, 21, 22, 7, 30, 31, 32])
    predict = Host([10, 11, 99, 0, 44, 0, 0, 0, 30, 31, 32, 33])
    body = _decode_step(shim, ("v2", Host([3, 1, 4]), predict), draft)
    assert body["draft_ids"] == [[10, 11, 12], [20, 21, 22], [30, 31, 32]]
    assert body["accepted"] == [2, 0, 3] and body["bonus"] == [1, 1, 1]
    assert body["accepted_ids"] == [[10, 11, 99], [44], [30, 31, 32, 33]]
    assert body["mode"] == "decode" and body["passes"][1] == {"mode": "draft_extend_v2", "width": 384, "fc": True, "n": 1}


def test_v2_a_request_that_committed_nothing_has_no_bonus(shim):
    """An ``accept_lens`` of 0 (a row that committed nothing this round): no bonus, no accepted drafts,
    no ids, so the mean acceptance length the viewer computes from the step is 7 tokens over 3
    request-steps, not 8."""
    draft = Host([5, 10, 11, 12, 6, 20, 21, 22, 7, 30, 31, 32])
    predict = Host([10, 11, 99, 0, 44, 0, 0, 0, 30, 31, 32, 33])
    body = _decode_step(shim, ("v2", Host([3, 0, 4]), predict), draft)
    assert body["accepted"] == [2, 0, 3] and body["bonus"] == [1, 0, 1]
    assert body["accepted_ids"] == [[10, 11, 99], [], [30, 31, 32, 33]]
    state = analyse([decode_frame(encode_frame("step", body, src="t", n=0))])
    assert state.publishers["t"].acceptance.mean_accept_length == 7 / 3


def test_v1_counts_exclude_the_bonus_and_tokens_are_packed(shim):
    body = _decode_step(shim, ("v1", [2, 0, 1], Host([10, 11, 99, 44, 30, 33])))
    assert body["accepted"] == [2, 0, 1] and body["bonus"] == [1, 1, 1]
    assert body["accepted_ids"] == [[10, 11, 99], [44], [30, 33]]
    assert body["draft_ids"] == [[], [], []]  # draft hook unobserved: nothing invented


def test_passes_read_at_callers_get_fc_from_the_width_and_runs_alike_merge(shim, monkeypatch):
    """The hooks append passes as they see them; the publisher thread decides fc where a caller read
    the width (fc None: EAGLE-3's rule, fc iff the width is not the embedding's) and merges each run
    of passes alike, so the wire step is what one merged record per run would have been."""
    shim.load.draft_embed_width = 128
    shim.load.draft_fc_always = False
    passes = [("decode", 384, None, 2, None), ("decode", 384, True, 1, None), ("decode", 128, None, 1, None),
              ("decode", 128, False, 1, 4), ("draft_extend_v2", 384, None, 1, None), ("decode", 384, None, 1, None)]
    assert step_body.merged_passes(shim.load, passes) == [
        {"mode": "decode", "width": 384, "fc": True, "n": 3},
        {"mode": "decode", "width": 128, "fc": False, "n": 1},
        {"mode": "decode", "width": 128, "fc": False, "n": 1, "replayed": True, "graph_bs": 4},
        {"mode": "draft_extend_v2", "width": 384, "fc": True, "n": 1},
        {"mode": "decode", "width": 384, "fc": True, "n": 1},  # not merged across another run
    ]
    shim.load.draft_fc_always = True  # an EAGLE-1/2 draft: fc on every pass
    assert [p["fc"] for p in step_body.merged_passes(shim.load, [("decode", 128, None, 1, None)])] == [True]
    shim.load.draft_fc_always = False
    shim.load.draft_embed_width = None  # unknown embedding: fc is never claimed
    assert [p["fc"] for p in step_body.merged_passes(shim.load, [("decode", 384, None, 1, None)])] == [False]


def test_prefill_step_carries_no_acceptance(shim):
    step = Step()
    step.prefill = True
    body = step_body.finalize_step(shim, ended(step, rids=["a", "b"]))
    assert body["mode"] == "prefill" and body["accepted"] == [0, 0] and body["accepted_ids"] == [[], []]


def test_a_failing_hook_is_disabled_reported_once_and_changes_nothing(shim):
    calls = []

    def original(x):
        calls.append(x)
        return x * 2

    def pre(x):
        raise ValueError("boom")

    hook = around(shim, "t.seam", pre, None)
    assert hook(original, 3) == 6 and hook(original, 4) == 8 and calls == [3, 4]
    assert "t.seam" in shim.seams.disabled
    assert [b["seam"] for b in shim.pending] == ["t.seam"] and shim.pending[0]["status"] == "failed"

    def post(ctx, result, x):
        raise KeyError("late")

    hook = around(shim, "t.post", None, post)
    assert hook(original, 5) == 10 and "t.post" in shim.seams.disabled

    def broken(x):
        raise RuntimeError("SGLang's own error")

    with pytest.raises(RuntimeError, match="SGLang's own error"):
        around(shim, "t.ok", lambda x: None, None)(broken, 1)
    assert "t.ok" not in shim.seams.disabled


def test_fault_injection_names_one_seam(shim, monkeypatch):
    shim.fault = "t.faulty"
    ran = []
    assert around(shim, "t.faulty", lambda x: ran.append(x), None)(lambda x: x + 1, 1) == 2
    assert around(shim, "t.fine", lambda x: ran.append(x), None)(lambda x: x + 1, 1) == 2
    assert ran == [1] and shim.seams.disabled == {"t.faulty"}
    assert "injected" in shim.pending[0]["detail"]
    shim.fault = "t.post_only"  # a hook without pre: the fault goes into its post
    assert around(shim, "t.post_only", None, lambda ctx, r, x: ran.append(r))(lambda x: x + 1, 1) == 2
    assert ran == [1] and shim.seams.disabled == {"t.faulty", "t.post_only"}


def test_a_post_only_hook_gets_the_time_its_original_began(shim):
    import time

    seen = []

    def original(x):
        seen.append(time.perf_counter_ns())
        return x * 2

    assert around(shim, "t.timed", None, lambda began, result, x: seen.append((began, result)))(original, 4) == 8
    ran_at, (began, result) = seen
    assert result == 8 and began <= ran_at and ran_at - began < 50_000_000 and shim.seams.disabled == set()


def test_one_endpoint_per_data_parallel_rank():
    assert endpoint_for_dp_rank("tcp://127.0.0.1:5557", 0) == "tcp://127.0.0.1:5557"
    assert endpoint_for_dp_rank("tcp://127.0.0.1:5557", 2) == "tcp://127.0.0.1:5559"
    assert endpoint_for_dp_rank("5557", 1) == "5558"
    assert endpoint_for_dp_rank("ipc:///tmp/e3s", 1) == "ipc:///tmp/e3s-dp1"
    assert endpoint_for_dp_rank("ipc:///run/user/7/eagle3scope/events.sock", 2) == "ipc:///run/user/7/eagle3scope/events-dp2.sock"


def test_requested_endpoint(monkeypatch):
    monkeypatch.delenv("EAGLE3SCOPE_ENDPOINT", raising=False)
    monkeypatch.delenv("EAGLE3SCOPE", raising=False)
    assert shim_state.requested_endpoint() is None
    monkeypatch.setenv("EAGLE3SCOPE", "1")
    assert shim_state.requested_endpoint() == ""  # the private default, resolved when the publisher starts
    monkeypatch.setenv("EAGLE3SCOPE_ENDPOINT", "tcp://127.0.0.1:6000")
    assert shim_state.requested_endpoint() == "tcp://127.0.0.1:6000"


def test_every_spelling_of_on_enables_the_default_endpoint(monkeypatch):
    monkeypatch.delenv("EAGLE3SCOPE_ENDPOINT", raising=False)
    for value in ("1", "true", "yes", "on", " on "):
        monkeypatch.setenv("EAGLE3SCOPE", value)
        assert shim_state.requested_endpoint() == "", value
    for value in ("0", "TRUE", "off", ""):
        monkeypatch.setenv("EAGLE3SCOPE", value)
        assert shim_state.requested_endpoint() is None, value


def test_a_fresh_process_state(monkeypatch):
    """What a scheduler process starts from (the instrumentor builds it once): nothing
    disabled, nothing pending, no channel, the first step numbered 1, the fault injection read once."""
    monkeypatch.delenv("EAGLE3SCOPE_FAULT", raising=False)
    fresh = shim_state.Shim()
    assert fresh.fault is None and fresh.seq == 0 and fresh.seams.disabled == set() and fresh.pending == []
    assert fresh.aux_channel is None and fresh.publisher is None and fresh.step is None
    assert fresh.step_ns == [0] and fresh.self_ns == {}  # the first heartbeat's deltas start from nothing
    assert fresh.aux_change_applying is False and list(fresh.uncommitted) == []
    monkeypatch.setenv("EAGLE3SCOPE_FAULT", " v2.verify ")
    assert shim_state.Shim().fault == "v2.verify"


class _Counting:
    def __init__(self):
        self.hook_failures, self.events = 5, []

    def submit(self, kind, body):
        self.events.append((kind, body["seam"], body["status"]))


def test_a_failure_counts_once_on_the_publisher_and_goes_out_as_a_hook_event(monkeypatch):
    fresh = shim_state.Shim()
    fresh.publisher = _Counting()
    fresh.fail("v2.draft", ValueError("x"))
    fresh.fail("v2.draft", ValueError("again"))  # disabled already: nothing more
    assert fresh.publisher.hook_failures == 6 and fresh.publisher.events == [("hook", "v2.draft", "failed")]


def test_hook_events_before_the_publisher_are_kept_up_to_256():
    fresh = shim_state.Shim()
    for i in range(300):
        fresh.report(f"s{i}", "attached")
    assert len(fresh.pending) == 256 and fresh.seams.status["s299"] == "attached"


# -- the ring of reusable host buffers: one slot and one event per step ---------------------------
class FakeEvent:
    """Stands in for ``torch.cuda.Event``: ``record`` queues it, ``complete`` is the device catching up."""

    def __init__(self):
        self.done, self.records, self.waits = True, 0, 0

    def record(self):
        self.done, self.records = False, self.records + 1

    def query(self):
        return self.done

    def complete(self):
        self.done = True

    def synchronize(self):  # the publisher thread's wait; never called on the hot path
        self.waits += 1
        self.done = True


def _round(ring):
    """What one published step does with the ring: take a slot, record its event after the copies."""
    slot = ring.acquire()
    if slot is not None:
        HostRing.record(slot)
    return slot


def test_ring_wraps_around_and_reuses_the_same_buffers():
    ring = HostRing(3, FakeEvent, capacity=256)
    seen = []
    for i in range(10):
        slot = _round(ring)
        slot.buffers.setdefault("draft", object())  # allocated once per slot, then reused
        seen.append((slot.index, slot.buffers["draft"]))
        slot.event.complete()
        HostRing.release(slot)
    assert [i for i, _ in seen] == [0, 1, 2] * 3 + [0]
    assert all(buf is seen[i % 3][1] for i, (_, buf) in enumerate(seen))
    assert ring.acquired == 10 and ring.dropped == 0
    assert all(s.event.waits == 0 for s in ring.slots)  # acquire only queries


def test_a_slot_whose_event_is_pending_is_not_reused_and_the_step_is_dropped():
    ring = HostRing(2, FakeEvent)
    first = _round(ring)
    HostRing.release(first)  # the reader let go, but the device copies are still in flight
    second = _round(ring)
    HostRing.release(second)
    second.event.complete()
    assert ring.acquire() is None and ring.acquire() is None  # ring wrapped onto the pending slot
    assert ring.dropped == 2 and ring.acquired == 2
    first.event.complete()
    assert ring.acquire() is first  # the same slot once its copies are done; no slot skipped
    assert ring.acquire() is second


def test_a_slot_its_reader_still_holds_is_not_reused_even_when_its_copies_are_done():
    ring = HostRing(1, None)  # CPU: no event, copies are done when copy_ returns
    slot = _round(ring)
    assert slot.event is None and not slot.recorded
    assert [ring.acquire() for _ in range(3)] == [None, None, None]
    HostRing.release(slot)
    assert ring.acquire() is slot and ring.dropped == 3


class PublisherStub:
    def __init__(self, accept=True):
        self.accept, self.submitted, self.dropped = accept, [], []

    def submit(self, kind, payload, finalize=None):
        if self.accept:
            self.submitted.append((kind, payload, finalize))
        return self.accept

    def drop(self, kind):
        self.dropped.append(kind)


class Mode:
    def is_extend(self):
        return False


class Batch:
    forward_mode = Mode()
    reqs = ()


def test_a_step_without_a_free_slot_is_counted_as_dropped_not_published(shim, monkeypatch):
    ring = HostRing(1, FakeEvent)
    held = ring.acquire()  # the publisher has not finished with the only slot
    shim.snapshots.ring = ring
    shim.publisher = PublisherStub()
    step_hook, verify_hook = hooks.FACTORIES["step"](shim, "u.step"), hooks.FACTORIES["verify_v2"](shim, "u.verify")

    class Untouched:  # a device tensor the hook must not copy: there is no slot for it
        is_cpu = False
        device = type("Device", (), {"type": "cuda"})()

        def __getattr__(self, name):
            pytest.fail(f"snapshotted without a free slot ({name})")

    result = type("R", (), {"accept_lens": Untouched(), "next_token_ids": Untouched()})()
    step_hook(lambda self, b: verify_hook(lambda s, b: result, None, b), None, Batch())
    assert shim.publisher.dropped == ["step"] and shim.publisher.submitted == []
    assert ring.dropped == 1 and shim.seams.disabled == set()  # dropped, not a failure
    HostRing.release(held)


def test_the_publisher_releases_the_slot_after_waiting_for_its_event(shim):
    ring = HostRing(1, FakeEvent)
    step = Step()
    step.slot = _round(ring)
    step.verify = ("v1", [1], Host([10, 11]))
    body = step_body.finalize_step(shim, ended(step, rids=["r"]))
    assert body["accepted_ids"] == [[10, 11]] and step.slot.event.waits == 1
    assert ring.acquire() is step.slot  # free again


def test_a_step_the_publisher_queue_refuses_gives_its_slot_back(shim, monkeypatch):
    ring = HostRing(1, FakeEvent)
    shim.snapshots.ring = ring
    shim.publisher = PublisherStub(accept=False)

    def round_(self, batch):
        shim.step.slot = ring.acquire()  # as snap does at the first copy
        shim.step.verify = ("v1", [0], Host([3]))

    hooks.FACTORIES["step"](shim, "u.step")(round_, None, Batch())
    assert ring.slots[0].busy is False and ring.slots[0].recorded


def test_the_publisher_is_woken_per_full_batch_not_per_event(tmp_path):
    """Signalling the publisher thread on every step cost the scheduler's thread ~3 % (py-spy):
    a submit wakes it only when ``wake_batch`` events wait; otherwise it polls."""
    import time

    from eagle3scope_shim.publisher import Publisher

    pub = Publisher(f"ipc://{tmp_path}/pub", "t", flush_interval_s=0.05, wake_batch=8, heartbeat_interval_s=60)
    wakes = []
    ring = pub._wake.ring
    pub._wake.ring = lambda: (wakes.append(len(pub._ring)), ring())
    pub.start()
    try:
        for i in range(64):
            pub.submit("hook", {"seam": f"s{i}", "status": "ok", "detail": ""})
            time.sleep(0.001)
        deadline = time.monotonic() + 5
        while pub.queued and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pub.queued == 0 and pub.dropped == 0
        assert wakes == [8] * len(wakes) and len(wakes) <= 64 // 8, wakes  # only full batches wake it
    finally:
        pub.close()


def test_the_bell_wakes_its_waiter_once_per_ring_from_any_thread():
    import threading
    import time

    from eagle3scope_shim.publisher import Bell

    bell = Bell()
    t0 = time.monotonic()
    assert bell.wait(0.05) is False and time.monotonic() - t0 >= 0.04  # nobody rang: the whole timeout
    bell.ring()
    bell.ring()  # twice before it is heard: one wake-up, and no error
    assert bell.wait(5) is True and bell.wait(0.01) is False
    past = []  # a deadline already past never blocks (acquire(-1) would, for ever): asked on a thread
    waiter = threading.Thread(target=lambda: past.append(bell.wait(-1)), daemon=True)
    waiter.start()
    waiter.join(2)
    assert past == [False]
    threading.Timer(0.05, bell.ring).start()
    t0 = time.monotonic()
    assert bell.wait(5) is True and time.monotonic() - t0 < 2  # rung from another thread: early


class _Param:
    """A parameter stand-in: the loader watch only reads and sets its ``weight_loader``."""

    def __init__(self):
        self.weight_loader = lambda param, weight, *shard: None


class _MLADraft:
    """kimi_k25_eagle3.Eagle3DeepseekV2ForCausalLM.load_weights' control flow (SGLang 0.5.23): q_a_proj and
    kv_a_proj_with_mqa are cached until both are read, then written as fused_qkv_a_proj_with_mqa."""

    def __init__(self):
        self.params = {n: _Param() for n in ("model.fc.weight", "lm_head.weight",
                                             "model.midlayer.self_attn.fused_qkv_a_proj_with_mqa.weight")}

    def named_parameters(self):
        return iter(self.params.items())

    def load_weights(self, weights):
        cached = {}
        for name, w in weights:
            if name == "t2d":
                continue
            mapped = "model." + name.replace("layers.0.", "midlayer.") if not name.startswith("lm_head") else name
            if "q_a_proj" in mapped or "kv_a_proj_with_mqa" in mapped:
                cached[mapped] = w
                q, kv = mapped.replace("kv_a_proj_with_mqa", "q_a_proj"), mapped.replace("q_a_proj", "kv_a_proj_with_mqa")
                if q in cached and kv in cached:
                    fused = self.params[q.replace("q_a_proj", "fused_qkv_a_proj_with_mqa")]
                    fused.weight_loader(fused, w)
                continue
            if mapped in self.params:
                self.params[mapped].weight_loader(self.params[mapped], w)


@pytest.mark.parametrize("names, skipped", [
    (["fc.weight", "layers.0.self_attn.q_a_proj.weight", "layers.0.self_attn.kv_a_proj_with_mqa.weight",
      "lm_head.weight", "t2d"], []),
    (["layers.0.self_attn.kv_a_proj_with_mqa.weight", "fc.weight", "layers.0.self_attn.q_a_proj.weight",
      "lm_head.weight"], []),
    # the partner never comes: the held tensor was dropped
    (["fc.weight", "layers.0.self_attn.q_a_proj.weight", "lm_head.weight"], ["layers.0.self_attn.q_a_proj.weight"]),
    (["fc.weight", "layers.0.extra.weight", "lm_head.weight"], ["layers.0.extra.weight"]),
])
def test_a_tensor_held_back_for_a_fused_write_counts_as_consumed(shim, monkeypatch, names, skipped):
    from eagle3scope_shim import loadreport

    monkeypatch.setattr(loadreport, "_default_weight_loader", lambda model: None)  # every parameter has its own
    model = _MLADraft()
    watch = loadreport.LoadWatch(model, shim.load)
    model.load_weights(watch.wrap((n, None) for n in names))
    watch.finish()
    assert watch.skipped == skipped
    assert sorted(watch.consumed + watch.skipped + watch.ignored) == sorted(names)
    fused = "model.midlayer.self_attn.fused_qkv_a_proj_with_mqa.weight"
    pair = {"layers.0.self_attn.q_a_proj.weight", "layers.0.self_attn.kv_a_proj_with_mqa.weight"}
    assert (fused in watch.written) == (pair <= set(names))


# -- trees, commits, budgets: what a step publishes ----------------------------------------------
def test_a_tree_step_names_the_accepted_path_by_accept_index(shim):
    """topk > 1: draft_token holds tree nodes in score order and accept_index ([bs, steps + 1], global
    node numbers, -1 padded; speculative/eagle_worker_common.py 0.5.23) names the accepted path; the
    verified tokens are compacted to the front of each request's block (_compact_accept_to_front)."""
    draft = Host([5, 10, 11, 12, 6, 20, 21, 22])  # 2 requests x 4 nodes: [root, 3 nodes]
    step = Step()
    step.draft, step.verify = draft, ("v2", Host([2, 3]), Host([11, 55, 0, 0, 20, 22, 66, 0]))
    step.path = Host([0, 2, -1, 4, 5, 7])  # request 0: root, node 2; request 1: root, node 5, node 7
    step.num_steps = 2
    body = step_body.finalize_step(shim, ended(step, rids=["a", "b"]))
    assert decode_frame(encode_frame("step", body, src="t", n=0)).body == body
    assert body["accepted_path"] == [[1], [0, 2]] and body["accepted"] == [1, 2] and body["num_steps"] == 2
    step.path = Host([[0, 2, -1], [4, 5, 7]])  # a CPU snapshot keeps accept_index's [bs, steps + 1] shape
    assert step_body.finalize_step(shim, ended(step, rids=["a", "b"]))["accepted_path"] == [[1], [0, 2]]
    assert [[d[j] for j in p] for d, p in zip(body["draft_ids"], body["accepted_path"])] == [[11], [20, 22]]
    assert [ids[:a] for ids, a in zip(body["accepted_ids"], body["accepted"])] == [[11], [20, 22]]


def test_a_tree_step_of_one_request_names_its_path_from_a_cpu_snapshot_too(shim):
    """One request: accept_index is [[root, node, node]] on a CPU snapshot (one row) or flat from the
    ring; either way the accepted path is nodes 2 and 3 of its draft_ids (global 2 and 3, less the root)."""
    step = Step()
    step.draft, step.verify = Host([5, 10, 11, 12]), ("v2", Host([3]), Host([11, 12, 66, 0]))
    for path in (Host([[0, 2, 3]]), Host([0, 2, 3])):
        step.path = path
        body = step_body.finalize_step(shim, ended(step, rids=["a"]))
        assert (body["accepted"], body["bonus"], body["accepted_path"]) == ([2], [1], [[1, 2]])


class Req:
    def __init__(self, rid, done=False):
        self.rid, self.done, self.is_retracted, self.spec_verify_ct = rid, done, False, 0

    def finished(self):
        return self.done


class DecodeBatch:
    class forward_mode:  # noqa: N801
        @staticmethod
        def is_extend():
            return False

    def __init__(self, reqs):
        self.reqs = reqs


class Worker:
    speculative_num_steps = 3


def _settle(processor, result, batch):
    """SGLang 0.5.23's _resolve_spec_v2_tokens as far as the commit goes: a finished or retracted
    request's round is not counted (managers/scheduler_components/batch_result_processor.py)."""
    for req in batch.reqs:
        if not (req.is_retracted or req.finished()):
            req.spec_verify_ct += 1


@pytest.fixture
def committing(shim, monkeypatch):
    shim.publisher = PublisherStub()
    shim.uncommitted = __import__("collections").deque()
    shim.plan.stepped = True
    shim.seams.status[detach_plan.COMMIT_SEAM] = "attached"
    return shim.publisher


class Result:
    """The GenerationBatchResult the scheduler later settles (weak-referenceable, as SGLang's dataclass is)."""


KEEP: list = []  # results the scheduler still holds


def _run_round(shim, step_hook, batch, lens):
    def round_(self, b):
        shim.step.verify = ("v2", Host(lens), Host([9] * 4 * len(lens)))
        KEEP.append(Result())
        return KEEP[-1]

    return step_hook(round_, Worker(), batch)


def test_a_decode_step_waits_for_the_commit_and_keeps_only_the_committed_requests(shim, committing):
    step_hook, commit_hook = hooks.FACTORIES["step"](shim, "u.step"), hooks.FACTORIES["commit"](shim, detach_plan.COMMIT_SEAM)
    live, done = Req("live"), Req("done", done=True)  # "done" finished last tick: the overlap scheduler's extra tick
    batch = DecodeBatch([live, done])
    result = _run_round(shim, step_hook, batch, [3, 2])
    assert committing.submitted == []  # SGLang has not settled the round yet
    commit_hook(_settle, None, result, batch)
    (kind, payload, finalize), = committing.submitted
    body = finalize(payload)
    assert body["rids"] == ["live"] and body["bs"] == 1 and body["discarded"] == ["done"]
    assert body["accepted"] == [2] and body["accepted_ids"] == [[9, 9, 9]] and body["num_steps"] == 3
    assert body["seq"] == 1 and live.spec_verify_ct == 1 and done.spec_verify_ct == 0
    assert decode_frame(encode_frame("step", body, src="t", n=0)).body == body


class GrammarReq(Req):
    def __init__(self, rid, grammar, done=False):
        super().__init__(rid, done)
        self.grammar = grammar


def test_a_step_says_which_requests_a_grammar_constrains_and_follows_the_committed_ones(shim, committing):
    """``constrained`` comes from SGLang's host metadata (``Req.grammar``), one flag per request, and
    loses a discarded request's flag with its other per-request lists."""
    step_hook, commit_hook = hooks.FACTORIES["step"](shim, "u.step"), hooks.FACTORIES["commit"](shim, detach_plan.COMMIT_SEAM)
    batch = DecodeBatch([GrammarReq("json", object()), GrammarReq("free", None), GrammarReq("done", object(), done=True)])
    batch.has_grammar = True
    result = _run_round(shim, step_hook, batch, [2, 1, 1])
    commit_hook(_settle, None, result, batch)
    (_, payload, finalize), = committing.submitted
    body = finalize(payload)
    assert body["rids"] == ["json", "free"] and body["constrained"] == [True, False]
    assert decode_frame(encode_frame("step", body, src="t", n=0)).body == body


@pytest.mark.parametrize("has_grammar", [False, None])
def test_a_step_of_free_requests_carries_no_constrained_field(shim, committing, has_grammar):
    """A batch SGLang marks grammar-free is not looked through; one without the flag is, and has none."""
    step_hook = hooks.FACTORIES["step"](shim, "u.step")
    batch = DecodeBatch([GrammarReq("a", object() if has_grammar is False else None), GrammarReq("b", None)])
    if has_grammar is not None:
        batch.has_grammar = has_grammar
    _run_round(shim, step_hook, batch, [1, 1])
    hooks.FACTORIES["commit"](shim, detach_plan.COMMIT_SEAM)(_settle, None, KEEP[-1], batch)
    (_, payload, finalize), = committing.submitted
    assert "constrained" not in finalize(payload)


def test_steps_never_settled_are_published_as_run_and_in_order(shim, committing):
    step_hook = hooks.FACTORIES["step"](shim, "u.step")
    batch = DecodeBatch([Req("r")])
    for _ in range(hooks.MAX_UNCOMMITTED + 2):
        _run_round(shim, step_hook, batch, [1])
    bodies = [finalize(payload) for _, payload, finalize in committing.submitted]
    assert [b["seq"] for b in bodies] == [1, 2] and all(b["rids"] == ["r"] and "discarded" not in b for b in bodies)
    assert len(shim.uncommitted) == hooks.MAX_UNCOMMITTED


def test_without_the_commit_seam_a_step_is_published_at_once(shim, committing):
    step_hook = hooks.FACTORIES["step"](shim, "u.step")
    _run_round(shim, step_hook, DecodeBatch([Req("r")]), [1])
    shim.seams.disabled.add(detach_plan.COMMIT_SEAM)  # its hook failed: the waiting step goes out with the next one
    _run_round(shim, step_hook, DecodeBatch([Req("r")]), [1])
    assert [step.seq for _, step, _ in committing.submitted] == [1, 2] and not shim.uncommitted


@pytest.mark.parametrize("overlap", [False, True, None])
def test_without_the_overlap_loop_the_commit_hook_comes_out_and_steps_go_out_as_they_end(shim, committing, monkeypatch, overlap):
    """SGLang's CPU speculative decoding runs no overlap loop (arg_groups/speculative_hook.py 0.5.23): no
    round is discarded, so the commit hook is taken out and a step is published as it ends. An
    overlap scheduler, or one that does not say (no ``enable_overlap``), keeps it and its steps wait."""
    import types


    taken = []
    shim.seams.detachers[detach_plan.COMMIT_SEAM] = lambda: taken.append(1) or True
    shim.plan.published_at_step = False
    shim.scheduler = (types.SimpleNamespace() if overlap is None else
                        types.SimpleNamespace(enable_overlap=overlap))
    detach_plan._detach_commit(shim)
    _run_round(shim, hooks.FACTORIES["step"](shim, "u.step"), DecodeBatch([Req("r")]), [1])
    assert (taken == [1]) is (overlap is False) and shim.plan.published_at_step is (overlap is False)
    assert len(committing.submitted) == (1 if overlap is False else 0)


class _Observed:
    def forward_batch_generation(self, batch):
        return None


class _Inherits(_Observed):
    pass


class _Overrides(_Observed):
    def forward_batch_generation(self, batch):
        return None


class _DraftInner:
    def forward(self):
        return None


def test_an_unobserved_worker_or_draft_is_reported_by_name(shim, monkeypatch):
    import sys
    import types

    module = types.ModuleType("e3s_fake_workers")
    module._Observed, module._DraftInner = _Observed, _DraftInner
    monkeypatch.setitem(sys.modules, "e3s_fake_workers", module)
    shim.seams.targets.update({"v2.step": "e3s_fake_workers._Observed.forward_batch_generation",
                                                    "llama_eagle3.forward": "e3s_fake_workers._DraftInner.forward"})

    def draft(inner):
        return types.SimpleNamespace(draft_worker=types.SimpleNamespace(draft_runner=types.SimpleNamespace(
            model=types.SimpleNamespace(model=inner))))

    def reported(worker):
        shim.seams.status.clear()
        hooks.report_unobserved(shim, worker)
        return {b["seam"]: b["detail"] for b in shim.pending if b["status"] == "unhooked" and not shim.pending.clear()}

    healthy = _Inherits()
    healthy.draft_worker = draft(_DraftInner()).draft_worker
    assert reported(healthy) == {}
    got = reported(_Overrides())
    assert list(got) == ["worker"] and "_Overrides" in got["worker"] and "e3s_fake_workers._Observed" in got["worker"]
    plain = _Inherits()
    plain.draft_worker = draft(object()).draft_worker
    got = reported(plain)
    assert list(got) == ["draft_model"] and "e3s_fake_workers._DraftInner" in got["draft_model"]
    assert reported(None) == {}  # no speculative worker at all: nothing to say


class _Eagle1Inner:  # stands for llama_eagle.LlamaModel (EAGLE-1/2: fc on every pass)
    def forward(self):
        return None


def test_an_eagle1_draft_is_observed_and_known_to_apply_fc_always(shim, monkeypatch):
    """LlamaForCausalLMEagle under --speculative-algorithm EAGLE: its forward is hooked (no
    "draft_model" unhooked warning), and caller-side reads know its fc runs whatever the width."""
    import sys
    import types

    module = types.ModuleType("e3s_fake_drafts")
    module._Observed, module._DraftInner, module._Eagle1Inner = _Observed, _DraftInner, _Eagle1Inner
    monkeypatch.setitem(sys.modules, "e3s_fake_drafts", module)
    shim.seams.targets.update({"v2.step": "e3s_fake_drafts._Observed.forward_batch_generation",
                                                    "llama_eagle3.forward": "e3s_fake_drafts._DraftInner.forward",
                                                    "llama_eagle.forward": "e3s_fake_drafts._Eagle1Inner.forward"})
    shim.unobserved = {}
    shim.load.draft_fc_always = False
    worker = _Inherits()
    worker.draft_worker = types.SimpleNamespace(draft_runner=types.SimpleNamespace(
        model=types.SimpleNamespace(model=_Eagle1Inner())))
    hooks.report_unobserved(shim, worker)
    assert shim.unobserved == {}
    hooks._draft_facts(shim, worker.draft_worker.draft_runner.model)
    assert shim.load.draft_fc_always is True
    hooks._draft_facts(shim, types.SimpleNamespace(model=_DraftInner()))
    assert shim.load.draft_fc_always is False


def test_the_hook_table_names_exactly_the_hooks_the_seams_use():
    """hooks.FACTORIES is written out: every seam's hook has its factory, and no factory is unused."""
    from eagle3scope_shim import seams

    used = {seam.hook for adapter in seams.ADAPTERS for seam in adapter.seams}
    assert set(hooks.FACTORIES) == used
    written = {name for name in vars(hooks) if name.startswith("make_")}
    assert {fn.__name__ for fn in hooks.FACTORIES.values()} == written


def test_the_patcher_wraps_on_import_and_unwraps_only_its_own_wrappers(shim, monkeypatch, tmp_path, caplog):
    """Patcher: a module imported later is wrapped as it executes; unwrapping restores the raw
    attribute (a staticmethod stays one) where the shim's wrapper is still in place, and leaves one
    that was wrapped again since."""
    import sys

    from eagle3scope_shim import patching

    (tmp_path / "e3s_fake_seam.py").write_text(
        "class Worker:\n    def step(self, x):\n        return x + 1\n\n    @staticmethod\n    def pure(x):\n        return x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    calls = []

    def hook(original, *args, **kwargs):
        calls.append(args[-1])
        return original(*args, **kwargs)

    monkeypatch.setattr(patching, "plan", lambda shim: [("f.step", ("e3s_fake_seam", "Worker.step"), hook),
                                                   ("f.pure", ("e3s_fake_seam", "Worker.pure"), hook)])
    shim.seams.status.clear()
    patcher = patching.Patcher(shim)
    patcher.patch_all()
    try:
        assert "e3s_fake_seam" not in sys.modules and patcher.active
        import e3s_fake_seam as fake

        assert fake.Worker().step(1) == 2 and fake.Worker.pure(5) == 5 and calls == [1, 5]
        assert shim.seams.status == {"f.step": "attached", "f.pure": "attached"}
        theirs = fake.Worker.step  # someone else wraps the shim's wrapper
        fake.Worker.step = lambda self, x: theirs(self, x) * 10
    finally:
        patcher.unpatch_all()
        sys.modules.pop("e3s_fake_seam", None)
    assert isinstance(fake.Worker.__dict__["pure"], staticmethod) and not hasattr(fake.Worker.pure, "__wrapped__")
    assert fake.Worker().step(1) == 20  # theirs, left in place
    assert "e3s_fake_seam.Worker.step was replaced after the shim wrapped it" in caplog.text
    assert not patcher.active and shim.seams.status == {"f.step": "disabled", "f.pure": "disabled"}


def test_the_ring_is_sized_from_the_targets_request_pool_and_the_widest_adaptive_round(monkeypatch):
    """Request pool (held by the worker, or else by the target's model runner) x the widest round: the
    draft tokens, or an adaptive step budget's steps + 1 (bonus included), whichever is larger."""
    ns = lambda **kw: type("NS", (), kw)()  # noqa: E731
    runner = ns(req_to_token_pool=ns(size=16), max_running_requests=2)
    worker = ns(target_worker=ns(model_runner=runner), speculative_num_steps=3, speculative_num_draft_tokens=4,
                adaptive_controller=ns(candidate_steps=[1, 5]))
    assert hooks._ring_capacity(worker) == 16 * 6
    worker.adaptive_controller = None
    assert hooks._ring_capacity(worker) == 16 * 4


def test_a_batch_with_an_extend_in_it_is_a_prefill_step(shim, monkeypatch):
    """SGLang's mixed batches: the forward mode says decode but ``is_extend_in_batch`` is set (the
    step seam's own test, eagle_worker_v2.py 0.5.23); such a step carries no acceptance."""
    shim.publisher = PublisherStub()
    shim.plan.stepped = True
    seen = []

    class Mixed(Batch):
        is_extend_in_batch = True

    for batch in (Batch(), Mixed()):
        hooks.FACTORIES["step"](shim, "u.step")(lambda self, b: seen.append(shim.step.prefill), None, batch)
    assert seen == [False, True]


def test_the_own_patcher_detaches_one_seam_and_keeps_its_status(shim, monkeypatch, tmp_path):
    """SeamTable.detach through the own patcher (releases without HookRegistry): the raw attribute comes
    back (a staticmethod stays one), once; the seam's status is what it was (its work is done elsewhere)."""
    import sys

    from eagle3scope_shim import patching

    (tmp_path / "e3s_fake_detach.py").write_text(
        "class Worker:\n    def step(self, x):\n        return x + 1\n\n    @staticmethod\n    def pure(x):\n        return x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(patching, "plan", lambda shim: [("f.step", ("e3s_fake_detach", "Worker.step"), lambda o, *a: o(*a) * 10),
                                                   ("f.pure", ("e3s_fake_detach", "Worker.pure"), lambda o, *a: o(*a) * 10)])
    shim.seams.status.clear()
    patcher = patching.Patcher(shim)
    patcher.patch_all()
    try:
        import e3s_fake_detach as fake

        raw_step = fake.Worker.step.__wrapped__
        assert fake.Worker().step(1) == 20 and fake.Worker.pure(2) == 20
        assert shim.seams.detach("f.step") and fake.Worker.__dict__["step"] is raw_step and fake.Worker().step(1) == 2
        assert shim.seams.detach("f.pure") and isinstance(fake.Worker.__dict__["pure"], staticmethod)
        assert fake.Worker.pure(2) == 2
        assert not shim.seams.detach("f.step") and not shim.seams.detach("never.attached")
        assert shim.seams.status == {"f.step": "attached", "f.pure": "attached"} and not patcher._own
    finally:
        patcher.unpatch_all()
        sys.modules.pop("e3s_fake_detach", None)


def test_the_draft_model_is_found_in_either_worker_kind():
    """v2: EAGLEWorkerV2.draft_worker.draft_runner.model; v1: EAGLEWorker.model_runner.model (the draft's
    runner: a v1 EAGLEWorker is the draft worker itself, eagle_worker.py 0.5.10)."""
    ns = lambda **kw: type("NS", (), kw)()  # noqa: E731
    assert hooks._draft_model(ns(draft_worker=ns(draft_runner=ns(model="v2 draft")), model_runner=ns(model="x"))) == "v2 draft"
    assert hooks._draft_model(ns(model_runner=ns(model="v1 draft"))) == "v1 draft"
    assert hooks._draft_model(ns()) is None


def test_a_failed_hook_says_which_seam_and_why_on_the_servers_log(caplog):
    fresh = shim_state.Shim()
    with caplog.at_level("WARNING", logger="eagle3scope"):
        fresh.fail("v2.verify", ValueError("bad shape"))
    assert caplog.messages == ["eagle3scope: hook v2.verify failed and is disabled (SGLang continues unaffected): "
                               "ValueError: bad shape"]


# -- hook bodies at their edges: tree paths, ring sizing, v1 counts, capture, seam accounting -----------
def test_a_tree_verify_snapshots_the_accepted_path_only_for_topk_above_one(shim, monkeypatch):
    """v2 verify's hook reads the worker's topk: a tree (topk > 1) also takes accept_index."""
    ns = lambda **kw: type("NS", (), kw)()  # noqa: E731
    verify = hooks.FACTORIES["verify_v2"](shim, "v2.verify")
    result = ns(accept_lens=CpuTensor([2]), next_token_ids=CpuTensor([5, 6, 7]), accept_index=CpuTensor([[0, 2, -1]]))
    for topk, path in ((2, [[0, 2, -1]]), (1, None)):
        shim.step = Step()
        verify(lambda worker, batch: result, ns(topk=topk), ns())
        assert shim.step.verify == ("v2", [2], [5, 6, 7]) and shim.step.path == path


def test_a_one_step_budget_wider_than_the_draft_tokens_sizes_the_ring(monkeypatch):
    """Without adaptive steps the round's width is max(draft tokens, steps + 1)."""
    ns = lambda **kw: type("NS", (), kw)()  # noqa: E731
    assert hooks._ring_capacity(ns(req_to_token_pool=ns(size=3), speculative_num_steps=7, speculative_num_draft_tokens=4)) == 3 * 8


def test_an_unobserved_worker_is_named_in_the_sticky_hellos_detail(shim, monkeypatch):
    hooks.report_unobserved(shim, type("NGRAMWorker", (), {})())
    assert "NGRAMWorker" in shim.unobserved["worker"] and shim.seams.status["worker"] == "unhooked"
    assert shim.pending[-1]["detail"] == shim.unobserved["worker"]


def test_the_aux_configure_hook_keeps_sglangs_resolved_settings_per_model(shim, monkeypatch):
    model = object()
    hooks.FACTORIES["aux_configure"](shim, "aux.configure")(
        lambda **kw: None, model=model, eagle_use_aux_hidden_state=1, eagle_aux_hidden_state_layer_ids=(2, 5))
    assert shim.load.aux_config == {id(model): {"use_aux": True, "layer_ids": [2, 5]}}


def test_a_draft_forward_inside_a_graph_capture_records_the_graph_once(shim, monkeypatch):
    """Under SGLang's capture flag the forward hook records (mode, bs) -> [width, fc] and asks for a new hello."""
    from eagle3scope_shim import graph_capture, loadreport

    ns = lambda **kw: type("NS", (), kw)()  # noqa: E731
    monkeypatch.setattr(graph_capture, "capture_flag", lambda: (lambda: True))
    refreshed = []
    monkeypatch.setattr(loadreport, "refresh_hello", lambda shim: refreshed.append(1))
    forward = hooks.FACTORIES["draft_forward"](shim, "llama_eagle3.forward")
    inner = ns(embed_tokens=ns(weight=ns(shape=(1024, 128))))
    fb = ns(spec_info=ns(hidden_states=ns(shape=(4, 384))), forward_mode=ns(name="DECODE"), batch_size=4)
    forward(lambda *a: None, inner, None, None, fb)
    forward(lambda *a: None, inner, None, None, fb)
    assert shim.load.graphs == {("decode", 4): [384, True]} and refreshed == [1] and shim.seams.disabled == set()


def test_a_step_whose_post_never_ran_gives_its_ring_slot_back(shim, monkeypatch):
    """SGLang raised inside the last round: its step never reached post; the next round frees its slot."""
    ns = lambda **kw: type("NS", (), kw)()  # noqa: E731
    shim.publisher = object()
    shim.aux_channel = None
    shim.plan.stepped = True
    stale = Step()
    stale.slot = ns(busy=True)
    shim.step = stale
    seen = []
    hook = hooks.FACTORIES["step"](shim, "v2.step")
    import types

    batch = ns(forward_mode=types.SimpleNamespace(is_idle=lambda: False, is_extend=lambda: False), is_extend_in_batch=False)
    with pytest.raises(RuntimeError):
        hook(lambda worker, b: seen.append(shim.step) or (_ for _ in ()).throw(RuntimeError("SGLang")), ns(), batch)
    assert stale.slot.busy is False and seen[0] is not stale


def test_a_fresh_states_step_seam_adds_up_its_rounds():
    import time

    fresh = shim_state.Shim()
    hook = around(fresh, "s.step", None, None, step=True)
    hook(lambda: time.sleep(0.002))
    assert fresh.step_ns[0] >= 2_000_000 and fresh.round_seams == {"s.step"}


def test_start_publisher_binds_names_its_siblings_and_hands_over_the_cells(monkeypatch, caplog, tmp_path):
    from eagle3scope.wire.endpoints import fresh_ipc_endpoint

    submitted = []

    class Recording(shim_state.Publisher):
        def submit(self, kind, payload, finalize=None):
            submitted.append((kind, payload))
            return super().submit(kind, payload, finalize)

    monkeypatch.setattr(shim_state, "Publisher", Recording)
    fresh = shim_state.Shim()
    early = {"seam": "early", "status": "attached", "detail": ""}
    fresh.pending.append(early)
    base = fresh_ipc_endpoint("startpub")
    with caplog.at_level("INFO", logger="eagle3scope"):
        assert fresh.start_publisher(base, 1, 2)
    pub = fresh.publisher
    try:
        assert pub.src == fresh.src and fresh.src.endswith(":dp1")
        assert fresh.siblings == [endpoint_for_dp_rank(base, 0), endpoint_for_dp_rank(base, 1)]
        assert pub.self_time == (fresh.self_ns, fresh.step_ns, fresh.round_seams) and fresh.pending == []
        assert submitted == [("hook", early)]  # what the seams said before there was a publisher
        assert f"eagle3scope: publishing on {pub.endpoint} as {fresh.src}" in caplog.messages
        assert pub.endpoint == endpoint_for_dp_rank(base, 1) and pub.heartbeat_extra == fresh.snapshots.stats  # ring figures
        alone = shim_state.Shim()
        assert alone.start_publisher(fresh_ipc_endpoint("startpub1"), 0)  # one publisher unless told more
        alone.publisher.close()
        assert len(alone.siblings) == 1
    finally:
        pub.close()
    taken = shim_state.Shim()
    with caplog.at_level("ERROR", logger="eagle3scope"):
        assert taken.start_publisher(f"ipc://{tmp_path}/no/such/dir/sock", 0) is False
    assert taken.publisher is None
    assert any(m.startswith(f"eagle3scope: NOT PUBLISHING: cannot bind ipc://{tmp_path}/no/such/dir/sock") and "Error:" in m
               and "Error: None." not in m for m in caplog.messages), caplog.messages


def test_without_a_pool_the_ring_is_sized_from_the_runners_max_running_requests(monkeypatch):
    ns = lambda **kw: type("NS", (), kw)()  # noqa: E731
    assert hooks._ring_capacity(ns(target_worker=ns(model_runner=ns(max_running_requests=5)), speculative_num_steps=3,
                                   speculative_num_draft_tokens=4)) == 5 * 4


def test_an_idle_attention_dp_pass_is_no_step(shim, monkeypatch):
    """An idle DP-attention rank runs a collective-only pass (ForwardMode.IDLE): nothing to report."""
    import types

    shim.publisher = object()
    shim.aux_channel = None
    shim.step = None
    shim.plan.stepped = True
    seen = []
    idle = types.SimpleNamespace(forward_mode=types.SimpleNamespace(is_idle=lambda: True, is_extend=lambda: False))
    hooks.FACTORIES["step"](shim, "v2.step")(lambda worker, b: seen.append(shim.step) or "out", object(), idle)
    assert seen == [None] and shim.step is None and shim.seams.disabled == set()


def test_a_v1_verify_keeps_sglangs_per_request_counts_and_packed_tokens(shim, monkeypatch):
    """v1 EagleVerifyOutput: counts without the bonus (a CPU list; named per release, seams.V1_COUNT_FIELDS)."""
    ns = lambda **kw: type("NS", (), kw)()  # noqa: E731
    shim.step = Step()
    out = ns(num_accepted_drafts_per_req_cpu=[1, 0], accept_tokens=CpuTensor([5, 6, 7]))
    hooks.FACTORIES["verify_v1"](shim, "v1.verify")(lambda worker, batch: (None, out), ns(), ns())
    assert shim.step.verify == ("v1", [1, 0], [5, 6, 7]) and shim.seams.disabled == set()


@pytest.mark.parametrize("counts, tokens", [("accept_length_per_req_cpu", "verified_id"),  # up to 0.5.10
                                             ("num_accepted_drafts_per_req_cpu", "verified_id"),  # 0.5.11
                                             ("num_correct_drafts_per_req_cpu", "accept_tokens")])  # 0.5.12 on
def test_a_v1_verify_of_every_release_gives_the_same_step(shim, monkeypatch, counts, tokens):
    """Each release's names for the per-request counts and the packed tokens: a request that accepted
    no draft still commits its bonus on v1, so the step is 2 + 0 accepted, 1 + 1 bonus, ids [5, 6], [7]."""
    ns = lambda **kw: type("NS", (), kw)()  # noqa: E731
    shim.step = Step()
    out = ns(**{counts: [1, 0], tokens: CpuTensor([5, 6, 7])})
    hooks.FACTORIES["verify_v1"](shim, "v1.verify")(lambda worker, batch: (None, out), ns(), ns())
    assert shim.seams.disabled == set()
    body = step_body.finalize_step(shim, ended(shim.step, seq=3, rids=["a", "b"]))
    assert (body["accepted"], body["bonus"], body["accepted_ids"]) == ([1, 0], [1, 1], [[5, 6], [7]])


def test_the_tp_broadcast_hook_without_a_channel_passes_sglangs_call_through(shim, monkeypatch, caplog):
    from eagle3scope_shim import collective

    hook = hooks.FACTORIES["tp_broadcast"](shim, "tp.broadcast")
    assert hook(lambda self, reqs: reqs, object(), []) == [] and shim.seams.disabled == set()

    def unreadable(result):
        raise ValueError("not a list")

    monkeypatch.setattr(collective, "take", unreadable)
    with caplog.at_level("WARNING", logger="eagle3scope"):
        assert hook(lambda self, reqs: ["req"], object(), None) == ["req"]
    assert caplog.messages == ["eagle3scope: reading SGLang's broadcast failed: ValueError: not a list"]
    assert shim.seams.disabled == set()  # never disabled: a change it did not take out would reach SGLang's dispatcher


def test_the_draft_forward_seam_counts_within_the_rounds_and_the_commit_seam_outside(shim, monkeypatch):
    """round_shim_us (the TUI's share) takes the seams whose hooks run inside a step seam's call."""
    hooks.FACTORIES["draft_forward"](shim, "t.fwd")
    hooks.FACTORIES["commit"](shim, "t.commit")
    assert "t.fwd" in shim.round_seams and "t.commit" not in shim.round_seams


def test_the_target_graph_capture_hook_of_a_runner_without_a_model_records_nothing(shim, monkeypatch):
    hook = hooks.FACTORIES["target_graph_capture"](shim, "graph_capture.target_capture")
    assert hook(lambda self: "captured", object()) == "captured"
    assert shim.load.target_graph_aux is None and shim.seams.disabled == set()


def test_a_published_step_counts_in_the_publishers_steps(shim, monkeypatch):
    """The heartbeat's ``steps`` counts step events: _submit hands them over as kind "step"."""
    from eagle3scope_shim.publisher import Publisher

    pub = Publisher("ipc:///tmp/e3s-never-bound", "t")  # never started: submit only queues
    shim.publisher = pub
    shim.seq = 0
    hooks._submit(shim, Step(), step_body.finalize_step)
    assert pub.steps == 1 and pub.queued == 1 and shim.seq == 1


# -- phase times, the draft's embedding width, the load hook, steps left unpublished -------------------
def test_the_draft_embedding_width_is_its_embed_tokens_weights_last_dim():
    ns = lambda **kw: type("NS", (), kw)()  # noqa: E731
    assert hooks._embed_width(ns(model=ns(embed_tokens=ns(weight=ns(shape=(1024, 96)))))) == 96
    assert hooks._embed_width(ns(model=ns())) is None


def test_a_runtime_aux_change_is_recorded_with_what_sglang_captures_now(shim, monkeypatch):
    ns = lambda **kw: type("NS", (), kw)()  # noqa: E731
    calls = []
    shim.load.aux_calls = calls
    target = ns(model=ns(layers_to_capture=[3, 6]), capture_aux_hidden_states=True)
    hooks.FACTORIES["aux_set_layers"](shim, "aux.llama_set_layers")(lambda self, layer_ids=None: None, target, [2, 5])
    assert calls == [{"requested": [2, 5], "captured": [3, 6], "on": True}]


def test_the_worker_calls_time_their_phase_into_the_step(shim, monkeypatch):
    """verify_ns, extend_ns (draft_ms, verify_ms, extend_ms on the wire) from the hooks around each call."""
    import time

    ns = lambda **kw: type("NS", (), kw)()  # noqa: E731
    shim.step = Step()
    shim.load.draft_embed_width = None
    result = ns(accept_lens=CpuTensor([1]), next_token_ids=CpuTensor([4]))
    hooks.FACTORIES["verify_v2"](shim, "v2.verify")(lambda w, b: time.sleep(0.002) or result, ns(topk=1), ns())
    batch_result = ns(logits_output=ns(hidden_states=None))
    hooks.FACTORIES["draft_extend"](shim, "v2.draft_extend")(lambda w, b, r: time.sleep(0.002), ns(), ns(), batch_result)
    assert shim.step.verify_ns >= 2_000_000 and shim.step.extend_ns >= 2_000_000 and shim.step.draft_ns is None


def test_a_v1_call_is_timed_from_its_start_on_the_shims_clock(shim, monkeypatch):
    """v1's verify and draft hooks time the call they wrap: on a clock that reads 1,000 ns at the
    call's start and 4,500 ns at its end, the step's verify_ns is 3,500."""
    ns = lambda **kw: type("NS", (), kw)()  # noqa: E731
    ticks = iter([1_000, 4_500])
    monkeypatch.setattr(hooks, "_now", lambda: next(ticks))
    shim.step = Step()
    out = ns(num_accepted_drafts_per_req_cpu=[1], accept_tokens=CpuTensor([5, 6]))
    hooks.FACTORIES["verify_v1"](shim, "v1.verify")(lambda worker, batch: (None, out), ns(), ns())
    assert shim.step.verify_ns == 3_500 and shim.seams.disabled == set()


@pytest.mark.parametrize("stage", ["no _draft_worker", "its own _draft_worker"])
def test_a_v2_worker_is_registered_with_its_drafts_embedding_width(shim, monkeypatch, stage):
    """At a v2 worker's init the shim keeps (worker, target, draft) and the draft's embedding width,
    which decides fc on the passes read at their callers; only a pipeline stage whose
    ``_draft_worker`` is None (no draft there) is skipped."""
    ns = lambda **kw: type("NS", (), kw)()  # noqa: E731
    shim.seams.disabled.clear()
    shim.load.workers = []
    shim.load.draft_embed_width = None
    draft = ns(model=ns(embed_tokens=ns(weight=ns(shape=(500, 96)))))
    target = ns()
    worker = ns(draft_worker=ns(draft_runner=ns(model=draft)), target_worker=ns(model_runner=ns(model=target)))
    if stage == "its own _draft_worker":
        worker._draft_worker = worker.draft_worker
    hooks.FACTORIES["worker_init_v2"](shim, "v2.init")(lambda self: None, worker)
    assert shim.load.workers == [("v2", worker, target, draft)] and shim.load.draft_embed_width == 96
    worker._draft_worker = None
    hooks.FACTORIES["worker_init_v2"](shim, "v2.init")(lambda self: None, worker)
    assert len(shim.load.workers) == 1 and shim.seams.disabled == set()


def test_a_request_without_a_verify_count_is_committed_not_a_failure(shim, monkeypatch):
    """The commit hook reads spec_verify_ct where SGLang keeps one; a request without it is never discarded."""
    import weakref

    ns = lambda **kw: type("NS", (), kw)()  # noqa: E731
    from collections import deque

    submitted = []
    shim.publisher = ns(submit=lambda *a: submitted.append(a) or True)
    result, step = ns(), Step()
    shim.uncommitted = deque([(weakref.ref(result), ended(step, rids=["a"]))])
    batch = ns(reqs=[ns(rid="a")])
    hooks.FACTORIES["commit"](shim, "commit.resolve")(lambda self, r, b: None, object(), result, batch)
    assert len(submitted) == 1 and step.discarded is None and shim.seams.disabled == set()


def test_the_load_hook_hands_sglang_every_checkpoint_tensor(shim, monkeypatch):
    from eagle3scope_shim import loadreport

    monkeypatch.setattr(loadreport, "_default_weight_loader", lambda model: None)

    class Draft:
        def named_parameters(self):
            return []

        def load_weights(self, weights):
            return [name for name, _ in weights]

    got = hooks.FACTORIES["draft_load"](shim, "llama_eagle3.load")(Draft.load_weights, Draft(), iter([("a", 1), ("b", 2)]))
    assert got == ["a", "b"] and shim.seams.disabled == set()


def test_the_scheduler_start_sizes_the_ring_and_no_step_does(shim, monkeypatch):
    import types

    shim.publisher = types.SimpleNamespace(submit=lambda *a: True, hook_failures=0, wake=None)
    shim.aux_channel = None
    shim.step = None
    shim.seams.status.clear()
    shim.plan.stepped = False
    shim.load.workers = []
    shim.snapshots.capacity = 0
    shim.snapshots.ring = None
    worker = types.SimpleNamespace(req_to_token_pool=types.SimpleNamespace(size=2), speculative_num_steps=3,
                                   speculative_num_draft_tokens=4)
    hooks._start_ring(shim, types.SimpleNamespace(draft_worker=worker, server_args=types.SimpleNamespace(device="cpu")))
    assert shim.snapshots.capacity == 8 and shim.snapshots.ring is None  # a CPU server's tensors are host tensors already
    batch = types.SimpleNamespace(forward_mode=types.SimpleNamespace(is_idle=lambda: False, is_extend=lambda: True),
                                  reqs=[])
    hook = hooks.FACTORIES["step"](shim, "v2.step")
    worker.req_to_token_pool.size = 5
    hook(lambda w, b: None, worker, batch)
    assert shim.snapshots.capacity == 8 and shim.plan.stepped and shim.seams.disabled == set()


def test_a_decode_step_whose_verify_went_unobserved_is_not_published_and_a_prefill_is(shim, monkeypatch):
    import types

    submitted = recording_publisher(shim)  # a fresh shim: no step, no seam status yet
    shim.plan.stepped = True
    shim.load.workers = []
    hook = hooks.FACTORIES["step"](shim, "v2.step")
    for extend, published in ((False, 0), (True, 1)):
        batch = types.SimpleNamespace(reqs=[types.SimpleNamespace(rid="r")],
                                      forward_mode=types.SimpleNamespace(is_idle=lambda: False, is_extend=lambda e=extend: e))
        hook(lambda w, b: None, types.SimpleNamespace(), batch)
        assert len(submitted) == published


def test_a_hook_event_without_detail_says_nothing(monkeypatch):
    fresh = shim_state.Shim()
    fresh.report("s", "attached")
    assert fresh.pending == [{"seam": "s", "status": "attached", "detail": ""}]


# -- the step body's phase times, one-step trees, the sync guard, the forward hook's plan, entry ranks --
def test_the_step_body_carries_each_phases_time_in_ms_under_its_wire_name(shim):
    step = Step()
    step.draft_ns, step.verify_ns, step.extend_ns = 2_500_000, 1_000_000, None
    body = step_body._step_body(shim, ended(step))
    assert (body["draft_ms"], body["verify_ms"], body["extend_ms"]) == (2.5, 1.0, None)


def test_the_draft_call_times_its_phase(shim, monkeypatch):
    import time

    ns = lambda **kw: type("NS", (), kw)()  # noqa: E731
    shim.step = Step()
    shim.load.draft_embed_width = None
    verify_input = ns(draft_token=CpuTensor([1, 2]))
    batch = ns(spec_info=ns(hidden_states=None))
    hooks.FACTORIES["draft"](shim, "v2.draft")(lambda w, b: time.sleep(0.002) or verify_input, ns(), batch)
    assert shim.step.draft_ns >= 2_000_000 and shim.step.draft == [1, 2]


def test_a_one_step_tree_sizes_the_ring_by_its_draft_tokens(monkeypatch):
    ns = lambda **kw: type("NS", (), kw)()  # noqa: E731
    assert hooks._ring_capacity(ns(req_to_token_pool=ns(size=2), speculative_num_steps=3, speculative_num_draft_tokens=8)) == 2 * 8


def test_a_v1_draft_call_returns_its_verify_input_first(shim, monkeypatch):
    """v1 EAGLEWorker.draft returns the verify input (a tuple's first item in some releases)."""
    ns = lambda **kw: type("NS", (), kw)()  # noqa: E731
    shim.step = Step()
    shim.load.draft_embed_width = None
    batch = ns(spec_info=ns(hidden_states=None))
    hooks.FACTORIES["draft"](shim, "v1.draft")(lambda w, b: (ns(draft_token=CpuTensor([7, 8])), "other"), ns(), batch)
    assert shim.step.draft == [7, 8]


def test_the_worker_hooks_run_under_the_sync_guard_when_the_tests_ask(shim, monkeypatch):
    """EAGLE3SCOPE_SYNC_GUARD=1 (test support): hot bodies run inside the guard, named by their seam."""
    import contextlib

    from eagle3scope_shim import guard

    entered = []

    @contextlib.contextmanager
    def recording(seam):
        entered.append(seam)
        yield

    monkeypatch.setattr(guard, "SYNC_GUARD", recording)
    shim.seams.disabled.clear()
    shim.step = Step()
    ns = lambda **kw: type("NS", (), kw)()  # noqa: E731
    hooks.FACTORIES["draft_extend"](shim, "v2.draft_extend")(lambda w, b, r: None, ns(), ns(), ns(logits_output=ns(hidden_states=None)))
    assert entered == ["v2.draft_extend", "v2.draft_extend"]  # pre and post
    shim.uncommitted = __import__("collections").deque([(lambda: None, None)])
    shim.publisher = object()
    hooks.FACTORIES["commit"](shim, "commit.resolve")(lambda self, r, b: None, object(), object(), ns(reqs=[]))
    assert entered[2:] == ["commit.resolve", "commit.resolve"]


def test_the_first_step_keeps_the_forward_hook_of_a_worker_with_draft_graphs(shim, monkeypatch):
    """The first step judges its own worker's graph slots (not none at all) before taking a hook out."""
    import types


    taken = []
    shim.seams.detachers["llama_eagle3.forward"] = lambda: taken.append(1) or True
    shim.seams.disabled.clear()
    shim.unobserved = {}
    shim.publisher = types.SimpleNamespace(submit=lambda *a: True, hook_failures=0)
    shim.aux_channel = None
    shim.step = None
    shim.seams.status.clear()
    shim.plan.stepped = False
    shim.load.draft_embed_width = 128
    shim.plan.forwards_at_callers = False
    runner = type("EAGLEDraftCudaGraphRunner", (), {})()
    worker = types.SimpleNamespace(draft_worker=types.SimpleNamespace(cuda_graph_runner=runner), speculative_num_steps=3,
                                   speculative_num_draft_tokens=4, req_to_token_pool=types.SimpleNamespace(size=1))
    shim.load.workers = [("v2", worker, None, None)]
    batch = types.SimpleNamespace(forward_mode=types.SimpleNamespace(is_idle=lambda: False, is_extend=lambda: True),
                                  reqs=[])
    hooks.FACTORIES["step"](shim, "v2.step")(lambda w, b: None, worker, batch)
    assert taken == [] and shim.plan.forwards_at_callers is False and shim.plan.stepped


def test_a_hook_events_detail_is_cut_at_1000_characters():
    fresh = shim_state.Shim()
    fresh.report("s", "failed", "x" * 2000)
    assert len(fresh.pending[0]["detail"]) == 1000


def test_an_unsafe_default_endpoint_is_named_as_the_default_on_the_servers_log(monkeypatch, caplog):
    from eagle3scope.wire.endpoints import EndpointError

    def unsafe(endpoint):
        raise EndpointError("the runtime directory is not private")

    monkeypatch.setattr(shim_state, "resolve_bind_endpoint", unsafe)
    with caplog.at_level("ERROR", logger="eagle3scope"):
        assert shim_state.Shim().start_publisher("", 0) is False
    assert caplog.messages[-1].startswith("eagle3scope: NOT PUBLISHING: cannot bind the default endpoint: EndpointError")


def test_the_scheduler_hook_starts_only_an_entry_ranks_publisher_with_its_topology(shim, monkeypatch):
    """Wiring of make_scheduler_init (the engine tests run it for real): the topology read once, the
    publisher started with this rank's index and the publisher count, the control channel with its
    TP rank, the unobserved check on the scheduler's draft worker, the start-up bodies, the ring."""
    import types

    from eagle3scope_shim import aux_channel, loadreport, topology

    calls = []
    parallel, rank = {"publishers": 2}, {"tp_rank": 3}
    monkeypatch.setenv("EAGLE3SCOPE_ENDPOINT", "ipc:///tmp/e3s-wiring")
    monkeypatch.setattr(topology, "read", lambda sched, args, kwargs: (parallel, rank))
    monkeypatch.setattr(topology, "publisher_index", lambda p, r: 1)
    monkeypatch.setattr(shim, "confirm_registered", lambda: calls.append("confirm"))
    monkeypatch.setattr(shim, "start_publisher", lambda endpoint, index, publishers: calls.append(
        ("start", endpoint, index, publishers)) or True)
    monkeypatch.setattr(aux_channel, "start", lambda shim, sched, index, tp: calls.append(("aux", sched, index, tp)))
    monkeypatch.setattr(hooks, "report_unobserved", lambda shim, worker: calls.append(("unobserved", worker)))
    monkeypatch.setattr(loadreport, "publish_startup", lambda shim, sched: calls.append(("startup", sched)))
    monkeypatch.setattr(hooks, "_start_ring", lambda shim, sched: calls.append(("ring", sched)))
    sched = types.SimpleNamespace(draft_worker="the draft worker")
    for publishes in (False, True):
        monkeypatch.setattr(topology, "entry_rank", lambda p, r: (publishes, f"publishes={publishes}"))
        hooks.FACTORIES["scheduler_init"](shim, "scheduler.init")(lambda self: None, sched)
        assert shim.scheduler is sched and shim.topology == {"parallel": parallel, "rank": rank, "index": 1,
                                                               "publishes": publishes, "reason": f"publishes={publishes}"}
    assert calls == ["confirm", ("start", "ipc:///tmp/e3s-wiring", 1, 2), ("aux", sched, 1, 3),
                     ("unobserved", "the draft worker"), ("startup", sched), ("ring", sched)]


# -- names, start-up state, and what each step reads or asks once ---------------------------------------
def test_an_unhooked_draft_model_is_named_by_its_class(shim, monkeypatch):
    ns = lambda **kw: type("NS", (), kw)()  # noqa: E731
    monkeypatch.setattr(hooks, "_observes", lambda targets, obj, family: family == "worker")
    draft = type("MedusaHead", (), {})()
    hooks.report_unobserved(shim, ns(draft_worker=ns(draft_runner=ns(model=draft))))
    assert shim.unobserved["draft_model"].startswith("the draft model is MedusaHead, whose forward the shim does not hook")


def test_a_fresh_state_dates_its_process_and_rebuilds_no_hello_before_the_first(shim, monkeypatch):
    import time

    from eagle3scope_shim import loadreport

    before = time.time_ns()
    fresh = shim_state.Shim()
    assert before <= fresh.started_ns <= time.time_ns() and fresh.hello_args is None
    sticky = []
    fresh.publisher = type("P", (), {"set_sticky": lambda self, kind, body: sticky.append(kind)})()
    loadreport.refresh_hello(fresh)  # a capture before the start-up bodies: nothing to rebuild yet
    assert sticky == []


def test_the_capture_read_each_step_follows_changes_and_a_new_target(shim, monkeypatch):
    """capture_now finds the models holding the capture once per target (``owner.model`` is a torch
    submodule, read through ``Module.__getattr__``) and still reads the flag and the layers every step:
    a runtime switch (SGLang's set_eagle3_layers_to_capture sets both) shows at the next step."""
    from eagle3scope_shim import loadreport

    class Module:  # as torch's: submodules live in _modules, reached through __getattr__
        def __init__(self, **modules):
            self._modules = modules

        def __getattr__(self, name):
            looked.append(name)
            try:
                return self.__dict__["_modules"][name]
            except KeyError:
                raise AttributeError(name) from None

    def target(layers):
        owner = Module(model=Module())
        owner.capture_aux_hidden_states, owner.model.layers_to_capture = True, layers
        return owner

    looked = []

    first = target([2, 5, 8])
    shim.load.workers = [("v2", None, first, None)]
    shim._capture_from = None
    shim._capture_key = None
    assert loadreport.capture_now(shim) == {"on": True, "layers": [2, 5, 8]}
    inner = first.model
    looked.clear()
    inner.layers_to_capture = [1, 4]  # a new list, as SGLang assigns it
    assert loadreport.capture_now(shim) == {"on": True, "layers": [1, 4]}
    inner.layers_to_capture.append(7)  # or the same list changed in place
    assert loadreport.capture_now(shim) == {"on": True, "layers": [1, 4, 7]}
    first.capture_aux_hidden_states = False
    assert loadreport.capture_now(shim) == {"on": False, "layers": [1, 4, 7]}
    assert "model" not in looked  # the submodule was found once
    shim.load.workers = [("v2", None, first, None), ("v2", None, target([3]), None)]
    assert loadreport.capture_now(shim) == {"on": True, "layers": [3]}  # a new worker's target is looked up afresh


def test_forward_modes_and_spec_input_types_are_asked_once_each_and_stand_ins_every_time(shim, monkeypatch):
    """SGLang's ForwardMode and SpecInputType are enums whose ``is_*`` answers never change, so each
    member is asked once (by the step hook itself, whose lookups are inline: no call a step); an
    unhashable mode, or a spec input without ``spec_input_type``, is asked every call, and the memo
    holds at most MAX_MEMO members."""
    import enum
    import types

    class Mode(enum.IntEnum):
        DECODE, EXTEND, IDLE = 1, 2, 3

        def is_idle(self):
            asked.append(self)
            return self is Mode.IDLE

        def is_extend(self):
            return self is Mode.EXTEND

    asked, seen = [], []
    shim.publisher = PublisherStub()
    shim.plan.stepped = True
    step_hook = hooks.FACTORIES["step"](shim, "u.step")

    def step(mode):  # what the step's own pre made of the mode: no step (idle), or a prefill or decode one
        batch = types.SimpleNamespace(forward_mode=mode, reqs=[], is_extend_in_batch=False)
        step_hook(lambda worker, b: seen.append(None if shim.step is None else shim.step.prefill), None, batch)
        return seen[-1]

    assert [step(m) for m in (Mode.DECODE, Mode.EXTEND, Mode.IDLE, Mode.DECODE, Mode.IDLE)] == [
        False, True, None, False, None]
    assert asked == [Mode.DECODE, Mode.EXTEND, Mode.IDLE]
    unhashable = types.SimpleNamespace(is_idle=lambda: False, is_extend=lambda: True)
    assert step(unhashable) is True and step(unhashable) is True
    monkeypatch.setattr(hooks, "MAX_MEMO", 3)  # full: a fourth mode is answered, not kept

    class Other:
        def is_extend(self):
            asked.append(self)
            return False

    other = Other()
    assert step(other) is False and step(other) is False and asked[-2:] == [other, other]
    assert shim.seams.disabled == set()
    spec = lambda prebuilt, kind=None: types.SimpleNamespace(  # noqa: E731
        is_verify_input=lambda: prebuilt, hidden_states=types.SimpleNamespace(shape=(2, 96)),
        **({"spec_input_type": kind} if kind else {}))
    memo = {}
    drafts = lambda s: hooks._draft_start(types.SimpleNamespace(spec_info=s), memo)  # noqa: E731
    assert drafts(spec(False))[1] == 96 and drafts(spec(True)) is None  # no type: asked
    assert drafts(spec(True, "verify")) is None and drafts(spec(False, "verify")) is None  # asked once
    assert memo == {"verify": True}
