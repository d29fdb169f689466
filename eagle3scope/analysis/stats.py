"""Acceptance statistics shared by the contract rules and the TUI.

Everything is derived from one histogram: ``hist[j]`` counts the request-steps (one request in one
decode step) that accepted ``j`` drafts. From it follow the mean acceptance length (``j`` + bonus,
counted the way SGLang's ``accept len`` log line counts it) and the per-position rates for a chain
of depth ``k``: position ``i`` is reached when ``i - 1`` drafts were accepted, and accepted when
``i`` were, so ``rate_i = #(j >= i) / #(j >= i - 1)``. Positions are depths: in a tree
(topk > 1) ``j`` is the depth of the accepted path, whichever nodes it ran through. A round whose
step budget ``b`` is smaller than ``k`` (adaptive steps) proposed nothing deeper: when it accepted
all ``b`` drafts, position ``b + 1`` was not observed rather than rejected, so ``capped[b]``
counts such request-steps and they leave the denominator of ``rate_{b+1}``.
"""

from __future__ import annotations

from collections import deque


class Tally:
    """Cumulative acceptance counts over request-steps."""

    __slots__ = ("hist", "capped", "n", "tokens", "steps")

    def __init__(self) -> None:
        self.hist: list[int] = []
        self.capped: list[int] = []  # capped[b]: request-steps that accepted every draft of a budget b
        self.n = 0  # request-steps
        self.tokens = 0  # committed tokens: accepted drafts + bonus
        self.steps = 0  # decode steps (frames)

    def add(self, accepted: list[int], tokens: int, sign: int = 1, budget: int | None = None) -> None:
        hist = self.hist
        size = len(hist)
        for a in accepted:
            if a >= size:
                hist.extend([0] * (a + 1 - size))
                size = a + 1
            hist[a] += sign
        if budget is not None:
            full = accepted.count(budget)
            if full:
                capped = self.capped
                if budget >= len(capped):
                    capped.extend([0] * (budget + 1 - len(capped)))
                capped[budget] += sign * full
        self.n += sign * len(accepted)
        self.tokens += sign * tokens
        self.steps += sign

    @property
    def mean_accept_length(self) -> float | None:
        return self.tokens / self.n if self.n else None

    def positions(self, k: int) -> tuple[list[int], list[int]]:
        """(reached, accepted) request-step counts of draft positions 1..k."""
        hist, capped = self.hist, self.capped
        at_least = [0] * (k + 1)  # at_least[i]: request-steps with >= i drafts accepted
        running = 0
        for j in range(len(hist) - 1, -1, -1):
            running += hist[j]
            if j <= k:
                at_least[j] = running
        # position i is reached by the request-steps that accepted i - 1 drafts or more, less those
        # whose budget was exactly i - 1 (they proposed nothing at i)
        reached = [at_least[i - 1] - (capped[i - 1] if i - 1 < len(capped) else 0) for i in range(1, k + 1)]
        return reached, at_least[1:]

    def per_position(self, k: int) -> list[float | None]:
        """Acceptance rate of draft position 1..k, each given the previous one was accepted."""
        reached, accepted = self.positions(k)
        return [a / r if r else None for r, a in zip(reached, accepted)]


class AcceptanceStats:
    """Rolling window over the last ``window`` request-steps plus cumulative totals.

    ``k`` (the chain depth, ``speculative_num_steps``) is set from the publisher's hello; until
    then it is inferred from the longest draft seen. ``history`` holds ``(seq, t_ns, rolling
    mean)`` per decode step, bounded, for plots.
    """

    def __init__(self, window: int = 512, history: int = 4096) -> None:
        self.window_size = window
        self.window = Tally()
        self.total = Tally()
        self._steps: deque[tuple[int, list[int], int, int | None]] = deque()  # (t_ns, accepted, tokens, budget)
        self.history: deque[tuple[int, int, float]] = deque(maxlen=history)
        self.k_configured: int | None = None
        self.k_seen = 0
        self.k_budget = 0  # the largest step budget a round carried (adaptive steps may exceed the configured one)

    def add_step(self, seq: int, t_ns: int, accepted: list[int], bonus: list[int], depth: int = 0,
                 budget: int | None = None) -> None:
        """One decode step; ``budget`` is the round's own step budget when it carried one."""
        if not accepted:
            return
        tokens = sum(accepted) + sum(bonus)
        self.window.add(accepted, tokens, 1, budget)
        self.total.add(accepted, tokens, 1, budget)
        steps = self._steps
        steps.append((t_ns, accepted, tokens, budget))
        window = self.window
        while window.n - len(steps[0][1]) >= self.window_size:
            _, old, old_tokens, old_budget = steps.popleft()
            window.add(old, old_tokens, -1, old_budget)
        if depth > self.k_seen:
            self.k_seen = depth
        if budget is not None and budget > self.k_budget:
            self.k_budget = budget
        self.history.append((seq, t_ns, window.tokens / window.n))

    @property
    def k(self) -> int:
        if self.k_configured:
            return max(self.k_configured, self.k_budget)
        return max(self.k_seen, self.k_budget, len(self.total.hist) - 1, 0)

    @property
    def n_steps(self) -> int:
        return self.total.steps

    @property
    def mean_accept_length(self) -> float | None:
        """Rolling mean acceptance length (bonus token included)."""
        return self.window.mean_accept_length

    @property
    def cumulative_mean_accept_length(self) -> float | None:
        return self.total.mean_accept_length

    @property
    def per_position(self) -> list[float | None]:
        return self.window.per_position(self.k)

    @property
    def cumulative_per_position(self) -> list[float | None]:
        return self.total.per_position(self.k)

    @property
    def histogram(self) -> list[int]:
        """Rolling window: request-steps with j drafts accepted, j = 0..k."""
        hist = self.window.hist
        k = max(self.k, len(hist) - 1)
        return [hist[j] if j < len(hist) else 0 for j in range(k + 1)]

    def _span_s(self) -> float | None:
        steps = self._steps
        if len(steps) < 2:
            return None
        span = (steps[-1][0] - steps[0][0]) / 1e9
        return span if span > 0 else None

    @property
    def steps_per_s(self) -> float | None:
        span = self._span_s()
        return (len(self._steps) - 1) / span if span else None

    @property
    def accepted_tokens_per_s(self) -> float | None:
        """Committed tokens (accepted drafts + bonus) per second over the window."""
        span = self._span_s()
        return (self.window.tokens - self._steps[0][2]) / span if span else None

    def summary(self) -> dict:
        return {
            "steps": self.n_steps,
            "request_steps": self.total.n,
            "mean_accept_length": self.cumulative_mean_accept_length,
            "per_position": self.cumulative_per_position,
            "histogram": list(self.total.hist),
            "rolling_mean_accept_length": self.mean_accept_length,
        }
