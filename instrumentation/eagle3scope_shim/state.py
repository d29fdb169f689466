"""Process-wide shim state: the publisher (SGLang's entry ranks only, see ``topology``), the step being built,
the facts gathered at load time, and the fail-closed wrapper every hook runs in.

A hook body that raises is disabled for the rest of the process, reported once (a ``hook`` event
with status ``failed`` and one log line) and the wrapped SGLang function's own result is returned
unchanged. SGLang's own exceptions pass through untouched. Nothing here blocks or syncs: device
tensors go into the snapshot ring (:mod:`eagle3scope_shim.ring`).
"""

from __future__ import annotations

import collections
import logging
import os
import socket
import time
from typing import Callable

from eagle3scope.wire import bodies, env
from eagle3scope.wire.endpoints import ENV_ENDPOINT, endpoint_for_dp_rank, resolve_bind_endpoint, sibling_endpoints
from eagle3scope_shim.publisher import Publisher
from eagle3scope_shim.ring import SNAPSHOTS, RingSlot

log = logging.getLogger("eagle3scope")

ENV_ENABLE, ENV_FAULT, ENV_SYNC_GUARD = env.ENABLE, env.FAULT, env.SYNC_GUARD


if os.environ.get(ENV_SYNC_GUARD, "").strip() == "1":  # test support; it needs torch, so only when asked
    from eagle3scope_shim.syncguard import SyncGuard
else:
    SyncGuard = None


def requested_endpoint() -> str | None:
    """The endpoint the user asked for ("": the default, resolved when the publisher starts), or
    None when the shim is off."""
    endpoint = os.environ.get(ENV_ENDPOINT, "").strip()
    if endpoint:
        return endpoint
    if os.environ.get(ENV_ENABLE, "").strip() in ("1", "true", "yes", "on"):
        return ""
    return None


class Step:
    """What the hooks learn during one ``forward_batch_generation`` call."""

    __slots__ = ("passes", "draft", "verify", "draft_ns", "verify_ns", "extend_ns", "prefill", "slot", "dropped",
                 "num_steps", "path", "discarded", "forwards")

    def __init__(self) -> None:
        self.passes: list[list] = []  # [mode, width, fc, n, graph bs (a replay; 0: its capture unseen) or None]
        self.forwards = 0  # draft-model forwards whose Python ran in this step (not replayed)
        self.draft = None  # snapshot of EagleVerifyInput.draft_token
        self.verify = None  # (kind, per-request counts, token ids) snapshots
        self.path = None  # trees (topk > 1): snapshot of verify's accept_index, the nodes of the accepted path
        self.num_steps = None  # this round's step budget (adaptive steps vary it per round)
        self.discarded = None  # rids whose round SGLang ran but did not commit (the commit seam)
        self.draft_ns = self.verify_ns = self.extend_ns = None
        self.prefill = False
        self.slot: RingSlot | None = None  # host buffers of this step's snapshots, taken on first use
        self.dropped = False  # every ring slot was busy: the step is counted as dropped, not published

    def add_pass(self, mode: str, width: int, fc: bool, n: int = 1, graph: int | None = None) -> None:
        passes = self.passes
        if passes:
            last = passes[-1]
            if last[0] == mode and last[1] == width and last[2] == fc and last[4] == graph:
                last[3] += n
                return
        passes.append([mode, width, fc, n, graph])


class ShimState:
    def __init__(self) -> None:
        self.publisher = None
        self.src = None
        self.started_ns = time.time_ns()  # with the pid, tells a restarted process apart under the same src
        self.step: Step | None = None
        self.seq = 0
        self.disabled: set[str] = set()
        self.seam_status: dict[str, str] = {}
        self.pending: list[dict] = []  # hook events before the publisher exists
        self.unobserved: dict[str, str] = {}  # part ("worker", "draft_model") -> why the hooks cannot see it
        self.fault = os.environ.get(ENV_FAULT, "").strip() or None
        self.guard = SyncGuard
        self.capture: dict | None = None
        self._capture_key = None
        self.aux_channel = None  # an aux_channel.AuxChannel while the control channel is open
        self.scheduler = None  # this process's SGLang Scheduler (every TP rank): its forward_ct dates a change
        self.aux_change_applying = False  # a control change is calling set_eagle3_layers_to_capture
        #: decode steps waiting for SGLang to commit them (the commit seam): (weakref to the result, payload), oldest first
        self.uncommitted: collections.deque = collections.deque()
        # the shim's own cost (heartbeat ``shim_us``/``step_us``): one cell per seam, written only by
        # the thread running the hook, read as deltas by the publisher thread (no lock: int reads)
        self.self_ns: dict[str, list[int]] = {}  # seam -> [ns spent in its pre/post bodies]
        self.step_ns = [0]  # ns of the step seams' whole calls, hooks included (the rounds the cost relates to)
        self.round_seams: set[str] = set()  # seams whose hooks run within those calls (the rounds' share)
        #: {"parallel", "rank", "index", "publishes", "reason"} of this scheduler (topology), once it is built;
        #: the aux channel reads the ranks from here
        self.topology: dict | None = None
        self.siblings: list[str] | None = None  # every publisher's endpoint of this server, by index
        self.hello_args: tuple | None = None  # (scheduler,): hello is rebuilt on a new capture

    # -- reporting ----------------------------------------------------------------------------
    def report(self, seam: str, status: str, detail: str = "") -> None:
        self.seam_status[seam] = status
        body = bodies.Hook(seam=seam, status=status, detail=detail[:1000])
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
    def start_publisher(self, endpoint: str, index: int, publishers: int = 1) -> bool:
        """Publish this scheduler's events on its endpoint, the server's ``index``-th of ``publishers``
        (one per DP scheduler, ``topology``). One that cannot be bound (taken, not private, no CURVE
        key for TCP) is an error line on the server's log, and nothing is published: the server
        serves on, its hello goes to nobody. False then."""
        self.src = f"{socket.gethostname()}:{os.getpid()}:dp{index}"
        wanted = endpoint or "the default endpoint"
        try:
            base = resolve_bind_endpoint(endpoint)
            wanted = endpoint_for_dp_rank(base, index)
            pub = Publisher(wanted, self.src)
            pub.heartbeat_extra = SNAPSHOTS.stats
            pub.start()
        except Exception as exc:
            log.error("eagle3scope: NOT PUBLISHING: cannot bind %s: %s: %s. This server serves on, unobserved: its"
                      " hello goes to nobody, and no viewer, recorder, gate or exporter will see it.",
                      wanted, type(exc).__name__, exc)
            return False
        self.siblings = sibling_endpoints(base, publishers)
        for body in self.pending:
            pub.submit("hook", body)
        self.pending.clear()
        pub.self_time = (self.self_ns, self.step_ns, self.round_seams)
        self.publisher = pub
        log.info("eagle3scope: publishing on %s as %s", pub.endpoint, self.src)
        return True


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


def around(seam: str, pre: Callable | None, post: Callable | None, *, hot: bool = False, step: bool = False,
           in_step: bool = False, traceable: bool = True) -> Callable:
    """An AROUND hook ``(original, *args, **kwargs)`` that fails closed.

    ``pre(*args, **kwargs)`` returns a context or a :class:`Rewrite` (or raises),
    ``post(ctx, result, *args, **kwargs)`` observes the result. Either raising disables the seam;
    ``original``'s result is returned as is. ``hot`` bodies run under the sync guard when enabled.
    ``traceable=False`` (a worker method torch.compile never traces) skips the compile check, one
    ``torch.compiler.is_compiling`` call per hook.
    The wrapper's own time (guard checks, ``pre``, ``post``; not ``original``) adds up in the seam's
    cell of ``STATE.self_ns``; a ``step`` seam's whole call (the round, its own hook time included) in
    ``STATE.step_ns``. ``step`` and ``in_step`` seams (those whose hooks run only within a step
    seam's call) are ``STATE.round_seams``: their time over ``step_ns`` is the shim's share of the
    rounds, which cannot exceed 1 (other seams, e.g. the commit seam or load time, run outside). The clock is
    ``perf_counter_ns`` (vDSO, ~75 ns a read here) rather than ``thread_time_ns`` (a syscall, ~260 ns:
    BENCHMARKS.md), so it is wall time, which on a loaded box includes preemption.
    """
    state = STATE
    guard = state.guard if hot else None
    cell = state.self_ns.setdefault(seam, [0])
    rounds = state.step_ns if step else None
    if step or in_step:
        state.round_seams.add(seam)
    clock = time.perf_counter_ns

    def hook(original, *args, **kwargs):
        t0 = clock()
        if seam in state.disabled or (traceable and _compiling()):
            cell[0] += clock() - t0
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
        t1 = clock()
        result = original(*args, **kwargs)
        if post is None and rounds is None:  # a pre-only hook (the draft forwards): two reads, not four
            cell[0] += t1 - t0
            return result
        t2 = clock()
        if post is not None and seam not in state.disabled:
            try:
                if guard is None:
                    post(ctx, result, *args, **kwargs)
                else:
                    with guard(seam):
                        post(ctx, result, *args, **kwargs)
            except Exception as exc:
                state.fail(seam, exc)
        t3 = clock()
        cell[0] += t1 - t0 + t3 - t2
        if rounds is not None:
            rounds[0] += t3 - t0
        return result

    hook.__name__ = f"eagle3scope_{seam.replace('.', '_')}"
    hook.eagle3scope_seam = seam
    return hook
