"""The viewer's ZeroMQ SUB side: one socket listening to every publisher, and what was lost.

Frames from a server are untrusted bytes: a malformed frame or a newer schema major is
counted (with the last message kept for the viewer) and skipped, never raised, so the frames
behind it still arrive. Per publisher (``src``) it keeps the loss figures a viewer must show:
frames lost in transit (gaps in the frame counter ``n``) and frames the shim itself dropped
(its heartbeat ``dropped`` counter), plus the latest sticky ``hello``/``load`` bodies.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import zmq

from eagle3scope.wire import Frame, FrameError, decode_frame

#: kinds whose latest body describes the publisher's state (re-published, kept per src)
STATE_KINDS = ("hello", "load", "config")


@dataclass(slots=True)
class SourceStats:
    """What one publisher sent and what of it was lost."""

    frames: int = 0
    steps: int = 0
    lost_in_transit: int = 0
    shim_dropped: int = 0
    shim_steps: int = 0
    hook_failures: int = 0
    queued: int = 0
    restarts: int = 0
    last_n: int = -1
    last_t: int = 0
    state: dict[str, dict] = field(default_factory=dict)

    @property
    def lost(self) -> int:
        """Every step-or-other frame that never reached this viewer, whatever the cause."""
        return self.lost_in_transit + self.shim_dropped

    def observe(self, frame: Frame) -> None:
        if frame.n <= self.last_n:
            self.restarts += 1  # the publisher restarted under the same src: start counting again
        elif self.last_n >= 0:
            self.lost_in_transit += frame.n - self.last_n - 1
        self.last_n = frame.n
        self.last_t = frame.t
        self.frames += 1
        kind, body = frame.kind, frame.body
        if kind == "step":
            self.steps += 1
        elif kind == "heartbeat":
            self.shim_dropped = _count(body.get("dropped"), self.shim_dropped)
            self.shim_steps = _count(body.get("steps"), self.shim_steps)
            self.hook_failures = _count(body.get("hook_failures"), self.hook_failures)
            self.queued = _count(body.get("queued"), self.queued)
        elif kind in STATE_KINDS:
            self.state[kind] = body


def _count(value: object, default: int) -> int:
    return value if type(value) is int and value >= 0 else default


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

    def loss(self) -> dict:
        """The loss figures a recording keeps in its metadata: totals and per publisher."""
        return {
            "lost": self.lost, "bad_frames": self.bad_frames,
            "sources": {src: {"lost_in_transit": s.lost_in_transit, "dropped_by_shim": s.shim_dropped,
                              "frames": s.frames} for src, s in self.sources.items()},
        }

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close(0)
            self._sock = None

    def __enter__(self) -> Subscriber:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
