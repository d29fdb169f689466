"""The shim's ZeroMQ PUB side: a hot path that never blocks and a thread that does the work.

Runs inside SGLang's scheduler process, so it imports only the standard library, ``zmq`` and
``eagle3scope.wire``. :meth:`Publisher.submit` appends to a bounded ring and returns; the
publisher thread later calls the caller's ``finalize`` (waiting on device events, converting
tensors) and packs the body, for every event queued, then numbers and sends the frames back to
back, without waiting and without letting go of the GIL (:mod:`eagle3scope_shim.heldsend`). The
thread drains the ring every ``flush_interval_s`` (:class:`Bell`), or as soon as ``wake_batch``
events wait, instead of being woken per event:
signalling it from the scheduler's thread on every step (out of an idle wait) cost that thread about
3 % of its py-spy samples on a loaded box, the woken thread pre-empting it and taking the GIL
(BENCHMARKS.md). Polling costs an idle server two wake-ups a second; a step reaches viewers within
``flush_interval_s`` (0.5 s), or sooner on a fast server (64 events wait, or the shim's snapshot
ring runs short and rings :meth:`Publisher.wake`: ``ring.HostRing``). Each drain's first frame
costs several times the others after a forward has swept the caches, and each timed wait about
77 µs of CPU on the test VM, so bigger drains cost less per frame: in the engine bench the drains
fell from 28-33 to 22 µs a round, at rounds of the same length, against 0.25 s and 16 (BENCHMARKS.md,
"Shim"). A full ring counts a drop instead of growing or waiting. ``hello``/``load``
bodies are sticky: re-sent periodically so a viewer that starts late or restarts learns them.
Heartbeats carry the counters so drops reach the viewer. The endpoint is judged before it is
bound (:func:`eagle3scope.wire.endpoints.guard`): an ipc socket only in a private directory and never
over another live publisher, TCP only with CURVE (:mod:`eagle3scope.wire.curve`) unless the user
trusts the network.
"""

from __future__ import annotations

import atexit
import collections
import ctypes
import threading
import time
import weakref
from typing import Any, Callable

import zmq

from eagle3scope.wire import frame_of_packed, frame_packer
from eagle3scope.wire.curve import load_keys, secure_server
from eagle3scope.wire.endpoints import guard, resolve_bind_endpoint
from eagle3scope_shim.heldsend import sender

#: OS-visible thread names, so per-thread CPU (``top -H``, /proc/<pid>/task/*/comm, py-spy) shows
#: the shim's share of the scheduler process: the publisher thread, and ZeroMQ's I/O and reaper
#: threads of the shim's own context as ``3/ZMQbg/IO/0`` (SGLang's contexts name theirs ``ZMQbg/...``).
PUBLISHER_THREAD_NAME = "e3s-publisher"
ZMQ_THREAD_PREFIX = 3


def name_os_thread(name: str) -> None:
    """Name the calling thread for the OS (Linux ``prctl(PR_SET_NAME)``, 15 bytes); best effort."""
    try:
        ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)
    except Exception:
        pass


#: the least time between two re-sends of the sticky bodies that viewers joining ask for
JOIN_RESEND_S = 0.1


class Bell:
    """Wakes one waiting thread: :meth:`ring` from any thread, :meth:`wait` on the waiter's, which
    returns early when rung since its last wait. A bare lock the waiter holds and a ring releases: a
    timed wait is one futex wait, 77 µs of CPU on this VM against ``Event.wait``'s 118 (it builds a
    ``Condition`` waiter lock each time), and the publisher waits several times a second, idle or not
    (BENCHMARKS.md, "Shim")."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()

    def ring(self) -> None:
        try:
            self._lock.release()
        except RuntimeError:  # rung already, not yet heard
            pass

    def wait(self, timeout: float) -> bool:
        """Until rung or ``timeout`` seconds; True when rung (the ring is then used up)."""
        return self._lock.acquire(timeout=max(0.0, timeout))


class Publisher:
    """Bounded, non-blocking publisher of eagle3scope frames for one scheduler process.

    Counters (read them any time): ``steps`` (``step`` submits seen, dropped or not),
    ``dropped`` (frames the ring or the socket refused), ``hook_failures`` (``finalize`` or
    encode errors; the shim may add its own), ``queued`` (current ring length).
    """

    def __init__(
        self,
        endpoint: str,
        src: str,
        *,
        queue_size: int = 4096,
        hwm: int = 10000,
        sticky_interval_s: float = 2.0,
        heartbeat_interval_s: float = 1.0,
        flush_interval_s: float = 0.5,
        wake_batch: int = 64,
    ) -> None:
        self._requested = resolve_bind_endpoint(endpoint)
        self.src = src
        self._queue_size = max(1, int(queue_size))
        self._hwm = int(hwm)
        self._sticky_interval = float(sticky_interval_s)
        self._heartbeat_interval = float(heartbeat_interval_s)
        self._flush_interval = float(flush_interval_s)
        self._wake_batch = max(1, int(wake_batch))
        self._ring: collections.deque = collections.deque()
        self._wake = Bell()
        self._stop = False
        self._closed = False
        self._finalizing = False  # the thread is building and sending a batch it took off the ring
        self._thread: threading.Thread | None = None
        self._ctx: zmq.Context | None = None
        self._sock: zmq.Socket | None = None
        self._put: Callable[[bytes], None] | None = None  # send without waiting (heldsend.sender)
        self._packer = frame_packer()  # the publisher thread's own
        self._auth = None  # the CURVE ZAP handler over TCP
        self._bound: str | None = None
        self._sticky: dict[str, dict] = {}
        self._sticky_dirty = False
        self._reported: set[str] = set()
        self._n = 0
        self.steps = 0
        self.hook_failures = 0
        self._ring_dropped = 0
        self._send_dropped = 0
        self.sent = 0
        #: (seam -> [ns], [ns of rounds], seams within the rounds) cells the hooks add their own time to
        #: (``guard.around``); each heartbeat carries what they gained since the last one, as ``shim_us``,
        #: ``step_us`` and ``round_shim_us``
        self.self_time: tuple[dict[str, list[int]], list[int], set[str]] | None = None
        self._self_seen: dict[str, int] = {}
        self._step_seen = 0
        self._busy_ns = self._busy_seen = 0  # this thread's CPU time turning events into frames (heartbeat publisher_us)
        #: more heartbeat fields (called on the publisher thread), e.g. the shim's host-ring figures
        self.heartbeat_extra: Callable[[], dict] | None = None

    # -- counters -----------------------------------------------------------------------------
    @property
    def dropped(self) -> int:
        return self._ring_dropped + self._send_dropped

    @property
    def queued(self) -> int:
        return len(self._ring)

    @property
    def endpoint(self) -> str:
        """The endpoint actually bound (ephemeral tcp ports resolved); the request before start."""
        return self._bound or self._requested

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        """Bind the PUB socket and start the daemon publisher thread (idempotent).

        Raises ``zmq.ZMQError`` when the endpoint cannot be bound (port taken, bad path),
        :class:`~eagle3scope.wire.endpoints.EndpointError` when it is not safe to bind and
        :class:`~eagle3scope.wire.curve.KeyFileError` when TCP needs a key that cannot be had:
        the caller decides whether to report and carry on without publishing.
        """
        if self._thread is not None or self._closed:
            return
        keys = load_keys(create=True) if guard(self._requested, bind=True) == "curve" else None
        self._ctx = zmq.Context()
        try:
            self._ctx.set(zmq.THREAD_NAME_PREFIX, ZMQ_THREAD_PREFIX)
        except (AttributeError, zmq.ZMQError):
            pass  # libzmq < 4.3: unnamed I/O threads
        sock = self._ctx.socket(zmq.XPUB)  # a PUB that hears each viewer subscribe (see _viewer_joined)
        sock.setsockopt(zmq.XPUB_VERBOSE, 1)
        sock.setsockopt(zmq.SNDHWM, self._hwm)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            if keys is not None:
                self._auth = secure_server(self._ctx, sock, keys)
            sock.bind(self._requested)
        except zmq.ZMQError:
            sock.close(0)
            self._stop_auth()
            self._ctx.term()
            self._ctx = None
            raise
        self._sock, self._put = sock, sender(sock)
        self._bound = sock.getsockopt_string(zmq.LAST_ENDPOINT) or self._requested
        self._thread = threading.Thread(target=self._run, name=PUBLISHER_THREAD_NAME, daemon=True)
        self._thread.start()
        ref = weakref.ref(self)
        atexit.register(lambda: (p := ref()) is not None and p.close(0.2))

    def close(self, linger_s: float = 0.5) -> None:
        """Flush what is queued (up to ``linger_s``), send a last heartbeat, release the socket."""
        if self._closed:
            return
        self._closed = True
        self._stop = True
        self._linger_s = max(0.0, float(linger_s))
        thread = self._thread
        if thread is None:
            return
        self._wake.ring()
        thread.join(timeout=self._linger_s + 1.0)

    # -- hot path -----------------------------------------------------------------------------
    def submit(self, kind: str, payload: Any, finalize: Callable[[Any], dict | None] | None = None) -> bool:
        """Queue one event; O(1), never blocks, never raises. ``finalize(payload)`` runs later.
        False when the event was dropped (``finalize`` will then never see ``payload``)."""
        try:
            if kind == "step":
                self.steps += 1
            ring = self._ring
            if self._stop or len(ring) >= self._queue_size:
                self._ring_dropped += 1
                return False
            ring.append((kind, payload, finalize, time.time_ns()))
            if len(ring) == self._wake_batch:
                self._wake.ring()
            return True
        except Exception:
            return False

    def wake(self) -> None:
        """Drain now rather than at the next timer (any thread; never blocks): a producer running
        short of something the drain gives back, e.g. the shim's snapshot ring."""
        self._wake.ring()

    def flush(self, timeout_s: float) -> bool:
        """Another thread: wake the publisher and wait, at most ``timeout_s``, until every event
        queued so far has been finalised; True when it was. Before a graph recapture, so that no
        queued step still needs the publisher's device calls."""
        if self._thread is None or threading.current_thread() is self._thread:
            return not self._ring
        deadline = time.monotonic() + max(0.0, timeout_s)
        self._wake.ring()
        while self._ring or self._finalizing:
            if time.monotonic() >= deadline or not self._thread.is_alive():
                return False
            time.sleep(0.001)
        return True

    def drop(self, kind: str) -> None:
        """Count an event the caller could not even snapshot (e.g. no free host buffer)."""
        if kind == "step":
            self.steps += 1
        self._ring_dropped += 1

    def set_sticky(self, kind: str, body: dict) -> None:
        """Send ``body`` as ``kind`` now and again every ``sticky_interval_s`` (hello, load)."""
        self._sticky[kind] = body
        self._sticky_dirty = True
        self._wake.ring()

    # -- publisher thread ---------------------------------------------------------------------
    def _send(self, kind: str, body: dict, t: int | None = None) -> None:
        packed = self._pack(kind, body)
        if packed is not None:
            self._send_packed(kind, packed, t)

    def _pack(self, kind: str, body: dict) -> bytes | None:
        try:
            return self._packer.pack(body)
        except Exception as exc:
            self._failure(kind, "encode", exc)
            return None

    def _send_packed(self, kind: str, packed: bytes, t: int | None) -> None:
        """Number the frame around a packed body and send it; ``n`` counts only frames sent."""
        try:
            data = frame_of_packed(kind, packed, src=self.src, n=self._n, t=t, packer=self._packer)
        except Exception as exc:
            self._failure(kind, "encode", exc)
            return
        try:
            self._put(data)
        except zmq.Again:
            self._send_dropped += 1
            return
        except zmq.ZMQError as exc:
            self._send_dropped += 1
            self._failure(kind, "send", exc)
            return
        self._n += 1
        self.sent += 1

    def _failure(self, kind: str, stage: str, exc: BaseException) -> None:
        """Count a failure; report each distinct one once as a ``hook`` frame (seam publisher)."""
        self.hook_failures += 1
        key = f"{kind}:{stage}:{type(exc).__name__}"
        if key in self._reported or len(self._reported) >= 64:
            return
        self._reported.add(key)
        detail = f"{stage} of a {kind!r} event failed: {type(exc).__name__}: {exc}"[:1000]
        self._send("hook", dict(seam="publisher", status="failed", detail=detail))

    def _heartbeat(self) -> None:
        body = dict(steps=self.steps, dropped=self.dropped, hook_failures=self.hook_failures,
                                queued=len(self._ring))
        extra = self.heartbeat_extra
        if extra is not None:
            try:
                body.update(extra())
            except Exception as exc:
                self._failure("heartbeat", "extra", exc)
        if self.self_time is not None:
            body["shim_us"], body["step_us"], body["round_shim_us"] = self._self_time_delta()
            busy = self._busy_ns
            body["publisher_us"], self._busy_seen = (busy - self._busy_seen) / 1000, busy
        self._send("heartbeat", body)

    def _self_time_delta(self) -> tuple[dict[str, float], float, float]:
        """µs each seam's hooks (seams with none left out), the rounds, and the round seams' hooks took
        since the last heartbeat."""
        cells, rounds, round_seams = self.self_time
        seen, shim = self._self_seen, {}
        for seam, cell in list(cells.items()):
            ns = cell[0]
            if ns != seen.get(seam, 0):
                shim[seam] = (ns - seen.get(seam, 0)) / 1000
                seen[seam] = ns
        ns = rounds[0]
        step_us, self._step_seen = (ns - self._step_seen) / 1000, ns
        return shim, step_us, sum(us for seam, us in shim.items() if seam in round_seams)

    def _send_sticky(self) -> None:
        self._sticky_dirty = False
        for kind, body in list(self._sticky.items()):
            self._send(kind, body)

    def _packed(self, item: tuple) -> tuple[str, bytes, int] | None:
        """A queued event's body built (``finalize``) and packed: (kind, packed body, t), or None
        when there is nothing to send (a failure is reported)."""
        kind, payload, finalize, t = item
        if finalize is not None:
            try:
                body = finalize(payload)
            except Exception as exc:
                self._failure(kind, "finalize", exc)
                return None
            if body is None:
                return None
        else:
            body = payload
        packed = self._pack(kind, body)
        return None if packed is None else (kind, packed, t)

    def _drain(self, ring: collections.deque) -> None:
        """Up to 256 queued events: every body built and packed first, then the frames numbered and
        sent back to back, so ZeroMQ's I/O thread wakes about once for the lot rather than once a frame
        (in the engine: 5 µs a frame less on that thread, 5 on this one; BENCHMARKS.md)."""
        burst = [self._packed(ring.popleft()) for _ in range(min(len(ring), 256))]
        for got in burst:
            if got is not None:
                self._send_packed(*got)

    def _viewer_joined(self) -> bool:
        """Whether a viewer subscribed since the last look: it then gets hello and load now, not up to
        ``sticky_interval_s`` later (a short recording could end first). Never blocks; a flood of
        subscriptions costs at most one re-send per JOIN_RESEND_S."""
        joined = False
        try:
            for _ in range(64):
                if not self._sock.poll(0):
                    break
                joined = self._sock.recv(zmq.NOBLOCK)[:1] == b"\x01" or joined
        except zmq.ZMQError:
            pass
        return joined

    def _run(self) -> None:
        name_os_thread(PUBLISHER_THREAD_NAME)
        ring = self._ring
        next_sticky = next_beat = last_sticky = next_look = 0.0
        try:
            while True:
                now = time.monotonic()
                # a look per JOIN_RESEND_S, not per pass (two a wake-up, 40-70 µs each in the engine)
                if now >= next_look:
                    next_look = now + JOIN_RESEND_S
                    if self._viewer_joined() and now >= last_sticky + JOIN_RESEND_S:
                        self._sticky_dirty = True
                if self._sticky_dirty or now >= next_sticky:
                    self._send_sticky()
                    last_sticky, next_sticky = now, now + self._sticky_interval
                if now >= next_beat:
                    self._heartbeat()
                    next_beat = now + self._heartbeat_interval
                if self._stop:
                    break
                if ring:
                    t0 = time.thread_time_ns()  # CPU, not wall: the scheduler's thread may hold the GIL meanwhile
                    self._finalizing = True
                    try:
                        self._drain(ring)
                    finally:
                        self._finalizing = False
                    self._busy_ns += time.thread_time_ns() - t0
                    continue
                # poll: a submit wakes this thread only when a batch is full (see the module docstring)
                if not self._sticky_dirty and not self._stop:
                    self._wake.wait(min(self._flush_interval, min(next_sticky, next_beat) - time.monotonic()))
            deadline = time.monotonic() + self._linger_s
            while ring and time.monotonic() < deadline:
                self._drain(ring)
            self._ring_dropped += len(ring)
            ring.clear()
            self._heartbeat()
        finally:
            self._sock.close(int(getattr(self, "_linger_s", 0.0) * 1000))
            self._stop_auth()
            self._ctx.term()

    def _stop_auth(self) -> None:
        if self._auth is not None:
            try:
                self._auth.stop()
            except Exception:
                pass
            self._auth = None
