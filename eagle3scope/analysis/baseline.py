"""A recording judged against an earlier one of the same draft: did acceptance get worse, and where?

Mean accept length (bonus included), the per-position rates and the mean of every slice
(:mod:`~eagle3scope.analysis.slices`) are compared with the same block bootstrap ``advise`` uses
(:func:`~eagle3scope.analysis.advisor.block_sums`, :func:`~eagle3scope.analysis.advisor.resamples`):
each side's rounds are cut into consecutive blocks and resampled on their own, and the change
(current minus baseline) gets the central 95 % of the resampled changes. A change *regressed* when
that whole interval lies below minus the tolerance (:data:`MIN_RATE_DROP` for a rate,
:data:`MIN_LENGTH_DROP` of the baseline's mean for a mean): a drop outside the noise and large
enough to matter. ``confidence`` is the share of resamples in which the current value was lower.
Rounds are the decode steps a :class:`~eagle3scope.analysis.SessionState` kept (its newest
:data:`~eagle3scope.analysis.advisor.ROUNDS_KEPT`), each publisher's steps pooled as ``check``'s
summary pools them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from eagle3scope.analysis.advisor import BLOCKS, BOOTSTRAP, Round, Sums, block_sums, interval95, pooled, resamples
from eagle3scope.analysis.slices import DIMENSIONS, request_labels
from eagle3scope.wire.bodies import Step

#: a rate (per-position acceptance) regresses only by more than this, outside the noise
MIN_RATE_DROP = 0.02
#: a mean accept length regresses only by more than this share of the baseline's, outside the noise
MIN_LENGTH_DROP = 0.02
#: request-steps each side needs before a mean (overall or a slice's) is judged; per position, the
#: request-steps that reached it
MIN_REQUEST_STEPS = 100

@dataclass(frozen=True, slots=True)
class KeptRound:
    """What a session keeps of a decode step for a later comparison: the fields a comparison and its
    slices read (:func:`~eagle3scope.analysis.slices.request_labels`), not the token ids."""

    accepted: list[int]
    bonus: list[int]
    num_steps: int | None
    ctx_len: list[int] | None
    greedy: list[bool] | None
    constrained: list[bool] | None


def kept_round(step: Step) -> KeptRound:
    return KeptRound(step.accepted, step.bonus, step.num_steps, step.ctx_len, step.greedy, step.constrained)


@dataclass(frozen=True)
class Delta:
    """One compared value. ``judged`` False (with ``reason``) when either side had too little to judge."""

    name: str
    baseline: float | None
    current: float | None
    interval: tuple[float, float] | None  # 95 % interval of current - baseline
    confidence: float | None  # share of resamples with current < baseline
    regressed: bool
    judged: bool
    reason: str = ""
    tolerance: float = 0.0

    @property
    def change(self) -> float | None:
        return None if self.baseline is None or self.current is None else self.current - self.baseline

    def to_dict(self) -> dict:
        return {"name": self.name, "baseline": self.baseline, "current": self.current, "change": self.change,
                "interval": list(self.interval) if self.interval else None, "confidence": self.confidence,
                "tolerance": self.tolerance, "regressed": self.regressed, "judged": self.judged,
                "reason": self.reason}


@dataclass(frozen=True)
class Comparison:
    """Overall, per-position and per-slice deltas; ``slices`` maps "dimension=label" to its mean's delta."""

    baseline_rounds: int
    current_rounds: int
    overall: tuple[Delta, ...]  # mean accept length, then position 1..k
    slices: tuple[Delta, ...]
    notes: tuple[str, ...]

    @property
    def regressions(self) -> list[Delta]:
        return [d for d in (*self.overall, *self.slices) if d.regressed]

    def to_dict(self) -> dict:
        return {"baseline_rounds": self.baseline_rounds, "current_rounds": self.current_rounds,
                "regressed": [d.name for d in self.regressions], "notes": list(self.notes),
                "overall": [d.to_dict() for d in self.overall], "slices": [d.to_dict() for d in self.slices]}


def _rates(s: Sums, k: int) -> tuple[list[float | None], list[int]]:
    """Per-position acceptance 1..k of a pool (the rate at position i given i - 1 accepted) and each one's reached count."""
    at_least = [0] * (s.depth + 2)
    for a in range(s.depth, -1, -1):
        at_least[a] = at_least[a + 1] + s.accepted[a]
    reached = [at_least[i - 1] for i in range(1, k + 1)]
    return [at_least[i] / r if r else None for i, r in zip(range(1, k + 1), reached)], reached


def _values(s: Sums, k: int) -> list[float | None]:
    """The compared values of one pool: mean accept length, then the rates of positions 1..k."""
    return [s.accept_length(s.depth), *_rates(s, k)[0]]


class _Side:
    """One recording's rounds as blocks: the pooled values and each bootstrap resample's."""

    def __init__(self, rounds: list[Round], depth: int, k: int, seed: int, bootstrap: int, blocks: int) -> None:
        parts = block_sums(rounds, depth, blocks)
        self.total = pooled(parts, depth)
        self.values = _values(self.total, k)
        self.samples = [_values(s, k) for s in resamples(parts, depth, bootstrap, random.Random(seed))]


def _delta(name: str, index: int, base: _Side, cur: _Side, too_few: str, tolerance: float) -> Delta:
    b, c = base.values[index], cur.values[index]
    if too_few or b is None or c is None:
        return Delta(name, b, c, None, None, False, False, too_few or "nothing to compare", tolerance)
    changes = [cs[index] - bs[index] for bs, cs in zip(base.samples, cur.samples)
               if bs[index] is not None and cs[index] is not None]
    interval = interval95(changes)
    if interval is None:
        return Delta(name, b, c, None, None, False, False, "too few blocks of rounds to resample", tolerance)
    confidence = sum(x < 0 for x in changes) / len(changes)
    return Delta(name, b, c, interval, confidence, interval[1] < -tolerance, True, "", tolerance)


def _too_few(base: int, cur: int, what: str = "") -> str:
    """Why a value is not judged on ``base`` and ``cur`` request-steps, or "" when both are enough."""
    if min(base, cur) < MIN_REQUEST_STEPS:
        return f"baseline {base}, current {cur} request-steps{what}; {MIN_REQUEST_STEPS} needed on each side"
    return ""


def _raw(rounds: list[KeptRound]) -> list[Round]:
    """Kept rounds in the advisor's round form (untimed: a comparison needs no time model)."""
    return [Round.untimed(r.accepted, r.bonus, r.num_steps) for r in rounds]


def _sliced(rounds: list[KeptRound]) -> dict[tuple[int, str], list[Round]]:
    """(dimension index, label) -> the requests of each round in that slice, as rounds (in the advisor's
    form; a round without a request in the slice is left out). One pass over the rounds for all slices."""
    out: dict[tuple[int, str], list[Round]] = {}
    for r in rounds:
        acc, bonus, budget = r.accepted, r.bonus, r.num_steps
        labels = request_labels(r)
        if labels.count(labels[0]) == len(labels):  # the usual case: one label per dimension for the round
            for d, label in enumerate(labels[0]):
                out.setdefault((d, label), []).append(Round.untimed(acc, bonus, budget))
            continue
        for d in range(len(DIMENSIONS)):
            groups: dict[str, tuple[list, list]] = {}
            for a, b, key in zip(acc, bonus, labels):
                group = groups.setdefault(key[d], ([], []))
                group[0].append(a)
                group[1].append(b)
            for label, (group_acc, group_bonus) in groups.items():
                out.setdefault((d, label), []).append(Round.untimed(group_acc, group_bonus, budget))
    return out


def compare(baseline: list[KeptRound], current: list[KeptRound], *, k_baseline: int, k_current: int,
            bootstrap: int = BOOTSTRAP, blocks: int = BLOCKS, seed: int = 0) -> Comparison:
    """Judge ``current`` against ``baseline`` (lists of :func:`kept_round`); ``k_*``: each side's chain depth."""
    depth = max(k_baseline, k_current, *(a for r in (*baseline, *current) for a in r.accepted), 1)
    k = max(0, min(k_baseline, k_current))
    notes = []
    if k_baseline != k_current:
        notes.append(f"the baseline ran {k_baseline} draft steps, this recording {k_current}: positions 1..{k} compared")
    budgets = {r.num_steps for r in (*baseline, *current)} - {None}
    adaptive = bool(budgets - {k_baseline, k_current})
    if adaptive:
        notes.append("adaptive steps (rounds at num_steps " + ", ".join(map(str, sorted(budgets))) + "): per-position "
                     "rates not compared, means only")

    def sides(b_rounds: list[Round], c_rounds: list[Round]) -> tuple[_Side, _Side]:
        return (_Side(b_rounds, depth, k, seed, bootstrap, blocks), _Side(c_rounds, depth, k, seed + 1, bootstrap, blocks))

    def tolerance(side: _Side) -> float:
        return MIN_LENGTH_DROP * (side.values[0] or 0.0)

    base, cur = sides(_raw(baseline), _raw(current))
    too_few = _too_few(base.total.request_steps, cur.total.request_steps)
    overall = [_delta("mean accept length", 0, base, cur, too_few, tolerance(base))]
    if not adaptive:
        b_reached, c_reached = _rates(base.total, k)[1], _rates(cur.total, k)[1]
        for i in range(1, k + 1):
            few = too_few or _too_few(b_reached[i - 1], c_reached[i - 1], " reached it")
            overall.append(_delta(f"position {i}", i, base, cur, few, MIN_RATE_DROP))
    b_slices, c_slices = _sliced(baseline), _sliced(current)
    slices = []
    for d, (dim, labels) in enumerate(DIMENSIONS.items()):
        for label in labels:
            b_rounds, c_rounds = b_slices.get((d, label), []), c_slices.get((d, label), [])
            if not b_rounds and not c_rounds:
                continue
            b_side, c_side = sides(b_rounds, c_rounds)
            if (b_side.total.request_steps, c_side.total.request_steps) == (base.total.request_steps, cur.total.request_steps):
                continue  # the slice is the whole run on both sides: its mean is the one above
            few = _too_few(b_side.total.request_steps, c_side.total.request_steps)
            slices.append(_delta(f"{dim}={label}", 0, b_side, c_side, few, tolerance(b_side)))
    return Comparison(len(baseline), len(current), tuple(overall), tuple(slices), tuple(notes))
