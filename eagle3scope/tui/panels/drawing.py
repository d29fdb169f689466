"""Rendering helpers every panel shares: number formats, block bars, evidence as one line, and
:func:`plain`, the TUI's side of the untrusted-text boundary (:mod:`eagle3scope.wire.untrusted`)."""

from __future__ import annotations

from rich.text import Text

from eagle3scope.wire.untrusted import terminal

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
    """A rule's evidence map as one safe line: ``key=value`` pairs in the rule's own order."""
    if isinstance(evidence, dict):
        return terminal("  ".join(f"{k}={v}" for k, v in evidence.items()))
    return terminal(evidence)



def plain(value, style=None, **kwargs) -> Text:
    """``value`` (any string a frame or file named) as Rich text: one line, no control character,
    never parsed as markup. Panels, screens and tables put untrusted strings on screen only so."""
    return Text(terminal(value), style=style or "", **kwargs)
