"""Process-wide shim state: the publisher (scheduler of TP rank 0 only), the step being built,
the facts gathered at load time, and the fail-closed wrapper every hook runs in.

A hook body that raises is disabled for the rest of the process, reported once (a ``hook`` event
with status ``failed`` and one log line) and the wrapped SGLang function's own result is returned
unchanged. SGLang's own exceptions pass through untouched. Nothing here blocks or syncs: device
tensors are copied ``non_blocking`` into pinned host buffers behind a recorded event, and the
publisher thread turns them into lists later (see :func:`snap` and :class:`Step`).
"""

from __future__ import annotations

import collections
import logging
import os
import socket
import time
from typing import Any, Callable

from eagle3scope.wire.endpoints import DEFAULT_ENDPOINT, endpoint_for_dp_rank
from eagle3scope_shim.publisher import Publisher

log = logging.getLogger("eagle3scope")

ENV_ENDPOINT = "EAGLE3SCOPE_ENDPOINT"
ENV_ENABLE = "EAGLE3SCOPE"
ENV_FAULT = "EAGLE3SCOPE_FAULT"  # test support: name of a seam whose hook body raises
ENV_SYNC_GUARD = "EAGLE3SCOPE_SYNC_GUARD"  # test support: fail on host-device syncs in hook bodies


if os.environ.get(ENV_SYNC_GUARD, "").strip() == "1":  # test support; it needs torch, so only when asked
    from eagle3scope_shim.syncguard import SyncGuard
else:
    SyncGuard = None


def requested_endpoint() -> str | None:
    """The endpoint the user asked for, or None when the shim is off."""
    endpoint = os.environ.get(ENV_ENDPOINT, "").strip()
    if endpoint:
        return endpoint
    if os.environ.get(ENV_ENABLE, "").strip() in ("1", "true", "yes", "on"):
        return DEFAULT_ENDPOINT
    return None


class Step:
    """What the hooks learn during one ``forward_batch_generation`` call."""

    __slots__ = ("t0", "passes", "draft", "verify", "draft_ns", "verify_ns", "extend_ns", "device", "event", "prefill")

    def __init__(self) -> None:
        self.t0 = time.perf_counter_ns()
        self.passes: list[list] = []  # [mode, width, fc, n]
        self.draft = None  # snapshot of EagleVerifyInput.draft_token
        self.verify = None  # (kind, per-request counts, token ids) snapshots
        self.draft_ns = self.verify_ns = self.extend_ns = None
        self.device = "cpu"
        self.prefill = False
        self.event = None

    def add_pass(self, mode: str, width: int, fc: bool) -> None:
        passes = self.passes
        if passes:
            last = passes[-1]
            if last[0] == mode and last[1] == width and last[2] == fc:
                last[3] += 1
                return
        passes.append([mode, width, fc, 1])


class ShimState:
    def __init__(self) -> None:
        self.publisher = None
        self.src = None
        self.step: Step | None = None
        self.seq = 0
        self.disabled: set[str] = set()
        self.seam_status: dict[str, str] = {}
        self.pending: list[dict] = []  # hook events before the publisher exists
        self.fault = os.environ.get(ENV_FAULT, "").strip() or None
        self.guard = SyncGuard
        # load-time facts, gathered in whatever process loads the models
        self.draft_loads: dict[int, dict] = {}  # id(draft model) -> loader record
        self.aux_calls: collections.deque = collections.deque(maxlen=64)  # set_eagle3 calls, latest last
        self.aux_config: dict[int, dict] = {}  # id(model) -> SGLang's resolved aux settings
        self.workers: list[tuple[str, Any]] = []  # (kind, worker)
        self.capture: dict | None = None
        self._capture_key = None
        self.aux_channel = None  # an aux_channel.AuxChannel while the control channel is open
        self.aux_change_applying = False  # a control change is calling set_eagle3_layers_to_capture

    # -- reporting ----------------------------------------------------------------------------
    def report(self, seam: str, status: str, detail: str = "") -> None:
        self.seam_status[seam] = status
        body = {"seam": seam, "status": status, "detail": detail[:1000]}
        if self.publisher is not None:
            self.publisher.submit("hook", body)
        elif len(self.pending) < 256:
            self.pending.append(body)

    def fail(self, seam: str, exc: BaseException) -> None:
        if seam in self.disabled:
            return
        self.disabled.add(seam)
        if self.publisher is not None:
            self.publisher.hook_failures += 1
        detail = f"{type(exc).__name__}: {exc}"
        log.warning("eagle3scope: hook %s failed and is disabled (SGLang continues unaffected): %s", seam, detail)
        self.report(seam, "failed", detail)

    # -- publisher ----------------------------------------------------------------------------
    def start_publisher(self, endpoint: str, dp_rank: int) -> None:
        self.src = f"{socket.gethostname()}:{os.getpid()}:dp{dp_rank}"
        pub = Publisher(endpoint_for_dp_rank(endpoint, dp_rank), self.src)
        pub.start()
        for body in self.pending:
            pub.submit("hook", body)
        self.pending.clear()
        self.publisher = pub
        log.info("eagle3scope: publishing on %s as %s", pub.endpoint, self.src)


STATE = ShimState()


class Rewrite:
    """Returned by a ``pre`` to hand ``original`` different arguments (e.g. a watched iterator)."""

    __slots__ = ("ctx", "args", "kwargs")

    def __init__(self, ctx, args, kwargs) -> None:
        self.ctx, self.args, self.kwargs = ctx, args, kwargs


def _compiling() -> bool:
    """True while torch.compile traces: the hook then stays out of the graph (like a replayed CUDA
    graph, a compiled region is not observed) instead of baking its side effects into it."""
    global _compiling
    try:
        from torch.compiler import is_compiling
    except Exception:
        is_compiling = _never
    _compiling = is_compiling
    return is_compiling()


def _never() -> bool:
    return False


def around(seam: str, pre: Callable | None, post: Callable | None, *, hot: bool = False) -> Callable:
    """An AROUND hook ``(original, *args, **kwargs)`` that fails closed.

    ``pre(*args, **kwargs)`` returns a context or a :class:`Rewrite` (or raises),
    ``post(ctx, result, *args, **kwargs)`` observes the result. Either raising disables the seam;
    ``original``'s result is returned as is. ``hot`` bodies run under the sync guard when enabled.
    """
    state = STATE
    guard = state.guard if hot else None

    def hook(original, *args, **kwargs):
        if seam in state.disabled or _compiling():
            return original(*args, **kwargs)
        ctx = None
        if pre is not None:
            try:
                if state.fault == seam:
                    raise RuntimeError(f"fault injected into {seam} by {ENV_FAULT}")
                if guard is None:
                    ctx = pre(*args, **kwargs)
                else:
                    with guard(seam):
                        ctx = pre(*args, **kwargs)
            except Exception as exc:
                state.fail(seam, exc)
                return original(*args, **kwargs)
            if type(ctx) is Rewrite:
                ctx, args, kwargs = ctx.ctx, ctx.args, ctx.kwargs
        result = original(*args, **kwargs)
        if post is not None and seam not in state.disabled:
            try:
                if guard is None:
                    post(ctx, result, *args, **kwargs)
                else:
                    with guard(seam):
                        post(ctx, result, *args, **kwargs)
            except Exception as exc:
                state.fail(seam, exc)
        return result

    hook.__name__ = f"eagle3scope_{seam.replace('.', '_')}"
    hook.eagle3scope_seam = seam
    return hook


def snap(tensor):
    """A host copy of ``tensor`` taken without a sync: a clone on CPU, else a non-blocking copy
    into pinned memory (torch's caching host allocator reuses those blocks). Pair with
    :func:`record_event` so the publisher thread waits before reading it."""
    if tensor is None:
        return None
    if tensor.device.type == "cpu":
        return tensor.clone()
    import torch

    buf = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=tensor.device.type == "cuda")
    buf.copy_(tensor, non_blocking=True)
    return buf


def record_event(device_type: str):
    """An event after the copies queued so far on the current stream (None on CPU)."""
    if device_type == "cpu":
        return None
    import torch

    module = getattr(torch, device_type, None)
    event_cls = getattr(module, "Event", None)
    if event_cls is None:
        return None
    event = event_cls()
    event.record()
    return event
