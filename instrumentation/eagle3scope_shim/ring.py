"""The snapshot ring: reusable host buffers that device tensors are copied into without a sync.

Nothing here blocks: device tensors are copied ``non_blocking`` into a :class:`HostRing` slot's
reusable (pinned) host buffers, the slot's one event is recorded after the step's copies, and the
publisher thread turns them into lists later and hands the slot back (see :func:`snap`).
"""

from __future__ import annotations

import os
from typing import Any, Callable

from eagle3scope.wire import bodies, env


class Snapshots:
    """The process's ring and what sizes it, made at the first device copy."""

    def __init__(self) -> None:
        self.ring: HostRing | None = None
        self.capacity = 0  # elements per ring buffer: request pool size x draft tokens, set at the first step
        self.sized = False
        self.on_cpu = os.environ.get(env.RING_ON_CPU, "").strip() == "1"
        self.timed = False  # the ring records device time at the phase boundaries (ring.mark)

    def stats(self) -> bodies.Heartbeat:
        """The host ring's size and allocations, for the heartbeat (publisher thread; ints only)."""
        ring = self.ring
        if ring is None:
            return {}
        return {"ring": bodies.Ring(slots=len(ring.slots), capacity=ring.capacity, allocations=ring.allocations,
                                    late_allocations=ring.late_allocations, oversize=ring.oversize)}


class RingSlot:
    """One step's host buffers (by field name), the event recorded after its copies, and the
    timing events of its phase boundaries (:data:`MARKS`, on a device that times them)."""

    __slots__ = ("index", "buffers", "event", "busy", "recorded", "marks", "marked")

    def __init__(self, index: int, event, marks: list | None = None) -> None:
        self.index = index
        self.buffers: dict[str, Any] = {}
        self.event = event  # None on CPU: host copies are complete when ``copy_`` returns
        self.busy = False  # handed out, not yet released by its reader
        self.recorded = False  # the event was recorded at least once
        self.marks = marks  # one timing event per MARKS entry, or None (no device clock)
        self.marked = 0  # bit i: MARKS[i] was recorded in the slot's current step


class HostRing:
    """A fixed ring of reusable host-buffer slots, one slot per published step.

    Slots are handed out in order. The next slot is reusable only when its reader released it and
    its event completed, which is checked with ``event.query()``: the hot path never waits. A busy
    slot means the step is not snapshotted and counts in ``dropped``. A field's buffers are
    allocated for every slot at once, at its first copy (the first step), ``capacity`` elements each
    (request pool size x draft tokens, which no batch exceeds); a copy larger than that drops its
    step (``oversize``) rather than allocate pinned memory on the hot path. Only a ring whose
    capacity is unknown (0) grows a slot's buffer. So a round costs neither a host allocation nor a
    new event; ``late_allocations`` counts allocations after the first step.
    """

    def __init__(self, size: int, new_event: Callable[[], Any] | None = None, capacity: int = 0,
                 new_timer: Callable[[], Any] | None = None) -> None:
        self.slots = [RingSlot(i, new_event() if new_event is not None else None,
                               [new_timer() for _ in MARKS] if new_timer is not None else None)
                      for i in range(max(1, size))]
        self.timed = new_timer is not None  # its slots record device time at the phase boundaries
        self.capacity = max(0, int(capacity))  # elements per buffer: request pool size x draft tokens
        self._next = 0
        self.acquired = 0
        self.dropped = 0
        self.allocations = 0  # buffer allocations (a field for every slot counts once)
        self.late_allocations = 0  # of them, after the first step
        self.oversize = 0  # copies larger than the buffers: their steps were dropped

    def buffer(self, slot: RingSlot, name: str, dtype, n: int, pin: bool):
        """The slot's buffer for ``name`` holding ``n`` elements of ``dtype``; None when ``n`` exceeds
        the ring's capacity (the caller drops the step)."""
        held = slot.buffers.get(name)
        if held is not None and held[0].dtype == dtype and held[0].numel() >= n:
            return held
        if self.capacity and n > self.capacity:
            self.oversize += 1
            return None
        import torch

        self.allocations += 1
        if self.acquired > 1:
            self.late_allocations += 1
        targets = self.slots if self.capacity and held is None else (slot,)
        for s in targets:
            buf = torch.empty(max(n, self.capacity), dtype=dtype, pin_memory=pin)
            s.buffers[name] = (buf, 0, buf[:0])
        return slot.buffers[name]

    def acquire(self) -> RingSlot | None:
        slot = self.slots[self._next]
        if slot.busy or (slot.recorded and not slot.event.query()):
            self.dropped += 1
            return None
        slot.busy = True
        self._next = (self._next + 1) % len(self.slots)
        self.acquired += 1
        return slot

    @staticmethod
    def record(slot: RingSlot) -> None:
        """Record the slot's event after the copies queued so far on the current stream."""
        if slot.event is not None:
            slot.event.record()
            slot.recorded = True

    @staticmethod
    def release(slot: RingSlot) -> None:
        slot.busy = False
        slot.marked = 0


#: Ring slots, clamped so the ring's host memory stays under :data:`RING_BYTES`.
RING_SLOTS = (8, 64)
RING_BYTES = 16 << 20


#: Phase boundaries a timed slot records an event at, on the current stream, as the hooks pass them.
#: SGLang runs nothing on the device between the draft's return and verify's call
#: (``forward_batch_generation``, eagle_worker_v2.py 0.5.23), so where verify's start is not marked
#: (v2's verify hook has no body before the call) the draft's end stands for it.
MARKS = ("draft_start", "draft_end", "verify_start", "verify_end", "extend_start", "extend_end")
DRAFT_START, DRAFT_END, VERIFY_START, VERIFY_END, EXTEND_START, EXTEND_END = range(len(MARKS))
#: step field -> (start mark or marks in order of preference, end mark)
DEVICE_PHASES = (("draft_device_ms", (DRAFT_START,), DRAFT_END), ("verify_device_ms", (VERIFY_START, DRAFT_END), VERIFY_END),
                 ("extend_device_ms", (EXTEND_START,), EXTEND_END))
#: devices whose rings time the phases: a timing-enabled ``torch.cuda.Event`` pair reads the GPU's own clock
TIMED_DEVICES = ("cuda",)


def times_device(server_args) -> bool:
    """Whether a server with these arguments gets device phase times (SGLang's device defaults to
    cuda); False where there are none to read."""
    return server_args is not None and (getattr(server_args, "device", None) or "cuda") in TIMED_DEVICES


def mark(step, boundary: int) -> None:
    """Record the timing event of ``boundary`` (an index into :data:`MARKS`) in the step's slot, on
    the current stream: no sync, no allocation (the events were made with the ring). Takes the slot
    the step's snapshots will use, as :func:`snap` would. Only called where ``SNAPSHOTS.timed``."""
    if step.dropped:
        return
    slot = step.slot
    if slot is None:
        slot = step.slot = SNAPSHOTS.ring.acquire()
        if slot is None:
            step.dropped = True
            return
    slot.marks[boundary].record()
    slot.marked |= 1 << boundary


def device_ms(slot: RingSlot) -> dict[str, float]:
    """Publisher thread, after the slot's event: each phase whose both boundaries were marked, in
    device milliseconds (``elapsed_time``; a mark on another stream that has not completed yet
    leaves its phase out rather than wait)."""
    out = {}
    marked, marks = slot.marked, slot.marks
    for name, starts, end in DEVICE_PHASES:
        start = next((i for i in starts if marked >> i & 1), None)
        if start is None or not marked >> end & 1:
            continue
        try:
            out[name] = float(marks[start].elapsed_time(marks[end]))
        except RuntimeError:
            continue
    return out


def ring_for(device_type: str, capacity: int) -> HostRing:
    """A ring for snapshots of ``device_type`` tensors, ``capacity`` elements per buffer (four
    int64-sized buffers per slot: draft tokens, accept lengths, accepted ids, tree accept index),
    with timing events per slot on a device in :data:`TIMED_DEVICES`."""
    import torch

    low, high = RING_SLOTS
    size = max(low, min(high, RING_BYTES // max(1, 4 * 8 * capacity)))
    if device_type == "cpu":  # test support (env.RING_ON_CPU): host copies are done when copy_ returns
        new_event = timer = None
    else:
        new_event = getattr(getattr(torch, device_type, None), "Event", None)
        if new_event is None:
            raise RuntimeError(f"torch.{device_type} has no Event: cannot tell when host copies are done")
        timer = (lambda: new_event(enable_timing=True)) if device_type in TIMED_DEVICES else None
    ring = HostRing(size, new_event, capacity, timer)
    SNAPSHOTS.timed = ring.timed  # the hooks mark only where the ring can time (ring.mark)
    return ring


def snap(step, name: str, tensor):
    """A host copy of ``tensor`` taken without a sync. A CPU tensor is read into a list at once:
    cheaper than a ``clone`` and done when it returns, and no device is
    involved. Device tensors go ``non_blocking`` into the step's ring slot: pinned buffers reused
    across steps, read by the publisher thread only after the slot's one event, which the step hook
    records after all the step's copies. None when the ring had no free slot: the step is then
    marked dropped. ``is_cpu``/``is_cuda`` rather than ``device.type``: each builds no
    ``torch.device`` (after a forward has swept the caches, ``device.type`` costs about 40 µs of CPU
    here, ``is_cpu`` 17: BENCHMARKS.md)."""
    if tensor is None:
        return None
    if tensor.is_cpu and not SNAPSHOTS.on_cpu:
        return tensor.clone() if CLONE_CPU else tensor.tolist()
    if step.dropped:
        return None
    slot = step.slot
    if slot is None:
        ring = SNAPSHOTS.ring
        if ring is None:
            ring = SNAPSHOTS.ring = ring_for(tensor.device.type, SNAPSHOTS.capacity)
        slot = step.slot = ring.acquire()
        if slot is None:
            step.dropped = True
            return None
    n = tensor.numel()
    held = SNAPSHOTS.ring.buffer(slot, name, tensor.dtype, n, tensor.is_cuda)  # (buffer, numel of the view, view)
    if held is None:
        step.dropped = True
        return None
    if held[1] != n:
        held = slot.buffers[name] = (held[0], n, held[0][:n])
    view = held[2]
    view.copy_(tensor if tensor.dim() == 1 else tensor.reshape(-1), non_blocking=True)
    return view


def listed(value) -> list:
    """A snapshot as a list (publisher thread): a CPU tensor's is one already, ring views and clones
    are read with ``tolist``."""
    return value if type(value) is list else value.tolist()


#: Under the sync guard (``EAGLE3SCOPE_SYNC_GUARD=1``, test support) a CPU tensor is cloned, not
#: listed: the guard flags ``tolist`` whatever the device, so that a CPU run proves what a GPU run
#: would sync on, and the CPU branch of :func:`snap` never runs for a device tensor.
CLONE_CPU = os.environ.get(env.SYNC_GUARD, "").strip() == "1"


SNAPSHOTS = Snapshots()
