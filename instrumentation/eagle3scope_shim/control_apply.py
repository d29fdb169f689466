"""One aux-layer change applied by every TP rank together (:func:`apply_everywhere`): each rank sets the
change through its target's own ``set_eagle3_layers_to_capture``, all gather each other's outcome, and
any rank's failure puts the previous set back on every rank; a recapture, where asked, runs on every
rank too. On a single rank the "gather" is :func:`alone`; under TP the change arrives with SGLang's
request broadcast (:func:`apply_broadcast`).
"""

from __future__ import annotations

import logging

from eagle3scope.wire.control_protocol import refusal
from eagle3scope_shim import collective
from eagle3scope_shim.control_facts import ControlFacts, layer_ids, gather

log = logging.getLogger("eagle3scope")


def alone(report: dict) -> list[dict]:
    """The "gather" of a single-rank server."""
    return [report]


def capture_of(facts: ControlFacts) -> tuple[bool, list[int]]:
    try:
        inner = facts.inner
        return (bool(getattr(inner, "capture_aux_hidden_states", False)),
                layer_ids(getattr(getattr(inner, "model", None), "layers_to_capture", None) or []))
    except Exception:
        return False, []


def _report(shim, facts: ControlFacts, rank: int, error: str, **extra) -> dict:
    on, captured = capture_of(facts)
    return {"rank": rank, "captured": captured, "on": on,
            "forward_ct": getattr(shim.scheduler, "forward_ct", None), "error": error, **extra}


def _set_here(shim, facts: ControlFacts, change: dict, rank: int) -> str:
    """Put the change's ids in effect on this rank; what went wrong ("" if nothing)."""
    layers = list(change["layers"])
    if shim.fault == f"aux.apply@tp{rank}=" + ",".join(map(str, layers)):  # test support (env.FAULT)
        return f"fault injected into aux.apply on TP rank {rank} by EAGLE3SCOPE_FAULT"
    if facts.target is None:
        return f"no target to change on this rank: {facts.why_not}"
    try:
        facts.target.set_eagle3_layers_to_capture(layers)
    except Exception as exc:
        return f"SGLang raised {type(exc).__name__}: {exc}"
    on, captured = capture_of(facts)
    if not on or captured != change["captured"]:
        return f"SGLang captured {captured} (on={on}) for {layers}, expected {change['captured']}"
    return ""


def _recapture_here(shim, facts: ControlFacts) -> tuple[str, float | None]:
    if not facts.graphs.captured:
        return "", None
    try:
        return "", facts.graphs.recapture(shim.publisher)
    except Exception as exc:
        return f"recapturing the target's graphs failed ({type(exc).__name__}: {exc})", None


def _restore_here(shim, facts: ControlFacts, previous, recaptured: bool) -> str:
    if facts.target is None:
        return "no target on this rank"
    try:
        facts.target.set_eagle3_layers_to_capture(previous)
    except Exception as exc:
        return f"SGLang raised {type(exc).__name__}: {exc}"
    if recaptured and facts.graphs.captured:
        try:
            facts.graphs.recapture(shim.publisher)
        except Exception as again:
            return f"its graphs not recaptured either ({type(again).__name__}: {again}): SGLang serves eagerly"
    return ""


def apply_everywhere(shim, change: dict, facts: ControlFacts, gather, rank: int) -> dict:
    """Apply ``change`` on this rank in step with the others; the outcome, the same on every rank.

    ``gather`` turns this rank's report into every rank's (a collective over the TP CPU group;
    :func:`alone` on one rank). Each rank's own failure is caught before the next gather, so
    every rank reaches every gather and, seeing the same reports, takes the same branch: all
    keep the new set, or all put the previous one back (and recapture again where they did)."""
    shim.aux_change_applying = True
    try:
        reports = gather(_report(shim, facts, rank, _set_here(shim, facts, change, rank)))
        recaptured = bool(change["recapture"]) and not _failed(reports)
        if recaptured:
            error, pause_ms = _recapture_here(shim, facts)
            reports = gather(_report(shim, facts, rank, error, pause_ms=pause_ms))
        failed = _failed(reports)
        if failed:
            restored = gather(_report(shim, facts, rank, _restore_here(shim, facts, change["previous"], recaptured)))
            return _refused(change, failed, restored, recaptured)
    finally:
        shim.aux_change_applying = False
    return _applied(change, reports)


def _failed(reports: list[dict]) -> list[dict]:
    return [r for r in reports if r["error"]]


def _ranks(reports: list[dict]) -> dict:
    """The per-rank capture lists, in replies of a TP server only (a single rank's is ``captured``)."""
    if len(reports) == 1:
        return {}
    return {"ranks": [{k: r[k] for k in ("rank", "captured", "on", "forward_ct", "error")} for r in reports]}


def _refused(change: dict, failed: list[dict], restored: list[dict], recaptured: bool) -> dict:
    where = (lambda r: "") if len(restored) == 1 else (lambda r: f"TP rank {r['rank']}: ")
    reason = "; ".join(where(r) + r["error"] for r in failed)
    previous, broken = change["previous"], _failed(restored)
    if broken:
        reason += f"; putting {previous} back: " + "; ".join(where(r) + r["error"] for r in broken)
    else:
        reason += f"; restored {previous}" + ("" if len(restored) == 1 else " on every TP rank") + (
            ", its graphs recaptured" if recaptured else "")
    return refusal(reason, id=change["id"], **_ranks(restored))


def _applied(change: dict, reports: list[dict]) -> dict:
    applied = {"ok": True, "status": "applied", "id": change["id"], "layers": list(change["layers"]),
               "captured": reports[0]["captured"], **_ranks(reports)}
    pauses = [r["pause_ms"] for r in reports if r.get("pause_ms") is not None]
    return applied if not pauses else {**applied, "pause_ms": max(pauses)}


def apply_guarded(shim, change: dict, facts: ControlFacts, gather, rank: int) -> dict:
    try:
        return apply_everywhere(shim, change, facts, gather, rank)
    except Exception as exc:  # a failed gather: the TP group itself is broken
        return refusal(f"internal error: {type(exc).__name__}: {exc}", id=change["id"])


def apply_broadcast(shim, receiver, changes: list[dict]) -> None:
    """Every TP rank, right after SGLang's broadcast carried ``changes``: apply each, all ranks
    together. Never raises (the seam must stay attached, or the next change would reach SGLang's
    dispatcher on this rank and leave the others waiting in the gather)."""
    try:
        group = collective.tp_group(receiver)
        gather_all, rank = collective.gather_over(group), group.rank_in_group
    except Exception as exc:
        log.warning("eagle3scope: aux change dropped: no TP group: %s: %s", type(exc).__name__, exc)
        return
    channel = shim.aux_channel
    if channel is not None:
        facts = channel.facts
    else:  # a TP rank without a channel: its facts gathered at its first change
        if shim.rank_control_facts is None:
            try:
                shim.rank_control_facts = gather(shim, receiver)
            except Exception as exc:  # applying then fails on this rank, in step with the others
                shim.rank_control_facts = ControlFacts()
                shim.rank_control_facts.why_not = f"{type(exc).__name__}: {exc}"
        facts = shim.rank_control_facts
    for change in changes:
        outcome = apply_guarded(shim, change, facts, gather_all, rank)
        if channel is not None:
            channel.concluded(change, outcome)
