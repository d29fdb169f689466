"""Rendering helpers every panel shares: number formats, block bars, evidence as one line."""

from __future__ import annotations

BLOCKS = " ▁▂▃▄▅▆▇█"


def fmt(value, spec: str = ".2f", none: str = "–") -> str:
    return none if value is None else format(value, spec)


def bar(fraction: float | None, width: int) -> str:
    if fraction is None or width <= 0:
        return " " * max(width, 0)
    eighths = round(max(0.0, min(1.0, fraction)) * width * 8)
    full, part = divmod(eighths, 8)
    return ("█" * full + (BLOCKS[part] if part else "")).ljust(width)


def evidence_text(evidence) -> str:
    """A rule's evidence map as one line: ``key=value`` pairs in the rule's own order."""
    if isinstance(evidence, dict):
        return "  ".join(f"{k}={v}" for k, v in evidence.items())
    return str(evidence)

