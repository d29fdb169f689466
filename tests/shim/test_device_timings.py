"""Device phase times: timing events made with the ring, recorded at the phase boundaries by the
real hooks, read by the publisher after the slot's event; and on a CPU server none of it."""

from __future__ import annotations

import types

import pytest

from eagle3scope.wire import decode_frame, encode_frame
from eagle3scope_shim import detach_plan, hooks, loadreport, ring
from eagle3scope_shim.ring import HostRing
from benchmarks.support.device_events import DeviceModel

ns = types.SimpleNamespace


class Device:
    """A device clock that only the wrapped SGLang calls advance: the GPU's work, which the host
    times (launches) do not see."""

    ms = 0.0


class Timer:
    """Stands in for ``torch.cuda.Event(enable_timing=True)``: ``record`` stamps the device clock;
    ``elapsed_time`` raises, as CUDA does, while either end has not completed."""

    made = 0

    def __init__(self, enable_timing: bool = True) -> None:
        assert enable_timing
        Timer.made += 1
        self.at, self.done = None, False

    def record(self) -> None:
        self.at, self.done = Device.ms, True

    def elapsed_time(self, end: "Timer") -> float:
        if not (self.done and end.done):
            raise RuntimeError("CUDA error: device not ready")
        return end.at - self.at


class Event:
    """The slot's completion event (``record``, ``query``, ``synchronize``)."""

    def __init__(self, enable_timing: bool = False) -> None:
        self.done = True

    def record(self) -> None:
        self.done = False

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.done = True


class Host(list):
    """A host tensor: what ``snap`` lists at once and the publisher reads."""

    is_cpu = True

    def tolist(self):
        return list(self)


class Publisher:
    def __init__(self) -> None:
        self.submitted = []

    def submit(self, kind, payload, finalize=None):
        self.submitted.append((payload, finalize))
        return True

    def drop(self, kind):
        raise AssertionError("no slot should be short")


@pytest.fixture
def server(shim, monkeypatch):
    """A v2 decode server whose ring times the phases (what ``ring_for`` makes on CUDA)."""
    timed = HostRing(4, Event, capacity=64, new_timer=Timer)
    shim.snapshots.ring, shim.snapshots.on_cpu = timed, False
    shim.publisher = Publisher()
    shim.plan.published_at_step = True
    return timed


def _work(ms: float, result=None):
    """A wrapped SGLang call whose device work takes ``ms`` (and no host time to speak of)."""

    def original(*args, **kwargs):
        Device.ms += ms
        return result

    return original


def _round(shim, draft_ms=3.0, gap_ms=0.0, verify_ms=5.0, extend_ms=2.0):
    """One decode round of two requests through the real step, draft, verify and draft-extend hooks."""
    step_hook = hooks.FACTORIES["step"](shim, "t.step")
    draft_hook = hooks.FACTORIES["draft"](shim, "t.draft")
    verify_hook = hooks.FACTORIES["verify_v2"](shim, "t.verify")
    extend_hook = hooks.FACTORIES["draft_extend"](shim, "t.extend")
    worker = ns(speculative_num_steps=3, topk=1)
    batch = ns(forward_mode=ns(is_idle=lambda: False, is_extend=lambda: False), is_extend_in_batch=False,
               reqs=[ns(rid="a"), ns(rid="b")])
    drafted = ns(draft_token=Host(range(8)))
    verified = ns(accept_lens=Host([2, 1]), next_token_ids=Host(range(8)))

    def forward(self, b):
        draft_hook(_work(draft_ms, (drafted,)), self, b)
        Device.ms += gap_ms  # between the draft's return and verify's call
        verify_hook(_work(verify_ms, verified), self, b)
        extend_hook(_work(extend_ms), self, b)

    step_hook(forward, worker, batch)


def _published(shim):
    ((step, finalize),) = shim.publisher.submitted
    body = finalize(step)
    assert decode_frame(encode_frame("step", body, src="t", n=0)).body == body  # a valid wire step
    return body, step


def test_the_hooks_mark_each_phase_on_the_device_and_the_publisher_reads_it_after_the_slot(shim, server):
    made = Timer.made
    _round(shim)
    assert Timer.made == made  # no event is made in a step: they came with the ring
    body, step = _published(shim)
    assert body["draft_device_ms"] == pytest.approx(3.0)
    assert body["verify_device_ms"] == pytest.approx(5.0)  # from the draft's end: v2's verify hook has no pre
    assert body["extend_device_ms"] == pytest.approx(2.0)
    assert body["draft_ms"] < 3.0 and body["accepted"] == [1, 0]  # host times stay as they were
    slot = step.slot
    assert slot.event.done and not slot.busy and slot.marked == 0  # released, its marks forgotten for the next step


def test_a_mark_not_yet_complete_leaves_its_phase_out_rather_than_wait_or_fail(shim, server):
    _round(shim)
    step, finalize = shim.publisher.submitted[0]
    step.slot.marks[ring.EXTEND_END].done = False  # recorded on a stream that has not got there
    body = finalize(step)
    assert "extend_device_ms" not in body and body["draft_device_ms"] == pytest.approx(3.0)
    assert shim.seams.disabled == set()


def test_an_untimed_ring_records_no_marks_and_publishes_no_device_times(shim, server, monkeypatch):
    untimed = HostRing(4, Event, capacity=64)
    shim.snapshots.ring = untimed
    _round(shim)
    body, step = _published(shim)
    assert not any(key.endswith("_device_ms") for key in body) and step.slot is None  # no slot taken for marks
    assert all(s.marks is None for s in untimed.slots)


def test_the_ring_made_at_the_start_has_timing_events_on_cuda_and_none_on_cpu(shim, monkeypatch):
    model = DeviceModel()
    shim.snapshots.torch, shim.snapshots.on_cpu = model.torch, False
    shim.snapshots.start("cuda", 64)
    cuda = shim.snapshots.ring
    assert cuda.timed and shim.snapshots.timed
    timers = [e for e in model.events if e.timing]
    assert len(timers) == len(cuda.slots) * len(ring.MARKS)
    assert all(len(slot.marks) == len(ring.MARKS) for slot in cuda.slots)
    assert sum(not e.timing for e in model.events) == len(cuda.slots)  # the completion events, untimed as before
    shim.snapshots.on_cpu = True
    shim.snapshots.start("cpu", 64)
    cpu = shim.snapshots.ring
    assert not cpu.timed and not shim.snapshots.timed and all(s.marks is None for s in cpu.slots)


@pytest.mark.parametrize("device, timed", [("cuda", True), (None, True), ("cpu", False)])
def test_the_hello_says_device_timings_only_where_the_device_times_the_phases(shim, monkeypatch, device, timed):
    assert loadreport._observable(shim, ns(device=device))["device_timings"] is timed
    shim.unobserved = {"worker": "another worker class"}
    assert loadreport._observable(shim, ns(device=device))["device_timings"] is False


@pytest.mark.parametrize("enable_overlap", [True, False])
def test_the_hello_says_whether_sglang_runs_the_overlap_loop(shim, monkeypatch, enable_overlap):
    body = loadreport.hello_body(shim, ns(server_args=ns(device="cuda"), enable_overlap=enable_overlap))
    assert body["server_args"]["overlap_schedule"] is enable_overlap
    assert decode_frame(encode_frame("hello", body, src="t", n=0)).body["server_args"]["overlap_schedule"] is enable_overlap


@pytest.mark.parametrize("device, detached", [("cuda", False), ("cpu", True)])
def test_the_draft_and_extend_hooks_stay_where_they_mark_the_device(shim, monkeypatch, device, detached):
    taken = []
    monkeypatch.setattr(shim.seams, "detach", lambda seam: taken.append(seam) or True)
    shim.load.workers = [("v2", None, None, None)]
    shim.plan.forwards_at_callers = True
    shim.plan.draft_at_verify = False
    shim.plan.extend_at_verify = False
    shim.topology = None
    shim.scheduler = ns(server_args=ns(device=device))
    detach_plan._detach_draft_and_extend(shim, ns(speculative_num_steps=3))
    assert (taken == [detach_plan.DRAFT_SEAM, detach_plan.EXTEND_SEAM]) is detached
    assert shim.plan.draft_at_verify is detached
