"""Measures of the demo's generated text that its tests share."""

from __future__ import annotations


def shortest_period(seq: list) -> int:
    """The smallest p with seq[i] == seq[i + p] throughout (len(seq) when the text does not repeat)."""
    return next(p for p in range(1, len(seq) + 1) if all(seq[i] == seq[i + p] for i in range(len(seq) - p)))
