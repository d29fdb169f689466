"""The viewer's ZeroMQ SUB side: one socket listening to every publisher, and what was lost.

Frames from a server are untrusted bytes: a malformed frame or a newer schema major is
counted (with the last message kept for the viewer) and skipped, never raised, so the frames
behind it still arrive. Per publisher (``src``) it keeps the loss figures a viewer must show
(:class:`~eagle3scope.wire.loss.FrameLoss`: frames lost in transit and frames the shim itself
dropped), plus the latest sticky ``hello``/``load``/``config`` bodies.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import zmq

from eagle3scope.wire import Frame, FrameError, decode_frame
from eagle3scope.wire.loss import FrameLoss

#: kinds whose latest body describes the publisher (re-published periodically, kept per src)
STICKY_KINDS = ("hello", "load", "config")


@dataclass(slots=True)
class SourceStats(FrameLoss):
    """What one publisher sent, what of it was lost (:class:`FrameLoss`), its latest sticky bodies."""

    steps: int = 0
    state: dict[str, dict] = field(default_factory=dict)

    def observe(self, frame: Frame) -> tuple[str, ...]:
        notes = FrameLoss.observe(self, frame)
        if frame.kind == "step":
            self.steps += 1
        elif frame.kind in STICKY_KINDS:
            self.state[frame.kind] = frame.body
        return notes


class Subscriber:
    """One SUB socket connected to several publishers (one per data-parallel scheduler)."""

    def __init__(self, endpoints: list[str], *, rcvhwm: int = 200_000) -> None:
        if isinstance(endpoints, str):
            endpoints = [endpoints]
        self.endpoints = list(endpoints)
        # The process-wide context: a private one dropped inside a reference cycle (an exception
        # in a click runner, a forgotten viewer) would block the garbage collector in term().
        self._sock = zmq.Context.instance().socket(zmq.SUB)
        self._sock.setsockopt(zmq.RCVHWM, rcvhwm)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.SUBSCRIBE, b"")
        try:
            for endpoint in self.endpoints:
                self._sock.connect(endpoint)
        except zmq.ZMQError:
            self.close()
            raise
        self.sources: dict[str, SourceStats] = {}
        self.bad_frames = 0
        self.last_error: str | None = None

    def poll_raw(self, timeout_ms: int = 100, max_frames: int = 256) -> list[tuple[bytes, Frame]]:
        """Wait up to ``timeout_ms`` for frames, then drain up to ``max_frames`` (raw bytes kept).

        Small batches on purpose: thousands of live frames per call make CPython's cyclic GC
        rescan them and halve the ingest rate.
        """
        sock = self._sock
        out: list[tuple[bytes, Frame]] = []
        if not sock.poll(timeout_ms, zmq.POLLIN):
            return out
        while len(out) < max_frames:
            try:
                data = sock.recv(zmq.NOBLOCK, copy=True)
            except zmq.Again:
                break
            frame = self._accept(data)
            if frame is not None:
                out.append((data, frame))
        return out

    def poll(self, timeout_ms: int = 100, max_frames: int = 256) -> list[Frame]:
        """Like :meth:`poll_raw`, frames only."""
        return [frame for _, frame in self.poll_raw(timeout_ms, max_frames)]

    def _accept(self, data: bytes) -> Frame | None:
        try:
            frame = decode_frame(data)
        except FrameError as exc:
            self.bad_frames += 1
            self.last_error = str(exc)
            return None
        stats = self.sources.get(frame.src)
        if stats is None:
            stats = self.sources[frame.src] = SourceStats()
        stats.observe(frame)
        return frame

    @property
    def lost(self) -> int:
        """Frames lost across all publishers (in transit plus dropped by the shims)."""
        return sum(s.lost for s in self.sources.values())

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close(0)
            self._sock = None

    def __enter__(self) -> Subscriber:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
