"""Flatten step frames into one row per request, the shape pandas/polars users want.

Shared by ``export`` (csv/parquet) and the headless ``replay`` summary. Values come from
untrusted files: every frame read here was decoded into its checked record (``wire/bodies.py``).
"""

from __future__ import annotations

from eagle3scope.wire import FEATURE_CARRYING_MODES, Frame
from eagle3scope.wire.bodies import Step

#: column order of csv/parquet exports
COLUMNS = (
    "seq", "t_ns", "src", "mode", "bs", "rid", "accepted", "bonus", "accept_len_incl_bonus", "n_drafted",
    "draft_ids", "accepted_ids", "pass_widths", "feature_width", "feature_fc", "capture_on", "capture_layers",
    "draft_ms", "verify_ms",
)


def pass_summary(step: Step) -> dict:
    """Per-step summary of the draft passes and the target's capture flag.

    ``pass_widths`` reads like ``draft_extend:12288+fc;decode:4096x2``; ``feature_width`` is the
    narrowest hidden state entering a feature-carrying pass (the one EAGLE-3 needs k*H wide) and
    ``feature_fc`` whether ``fc`` ran on all of them (None when no such pass was seen).
    """
    parts, feature_widths, feature_fc = [], [], []
    for p in step.passes:
        mode, width, fc, n = str(p.mode), p.width, p.fc, p.n
        parts.append(f"{mode}:{width if width is not None else '?'}{'+fc' if fc is True else ''}"
                     f"{f'x{n}' if n > 1 else ''}")
        if mode in FEATURE_CARRYING_MODES:
            if width is not None:
                feature_widths.append(width)
            feature_fc.append(fc is True)
    capture = step.capture
    return {
        "pass_widths": ";".join(parts),
        "feature_width": min(feature_widths) if feature_widths else None,
        "feature_fc": all(feature_fc) if feature_fc else None,
        "capture_on": step.capture_on,
        "capture_layers": list(capture.layers or []) if capture is not None else [],
    }


def step_rows(frame: Frame) -> list[dict]:
    """One dict per request of a ``step`` frame, keys in :data:`COLUMNS` order."""
    step = frame.record
    common = pass_summary(step)
    rows = []
    for request in step.requests:
        a, b, d = request.accepted, request.bonus, request.draft_ids
        rows.append({
            "seq": step.seq, "t_ns": step.t_ns or frame.t, "src": frame.src,
            "mode": str(step.mode), "bs": step.bs, "rid": str(request.rid),
            "accepted": a, "bonus": b, "accept_len_incl_bonus": a + b, "n_drafted": len(d),
            "draft_ids": d, "accepted_ids": request.accepted_ids,
            "pass_widths": common["pass_widths"], "feature_width": common["feature_width"],
            "feature_fc": common["feature_fc"], "capture_on": common["capture_on"],
            "capture_layers": common["capture_layers"],
            "draft_ms": step.draft_ms, "verify_ms": step.verify_ms,
        })
    return rows
