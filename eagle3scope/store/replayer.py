"""Replay a session file into the same pipeline the live view uses.

:class:`Replayer` hands out :class:`~eagle3scope.wire.Frame` lists like
:meth:`Subscriber.poll <eagle3scope.live.subscriber.Subscriber.poll>` does, paced by the recorded
time divided by ``speed``. Idle stretches longer than ``max_gap_s`` of recorded time are
shortened to ``max_gap_s`` so a night of silence does not freeze the replay. Pacing follows a
monotonic view of the stream's time: each frame is due its gap to the frame before it, clamped to
``[0, max_gap_s]`` (a clock stepped back costs nothing, and the frames after it keep their pace),
and a lone frame stamped far from both neighbours (0, INT64_MAX) is due at once without moving
the view, so the frames after it are paced as if it were not there.

Two ways to drive it:

* pull, for a UI timer or thread: ``frames = r.due()`` (non-blocking; empty while paused),
  ``r.wait_s()`` says how long until the next frame is due;
* push, for headless use: ``for frame in r: ...`` (sleeps as needed, honours pause).

Seeking (``seek_step``, ``seek_time``, ``seek_index``) repositions the stream and queues, ahead of
the frames at the new point, the state frames recorded before it (latest hello, load, config,
heartbeat per publisher and hook per seam): a consumer clears its state on seek and rebuilds it
from what follows. ``step_one()`` returns the frames up to and including the next step, paused
or not. All methods are safe to call from another thread than the one pulling frames.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from pathlib import Path
from typing import Callable, Iterator

from eagle3scope.store.format import CorruptBatchError
from eagle3scope.store.reader import SessionReader
from eagle3scope.wire import Frame

MIN_SPEED, MAX_SPEED = 0.25, 64.0


class Replayer:
    def __init__(self, path: str | Path, *, speed: float = 1.0, max_gap_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.reader = SessionReader(path)
        self._clock = clock
        self._lock = threading.RLock()
        self._max_gap_ns = int(max_gap_s * 1e9)
        self._speed = _clamp(speed)
        self.paused = False
        self._queue: deque[Frame] = deque()  # state frames from a seek, delivered first
        self._batch_pos = 0
        self._frames: list[Frame] = []
        self._i = 0  # next frame in self._frames
        self._last_t: int | None = None
        self._pace_t: int | None = None  # recorded time of the last frame delivered, for pacing
        self._sched: float | None = None  # wall time the last frame was due; None: re-anchor at now
        self.step_seq: int | None = None
        self._load(0)

    # -- properties -----------------------------------------------------------------------------
    @property
    def speed(self) -> float:
        return self._speed

    @speed.setter
    def speed(self, value: float) -> None:
        with self._lock:
            self._speed = _clamp(value)
            self._sched = None

    @property
    def position(self) -> int:
        """Record index of the next frame to deliver."""
        with self._lock:
            if self._batch_pos >= len(self.reader.batches):
                return self.reader.count()
            return self.reader.batches[self._batch_pos].first_idx + self._i

    @property
    def t_ns(self) -> int | None:
        """Recorded time of the last frame delivered."""
        return self._last_t

    @property
    def finished(self) -> bool:
        with self._lock:
            return not self._queue and self._peek() is None

    @property
    def errors(self) -> list:
        """Damaged parts met so far (:class:`~eagle3scope.store.StoreError`); they are skipped."""
        return self.reader.errors

    # -- control --------------------------------------------------------------------------------
    def pause(self) -> None:
        with self._lock:
            self.paused = True

    def resume(self) -> None:
        with self._lock:
            self.paused = False
            self._sched = None

    def toggle(self) -> bool:
        """Pause or resume; returns the new ``paused``."""
        (self.resume if self.paused else self.pause)()
        return self.paused

    def seek_index(self, idx: int) -> int:
        """Go to record ``idx`` (clamped); queue the state recorded before it. Returns the index."""
        with self._lock:
            idx = max(0, min(idx, self.reader.count()))
            self._load(idx)
            self._queue.clear()
            self._queue.extend(self.reader.state_at(self.position))
            self._sched = None
            self._last_t = self._pace_t = None
            return self.position

    def seek_step(self, seq: int) -> int:
        """Go to the first step with ``seq`` >= ``seq`` (the end if none)."""
        idx = self.reader.seek_seq(seq)
        return self.seek_index(self.reader.count() if idx is None else idx)

    def seek_run_step(self, src: str, began: tuple[int, int], seq: int) -> int:
        """Go to the first step with ``seq`` >= ``seq`` of ``src``'s run that began at frame ``began``."""
        idx = self.reader.seek_run_step(src, began, seq)
        return self.seek_index(self.reader.count() if idx is None else idx)

    def seek_time(self, t_ns: int) -> int:
        """Go to the first frame recorded at or after ``t_ns`` (absolute ns; the end if none)."""
        idx = self.reader.seek_time(t_ns)
        return self.seek_index(self.reader.count() if idx is None else idx)

    def step_one(self) -> list[Frame]:
        """Frames up to and including the next step frame, regardless of pause and time."""
        with self._lock:
            out = list(self._queue)
            self._queue.clear()
            while (frame := self._take()) is not None:
                out.append(frame)
                if frame.kind == "step":
                    break
            self._sched = None
            return out

    # -- delivery -------------------------------------------------------------------------------
    def due(self, now: float | None = None, max_frames: int = 10_000) -> list[Frame]:
        """The frames whose (scaled) recorded time has come; never blocks; empty while paused."""
        with self._lock:
            out = list(self._queue)
            self._queue.clear()
            if self.paused:
                return out
            now = self._clock() if now is None else now
            while len(out) < max_frames:
                frame = self._peek()
                if frame is None:
                    break
                due_at = self._due_at(frame, now)
                if due_at > now:
                    break
                out.append(self._take())
                self._sched = due_at
            return out

    def wait_s(self, now: float | None = None) -> float | None:
        """Seconds until the next frame is due; None when paused or finished."""
        with self._lock:
            if self._queue:
                return 0.0
            frame = self._peek()
            if self.paused or frame is None:
                return None
            now = self._clock() if now is None else now
            return max(0.0, self._due_at(frame, now) - now)

    def __iter__(self) -> Iterator[Frame]:
        """Blocking, paced iteration until the end (headless replay)."""
        while True:
            frames = self.due()
            yield from frames
            if frames:
                continue
            wait = self.wait_s()
            if wait is None:
                if self.finished:
                    return
                time.sleep(0.05)  # paused
            else:
                time.sleep(min(wait, 0.25))

    def close(self) -> None:
        self.reader.close()

    # -- internals ------------------------------------------------------------------------------
    def _due_at(self, frame: Frame, now: float) -> float:
        """Wall time ``frame`` is due: the last frame's due time plus the recorded gap / speed.

        Gaps to the previous frame (not to the latest time seen: one frame stamped in the far
        future would leave every later one due at once) are clamped to ``[0, max_gap_s]``;
        chaining due times (not delivery times) keeps the pace free of drift.
        """
        if self._sched is None or self._pace_t is None:
            return now if self._sched is None else self._sched
        gap = frame.t - self._pace_t
        if not 0 <= gap <= self._max_gap_ns:
            gap = 0 if self._lone(frame) else min(max(gap, 0), self._max_gap_ns)
        return self._sched + gap / 1e9 / self._speed

    def _lone(self, frame: Frame) -> bool:
        """``frame`` (the next one, out of step with the view) is an outlier: the frame after it
        goes on from the view as if it were not there (known within a batch only)."""
        after = self._i + 1
        if self._pace_t is None or after >= len(self._frames) or self._frames[self._i] is not frame:
            return False
        return 0 <= self._frames[after].t - self._pace_t <= self._max_gap_ns

    def _load(self, idx: int) -> None:
        batches = self.reader.batches
        pos = 0
        while pos + 1 < len(batches) and batches[pos + 1].first_idx <= idx:
            pos += 1
        self._batch_pos, self._frames, self._i = pos, [], 0
        if pos < len(batches):
            self._fill()
            if self._batch_pos == pos:  # else the batch was damaged and _fill moved past it
                self._i = max(0, min(idx - batches[pos].first_idx, len(self._frames)))

    def _fill(self) -> None:
        """Decode the current batch, skipping damaged ones (recorded in :attr:`errors`)."""
        batches = self.reader.batches
        while self._batch_pos < len(batches):
            try:
                self._frames = self.reader.load_batch(batches[self._batch_pos])
                return
            except CorruptBatchError as exc:
                self.reader.note_error(exc)
                self._batch_pos += 1
        self._frames = []

    def _peek(self) -> Frame | None:
        while self._i >= len(self._frames):
            if self._batch_pos + 1 >= len(self.reader.batches):
                return None
            self._batch_pos += 1
            self._i = 0
            self._fill()
        return self._frames[self._i]

    def _take(self) -> Frame | None:
        frame = self._peek()
        if frame is not None:
            pace = self._pace_t
            if pace is None or 0 <= frame.t - pace <= self._max_gap_ns or not self._lone(frame):
                self._pace_t = frame.t  # a lone outlier leaves the view where it was
            self._i += 1
            if self._last_t is None or frame.t > self._last_t:
                self._last_t = frame.t
            if frame.kind == "step":
                self.step_seq = frame.record.seq
        return frame


def _clamp(speed: float) -> float:
    return min(MAX_SPEED, max(MIN_SPEED, float(speed)))
