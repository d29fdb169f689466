"""Acceptance statistics shared by the contract rules and the TUI.

Everything is derived from one histogram: ``hist[j]`` counts the request-steps (one request in one
decode step) that accepted ``j`` drafts. From it follow the mean acceptance length (``j`` + bonus,
counted the way SGLang's ``accept len`` log line counts it) and the per-position rates for a chain
of depth ``k``: position ``i`` is reached when ``i - 1`` drafts were accepted, and accepted when
``i`` were, so ``rate_i = #(j >= i) / #(j >= i - 1)``.
"""

from __future__ import annotations

from collections import deque


class Tally:
    """Cumulative acceptance counts over request-steps."""

    __slots__ = ("hist", "n", "tokens", "steps")

    def __init__(self) -> None:
        self.hist: list[int] = []
        self.n = 0  # request-steps
        self.tokens = 0  # committed tokens: accepted drafts + bonus
        self.steps = 0  # decode steps (frames)

    def add(self, accepted: list[int], tokens: int, sign: int = 1) -> None:
        hist = self.hist
        size = len(hist)
        for a in accepted:
            if a >= size:
                hist.extend([0] * (a + 1 - size))
                size = a + 1
            hist[a] += sign
        self.n += sign * len(accepted)
        self.tokens += sign * tokens
        self.steps += sign

    @property
    def mean_accept_length(self) -> float | None:
        return self.tokens / self.n if self.n else None

    def per_position(self, k: int) -> list[float | None]:
        """Acceptance rate of draft position 1..k, each given the previous one was accepted."""
        hist = self.hist
        at_least = [0] * (k + 1)  # at_least[i]: request-steps with >= i drafts accepted
        running = 0
        for j in range(len(hist) - 1, -1, -1):
            running += hist[j]
            if j <= k:
                at_least[j] = running
        return [at_least[i] / at_least[i - 1] if at_least[i - 1] else None for i in range(1, k + 1)]


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
        self._steps: deque[tuple[int, list[int], int]] = deque()  # (t_ns, accepted, tokens)
        self.history: deque[tuple[int, int, float]] = deque(maxlen=history)
        self.k_configured: int | None = None
        self.k_seen = 0

    def add_step(self, seq: int, t_ns: int, accepted: list[int], bonus: list[int], depth: int = 0) -> None:
        if not accepted:
            return
        tokens = sum(accepted) + sum(bonus)
        self.window.add(accepted, tokens)
        self.total.add(accepted, tokens)
        steps = self._steps
        steps.append((t_ns, accepted, tokens))
        window = self.window
        while window.n - len(steps[0][1]) >= self.window_size:
            _, old, old_tokens = steps.popleft()
            window.add(old, old_tokens, -1)
        if depth > self.k_seen:
            self.k_seen = depth
        self.history.append((seq, t_ns, window.tokens / window.n))

    @property
    def k(self) -> int:
        return self.k_configured or max(self.k_seen, len(self.total.hist) - 1, 0)

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
