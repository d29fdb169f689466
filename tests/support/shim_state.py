"""A fresh shim for a test: the state :meth:`Instrumentor.instrument` builds, hooks made with it by
their factories (``hooks.FACTORIES[name](shim, seam)``), nothing shared with another test."""

from __future__ import annotations

import types

from eagle3scope_shim.shim_state import Shim


def make_shim() -> Shim:
    """A new :class:`Shim`, as the instrumentor builds it: nothing attached, published or learnt yet."""
    return Shim()


def ended(step, seq: int = 1, rids=(), t_ns: int = 0, capture: dict | None = None):
    """``step`` as the step hook hands it to the publisher thread: numbered, its requests and the
    capture in effect filled in (what ``step_body.finalize_step`` reads)."""
    step.seq, step.t_ns, step.rids, step.capture = seq, t_ns, list(rids), capture
    return step


def recording_publisher(shim: Shim) -> list[tuple]:
    """Give ``shim`` a publisher stand-in that keeps every ``submit`` (and no control channel): the
    list of what the hooks submitted."""
    submitted: list[tuple] = []
    shim.publisher = types.SimpleNamespace(submit=lambda *a: submitted.append(a) or True, hook_failures=0)
    shim.aux_channel = None
    return submitted
