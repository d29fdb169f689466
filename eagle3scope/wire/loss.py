"""Frame-loss accounting for one publisher, in one place for every reader of a stream.

Two counters on the wire say what never reached a viewer: holes in the frame counter ``n`` (lost
in transit, between the shim's socket and this reader) and the heartbeat's ``dropped`` (frames the
shim's own ring or socket refused). :class:`FrameLoss` folds both, with the heartbeat's other
counters (and the shim's own cost, ``shim_us`` per seam against ``step_us``, summed); the live
subscriber, the session state, the exporter and the rules read the same figures from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from eagle3scope.wire.schema import Frame
from eagle3scope.wire.validate import MAX_SEAMS

_NOTHING: tuple[str, ...] = ()


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
    restarts: int = 0
    last_n: int | None = None
    shim_s: dict[str, float] = field(default_factory=dict)  # seconds in the shim's hooks, per seam (MAX_SEAMS)
    step_s: float = 0.0  # seconds inside the rounds over the same heartbeats
    shim_share: float | None = None  # the latest heartbeat's shim time / round time (None: no rounds in it)

    @property
    def lost(self) -> int:
        """Every frame of this publisher that never reached the reader."""
        return self.lost_in_transit + self.shim_dropped

    def observe(self, frame: Frame) -> tuple[str, ...]:
        """Count ``frame``; return what a reader's event log should say about it (usually nothing)."""
        notes = _NOTHING
        last, n = self.last_n, frame.n
        if last is not None and n != last + 1:
            if n > last:
                self.lost_in_transit += n - last - 1
                notes = (f"{n - last - 1} frame(s) lost in transit (frame {last} -> {n})",)
            else:
                self.restarts += 1  # restarted under the same src: counting starts again
                notes = (f"frame counter went back ({last} -> {n}): publisher restarted?",)
        self.last_n = n
        self.frames += 1
        if frame.kind == "heartbeat":
            notes += self._heartbeat(frame.body)
        return notes

    def _heartbeat(self, body: dict) -> tuple[str, ...]:
        dropped, failures = self.shim_dropped, self.hook_failures
        self.shim_dropped = _count(body.get("dropped"), dropped)
        self.hook_failures = _count(body.get("hook_failures"), failures)
        self.shim_steps = _count(body.get("steps"), self.shim_steps)
        self.queued = _count(body.get("queued"), self.queued)
        self._cost(body.get("shim_us"), body.get("step_us"))
        notes = []
        if self.shim_dropped > dropped:
            notes.append(f"{self.shim_dropped - dropped} new frame(s) dropped by the shim (total {self.shim_dropped})")
        if self.hook_failures > failures:
            notes.append(f"{self.hook_failures - failures} new hook failure(s) (total {self.hook_failures})")
        return tuple(notes)

    def _cost(self, shim_us: dict | None, step_us: float | None) -> None:
        if shim_us is None:
            return
        totals = self.shim_s
        for seam, us in shim_us.items():
            if seam in totals or len(totals) < MAX_SEAMS:  # new names past the bound are not kept
                totals[seam] = totals.get(seam, 0.0) + us / 1e6
        if step_us:
            self.step_s += step_us / 1e6
            self.shim_share = sum(shim_us.values()) / step_us
        else:
            self.shim_share = None

    def resync(self) -> None:
        """Take the next frame without a gap check (after a replay seek, the jump is the seek)."""
        self.last_n = None
