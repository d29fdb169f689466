"""Test support: the sync guard, which fails a hot hook body that would synchronise host and device.

Enabled with ``EAGLE3SCOPE_SYNC_GUARD=1`` (read once, when :mod:`eagle3scope_shim.guard` is
imported); the fail-closed wrapper then runs each hot-path hook body inside :class:`SyncGuard`, so
a body that syncs is reported as a failed hook, which the engine tests assert never happens. Every
check looks at the operation, not at where its data lives, so a CPU run proves what a GPU run would
wait on. No single layer sees every sync, so the guard has three:

- aten operations (a ``TorchDispatchMode``, :func:`aten_sync`): a scalar read (``item``,
  ``__format__``, ``in``, ``bool``), ops whose output size depends on the data (``nonzero``,
  one-argument ``where``, ``masked_select``, ``unique*``, ``repeat_interleave`` without
  ``output_size``, ``bincount``, bool-mask ``index``/``index_put_``), ops that answer a host
  bool (``equal``, ``is_nonzero``, ``allclose``), a ``copy_``/``_to_copy`` into host memory or
  across devices without ``non_blocking``, and a pinned allocation (a page-locked
  ``cudaHostAlloc`` serialises the device's streams);
- torch functions that dispatch no aten op on a host tensor (``tolist``, ``numpy``, ``__array__``,
  ``repr``, ``cpu()``, ``to("cpu")``: on a CPU tensor the data is already there, on a GPU they
  copy and wait);
- ``torch.cuda.synchronize``, ``Stream.synchronize`` and ``Event.synchronize``, which are not
  tensor ops: patched to raise on a thread while it runs a guarded body. ``Event.query`` is not a
  sync (``cudaEventQuery`` returns at once) and stays allowed: the ring checks a slot's event that
  way in the step.
"""

from __future__ import annotations

import threading

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

_aten = torch.ops.aten

#: Ops that wait for the device whatever their arguments (their result is a host value, or its size is).
_ALWAYS_SYNC = {
    _aten._local_scalar_dense, _aten.nonzero, _aten.masked_select, _aten._unique, _aten._unique2,
    _aten.unique_dim, _aten.unique_consecutive, _aten.unique_dim_consecutive, _aten.bincount, _aten.equal,
    _aten.is_nonzero, _aten.allclose,
}
#: Pinning host memory (a page-locked ``cudaHostAlloc`` serialises the device's streams).
_PINNING = {_aten._pin_memory, _aten.pin_memory}
#: Indexing that turns a bool mask into indices on the host (``nonzero`` inside the kernel).
_MASK_INDEXING = {_aten.index, _aten.index_put, _aten.index_put_, _aten._index_put_impl_}
_MASKS = (torch.bool, torch.uint8)


class SyncViolation(RuntimeError):
    pass


def _mask_indexed(args) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype in _MASKS for i in indices or ())


def _blocking_transfer(func, args, kwargs) -> bool:
    """A ``copy_`` or a ``_to_copy`` to another device with the host on either side, without
    ``non_blocking``: the host waits for it (a pageable host-to-device copy too). Into host memory
    it is flagged whatever the source, so a host-to-host copy on the CPU engine stands for the
    device-to-host one a GPU server makes."""
    if func is _aten.copy_.default:
        dst, src = args[0], args[1]
        non_blocking = kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
        return not non_blocking and (dst.device.type == "cpu" or src.device.type == "cpu")
    if func is _aten._to_copy.default:
        device = kwargs.get("device")
        if device is None or kwargs.get("non_blocking", False):
            return False  # None: a dtype or layout change on the tensor's own device
        return "cpu" in (torch.device(device).type, args[0].device.type)
    return False


def aten_sync(func, args, kwargs) -> str:
    """Why the aten call ``func(*args, **kwargs)`` would synchronise host and device ("" if it would not)."""
    packet = func.overloadpacket
    if packet in _ALWAYS_SYNC:
        return "reads device data on the host"
    if packet is _aten.repeat_interleave and func._overloadname == "Tensor" and kwargs.get("output_size") is None:
        return "sizes its output from device data (no output_size)"
    if packet in _MASK_INDEXING and _mask_indexed(args):
        return "indexes with a bool mask (nonzero on the host)"
    if packet in _PINNING or kwargs.get("pin_memory"):
        return "allocates pinned host memory"
    if _blocking_transfer(func, args, kwargs):
        return "copies between host and device without non_blocking"
    return ""


#: Torch functions that read tensor data into host objects without dispatching an aten op on a host tensor.
_HOST_READS = {torch.Tensor.tolist, torch.Tensor.numpy, torch.Tensor.__array__, torch.Tensor.__repr__, torch.Tensor.cpu}


def _function_sync(func, args, kwargs) -> bool:
    if func in _HOST_READS:
        return True
    if func is torch.Tensor.to:
        if kwargs.get("non_blocking") or any(a is True for a in args[2:]):
            return False
        target = kwargs.get("device", args[1] if len(args) > 1 else None)
        if isinstance(target, torch.Tensor):
            target = target.device
        return isinstance(target, (str, torch.device)) and torch.device(target).type == "cpu"
    return False


class _InBody:
    """A torch mode that names the hook body it guards."""

    def __init__(self, seam: str) -> None:
        super().__init__()
        self.seam = seam


class _AtenGuard(_InBody, TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        why = aten_sync(func, args, kwargs)
        if why:
            raise SyncViolation(f"{func} {why}: it would synchronise host and device in hook {self.seam}")
        return func(*args, **kwargs)


class _FunctionGuard(_InBody, TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _function_sync(func, args, kwargs):
            raise SyncViolation(f"{getattr(func, '__name__', func)} would synchronise host and device in hook {self.seam}")
        return func(*args, **kwargs)


# -- torch.cuda's own synchronisation, refused on a thread inside a guarded body -------------------
_INSIDE = threading.local()


def _refusing(name: str, original):
    def synchronise(*args, **kwargs):
        seam = getattr(_INSIDE, "seam", None)
        if seam is not None:
            raise SyncViolation(f"{name} would synchronise host and device in hook {seam}")
        return original(*args, **kwargs)

    synchronise.eagle3scope_refuses = True
    return synchronise


def _cuda_syncs():
    """(owner, attribute, name) of torch.cuda's synchronising calls."""
    cuda = torch.cuda
    return ((cuda, "synchronize", "torch.cuda.synchronize"), (cuda.Stream, "synchronize", "torch.cuda.Stream.synchronize"),
            (cuda.Event, "synchronize", "torch.cuda.Event.synchronize"))


def _refuse_cuda_syncs() -> None:
    """Wrap each call (again, if something replaced it since: the CPU engine swaps
    ``torch.cuda.synchronize`` for a no-op at start-up)."""
    for owner, attr, name in _cuda_syncs():
        current = getattr(owner, attr, None)
        if current is not None and not getattr(current, "eagle3scope_refuses", False):
            setattr(owner, attr, _refusing(name, current))


class SyncGuard:
    """The three layers around one hook body, named by its seam."""

    __slots__ = ("seam", "modes", "outer")

    def __init__(self, seam: str) -> None:
        self.seam = seam
        self.modes = (_FunctionGuard(seam), _AtenGuard(seam))

    def __enter__(self):
        _refuse_cuda_syncs()
        self.outer = getattr(_INSIDE, "seam", None)
        _INSIDE.seam = self.seam
        for mode in self.modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        for mode in reversed(self.modes):
            mode.__exit__(*exc)
        _INSIDE.seam = self.outer
