"""Test support: a TorchFunctionMode that fails on host-device synchronisation in hook bodies.

Enabled with ``EAGLE3SCOPE_SYNC_GUARD=1``; the fail-closed wrapper runs each hot-path hook body
under it, so a body that calls ``item``/``tolist``/``numpy``/a blocking ``cpu``/``to``/``copy_``
is reported as a failed hook. It flags the call whatever the tensor's device, so the CPU engine
proves what a GPU run would sync on.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

_ALWAYS = {
    torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.numpy, torch.Tensor.cpu,
    torch.Tensor.__bool__, torch.Tensor.__int__, torch.Tensor.__float__, torch.Tensor.__index__,
    torch.Tensor.nonzero, torch.Tensor.unique, torch.unique, torch.nonzero,
}


class SyncViolation(RuntimeError):
    pass


def _blocking_to_host(func, args, kwargs) -> bool:
    """``t.to("cpu")`` without ``non_blocking`` (flagged whatever t's device), or a blocking
    ``copy_`` from a device tensor into host memory."""
    if func is torch.Tensor.to:
        if kwargs.get("non_blocking") or any(a is True for a in args[2:]):
            return False
        target = kwargs.get("device", args[1] if len(args) > 1 else None)
        return isinstance(target, (str, torch.device)) and torch.device(target).type == "cpu"
    if func is torch.Tensor.copy_:
        dst, src = args[0], args[1]
        non_blocking = kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
        return dst.device.type == "cpu" and src.device.type != "cpu" and not non_blocking
    return False


class SyncGuard(TorchFunctionMode):
    def __init__(self, seam: str) -> None:
        super().__init__()
        self.seam = seam

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _ALWAYS or _blocking_to_host(func, args, kwargs):
            raise SyncViolation(f"{getattr(func, '__name__', func)} would synchronise host and device in hook {self.seam}")
        return func(*args, **kwargs)
