"""Shared by the hostile-input suite (tests/test_hostile_*.py) and benchmarks/reliability/bench_reliability.py.

Every test adds what it tried to one tally per class (frames, control, recordings): cases tried,
crashes (an exception other than the documented error), hangs (a timeout), tracebacks (printed by
a CLI), silent losses (data dropped without an error being reported), leaks (a raw control
character, live markup, invalid XML or a formula cell that an untrusted string put into an
output), and the peak memory it saw.
When ``EAGLE3SCOPE_RELIABILITY_OUT`` names a file, each test appends its tally there as one JSON
line, which the benchmark script sums into RELIABILITY.md's table.
"""

from __future__ import annotations

import json
import os
import resource
from collections import Counter

from hypothesis import strategies as st

ENV_OUT = "EAGLE3SCOPE_RELIABILITY_OUT"
FIELDS = ("cases", "crashes", "hangs", "tracebacks", "silent_losses", "leaks")


class Tally:
    """Counts for one test; ``emit()`` appends them (with peak memory) to the report file."""

    def __init__(self, cls: str, test: str) -> None:
        self.cls, self.test = cls, test
        self.counts: Counter = Counter({f: 0 for f in FIELDS})
        self.peak_bytes = 0
        self.bound_bytes: int | None = None

    def add(self, **counts: int) -> None:
        self.counts.update(counts)

    def peak(self, nbytes: int, bound: int | None = None) -> None:
        self.peak_bytes = max(self.peak_bytes, nbytes)
        if bound is not None:
            self.bound_bytes = bound

    def summary(self) -> str:
        """One line for the run's output: the counts, and the peak memory where one was measured."""
        line = f"hostile {self.cls}, {self.test}: {dict(self.counts)}"
        if self.peak_bytes:
            line += f", peak {self.peak_bytes / 1e6:.1f} MB"
        if self.bound_bytes:
            line += f" (bound {self.bound_bytes / 1e6:.0f} MB)"
        return line

    def emit(self) -> None:
        path = os.environ.get(ENV_OUT)
        if not path:
            return
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"class": self.cls, "test": self.test, **self.counts, "peak_bytes": self.peak_bytes,
                                 "bound_bytes": self.bound_bytes}) + "\n")


def children_peak_rss() -> int:
    """Peak resident memory of the largest child process waited for so far (bytes)."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024


# -- hostile values: everything msgpack can carry, with the edges that broke consumers before ------
hostile_scalars = (
    st.none() | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, -(2**63), -1, 0, 1 << 40])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12) | st.binary(max_size=12)
)
hostile_values = st.recursive(
    hostile_scalars,
    lambda inner: st.lists(inner, max_size=5)
    | st.dictionaries(st.text(max_size=8) | st.binary(max_size=4), inner, max_size=5),
    max_leaves=20,
)


@st.composite
def mutated(draw, body: dict):
    """``body`` with one value somewhere inside it (or one new key) replaced by a hostile value."""
    import copy

    body = copy.deepcopy(body)
    node = body
    while True:
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        if not keys:
            break
        key = draw(st.sampled_from(keys))
        child = node[key]
        if isinstance(child, (dict, list)) and child and draw(st.booleans()):
            node = child
            continue
        node[key] = draw(hostile_values)
        return body
    if isinstance(node, dict):
        node[draw(st.text(max_size=8))] = draw(hostile_values)
    else:
        node.append(draw(hostile_values))
    return body
