"""Where a replay seek goes, read from what a user typed at the ``g`` prompt.

Plain text, no Textual: the prompt's answer is untrusted input, so every string either gives a
step (a ``seq``, 0 or more) or a time from the start (finite seconds, 0 or more), or raises a
:class:`ValueError` whose message says what would have been understood.
"""

from __future__ import annotations

import math

#: Time units a seek target may end with, and their length in seconds ("ms" before "s").
UNITS = (("ms", 1e-3), ("s", 1.0), ("m", 60.0), ("h", 3600.0))


def parse_seek(target: str) -> tuple[str, float]:
    """``"1234"`` or ``"step 1234"`` -> ("step", 1234); ``"12.5s"``/``"2m"``/``"1:30"`` -> ("time", seconds)."""
    text = target.strip().lower()
    if not text:
        raise ValueError("empty seek target")
    try:
        kind, value = _read(text)
    except ValueError:
        kind, value = None, None
    if kind is None or not math.isfinite(value) or value < 0:
        raise ValueError(f"cannot seek to {target!r}: give a step number or a time like 12.5s, 2m, 1:30")
    return kind, value


def _read(text: str) -> tuple[str | None, float | None]:
    if text.startswith("step"):
        return "step", int(text[4:].strip(" =:"))
    if text.isdigit():
        return "step", int(text)
    if ":" in text:
        seconds = 0.0
        for part in text.split(":"):
            seconds = seconds * 60 + float(part)
        return "time", seconds
    for suffix, scale in UNITS:
        if text.endswith(suffix):
            return "time", float(text[: -len(suffix)]) * scale
    return None, None
