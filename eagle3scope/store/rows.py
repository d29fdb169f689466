"""Flatten step frames into one row per request, the shape pandas/polars users want.

Shared by ``export`` (csv/parquet) and the headless ``replay`` summary. Values come from
untrusted files, so every field is read defensively: a wrong type becomes ``None``/empty.
"""

from __future__ import annotations

from eagle3scope.wire import FEATURE_CARRYING_MODES, Frame

#: column order of csv/parquet exports
COLUMNS = (
    "seq", "t_ns", "src", "mode", "bs", "rid", "accepted", "bonus", "accept_len_incl_bonus", "n_drafted",
    "draft_ids", "accepted_ids", "pass_widths", "feature_width", "feature_fc", "capture_on", "capture_layers",
    "draft_ms", "verify_ms",
)


def _int(value: object) -> int | None:
    return value if type(value) is int else None


def _num(value: object) -> float | None:
    return float(value) if type(value) in (int, float) else None


def _ints(value: object) -> list[int]:
    return [x for x in value if type(x) is int] if isinstance(value, list) else []


def pass_summary(body: dict) -> dict:
    """Per-step summary of the draft passes and the target's capture flag.

    ``pass_widths`` reads like ``draft_extend:12288+fc;decode:4096x2``; ``feature_width`` is the
    narrowest hidden state entering a feature-carrying pass (the one EAGLE-3 needs k*H wide) and
    ``feature_fc`` whether ``fc`` ran on all of them (None when no such pass was seen).
    """
    parts, feature_widths, feature_fc = [], [], []
    passes = body.get("passes")
    for p in passes if isinstance(passes, list) else []:
        if not isinstance(p, dict):
            continue
        mode, width, fc, n = str(p.get("mode")), _int(p.get("width")), p.get("fc"), _int(p.get("n")) or 1
        parts.append(f"{mode}:{width if width is not None else '?'}{'+fc' if fc is True else ''}"
                     f"{f'x{n}' if n > 1 else ''}")
        if mode in FEATURE_CARRYING_MODES:
            if width is not None:
                feature_widths.append(width)
            feature_fc.append(fc is True)
    capture = body.get("capture") if isinstance(body.get("capture"), dict) else {}
    on = capture.get("on")
    return {
        "pass_widths": ";".join(parts),
        "feature_width": min(feature_widths) if feature_widths else None,
        "feature_fc": all(feature_fc) if feature_fc else None,
        "capture_on": on if isinstance(on, bool) else None,
        "capture_layers": _ints(capture.get("layers")),
    }


def step_rows(frame: Frame) -> list[dict]:
    """One dict per request of a ``step`` frame, keys in :data:`COLUMNS` order."""
    body = frame.body
    common = pass_summary(body)
    rids, drafts, acc, bonus, acc_ids = (body.get(k) for k in ("rids", "draft_ids", "accepted", "bonus", "accepted_ids"))
    rows = []
    for i in range(_int(body.get("bs")) or 0):
        a, b = _int(acc[i]), _int(bonus[i])
        d = _ints(drafts[i])
        rows.append({
            "seq": body.get("seq"), "t_ns": _int(body.get("t_ns")) or frame.t, "src": frame.src,
            "mode": str(body.get("mode")), "bs": body.get("bs"), "rid": str(rids[i]),
            "accepted": a, "bonus": b, "accept_len_incl_bonus": (a or 0) + (b or 0), "n_drafted": len(d),
            "draft_ids": d, "accepted_ids": _ints(acc_ids[i]),
            "pass_widths": common["pass_widths"], "feature_width": common["feature_width"],
            "feature_fc": common["feature_fc"], "capture_on": common["capture_on"],
            "capture_layers": common["capture_layers"],
            "draft_ms": _num(body.get("draft_ms")), "verify_ms": _num(body.get("verify_ms")),
        })
    return rows
