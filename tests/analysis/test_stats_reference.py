"""Acceptance statistics against their definitions (analysis/stats.py's docstring; README: mean
acceptance length counts the bonus token, per-position rates are conditional, the rolling figures
cover the last 512 request-steps): any stream of decode steps, any window, any step budgets, computed
here from the request-steps themselves and compared with AcceptanceStats."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from eagle3scope.analysis.stats import AcceptanceStats, Tally


@st.composite
def streams(draw):
    k = draw(st.integers(1, 5))
    steps = []
    t = draw(st.integers(0, 10**12))
    for _ in range(draw(st.integers(0, 25))):
        budget = draw(st.one_of(st.none(), st.integers(0, k + 1)))
        top = k if budget is None else budget
        accepted = draw(st.lists(st.integers(0, top), min_size=0, max_size=4))
        bonus = draw(st.lists(st.integers(0, 1), min_size=len(accepted), max_size=len(accepted)))
        t += draw(st.integers(0, 3)) * 1_000_000
        steps.append((t, accepted, bonus, budget, draw(st.integers(0, k))))
    return k, steps


def window_of(steps, size):
    """The shortest run of whole latest steps holding at least `size` request-steps (or all of them)."""
    kept, n = [], 0
    for step in reversed(steps):
        if n >= size:
            break
        kept.insert(0, step)
        n += len(step[1])
    return kept


def rates(steps, k):
    out = []
    for i in range(1, k + 1):
        reached = sum(1 for _, acc, _, b, _ in steps for a in acc if a >= i - 1 and not (b == i - 1 and a == b))
        accepted = sum(1 for _, acc, _, _, _ in steps for a in acc if a >= i)
        out.append(accepted / reached if reached else None)
    return out


def mean(steps):
    n = sum(len(acc) for _, acc, _, _, _ in steps)
    return sum(sum(acc) + sum(bon) for _, acc, bon, _, _ in steps) / n if n else None


@settings(max_examples=200, deadline=None)
@given(streams(), st.integers(1, 12), st.booleans())
def test_every_figure_follows_from_the_request_steps(stream, size, configured):
    k_conf, steps = stream
    stats = AcceptanceStats(window=size)
    if configured:
        stats.k_configured = k_conf
    for seq, (t, accepted, bonus, budget, depth) in enumerate(steps):
        stats.add_step(seq, t, accepted, bonus, depth, budget)
    counted = [s for s in steps if s[1]]  # a step without requests is not a decode step
    budgets = [b for *_, b, _ in counted if b is not None]
    if configured:
        k = max([k_conf, *budgets])
    else:
        k = max([0, *budgets, *(d for *_, d in counted), *(a for _, acc, *_ in counted for a in acc)])
    assert stats.k == k
    win = window_of(counted, size)
    assert stats.n_steps == len(counted) and stats.total.n == sum(len(s[1]) for s in counted)
    assert stats.mean_accept_length == pytest.approx(mean(win))
    assert stats.cumulative_mean_accept_length == pytest.approx(mean(counted))
    assert stats.per_position == pytest.approx(rates(win, k))
    assert stats.cumulative_per_position == pytest.approx(rates(counted, k))
    hist = [sum(1 for _, acc, *_ in win for a in acc if a == j) for j in range(k + 1)]
    assert stats.histogram == hist + [0] * (len(stats.histogram) - len(hist))
    span = (win[-1][0] - win[0][0]) / 1e9 if len(win) >= 2 else 0
    if span > 0:
        assert stats.steps_per_s == pytest.approx((len(win) - 1) / span)
        tokens = sum(sum(acc) + sum(bon) for _, acc, bon, _, _ in win[1:])
        assert stats.accepted_tokens_per_s == pytest.approx(tokens / span)
    else:
        assert stats.steps_per_s is None and stats.accepted_tokens_per_s is None
    if counted:
        assert stats.history[-1][2] == pytest.approx(mean(win))
    summary = stats.summary()
    assert summary["steps"] == len(counted) and summary["request_steps"] == stats.total.n
    assert summary["mean_accept_length"] == stats.cumulative_mean_accept_length
    assert summary["rolling_mean_accept_length"] == stats.mean_accept_length
    assert summary["per_position"] == stats.cumulative_per_position
    assert sum(summary["histogram"]) == stats.total.n


def test_the_history_is_bounded_and_keeps_the_latest():
    stats = AcceptanceStats(window=4, history=3)
    for seq in range(10):
        stats.add_step(seq, seq, [seq % 3], [1])
    assert [seq for seq, _, _ in stats.history] == [7, 8, 9]


def test_a_tally_counts_each_add_once_and_a_negative_sign_takes_it_back():
    # `aux cycle` (control/cycle.py) adds with the default sign: one step, its request-steps and tokens once
    tally = Tally()
    tally.add([2, 0, 3], 8)
    assert (tally.steps, tally.n, tally.tokens, tally.hist) == (1, 3, 8, [1, 0, 1, 1])
    assert tally.mean_accept_length == 8 / 3
    tally.add([3], 4, budget=3)
    assert (tally.steps, tally.n, tally.capped) == (2, 4, [0, 0, 0, 1])
    tally.add([3], 4, -1, budget=3)
    tally.add([2, 0, 3], 8, -1)
    assert (tally.steps, tally.n, tally.tokens, tally.hist, tally.capped) == (0, 0, 0, [0, 0, 0, 0], [0, 0, 0, 0])
    assert tally.mean_accept_length is None
