"""The fail-closed wrapper every hook runs in (:func:`around`).

A hook body that raises is disabled for the rest of the process, reported once (a ``hook`` event
with status ``failed`` and one log line, ``shim.fail``) and the wrapped SGLang function's own result
is returned unchanged. SGLang's own exceptions pass through untouched. Hot-path bodies run under the
sync guard when the tests ask for it (``EAGLE3SCOPE_SYNC_GUARD=1``), and every body's own time is
added up per seam for the heartbeat.
"""

from __future__ import annotations

import os
import time
from typing import Callable

from eagle3scope.wire import env

if os.environ.get(env.SYNC_GUARD, "").strip() == "1":  # test support; it needs torch, so only when asked
    from eagle3scope_shim.syncguard import SyncGuard as SYNC_GUARD
else:
    SYNC_GUARD = None


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


def _injected(seam: str) -> RuntimeError:
    return RuntimeError(f"fault injected into {seam} by {env.FAULT}")


def around(shim, seam: str, pre: Callable | None, post: Callable | None, *, hot: bool = False, step: bool = False,
           in_step: bool = False, traceable: bool = True) -> Callable:
    """An AROUND hook ``(original, *args, **kwargs)`` that fails closed.

    ``pre(*args, **kwargs)`` returns a context or a :class:`Rewrite` (or raises),
    ``post(ctx, result, *args, **kwargs)`` observes the result; without a ``pre``, ``ctx`` is the
    ``perf_counter_ns`` at which ``original`` began (a post-only hook times its call with no body
    before it: each body a hook runs costs µs after a forward has swept the caches, BENCHMARKS.md).
    Either raising disables the seam (an injected fault goes into the first body); ``original``'s
    result is returned as is. ``hot`` bodies run under the sync guard when enabled.
    ``traceable=False`` (a worker method torch.compile never traces) skips the compile check, one
    ``torch.compiler.is_compiling`` call per hook.
    The wrapper's own time (guard checks, ``pre``, ``post``; not ``original``) adds up in the seam's
    cell of ``shim.self_ns``; a ``step`` seam's whole call (the round, its own hook time included) in
    ``shim.step_ns``. ``step`` and ``in_step`` seams (those whose hooks run only within a step
    seam's call) are ``shim.round_seams``: their time over ``step_ns`` is the shim's share of the
    rounds, which cannot exceed 1 (other seams, e.g. the commit seam or load time, run outside). The clock is
    ``perf_counter_ns`` (vDSO, ~75 ns a read here) rather than ``thread_time_ns`` (a syscall, ~260 ns:
    BENCHMARKS.md), so it is wall time, which on a loaded box includes preemption.
    """
    disabled = shim.seams.disabled  # mutated in place by shim.fail, never rebound
    guard = SYNC_GUARD if hot else None
    cell = shim.self_ns.setdefault(seam, [0])
    rounds = shim.step_ns if step else None
    if step or in_step:
        shim.round_seams.add(seam)
    clock = time.perf_counter_ns

    def hook(original, *args, **kwargs):
        t0 = clock()
        if seam in disabled or (traceable and _compiling()):
            cell[0] += clock() - t0
            return original(*args, **kwargs)
        if pre is not None:
            try:
                if shim.fault == seam:
                    raise _injected(seam)
                if guard is None:
                    ctx = pre(*args, **kwargs)
                else:
                    with guard(seam):
                        ctx = pre(*args, **kwargs)
            except Exception as exc:
                shim.fail(seam, exc)
                return original(*args, **kwargs)
            if type(ctx) is Rewrite:
                ctx, args, kwargs = ctx.ctx, ctx.args, ctx.kwargs
            t1 = clock()
        else:
            ctx = t1 = clock()
        result = original(*args, **kwargs)
        if post is None and rounds is None:  # a pre-only hook (the draft forwards): two reads, not four
            cell[0] += t1 - t0
            return result
        t2 = clock()
        if post is not None and seam not in disabled:
            try:
                if pre is None and shim.fault == seam:  # the fault goes into the hook's first body
                    raise _injected(seam)
                if guard is None:
                    post(ctx, result, *args, **kwargs)
                else:
                    with guard(seam):
                        post(ctx, result, *args, **kwargs)
            except Exception as exc:
                shim.fail(seam, exc)
        t3 = clock()
        cell[0] += t1 - t0 + t3 - t2
        if rounds is not None:
            rounds[0] += t3 - t0
        return result

    hook.__name__ = f"eagle3scope_{seam.replace('.', '_')}"
    hook.eagle3scope_seam = seam
    return hook
