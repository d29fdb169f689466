"""Frame-loss accounting for one publisher, in one place for every reader of a stream.

Two counters on the wire say what never reached a viewer: holes in the frame counter ``n`` (lost
in transit, between the shim's socket and this reader) and the heartbeat's ``dropped`` (frames the
shim's own ring or socket refused). :class:`FrameLoss` folds both, with the heartbeat's other
counters (and the shim's own cost, ``shim_us`` per seam against ``step_us``, summed). One reader
counts each stream: the session state per publisher (what the TUI, the exporter, the rules and
``check`` show), or, for the recorder, which has no state, :class:`StreamLoss`.

Order on the wire is one publisher's: ``n`` rises by one per frame. What else can arrive, and what
each reader makes of it (:meth:`FrameLoss.observe` says which, in ``verdict``):

* a hole (``n`` jumps ahead): that many frames lost in transit;
* an impossible hole (more than :data:`MAX_GAP` frames): a counter reset, not loss (one such jump
  must not report 4.6e18 frames lost);
* ``n`` again, or an earlier ``n`` whose ``t`` is not later than the last frame's: a duplicate
  (:data:`DUPLICATE`), which readers that count must drop; the first is reported, the rest counted;
* an earlier ``n`` with a later ``t``: the publisher restarted under the same ``src``
  (:data:`RESTART`): counting starts again, and the session state starts a new run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from eagle3scope.wire.schema import MAX_PUBLISHERS, Frame
from eagle3scope.wire.bodies import MAX_SEAMS, Heartbeat

_NOTHING: tuple[str, ...] = ()
#: a forward jump of ``n`` beyond this is a counter reset, not loss: at 100,000 frames/s (far above
#: what a shim sends) it would be twelve hours without a single frame arriving
MAX_GAP = 1 << 32
FRESH, DUPLICATE, RESTART = "fresh", "duplicate", "restart"


def _count(value: object, default: int) -> int:
    return value if type(value) is int and value >= 0 else default


@dataclass(slots=True)
class FrameLoss:
    """What one publisher (``src``) sent and what of it was lost, whatever the cause."""

    frames: int = 0
    lost_in_transit: int = 0
    shim_dropped: int = 0
    shim_steps: int = 0
    hook_failures: int = 0
    queued: int = 0
    restarts: int = 0  # the counter went back with time going on: the publisher restarted
    resets: int = 0  # impossible forward jumps of the counter (> MAX_GAP), not counted as loss
    duplicates: int = 0  # frames whose n was seen already (dropped by the session state)
    last_n: int | None = None
    last_t: int | None = None
    verdict: str = FRESH  # what the last observed frame was: FRESH, DUPLICATE or RESTART
    shim_s: dict[str, float] = field(default_factory=dict)  # seconds in the shim's hooks, per seam (MAX_SEAMS)
    step_s: float = 0.0  # seconds inside the rounds over the same heartbeats
    shim_share: float | None = None  # the latest heartbeat's shim time within the rounds / round time (None: no rounds in it)

    @property
    def lost(self) -> int:
        """Every frame of this publisher that never reached the reader."""
        return self.lost_in_transit + self.shim_dropped

    def observe(self, frame: Frame) -> tuple[str, ...]:
        """Count ``frame`` (its kind in :attr:`verdict`); return what a reader's event log should
        say about it (usually nothing)."""
        notes = _NOTHING
        last, n = self.last_n, frame.n
        self.verdict = FRESH
        if last is not None and n != last + 1:
            if n > last + MAX_GAP:
                self.resets += 1
                notes = (f"frame counter jumped {last} -> {n}: counted as a reset, not as loss",)
            elif n > last:
                self.lost_in_transit += n - last - 1
                notes = (f"{n - last - 1} frame(s) lost in transit (frame {last} -> {n})",)
            elif n == last or self.last_t is None or frame.t <= self.last_t:
                self.duplicates += 1
                self.verdict = DUPLICATE
                if self.duplicates == 1:
                    return (f"frame {n} arrived again (after {last}): duplicates are dropped and counted, "
                            "reported once",)
                return _NOTHING
            else:
                self.restarts += 1  # restarted under the same src: counting starts again
                self.verdict = RESTART
                notes = (f"frame counter went back ({last} -> {n}) with time going on: publisher restarted",)
        self.last_n, self.last_t = n, frame.t
        self.frames += 1
        if frame.kind == "heartbeat":
            notes += self._heartbeat(frame.record)
        return notes

    def _heartbeat(self, beat: Heartbeat) -> tuple[str, ...]:
        dropped, failures = self.shim_dropped, self.hook_failures
        self.shim_dropped = _count(beat.dropped, dropped)
        self.hook_failures = _count(beat.hook_failures, failures)
        self.shim_steps = _count(beat.steps, self.shim_steps)
        self.queued = _count(beat.queued, self.queued)
        self._cost(beat.shim_us, beat.step_us, beat.round_shim_us)
        notes = []
        if self.shim_dropped > dropped:
            notes.append(f"{self.shim_dropped - dropped} new frame(s) dropped by the shim (total {self.shim_dropped})")
        if self.hook_failures > failures:
            notes.append(f"{self.hook_failures - failures} new hook failure(s) (total {self.hook_failures})")
        return tuple(notes)

    def _cost(self, shim_us: dict | None, step_us: float | None, round_shim_us: float | None) -> None:
        if shim_us is None:
            return
        totals = self.shim_s
        for seam, us in shim_us.items():
            if seam in totals or len(totals) < MAX_SEAMS:  # new names past the bound are not kept
                totals[seam] = totals.get(seam, 0.0) + us / 1e6
        if step_us:
            self.step_s += step_us / 1e6
            # the rounds' own hooks over the rounds; a shim without round_shim_us: all of them
            self.shim_share = (sum(shim_us.values()) if round_shim_us is None else round_shim_us) / step_us
        else:
            self.shim_share = None

    def resync(self) -> None:
        """Take the next frame without a gap check (after a replay seek, the jump is the seek)."""
        self.last_n = None


class StreamLoss:
    """:class:`FrameLoss` per publisher of one stream, for a reader without a session state (the
    recorder): the one counter on that stream, as the session state's is on the streams it reads.
    At most :data:`~eagle3scope.wire.schema.MAX_PUBLISHERS` publishers (the subscriber refuses more)."""

    def __init__(self) -> None:
        self.sources: dict[str, FrameLoss] = {}

    def observe(self, frame: Frame) -> tuple[str, ...]:
        loss = self.sources.get(frame.src)
        if loss is None:
            if len(self.sources) >= MAX_PUBLISHERS:
                return _NOTHING
            loss = self.sources[frame.src] = FrameLoss()
        return loss.observe(frame)

    @property
    def lost(self) -> int:
        """Frames lost across all publishers (in transit plus dropped by the shims)."""
        return sum(s.lost for s in self.sources.values())

    def summary(self, bad_frames: int) -> dict:
        """The loss figures a recording keeps in its metadata: totals and per publisher."""
        return {
            "lost": self.lost, "bad_frames": bad_frames,
            "sources": {src: {"lost_in_transit": s.lost_in_transit, "dropped_by_shim": s.shim_dropped,
                              "frames": s.frames} for src, s in self.sources.items()},
        }
