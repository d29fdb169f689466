"""The baseline comparison itself (eagle3scope/analysis/baseline.py): a drop outside the noise and past
the tolerance regresses, named by position and slice; the same acceptance, or a drop the noise covers,
does not; the tolerance's boundary is exact where the bootstrap has no spread to add."""

from __future__ import annotations

import random

from hypothesis import given, settings, strategies as st

from eagle3scope.analysis.baseline import MIN_LENGTH_DROP, MIN_RATE_DROP, MIN_REQUEST_STEPS, KeptRound, compare

K = 3


def chain(rng: random.Random, rates: tuple[float, ...]) -> int:
    """Drafts accepted by one request-step whose position i is accepted with ``rates[i]`` given the earlier ones."""
    a = 0
    while a < len(rates) and rng.random() < rates[a]:
        a += 1
    return a


def kept(accepted: list[int], bonus: list[int], **fields) -> KeptRound:
    """A kept round (what a session keeps of a decode step); ``fields``: its optional per-request lists."""
    return KeptRound(accepted, bonus, fields.get("num_steps"), fields.get("ctx_len"), fields.get("greedy"),
                     fields.get("constrained"))


def rounds(n: int, rates=(0.7, 0.7, 0.7), *, bs: int = 2, seed: int = 0, **fields) -> list[KeptRound]:
    """``n`` kept rounds (what a session keeps of a decode step); ``fields``: per-request lists by round index."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        accepted = [chain(rng, rates) for _ in range(bs)]
        out.append(kept(accepted, [1] * bs, **{key: f(i) for key, f in fields.items()}))
    return out


def by_name(comparison) -> dict:
    return {d.name: d for d in (*comparison.overall, *comparison.slices)}


def test_a_drop_at_one_position_regresses_that_position_and_the_mean_only():
    base = rounds(600, (0.9, 0.8, 0.7), seed=1)
    cur = rounds(600, (0.9, 0.4, 0.7), seed=2)
    deltas = by_name(compare(base, cur, k_baseline=K, k_current=K))
    assert {name for name, d in deltas.items() if d.regressed} == {"mean accept length", "position 2"}
    p2 = deltas["position 2"]
    assert p2.judged and p2.interval[1] < -MIN_RATE_DROP and p2.confidence == 1.0
    assert abs(p2.change - (p2.current - p2.baseline)) < 1e-12 and -0.5 < p2.change < -0.3
    assert deltas["position 1"].interval[0] <= 0 <= deltas["position 1"].interval[1]


def test_a_drop_the_noise_covers_does_not_regress():
    """Two runs of the same draft (rates 0.7) on 300 rounds of 1 request: the second's mean came out
    lower, by chance alone, and the interval says so by reaching above zero."""
    base, cur = rounds(300, (0.7,) * 3, bs=1, seed=3), rounds(300, (0.7,) * 3, bs=1, seed=4)
    result = compare(base, cur, k_baseline=K, k_current=K)
    assert result.regressions == []
    mean = result.overall[0]
    assert mean.judged and mean.change < 0 and mean.interval[0] < 0 < mean.interval[1], mean
    # a real drop (0.7 -> 0.6 per position) on fifteen times the rounds: outside the noise
    big = compare(rounds(4500, (0.7,) * 3, bs=1, seed=3), rounds(4500, (0.6,) * 3, bs=1, seed=4),
                  k_baseline=K, k_current=K)
    assert "mean accept length" in [d.name for d in big.regressions]


def _fixed(n_rounds: int, every: int) -> list[KeptRound]:
    """Rounds of one request accepting all 3 drafts, but 2 in every ``every``-th round: each block of
    ``every`` rounds holds the same mix, so every bootstrap resample has exactly the same mean."""
    return [kept([2 if i % every == 0 else 3], [1]) for i in range(n_rounds)]


def test_the_tolerance_boundary_is_exact_without_noise():
    base = [kept([3], [1])] * 800  # mean 4.0: the tolerance is 2 % of it, 0.08
    assert MIN_LENGTH_DROP * 4.0 == 0.08
    small = by_name(compare(base, _fixed(800, 20), k_baseline=K, k_current=K))["mean accept length"]
    assert small.interval == (-0.05, -0.05) or abs(small.interval[0] + 0.05) < 1e-9
    assert not small.regressed  # dropped 0.05, less than the tolerance
    large = by_name(compare(base, _fixed(400, 10), k_baseline=K, k_current=K))["mean accept length"]
    assert abs(large.interval[1] + 0.1) < 1e-9 and large.regressed  # dropped 0.1, past it


def test_too_few_request_steps_are_not_judged():
    result = compare(rounds(MIN_REQUEST_STEPS // 2 - 1), rounds(600, (0.1,) * 3), k_baseline=K, k_current=K)
    mean = result.overall[0]
    assert not mean.judged and not mean.regressed and "needed on each side" in mean.reason
    assert result.regressions == []


def test_a_slice_that_dropped_is_named_and_the_others_are_not():
    """Long contexts lost acceptance, short ones did not: ``context_length=2K-8K`` regresses."""
    ctx = {"ctx_len": lambda i: [100, 3000], "greedy": lambda i: [i % 2 == 0, True]}
    base = rounds(800, (0.8, 0.7, 0.6), seed=5, **ctx)
    cur = rounds(800, (0.8, 0.7, 0.6), seed=6, **ctx)
    for r in cur:
        r.accepted[1] = min(r.accepted[1], 1)  # the long request never gets past position 1
    deltas = by_name(compare(base, cur, k_baseline=K, k_current=K))
    assert deltas["context_length=2K-8K"].regressed and not deltas["context_length=<128"].regressed
    assert deltas["context_length=<128"].judged
    assert "batch_size=2-4" not in deltas  # one label on both sides: the whole run, judged above
    assert {"sampling=greedy", "sampling=sampled"} <= set(deltas)


def test_different_depths_compare_the_common_positions_and_say_so():
    result = compare(rounds(400, (0.8, 0.7, 0.6)), rounds(400, (0.8, 0.7)), k_baseline=3, k_current=2)
    assert [d.name for d in result.overall] == ["mean accept length", "position 1", "position 2"]
    assert any("positions 1..2" in note for note in result.notes)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.integers(0, K), min_size=1, max_size=4), min_size=1, max_size=300),
       st.integers(0, 2 ** 16))
def test_a_recording_never_regresses_against_itself(accepted, seed):
    same = [kept(a, [1] * len(a), ctx_len=[len(a) * 1000] * len(a)) for a in accepted]
    result = compare(same, same, k_baseline=K, k_current=K, seed=seed)
    assert result.regressions == []
    for d in (*result.overall, *result.slices):
        if d.judged:
            assert d.baseline == d.current and d.interval[0] <= 0 <= d.interval[1], d


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.integers(0, K), min_size=1, max_size=4), min_size=MIN_REQUEST_STEPS, max_size=300),
       st.integers(1, K))
def test_accepting_more_everywhere_never_regresses(accepted, more):
    """Every request-step of the current run accepted at least what the baseline's did."""
    base = [kept(a, [1] * len(a)) for a in accepted]
    cur = [kept([min(K, x + more) for x in a], [1] * len(a)) for a in accepted]
    result = compare(base, cur, k_baseline=K, k_current=K)
    assert not result.overall[0].regressed and result.overall[0].change >= 0
