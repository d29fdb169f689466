"""The snapshot ring: reusable host buffers that device tensors are copied into without a sync.

Nothing here blocks on the hot path: device tensors are copied ``non_blocking`` into a
:class:`HostRing` slot's reusable (pinned) host buffers, the slot's one event is recorded after the
step's copies, and the publisher thread waits for that event, turns the buffers into lists and hands
the slot back (see :func:`snap`). The ring is sized and every buffer allocated on the scheduler's
thread when the scheduler starts (:meth:`Snapshots.start`), never in a step. It wakes the publisher
itself when it runs short, whatever its size. The publisher's event work adopts the scheduler's
device first and never overlaps a graph capture (:data:`CAPTURE_GATE`).
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any, Callable

from eagle3scope.wire import env

#: The fields snapshotted per step (hooks: draft tokens, accept lengths, accepted ids, tree accept
#: index), each with one buffer per slot, allocated when the ring is made.
FIELDS = ("draft", "lens", "ids", "path")

#: Held by a thread that captures a CUDA graph (the shim's recapture, SGLang's capture seam:
#: ``graphs.GraphPlan.recapture``, ``hooks.make_target_graph_capture``) and by the publisher thread
#: around its event work (:meth:`HostRing.device_work`). SGLang captures in PyTorch's ``global`` error
#: mode, where an event query or sync from ANY thread invalidates the capture; so the publisher's
#: event calls and a capture exclude each other. A gate rather than relaxed capture mode for the
#: publisher thread: PyTorch has no Python call that sets a thread's capture mode
#: (``cudaThreadExchangeStreamCaptureMode``), relaxed mode would still not cover a pinned allocation,
#: and a flag that is only read would race with a capture starting right after the read. Reentrant,
#: because the shim's recapture runs SGLang's capture, whose seam takes it again on the same thread.
#: The hot path never takes it; the publisher waits at most one capture, a capture at most one
#: event wait (one step's device work).
CAPTURE_GATE = threading.RLock()


class Snapshots:
    """The shim's ring and what sized it, made when the scheduler starts."""

    def __init__(self) -> None:
        self.ring: HostRing | None = None
        self.capacity = 0  # elements per ring buffer: request pool size x draft tokens
        self.on_cpu = os.environ.get(env.RING_ON_CPU, "").strip() == "1"
        self.torch = None  # the torch the ring is made with (None: the real one; tests give a model of it)

    def start(self, device_type: str, capacity: int, wake: Callable[[], None] | None = None) -> None:
        """Scheduler thread, before its first step: size the ring and allocate all its buffers, for
        snapshots of ``device_type`` tensors, ``capacity`` elements each. No ring where tensors are
        host tensors already (a CPU server, unless ``env.RING_ON_CPU`` asks for one)."""
        self.capacity = max(0, int(capacity))
        if device_type == "cpu" and not self.on_cpu:
            return
        self.ring = ring_for(device_type, self.capacity, wake=wake, torch=self.torch)

    @property
    def timed(self) -> bool:
        """The ring records device time at the phase boundaries: the hooks mark only then (:func:`mark`)."""
        ring = self.ring
        return ring is not None and ring.timed

    def stats(self) -> dict:
        """The host ring's size and allocations, for the heartbeat (publisher thread; ints only)."""
        ring = self.ring
        if ring is None:
            return {}
        return {"ring": dict(slots=len(ring.slots), capacity=ring.capacity, allocations=ring.allocations,
                                    late_allocations=ring.late_allocations, oversize=ring.oversize)}


class RingSlot:
    """One step's host buffers (by field name), the event recorded after its copies, its ring, and
    the timing events of its phase boundaries (:data:`MARKS`, on a device that times them)."""

    __slots__ = ("index", "ring", "buffers", "event", "busy", "recorded", "marks", "marked")

    def __init__(self, index: int, ring: HostRing, event, marks: list | None = None) -> None:
        self.index = index
        self.ring = ring
        self.buffers: dict[str, Any] = {}  # field -> (buffer, numel of the view, view)
        self.event = event  # None on CPU: host copies are complete when ``copy_`` returns
        self.busy = False  # handed out, not yet released by its reader
        self.recorded = False  # the event was recorded at least once
        self.marks = marks  # one timing event per MARKS entry, or None (no device clock)
        self.marked = 0  # bit i: MARKS[i] was recorded in the slot's current step


class SchedulerDevice:
    """The scheduler thread's device, which every other shim thread adopts before its first device
    call. A new thread's current device is 0 and ``CUDAEvent::synchronize`` sets none, so a
    publisher of a scheduler on another GPU would open a CUDA context on GPU 0 (SGLang's own copy
    thread sets its device first: ``managers/async_d2h_copy_worker.py``, 0.5.23)."""

    def __init__(self, cuda) -> None:
        self.cuda = cuda  # torch.cuda, or a model of it
        self.index = cuda.current_device()  # read on the scheduler's thread
        self._adopted = threading.local()

    def adopt(self) -> None:
        """Set the calling thread's device to the scheduler's, once per thread."""
        if not getattr(self._adopted, "done", False):
            self.cuda.set_device(self.index)
            self._adopted.done = True


class HostRing:
    """A fixed ring of reusable host-buffer slots, one slot per published step.

    Slots are handed out in order. The next slot is reusable only when its reader released it and
    its event completed, which is checked with ``event.query()``: the hot path never waits. A busy
    slot means the step is not snapshotted and counts in ``dropped``. Every field of :data:`FIELDS`
    has a buffer in every slot from the start, ``capacity`` elements of one integer dtype (request
    pool size x draft tokens, which no batch exceeds); a copy of another integer dtype converts
    (a non-blocking device-to-host ``copy_`` converts on the device), so a dtype flip allocates
    nothing, and a copy larger than the buffers drops its step (``oversize``). Only a field not in
    :data:`FIELDS`, or a ring whose capacity is unknown (0), allocates in a step:
    ``late_allocations`` counts those.

    The ring wakes its reader (``wake``) when it runs short: when half its slots are in use (a
    crossing, so once per shortage) and at the first refused acquire of a run of them. So a ring
    of any size is drained in time, while a reader that keeps up is not woken per step.
    """

    def __init__(self, size: int, new_event: Callable[[], Any] | None = None, capacity: int = 0, *,
                 alloc: Callable[[int], Any] | None = None, device: SchedulerDevice | None = None,
                 wake: Callable[[], None] | None = None, new_timer: Callable[[], Any] | None = None) -> None:
        self.slots = [RingSlot(i, self, new_event() if new_event is not None else None,
                               [new_timer() for _ in MARKS] if new_timer is not None else None)
                      for i in range(max(1, size))]
        self.timed = new_timer is not None  # its slots record device time at the phase boundaries
        self.capacity = max(0, int(capacity))  # elements per buffer: request pool size x draft tokens
        self._alloc = alloc  # n -> a host buffer of n elements
        self.device = device  # the scheduler's device (None: no device calls to make)
        self.wake = wake
        self._short = max(1, len(self.slots) // 2)  # slots in use at which the reader is woken
        self._refusing = False
        self._next = 0
        self.acquired = 0
        self.dropped = 0
        self.allocations = 0  # buffer allocations (a field for every slot counts once)
        self.late_allocations = 0  # of them, in a step
        self.oversize = 0  # copies larger than the buffers: their steps were dropped
        if alloc is not None and self.capacity:
            for name in FIELDS:
                self._allocate(name, self.capacity, self.slots)

    def _allocate(self, name: str, n: int, slots) -> None:
        self.allocations += 1
        for s in slots:
            buf = self._alloc(n)
            s.buffers[name] = (buf, 0, buf[:0])

    def buffer(self, slot: RingSlot, name: str, n: int):
        """The slot's buffer for ``name`` holding ``n`` elements; None when ``n`` exceeds the ring's
        capacity (the caller drops the step)."""
        held = slot.buffers.get(name)
        if held is not None and held[0].numel() >= n:
            return held
        if self.capacity and n > self.capacity:
            self.oversize += 1
            return None
        self.late_allocations += 1
        self._allocate(name, max(n, self.capacity), self.slots if self.capacity and held is None else (slot,))
        return slot.buffers[name]

    def acquire(self) -> RingSlot | None:
        slots = self.slots
        i = self._next
        slot = slots[i]
        if slot.busy or (slot.recorded and not slot.event.query()):
            self.dropped += 1
            if not self._refusing and self.wake is not None:
                self.wake()
            self._refusing = True
            return None
        self._refusing = False
        slot.busy = True
        n = len(slots)
        self._next = (i + 1) % n
        self.acquired += 1
        # slots are taken and given back in order: the slots from i - short + 1 to i are in use, and
        # i - short is free, only as the ring crosses into running short
        if self.wake is not None and slots[(i - self._short + 1) % n].busy and not slots[(i - self._short) % n].busy:
            self.wake()
        return slot

    @staticmethod
    def record(slot: RingSlot) -> None:
        """Record the slot's event after the copies queued so far on the current stream."""
        if slot.event is not None:
            slot.event.record()
            slot.recorded = True

    @contextlib.contextmanager
    def device_work(self):
        """Reader thread, around each of its device calls (event waits, event timings): the
        scheduler's device adopted first, and no graph capture running meanwhile."""
        with CAPTURE_GATE:
            if self.device is not None:
                self.device.adopt()
            yield

    def wait(self, slot: RingSlot) -> dict[str, float]:
        """Reader thread: until the slot's copies are done (a blocking event: the thread sleeps);
        then the slot's device phase times (:func:`device_ms`), read under the same device work."""
        if not slot.recorded and not slot.marked:
            return {}
        with self.device_work():
            if slot.recorded:
                slot.event.synchronize()
            return device_ms(slot) if slot.marked else {}

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


def mark(snapshots: Snapshots, step, boundary: int) -> None:
    """Record the timing event of ``boundary`` (an index into :data:`MARKS`) in the step's slot, on
    the current stream: no sync, no allocation (the events were made with the ring). Takes the slot
    the step's snapshots will use, as :func:`snap` would. Only called where ``snapshots.timed``."""
    if step.dropped:
        return
    slot = step.slot
    if slot is None:
        slot = step.slot = snapshots.ring.acquire()
        if slot is None:
            step.dropped = True
            return
    slot.marks[boundary].record()
    slot.marked |= 1 << boundary


def device_ms(slot: RingSlot) -> dict[str, float]:
    """Publisher thread, after the slot's event, inside :meth:`HostRing.device_work`: each phase
    whose both boundaries were marked, in device milliseconds (``elapsed_time``; a mark on another
    stream that has not completed yet leaves its phase out rather than wait)."""
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


def ring_for(device_type: str, capacity: int, *, wake: Callable[[], None] | None = None, torch=None) -> HostRing:
    """A ring for snapshots of ``device_type`` tensors, ``capacity`` elements per buffer (four
    int64 buffers per slot, :data:`FIELDS`), allocated now. ``torch`` is the module whose
    ``empty``, ``int64`` and ``<device_type>`` (``Event``, ``current_device``, ``set_device``) the
    ring uses: the real one, or a test's model of it (benchmarks/support/device_events.py). Events are
    blocking: the publisher thread sleeps in ``synchronize`` instead of spinning a core. On a device
    in :data:`TIMED_DEVICES` each slot also gets timing events for the phase boundaries."""
    if torch is None:
        import torch

    low, high = RING_SLOTS
    size = max(low, min(high, RING_BYTES // max(1, 4 * 8 * capacity)))
    dtype = torch.int64
    if device_type == "cpu":  # test support (env.RING_ON_CPU): host copies are done when copy_ returns
        return HostRing(size, None, capacity, alloc=lambda n: torch.empty(n, dtype=dtype), wake=wake)
    device = getattr(torch, device_type, None)
    event = getattr(device, "Event", None)
    if event is None:
        raise RuntimeError(f"torch.{device_type} has no Event: cannot tell when host copies are done")
    if device_type != "cuda":  # another backend's Event may take no blocking flag; its threads keep their device
        return HostRing(size, event, capacity, alloc=lambda n: torch.empty(n, dtype=dtype), wake=wake)
    return HostRing(size, lambda: event(blocking=True), capacity,
                    alloc=lambda n: torch.empty(n, dtype=dtype, pin_memory=True), device=SchedulerDevice(device), wake=wake,
                    new_timer=lambda: event(enable_timing=True, blocking=True))


def snap(snapshots: Snapshots, step, name: str, tensor):
    """A host copy of ``tensor`` taken without a sync. A CPU tensor is read into a list at once:
    cheaper than a ``clone`` and done when it returns, and no device is
    involved. Device tensors go ``non_blocking`` into the step's ring slot: pinned buffers reused
    across steps, read by the publisher thread only after the slot's one event, which the step hook
    records after all the step's copies; an int32 tensor converts into the int64 buffer on the
    device. None when the ring had no free slot, or there is no ring: the step is then marked
    dropped. ``is_cpu`` rather than ``device.type``: it builds no ``torch.device`` (after a forward
    has swept the caches, ``device.type`` costs about 40 µs of CPU here, ``is_cpu`` 17: BENCHMARKS.md)."""
    if tensor is None:
        return None
    if tensor.is_cpu and not snapshots.on_cpu:
        return tensor.clone() if CLONE_CPU else tensor.tolist()
    if step.dropped:
        return None
    slot = step.slot
    if slot is None:
        ring = snapshots.ring  # None: the scheduler's start made none (none is made in a step)
        slot = step.slot = None if ring is None else ring.acquire()
        if slot is None:
            step.dropped = True
            return None
    n = tensor.numel()
    held = slot.ring.buffer(slot, name, n)  # (buffer, numel of the view, view)
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
