"""The viewer's ZeroMQ SUB side: one socket listening to every publisher, and what was lost.

Frames from a server are untrusted bytes: a malformed or invalid frame (see
:mod:`eagle3scope.wire.bodies`), one over ``max_frame_bytes`` (ZeroMQ refuses it before it is
buffered) or a newer schema major is counted per publisher and kind, reported once per publisher
and kind (:meth:`Subscriber.take_reports`), and skipped, never raised, so the frames behind it
still arrive. At most :data:`~eagle3scope.wire.schema.MAX_PUBLISHERS` publishers are heard; frames
from more are refused. It counts no loss: the one reader of the frames does (the session state, or
the recorder's :class:`~eagle3scope.wire.loss.StreamLoss`), so a stream is counted once.

Only publishers it can authenticate as the server asked for are heard
(:func:`eagle3scope.wire.endpoints.guard`): ipc sockets in directories nobody else can write to,
TCP through CURVE with the key file's server key (a publisher without the secret fails the
handshake, is reported once per endpoint and never delivers a frame), plain TCP only on a
network the user trusts.
Discovery: a hello lists the endpoints of every publisher of the same server (one per DP or
attention-DP rank); unless ``discover=False`` the socket connects to those it does not have yet,
reached the way the announcing publisher was (:func:`~eagle3scope.wire.endpoints.reach_sibling`,
which keeps the host or ipc directory the user named), at most MAX_PUBLISHERS endpoints in all.
"""

from __future__ import annotations

import zmq

from eagle3scope.wire import Frame, FrameError, decode_frame
from eagle3scope.wire.bodies import Hello
from eagle3scope.wire.curve import KeyFileError, load_keys, secure_client
from eagle3scope.wire.endpoints import EndpointError, guard, reach_sibling
from eagle3scope.wire.schema import DEFAULT_MAX_FRAME_BYTES, MAX_FRAME_BYTES, MAX_PUBLISHERS

_HANDSHAKE_FAILED = zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH


class Subscriber:
    """One SUB socket connected to several publishers (one per data-parallel scheduler).

    Raises :class:`~eagle3scope.wire.endpoints.EndpointError` for an endpoint it cannot trust (or
    a TCP one without a usable CURVE key file), ``zmq.ZMQError`` for one ZeroMQ refuses."""

    def __init__(self, endpoints: list[str], *, rcvhwm: int = 200_000,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, discover: bool = True) -> None:
        if isinstance(endpoints, str):
            endpoints = [endpoints]
        self.endpoints = list(endpoints)
        self.discover = discover
        #: endpoints connected because a hello named them, and how each was reached
        self.discovered: list[str] = []
        self._anchors: list[tuple[str, str]] = []  # (endpoint connected to, endpoint its hello announced)
        self.max_frame_bytes = max(1024, min(int(max_frame_bytes), MAX_FRAME_BYTES))
        # The process-wide context: a private one dropped inside a reference cycle (an exception
        # in a click runner, a forgotten viewer) would block the garbage collector in term().
        self._sock = zmq.Context.instance().socket(zmq.SUB)
        self._sock.setsockopt(zmq.RCVHWM, rcvhwm)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.SUBSCRIBE, b"")
        self._sock.setsockopt(zmq.MAXMSGSIZE, self.max_frame_bytes)  # larger: the connection is reset
        self._monitor = None
        self.curve_key = None  # the key file's path, when TCP endpoints go through CURVE
        #: endpoint -> failed handshakes (a publisher there is not the server of the key file)
        self.unauthenticated: dict[str, int] = {}
        self._reports: list[tuple[str | None, str | None, str]] = []
        try:
            self._connect_all()
        except KeyFileError as exc:
            self.close()
            raise EndpointError(f"cannot authenticate a TCP publisher: {exc}") from None
        except (zmq.ZMQError, EndpointError):
            self.close()
            raise
        self.sources: set[str] = set()  # the publishers heard (MAX_PUBLISHERS)
        self.bad_frames = 0
        self.last_error: str | None = None
        self.bad_by: dict[tuple[str | None, str | None], int] = {}  # (src, kind) -> bad frames

    def _connect_all(self) -> None:
        """Private endpoints first, then CURVE ones (the key options apply to later connects)."""
        curve = [e for e in self.endpoints if guard(e, bind=False) == "curve"]
        for endpoint in self.endpoints:
            if endpoint not in curve:
                self._sock.connect(endpoint)
        if not curve:
            return
        keys = load_keys()
        self.curve_key = keys.path
        secure_client(self._sock, keys)
        self._monitor = self._sock.get_monitor_socket(_HANDSHAKE_FAILED)
        for endpoint in curve:
            self._sock.connect(endpoint)

    def poll_raw(self, timeout_ms: int = 100, max_frames: int = 256) -> list[tuple[bytes, Frame]]:
        """Wait up to ``timeout_ms`` for frames, then drain up to ``max_frames`` (raw bytes kept).

        Small batches on purpose: thousands of live frames per call make CPython's cyclic GC
        rescan them and halve the ingest rate.
        """
        sock = self._sock
        out: list[tuple[bytes, Frame]] = []
        if self._monitor is not None:
            self._check_handshakes()
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
            frame = decode_frame(data, max_bytes=self.max_frame_bytes)
        except FrameError as exc:
            self._bad(exc.src, exc.kind, str(exc))
            return None
        if frame.src not in self.sources:
            if len(self.sources) >= MAX_PUBLISHERS:
                self._bad(frame.src, frame.kind, f"more than {MAX_PUBLISHERS} publishers: frames from new ones refused")
                return None
            self.sources.add(frame.src)
        if frame.kind == "hello" and self.discover:
            self._discover(frame.record)
        return frame

    def _check_handshakes(self) -> None:
        from zmq.utils.monitor import parse_monitor_message

        while self._monitor.poll(0):
            try:
                event = parse_monitor_message(self._monitor.recv_multipart(zmq.NOBLOCK))
            except (zmq.ZMQError, ValueError):
                return
            endpoint = event.get("endpoint", b"")
            endpoint = endpoint.decode("utf-8", "replace") if isinstance(endpoint, bytes) else str(endpoint)
            if not self.unauthenticated.get(endpoint):
                self._reports.append((endpoint, "handshake", f"cannot authenticate the publisher at {endpoint} as the"
                                      f" server of {self.curve_key}: the CURVE handshake failed (another server's key,"
                                      " or someone else bound the port); nothing from it is accepted"))
            self.unauthenticated[endpoint] = self.unauthenticated.get(endpoint, 0) + 1

    def _discover(self, hello: Hello) -> None:
        """Connect to the siblings a hello lists, reached as the publisher that sent it was."""
        announced, siblings = hello.endpoint, hello.siblings
        if announced is None or not siblings:
            return
        anchor = next(((here, own) for here, own in self._anchors
                       if reach_sibling(here, own, announced) in self.endpoints), None)
        if anchor is None:
            unanchored = [e for e in self.endpoints if e not in {here for here, _ in self._anchors}]
            if announced in unanchored:
                anchor = (announced, announced)
            elif len(unanchored) == 1 and not self.discovered:
                anchor = (unanchored[0], announced)  # the one endpoint given (a port forward, a 0.0.0.0 bind)
            else:
                return  # cannot tell which connection this hello came through
            self._anchors.append(anchor)
        for sibling in siblings:
            endpoint = reach_sibling(anchor[0], anchor[1], sibling)
            if endpoint is None or endpoint in self.endpoints or len(self.endpoints) >= MAX_PUBLISHERS:
                continue
            try:  # trusted as the endpoints given are (private ipc directory, CURVE for TCP)
                if guard(endpoint, bind=False) == "curve" and self.curve_key is None:
                    raise EndpointError("a TCP sibling of a publisher reached without CURVE")
                self._sock.connect(endpoint)
            except (zmq.ZMQError, EndpointError) as exc:
                self._bad(None, "hello", f"not subscribing to sibling {endpoint}: {exc}")
                continue
            self.endpoints.append(endpoint)
            self.discovered.append(endpoint)

    def _bad(self, src: str | None, kind: str | None, error: str) -> None:
        self.bad_frames += 1
        self.last_error = error
        key = (src, kind)
        if key not in self.bad_by:
            if len(self.bad_by) >= MAX_PUBLISHERS * 8:  # keys come from untrusted frames: one overflow slot
                key = (None, None)
            if key not in self.bad_by:
                self._reports.append((src, kind, error))
        self.bad_by[key] = self.bad_by.get(key, 0) + 1

    def take_reports(self) -> list[tuple[str | None, str | None, str]]:
        """``(src, kind, error)`` for each publisher and kind whose first bad frame arrived since the
        last call: the viewer reports each once; later ones are only counted in :attr:`bad_by`."""
        reports, self._reports = self._reports, []
        return reports

    def close(self) -> None:
        if self._monitor is not None:
            self._monitor.close(0)
            self._monitor = None
        if self._sock is not None:
            self._sock.close(0)
            self._sock = None

    def __enter__(self) -> Subscriber:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
