"""A model of the CUDA runtime calls the shim's snapshot ring makes, for unit tests without a GPU.

It stands in for the ``torch`` the ring is given (``ring.ring_for(..., torch=model.torch)``):
``torch.empty(..., pin_memory=True)``, ``torch.int64`` and ``torch.cuda`` (``Event``,
``current_device``, ``set_device``). Each part stands for one CUDA mechanism, and is at least as
strict as CUDA, never more lenient:

- **Late completion** (the device runs behind the host): an event recorded on the current stream
  completes ``latency_s`` after its record, or, while :meth:`DeviceModel.hold` is in effect, only
  when :meth:`DeviceModel.release` says so. ``query()`` is False until then (``cudaEventQuery`` ->
  ``cudaErrorNotReady``); ``synchronize()`` waits for it (``cudaEventSynchronize``).
- **Asynchronous copies**: a ``non_blocking`` copy into a pinned buffer (``cudaMemcpyAsync``
  device-to-host) lands only when the next event recorded after it completes; a read before then
  sees the old contents.
- **A current device per thread** (``cudaSetDevice``/``cudaGetDevice``): each thread starts on
  device 0; ``set_device`` is recorded per thread id. Every runtime call a thread makes runs on its
  current device and needs a context there (CUDA's primary context, made by the first call on that
  device): :attr:`DeviceModel.contexts` are the devices that got one. ``CUDAEvent::synchronize``
  and ``query`` set no device, so a thread that never set its device touches device 0.
- **The blocking flag** (``cudaEventBlockingSync``): recorded per event; ``synchronize`` on an
  event without it counts a spin-wait (:attr:`DeviceModel.spins`), which CUDA does by polling a core.
- **Global capture mode** (``cudaStreamBeginCapture`` with ``cudaStreamCaptureModeGlobal``, as
  SGLang captures): while :meth:`DeviceModel.capture` runs on any thread, an event ``query`` or
  ``synchronize`` or a pinned allocation (``cudaHostAlloc``) from ANY thread raises
  :class:`CaptureViolation` and invalidates the capture, which then fails when it ends
  (:class:`CaptureFailed`, SGLang's "Capture cuda graph failed"). So does an event ``record``
  (prohibited on the legacy default stream, allowed on others: the model is the stricter).
"""

from __future__ import annotations

import contextlib
import threading
import time
import types


class CaptureViolation(RuntimeError):
    """A call CUDA prohibits while a global-mode capture runs (``cudaErrorStreamCaptureUnsupported``)."""


class CaptureFailed(RuntimeError):
    """The capture was invalidated by a prohibited call (``cudaErrorStreamCaptureInvalidated``)."""


class DeviceModel:
    def __init__(self, latency_s: float = 0.0) -> None:
        self.latency_s = latency_s
        self._cond = threading.Condition()
        self._device: dict[int, int] = {}  # thread id -> current device
        self.set_devices: dict[int, list[int]] = {}  # thread id -> the devices it set, in order
        self.contexts: set[int] = set()  # devices on which a call made a context
        self.events: list[ModelEvent] = []
        self.pinned_allocations: list[tuple[int, int]] = []  # (thread id, elements)
        self.spins = 0
        self.violations: list[tuple[int, str]] = []  # (thread id, call) made during a capture
        self._capturing: int | None = None  # the capturing thread
        self._invalidated = False
        self._holding = False
        self._queued: list[tuple] = []  # async copies not yet covered by a recorded event
        self.int64 = "int64"
        self.torch = types.SimpleNamespace(empty=self.empty, int64=self.int64, cuda=self)

    # -- torch.cuda --------------------------------------------------------------------------
    def current_device(self) -> int:
        return self._device.get(threading.get_ident(), 0)

    def set_device(self, index: int) -> None:
        tid = threading.get_ident()
        with self._cond:
            self._device[tid] = index
            self.set_devices.setdefault(tid, []).append(index)
            self._call("set_device", unsafe=False)

    def Event(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):  # noqa: N802
        event = ModelEvent(self, blocking, enable_timing)
        self.events.append(event)
        return event

    # -- torch.empty ---------------------------------------------------------------------------
    def empty(self, n: int, dtype=None, pin_memory: bool = False):
        with self._cond:
            if pin_memory:
                self._call("cudaHostAlloc", unsafe=True)
                self.pinned_allocations.append((threading.get_ident(), n))
        return HostBuffer(self, [0] * n)

    # -- test controls -------------------------------------------------------------------------
    @contextlib.contextmanager
    def capture(self):
        """A global-mode graph capture on the calling thread."""
        with self._cond:
            assert self._capturing is None, "one capture at a time"
            self._capturing, self._invalidated = threading.get_ident(), False
        try:
            yield
        finally:
            with self._cond:
                self._capturing = None
                invalidated = self._invalidated
        if invalidated:
            raise CaptureFailed("the capture was invalidated by a call from another thread")

    @contextlib.contextmanager
    def hold(self):
        """Events recorded meanwhile complete only when :meth:`release` is called."""
        self._holding = True
        try:
            yield
        finally:
            self._holding = False

    def release(self) -> None:
        """The device catches up: every event recorded so far completes."""
        with self._cond:
            for event in self.events:
                if event._due is not None:
                    event._due = 0.0
            self._cond.notify_all()

    def device_tensor(self, values, dtype: str = "int64") -> DeviceTensor:
        return DeviceTensor(list(values), dtype)

    # -- the runtime ----------------------------------------------------------------------------
    def _call(self, what: str, unsafe: bool) -> None:
        """A runtime call on the calling thread's current device (self._cond held)."""
        tid = threading.get_ident()
        device = self._device.get(tid, 0)
        self.contexts.add(device)
        if unsafe and self._capturing is not None:
            self._invalidated = True
            self.violations.append((tid, what))
            raise CaptureViolation(f"{what} while a global-mode graph capture runs")

    def _land(self, event: ModelEvent) -> None:
        if event._due is not None and time.monotonic() >= event._due:
            for dest, values in event._copies:
                dest._write(values)
            event._copies, event._due = [], None


class ModelEvent:
    def __init__(self, model: DeviceModel, blocking: bool, timing: bool = False) -> None:
        self.model = model
        self.blocking = blocking
        self.timing = timing  # made with enable_timing: a timing event of the phase boundaries
        self.device: int | None = None  # set at the first record, as PyTorch creates the event lazily
        self._due: float | None = None  # monotonic time it completes; None: complete; inf: held
        self._copies: list[tuple] = []

    def record(self) -> None:
        m = self.model
        with m._cond:
            m._call("cudaEventRecord", unsafe=True)
            self.device = m.current_device()
            self._copies, m._queued = self._copies + m._queued, []
            self._due = float("inf") if m._holding else time.monotonic() + m.latency_s

    def query(self) -> bool:
        m = self.model
        with m._cond:
            m._call("cudaEventQuery", unsafe=True)
            m._land(self)
            return self._due is None

    def synchronize(self) -> None:
        m = self.model
        with m._cond:
            m._call("cudaEventSynchronize", unsafe=True)
            if not self.blocking:
                m.spins += 1
            deadline = time.monotonic() + 10.0
            while True:
                m._land(self)
                if self._due is None:
                    return
                now = time.monotonic()
                assert now < deadline, "waited 10 s on an event the device never completes"
                m._cond.wait(min(deadline, self._due) - now if self._due != float("inf") else 0.05)


class DeviceTensor:
    """A device tensor as :func:`ring.snap` sees it: what a copy reads, and its shape."""

    is_cpu, is_cuda = False, True

    def __init__(self, values: list, dtype: str) -> None:
        self.values, self.dtype = values, dtype

    def numel(self) -> int:
        return len(self.values)

    def dim(self) -> int:
        return 1


class HostBuffer:
    """Host memory (pinned where allocated so) that asynchronous copies land in late."""

    def __init__(self, model: DeviceModel, data: list, start: int = 0, stop: int | None = None) -> None:
        self._model, self._data, self._start = model, data, start
        self._stop = len(data) if stop is None else stop

    def __getitem__(self, index: slice) -> HostBuffer:
        start, stop, _ = index.indices(self._stop - self._start)
        return HostBuffer(self._model, self._data, self._start + start, self._start + stop)

    def numel(self) -> int:
        return self._stop - self._start

    def copy_(self, src, non_blocking: bool = False) -> HostBuffer:
        assert non_blocking, "a blocking device-to-host copy syncs the host with the device"
        assert src.numel() == self.numel(), "copy_ needs equal sizes"
        with self._model._cond:  # lands when the next event recorded after it completes
            self._model._queued.append((self, [int(v) for v in src.values]))  # int32 converts to int64
        return self

    def _write(self, values: list) -> None:
        self._data[self._start:self._stop] = values

    def tolist(self) -> list:
        return self._data[self._start:self._stop]


class CpuTensor:
    """A CPU tensor as the snapshots read it (``is_cpu``, ``tolist``)."""

    is_cpu, is_cuda = True, False

    def __init__(self, values):
        self.values = values

    def tolist(self):
        return self.values
