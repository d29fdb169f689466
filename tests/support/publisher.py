"""A synthetic publisher: a real ZeroMQ socket on loopback TCP standing in for a server's shim.

An XPUB socket, so the subscriber's subscription arrives as a message: :meth:`wait_subscribed`
returns once a viewer is listening, and what is sent after it is not lost to PUB/SUB's slow join.
Frame counters ``n`` run per ``src`` unless a test sets them (to make gaps or restarts).
"""

from __future__ import annotations

import zmq

from eagle3scope.wire import Frame, encode_frame


class SyntheticPublisher:
    def __init__(self, *, linger_ms: int = 0) -> None:
        self.sock = zmq.Context.instance().socket(zmq.XPUB)
        self.sock.setsockopt(zmq.SNDHWM, 0)
        self.sock.setsockopt(zmq.LINGER, linger_ms)
        self.port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{self.port}"
        self.next_n: dict[str, int] = {}

    def wait_subscribed(self, timeout_s: float = 30.0) -> None:
        """Until a subscriber has subscribed (raises AssertionError after ``timeout_s``)."""
        assert self.sock.poll(int(timeout_s * 1000)), f"nobody subscribed to {self.endpoint}"
        assert self.sock.recv()[:1] == b"\x01"

    def send(self, kind: str, body: dict, *, src: str = "dp0", n: int | None = None, t: int | None = None) -> int:
        """Encode and send one frame; returns its ``n`` (the next one of ``src`` unless given)."""
        n = self.next_n.get(src, 0) if n is None else n
        self.next_n[src] = n + 1
        self.sock.send(encode_frame(kind, body, src=src, n=n, t=t))
        return n

    def send_frames(self, frames: list[Frame]) -> None:
        """Frames as they were (their own src, n and t)."""
        for f in frames:
            self.sock.send(encode_frame(f.kind, f.body, src=f.src, n=f.n, t=f.t))

    def send_raw(self, data: bytes) -> None:
        self.sock.send(data)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> SyntheticPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
