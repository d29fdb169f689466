"""Acceptance sliced by what tends to move it: context length, batch size, sampling and constraint.

"It drops on long contexts" or "only on big batches" should be one look. Each request-step gets one
label per dimension, from its step's own fields: ``ctx_len`` (tokens in the request's context),
``bs``, ``greedy`` (SGLang's per-request ``top_k <= 1``) and ``constrained`` (a grammar masks its
tokens). A step without a field (older shims) counts its requests as ``unknown`` in that dimension.
Labels come from fixed, bounded buckets, never from the values themselves, so a hostile stream
cannot grow a slice table and no per-request value reaches a label.
"""

from __future__ import annotations

from eagle3scope.analysis.stats import Tally

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
    for bound, label in zip(CONTEXT_BOUNDS, CONTEXT_LABELS):
        if n < bound:
            return label
    return CONTEXT_LABELS[-1]


def batch_label(bs: int) -> str:
    for bound, label in zip(BATCH_BOUNDS, BATCH_LABELS):
        if bs <= bound:
            return label
    return BATCH_LABELS[-1]


def _flag_labels(body: dict, key: str, labels: tuple[str, str], bs: int) -> list[str]:
    """Per request ``labels[0]`` where the step's ``key`` says true, ``labels[1]`` where false; ``unknown``
    for a request without a boolean (or a whole step without a well-formed list)."""
    flags = body.get(key)
    if type(flags) is not list or len(flags) != bs:
        return [UNKNOWN] * bs
    yes, no = labels
    return [yes if f is True else no if f is False else UNKNOWN for f in flags]


def request_labels(body: dict) -> list[tuple[str, str, str, str]]:
    """One label per dimension (in :data:`DIMENSIONS` order) for each request of a decode step."""
    bs = len(body["accepted"])
    ctx = body.get("ctx_len")
    contexts = list(map(context_label, ctx)) if type(ctx) is list and len(ctx) == bs else [UNKNOWN] * bs
    batch = [batch_label(bs)] * bs
    return list(zip(contexts, batch, _flag_labels(body, "greedy", SAMPLING_LABELS, bs),
                    _flag_labels(body, "constrained", CONSTRAINT_LABELS, bs)))


class Slices:
    """A :class:`Tally` per dimension and label, over every decode step added."""

    def __init__(self) -> None:
        self.tallies: dict[str, dict[str, Tally]] = {dim: {} for dim in DIMENSIONS}

    def add(self, accepted: list[int], bonus: list[int], labels: list[tuple], budget: int | None) -> None:
        """One decode step; ``labels`` from :func:`request_labels`."""
        for dim, column in zip(DIMENSIONS, zip(*labels)):
            if column.count(column[0]) == len(column):  # the usual case: one label for the whole step
                groups = {column[0]: (accepted, bonus)}
            else:
                groups = {}
                for a, b, label in zip(accepted, bonus, column):
                    acc, bon = groups.setdefault(label, ([], []))
                    acc.append(a)
                    bon.append(b)
            tallies = self.tallies[dim]
            for label, (acc, bon) in groups.items():
                tally = tallies.get(label)
                if tally is None:
                    tally = tallies[label] = Tally()
                tally.add(acc, sum(acc) + sum(bon), 1, budget)

    def summary(self, k: int) -> dict[str, list[dict]]:
        """dimension -> one row per label seen, in bucket order: request-steps, mean accept length
        (bonus included) and per-position rates for positions 1..k."""
        out = {}
        for dim, order in DIMENSIONS.items():
            tallies = self.tallies[dim]
            out[dim] = [{"label": label, "request_steps": t.n, "mean_accept_length": t.mean_accept_length,
                         "per_position": t.per_position(k)} for label in order if (t := tallies.get(label))]
        return out
