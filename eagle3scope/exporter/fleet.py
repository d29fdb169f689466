"""What the exporter knows about a fleet: one :class:`SessionState` per publisher.

A state per publisher (not one shared state) keeps the cost of 64 servers at 64 small states, with
no session-wide aggregate computed twice, and lets a publisher that went away (a restarted server
comes back under a new ``src``) be forgotten whole, so a long-running sidecar stays bounded.

The numbers come from the analysis layer exactly as ``check`` computes them; this module only adds
what a time series needs on top: when each publisher was last heard from, and how many times each
rule went from healthy to violated (``fired``), observed after every ingested batch.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Callable, Iterable

from eagle3scope.analysis import SessionState, Violation
from eagle3scope.wire import Frame
from eagle3scope.wire.schema import MAX_PUBLISHERS

#: Per-publisher state sizes: the exporter never draws plots, keeps an event log to show or advises.
STATE_SIZES = dict(window=512, recent=1, events=16, history=1, advisor_rounds=0)


class Fleet:
    """Frames in (from the exporter's loop thread), a consistent snapshot out (from scrapes).

    Every method takes :attr:`lock`; a scrape therefore never sees half of a batch.
    """

    def __init__(self, *, forget_after_s: float | None = 600.0, clock: Callable[[], float] = time.monotonic,
                 max_publishers: int = MAX_PUBLISHERS) -> None:
        self.states: dict[str, SessionState] = {}
        self.max_publishers = max_publishers
        self.refused_frames = 0  # frames from new publishers while max_publishers were tracked
        self.last_heard: dict[str, float] = {}
        self.fired: Counter[tuple[str, str, str]] = Counter()  # (src, rule id, severity) -> times it became active
        self.forgotten = 0
        self.bad_frames = 0  # frames the subscriber could not decode (set by the exporter's loop)
        self.lock = threading.Lock()
        self._active: dict[tuple[str, str, int], bool] = {}  # (src, rule id, run) -> active at the last batch
        self._runs: dict[str, int] = {}  # src -> its current run
        self._forget_after = forget_after_s
        self._clock = clock

    def ingest(self, frames: Iterable[Frame]) -> None:
        """Fold one batch in, then note which rules became active."""
        with self.lock:
            now = self._clock()
            self._expire(now)  # first: a forgotten publisher's place is free for this batch
            touched: set[str] = set()
            for frame in frames:
                state = self.states.get(frame.src)
                if state is None:
                    if len(self.states) >= self.max_publishers:
                        self.refused_frames += 1
                        continue
                    state = self.states[frame.src] = SessionState(**STATE_SIZES)
                state.ingest(frame)
                touched.add(frame.src)
            for src in touched:
                self.last_heard[src] = now
                state = self.states[src]
                run = state.publishers[src].run if src in state.publishers else 1
                self._count_fired(src, run, [v for v in state.violations() if v.run == run])  # the current run's

    def _count_fired(self, src: str, run: int, violations: list[Violation]) -> None:
        """Count rules that became active; a restart's new run starts with none active."""
        if self._runs.get(src, run) != run:  # just restarted: the ended run's states go
            for key in [k for k in self._active if k[0] == src]:
                del self._active[key]
        self._runs[src] = run
        for v in violations:
            key = (src, v.id, run)
            if v.active and not self._active.get(key):
                self.fired[(src, v.id, v.severity)] += 1
            self._active[key] = v.active

    def expire(self) -> None:
        """Forget publishers silent for longer than ``forget_after_s`` (the caller holds :attr:`lock`)."""
        self._expire(self._clock())

    def _expire(self, now: float) -> None:
        if self._forget_after is None:
            return
        for src in [s for s, t in self.last_heard.items() if now - t > self._forget_after]:
            self.forget(src)

    def forget(self, src: str) -> None:
        """Drop a publisher and every series about it (the caller holds :attr:`lock`)."""
        self.states.pop(src, None)
        self.last_heard.pop(src, None)
        for key in [k for k in self.fired if k[0] == src]:
            del self.fired[key]
        for key in [k for k in self._active if k[0] == src]:
            del self._active[key]
        self._runs.pop(src, None)
        self.forgotten += 1
