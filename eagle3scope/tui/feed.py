"""Ingest off the render path: a thread folds frames into a :class:`SessionState` under a lock.

The UI never waits for frames and the ingest thread never waits for the UI: the app takes the
lock only for the short copy it makes on each throttled refresh. ``paused``/``step`` act on the
*display* for a live feed (ingest goes on, nothing is lost) and on the stream itself for a replay.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from eagle3scope.analysis.state import SessionState
from eagle3scope.wire import Frame


class Feed:
    """Common part: the state, its lock, the thread, and the pause flag."""

    live = True
    CHUNK = 256

    def __init__(self, state: SessionState | None = None) -> None:
        self.state = state or SessionState()
        self.lock = threading.Lock()
        if self.live:
            self.paused = False
        self.error: str | None = None
        self.ingest_failures = 0
        self.arrivals: dict[str, float] = {}  # src -> time.monotonic() of its latest frame
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._guarded, name="eagle3scope-ingest", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)

    def _guarded(self) -> None:
        try:
            self.run()
        except Exception as exc:  # shown in the header instead of dying silently
            self.error = f"{type(exc).__name__}: {exc}"

    def run(self) -> None:
        raise NotImplementedError

    def ingest(self, frames: list[Frame]) -> None:
        if not frames:
            return
        now = time.monotonic()
        for start in range(0, len(frames), self.CHUNK):
            with self.lock:  # released between chunks so a refresh never waits long
                ingest = self.state.ingest
                for frame in frames[start : start + self.CHUNK]:
                    try:
                        ingest(frame)
                    except Exception as exc:  # a bug must cost one frame, not the feed
                        self._failed(frame, exc)
                    self.arrivals[frame.src] = now

    def _failed(self, frame: Frame, exc: Exception) -> None:
        self.ingest_failures += 1
        if self.ingest_failures == 1:
            self.state.note(frame.src, "error", f"{frame.kind} frame not ingested: {type(exc).__name__}: {exc}", frame.t)

    def note_errors(self, errors: list[str], level: str = "error", src: str = "file") -> None:
        """Show read errors (damaged batches, bad frames) in the event log."""
        if errors:
            with self.lock:
                for text in errors:
                    self.state.note(src, level, text)

    def read(self, fn: Callable[[SessionState], object]) -> object:
        """Run ``fn`` on the state while ingest is held off (keep ``fn`` to copying)."""
        with self.lock:
            return fn(self.state)


class LiveFeed(Feed):
    """Frames from a :class:`~eagle3scope.live.subscriber.Subscriber` (one or more publishers)."""

    def __init__(self, subscriber, state: SessionState | None = None) -> None:
        super().__init__(state)
        self.subscriber = subscriber

    @property
    def label(self) -> str:
        return "LIVE " + " ".join(self.subscriber.endpoints)

    def run(self) -> None:
        sub = self.subscriber
        while not self._stop.is_set():
            self.ingest(sub.poll(50))
            for src, kind, error in sub.take_reports():
                self.note_errors([f"bad {kind or 'frame'} dropped (further ones only counted): {error}"],
                                 "warning", src or "?")

    def stop(self) -> None:
        super().stop()
        self.subscriber.close()


class ReplayFeed(Feed):
    """Frames from a session file through :class:`~eagle3scope.store.replayer.Replayer`.

    Pause, step, speed and seek act on the replayer. A seek starts a fresh state (the replayer
    re-sends the hello/load/config recorded before the target) and lands on the target step:
    the frames up to and including it are ingested, and the rules evaluated, before the seek
    returns; a step evaluates them too, where the user stops to look. Played without seeks or
    steps, the state keeps ``check``'s rule schedule, so both report the same ``first_seq``.
    """

    live = False

    def __init__(self, path, *, speed: float = 1.0, state_factory: Callable[[], SessionState] = SessionState) -> None:
        from eagle3scope.store.replayer import Replayer

        self.replayer = Replayer(path, speed=speed)
        self._state_factory = state_factory
        self._replayer_lock = threading.Lock()  # one of: pull+ingest, seek, step
        self._settled = False  # the last rule pass after the recording's end has run
        self._errors_shown = 0
        super().__init__(state_factory())
        self.label = f"REPLAY {path}"

    def _show_new_errors(self) -> None:
        """Damaged parts met since the last call go to the event log; the replay goes on."""
        errors = self.replayer.errors
        if len(errors) > self._errors_shown:
            self.note_errors([f"skipped: {e}" for e in errors[self._errors_shown:]])
            self._errors_shown = len(errors)

    @property
    def paused(self) -> bool:
        return self.replayer.paused

    @paused.setter
    def paused(self, value: bool) -> None:
        (self.replayer.pause if value else self.replayer.resume)()

    @property
    def speed(self) -> float:
        return self.replayer.speed

    def set_speed(self, speed: float) -> None:
        self.replayer.speed = speed

    def run(self) -> None:
        replayer = self.replayer
        while not self._stop.is_set():
            with self._replayer_lock:
                frames = replayer.due()
                self.ingest(frames)
                self._show_new_errors()
                self._settle()
            if not frames:
                wait = replayer.wait_s()
                self._stop.wait(0.05 if wait is None else min(wait, 0.05))

    def step(self) -> None:
        """Pause and deliver the frames up to and including the next step."""
        with self._replayer_lock:
            self.replayer.pause()
            self.ingest(self.replayer.step_one())
            self._show_new_errors()
            with self.lock:
                self.state.evaluate_rules()  # the user stops here to look: judge the state here
            self._settle()

    def _settle(self) -> None:
        """At the recording's end, one more rule pass, as ``check`` makes after its last frame."""
        if self.replayer.finished and not self._settled:
            self._settled = True
            with self.lock:
                self.state.evaluate_rules()

    def seek_step(self, seq: int) -> None:
        self._seek(lambda r: r.seek_step(seq))

    def seek_run_step(self, src: str, run: int, began: tuple[int, int], seq: int) -> None:
        """Seek to step ``seq`` of ``src``'s run ``run`` (which began at frame ``began``), not an
        earlier run's step of the same number; the rebuilt state keeps the run's number."""
        self._seek(lambda r: r.seek_run_step(src, began, seq), runs={src: (run, began)})

    def seek_time(self, seconds: float) -> None:
        """Seek to ``seconds`` after the recording's first frame."""
        t0 = self.replayer.reader.t_first or 0
        self._seek(lambda r: r.seek_time(t0 + int(seconds * 1e9)))

    def _seek(self, move: Callable, runs: dict | None = None) -> None:
        with self._replayer_lock:
            move(self.replayer)
            frames = self.replayer.step_one()
            with self.lock:
                self.state = state = self._state_factory()
                for src, (run, began) in (runs or {}).items():
                    state.start_at_run(src, run, began)
                for frame in frames:
                    # the recorded state frames and the target step are not consecutive: a frame
                    # counter jump here is the seek, not a loss
                    state.forget_counters()
                    try:
                        state.ingest(frame)
                    except Exception as exc:
                        self._failed(frame, exc)
                state.evaluate_rules()  # a seek starts a new state: judge it where it lands
            self._errors_shown = 0  # a fresh state: list the damage met so far again
            self._show_new_errors()
            self._settled = False
            self._settle()

    def position(self) -> dict:
        r = self.replayer
        reader = r.reader
        t0, t1 = reader.t_first or 0, reader.t_last or 0
        return {
            "index": r.position,
            "total": reader.count(),
            "seq": r.step_seq,
            "speed": r.speed,
            "elapsed_s": ((r.t_ns or t0) - t0) / 1e9,
            "duration_s": (t1 - t0) / 1e9,
            "finished": r.finished and self._settled,  # and judged, as check judges its last frame
        }

    def stop(self) -> None:
        super().stop()
        self.replayer.close()
