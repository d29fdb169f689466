"""Acceptance sliced by what tends to move it: context length, batch size, sampling and constraint.

"It drops on long contexts" or "only on big batches" should be one look. Each request-step gets one
label per dimension, from its step's own fields: ``ctx_len`` (tokens in the request's context),
``bs``, ``greedy`` (SGLang's per-request ``top_k <= 1``) and ``constrained`` (a grammar masks its
tokens). A step without a field (older shims) counts its requests as ``unknown`` in that dimension.
Labels come from fixed, bounded buckets, never from the values themselves, so a hostile stream
cannot grow a slice table and no per-request value reaches a label.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from eagle3scope.analysis.stats import Tally
from eagle3scope.wire.bodies import Step

UNKNOWN = "unknown"
#: context-length buckets: upper bounds (exclusive) and their labels; the last is open
CONTEXT_BOUNDS = (128, 512, 2048, 8192, 32768)
CONTEXT_LABELS = ("<128", "128-511", "512-2K", "2K-8K", "8K-32K", ">=32K")
#: batch-size buckets: upper bounds (inclusive) and their labels; the last is open
BATCH_BOUNDS = (1, 4, 8, 16, 32, 64, 256)
BATCH_LABELS = ("1", "2-4", "5-8", "9-16", "17-32", "33-64", "65-256", ">256")
SAMPLING_LABELS = ("greedy", "sampled")
CONSTRAINT_LABELS = ("constrained", "free")
#: dimension -> its labels in display order (``unknown`` last in each)
DIMENSIONS: dict[str, tuple[str, ...]] = {
    "context_length": CONTEXT_LABELS + (UNKNOWN,),
    "batch_size": BATCH_LABELS,
    "sampling": SAMPLING_LABELS + (UNKNOWN,),
    "constraint": CONSTRAINT_LABELS + (UNKNOWN,),
}


def context_label(n: object) -> str:
    if type(n) is not int or n < 0:
        return UNKNOWN
    return CONTEXT_LABELS[bisect_right(CONTEXT_BOUNDS, n)]


def batch_label(bs: int) -> str:
    return BATCH_LABELS[bisect_left(BATCH_BOUNDS, bs)]


def _flag_labels(flags: list[bool] | None, labels: tuple[str, str], bs: int) -> list[str]:
    """Per request ``labels[0]`` where ``flags`` says true, ``labels[1]`` where false; ``unknown``
    for a whole step without the list."""
    if flags is None:
        return [UNKNOWN] * bs
    yes, no = labels
    return [yes if f else no for f in flags]


def request_labels(step: Step) -> list[tuple[str, str, str, str]]:
    """One label per dimension (in :data:`DIMENSIONS` order) for each request of a decode step (or a
    baseline's kept round of one, the same fields); a step
    without any per-request fact gets one shared tuple (what :meth:`Slices.add` counts at once)."""
    bs = len(step.accepted)
    ctx = step.ctx_len
    if ctx is None and step.greedy is None and step.constrained is None:
        return [(UNKNOWN, batch_label(bs), UNKNOWN, UNKNOWN)] * bs
    contexts = list(map(context_label, ctx)) if ctx is not None else [UNKNOWN] * bs
    return list(zip(contexts, [batch_label(bs)] * bs, _flag_labels(step.greedy, SAMPLING_LABELS, bs),
                    _flag_labels(step.constrained, CONSTRAINT_LABELS, bs)))


def _merged(tallies: list[Tally]) -> Tally:
    total = Tally()
    for t in tallies:
        for name in ("hist", "capped"):
            mine, theirs = getattr(total, name), getattr(t, name)
            if len(theirs) > len(mine):
                mine.extend([0] * (len(theirs) - len(mine)))
            for j, count in enumerate(theirs):
                mine[j] += count
        total.n += t.n
        total.tokens += t.tokens
    return total


class Slices:
    """A :class:`Tally` per combination of labels (at most 7 x 8 x 3 x 3), each dimension's slices
    summed from them when read: a step costs one tally update per distinct combination among its
    requests (one, usually), not one per dimension."""

    def __init__(self) -> None:
        self.tallies: dict[tuple, Tally] = {}

    def add(self, accepted: list[int], bonus: list[int], labels: list[tuple], budget: int | None) -> None:
        """One decode step; ``labels`` from :func:`request_labels`."""
        if labels.count(labels[0]) == len(labels):  # the usual case: one combination for the whole step
            groups = {labels[0]: (accepted, bonus)}
        else:
            groups = {}
            for a, b, key in zip(accepted, bonus, labels):
                acc, bon = groups.setdefault(key, ([], []))
                acc.append(a)
                bon.append(b)
        tallies = self.tallies
        for key, (acc, bon) in groups.items():
            tally = tallies.get(key)
            if tally is None:
                tally = tallies[key] = Tally()
            tally.add(acc, sum(acc) + sum(bon), 1, budget)

    def summary(self, k: int) -> dict[str, list[dict]]:
        """dimension -> one row per label seen, in bucket order: request-steps, mean accept length
        (bonus included) and per-position rates for positions 1..k."""
        out = {}
        for d, (dim, order) in enumerate(DIMENSIONS.items()):
            by_label: dict[str, list[Tally]] = {}
            for key, tally in self.tallies.items():
                by_label.setdefault(key[d], []).append(tally)
            rows = []
            for label in order:
                if label in by_label:
                    t = _merged(by_label[label])
                    rows.append({"label": label, "request_steps": t.n, "mean_accept_length": t.mean_accept_length,
                                 "per_position": t.per_position(k)})
            out[dim] = rows
        return out
