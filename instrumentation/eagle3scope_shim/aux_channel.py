"""The control channel inside SGLang: change the target's aux layers live, between steps.

A ZeroMQ ROUTER socket on loopback (``EAGLE3SCOPE_CONTROL``), guarded by the token in the 0600
file named by ``EAGLE3SCOPE_CONTROL_TOKEN_FILE`` (protocol: :mod:`eagle3scope.wire.control_protocol`).
It starts only in the scheduler of TP rank 0, after the publisher, and refuses to start (logged)
when the token file is missing, empty or readable by others, or the endpoint is not loopback.

The channel thread never blocks and never touches the model. Every message gets an answer or is
dropped, and the thread goes on serving: a message that is not one frame from a REQ socket, not
msgpack, over 64 KiB (ZeroMQ drops the connection), not signed with the token, stale or replayed
(``ts``/``nonce``) is refused with the reason; failures before authentication are answered at
most :data:`FAILURE_RATE`/s (the rest dropped unanswered), so a flood of wrong tokens costs little.
It validates a ``set`` (known command, ids within the target after the family's +1 rule, as many
as the draft's ``fc`` takes) and queues it; the requester's reply is parked, not waited for, so
other clients are served while a ``set`` waits. On a single rank the scheduler thread applies it in
:meth:`AuxChannel.apply_pending`, called at the start of the next EAGLE worker step, through the
target's own ``set_eagle3_layers_to_capture``. Under tensor parallelism every TP rank holds its own
target and capture list, so the change rides SGLang's per-iteration request broadcast from TP rank 0
(:mod:`eagle3scope_shim.collective`) and every rank applies it in :func:`control_apply.apply_broadcast`, in the
same iteration, then all gather each other's outcome: any rank's failure puts the previous set back
on every rank; a recapture, where asked, runs on every rank too. The outcome (every rank's capture
list under TP) goes out as a ``config`` event (origin ``control``, ``request_id``) and back to the
parked requester (or "queued" after ``wait_s``).
Changes that could not take effect are refused up front with the reason: CUDA graphs captured
with the old set (unless the request asks for a recapture, :mod:`eagle3scope_shim.graph_capture`),
pipeline parallelism (the last stage holds the aux layers), TP where the broadcast cannot reach
every rank (no broadcast seam in the release, DP attention keeping control messages local, a
channel not on TP rank 0), a release whose method takes no ids, an unknown model family, capture
switched off.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections import OrderedDict

import zmq

from eagle3scope.wire import aux_layers
from eagle3scope.wire.control_protocol import (
    DEFAULT_WAIT_S,
    ENV_CONTROL,
    ENV_TOKEN_FILE,
    MAX_MESSAGE_BYTES,
    REPLAY_WINDOW_S,
    ProtocolError,
    authentic,
    check_freshness,
    check_request,
    pack,
    refusal,
    unpack,
)
from eagle3scope.wire.endpoints import endpoint_for_dp_rank, is_loopback, resolve_bind_endpoint
from eagle3scope.wire.token import TokenError, read_token
from eagle3scope_shim.control_apply import alone, apply_guarded, capture_of
from eagle3scope_shim.control_facts import ControlFacts, gather

log = logging.getLogger("eagle3scope")

_KEEP_OUTCOMES = 64
#: answered failures before authentication per second (burst: twice that); the rest are dropped
FAILURE_RATE = 20.0
#: nonces remembered (those older than the replay window are forgotten first)
MAX_NONCES = 65536
#: requests parked waiting for their ``set`` to apply
MAX_PARKED = 64
_POLL_MS = 20


class _Budget:
    """Token bucket: ``take()`` is True while the rate allows one more."""

    def __init__(self, rate: float) -> None:
        self.rate, self.level, self.at = rate, 2 * rate, time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.level = min(2 * self.rate, self.level + (now - self.at) * self.rate)
        self.at = now
        if self.level >= 1:
            self.level -= 1
            return True
        return False


class AuxChannel:
    """The ROUTER channel thread plus the queue the scheduler thread drains."""

    def __init__(self, shim, endpoint: str, token: str, facts: ControlFacts) -> None:
        self.shim = shim  # whose publisher and verdict hear each change
        self.requested = endpoint
        self.endpoint: str | None = None
        self.facts = facts
        self._token = token
        self._cond = threading.Condition()
        self._pending: dict | None = None
        self._outcomes: OrderedDict[str, dict] = OrderedDict()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._sock = None
        self._ctx = None
        self._nonces: OrderedDict[str, float] = OrderedDict()
        self._parked: list[tuple[bytes, str, float, dict]] = []  # (peer, request id, deadline, queued reply)
        self._failures = _Budget(FAILURE_RATE)
        self.collective = facts.tp_size > 1  # a set rides the broadcast seam, not the step hook
        self._inflight: dict | None = None  # the entry riding the broadcast now (scheduler thread)
        self.ranks: list[dict] | None = None  # every TP rank's report from the latest change
        self.refused_tokens = 0
        self.dropped = 0  # failures left unanswered by the rate limit
        calls = shim.load.aux_calls
        self.current = calls[-1]["requested"] if calls else facts.configured

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        self._ctx = zmq.Context()
        sock = self._ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        sock.setsockopt(zmq.RCVHWM, 256)
        sock.setsockopt(zmq.SNDHWM, 256)
        try:
            sock.bind(self.requested)
        except zmq.ZMQError:
            sock.close(0)
            self._ctx.term()
            raise
        self._sock = sock
        self.endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT) or self.requested
        self._thread = threading.Thread(target=self._run, name="eagle3scope-control", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop = True
        if self._thread is not None:
            self._thread.join(timeout=2.0)

    def _run(self) -> None:
        sock = self._sock
        try:
            while not self._stop:
                try:
                    if sock.poll(_POLL_MS):
                        self._serve_one(sock)
                    self._answer_parked(sock)
                except zmq.ZMQError as exc:  # a broken peer must not end the channel
                    log.debug("eagle3scope: control socket: %s", exc)
        finally:
            sock.close(0)
            self._ctx.term()

    def _serve_one(self, sock) -> None:
        """Read one message (at most 3 frames kept, the rest drained) and answer or drop it."""
        try:
            parts = [sock.recv(zmq.NOBLOCK)]
        except zmq.Again:
            return
        extra = 0
        while sock.getsockopt(zmq.RCVMORE):
            part = sock.recv()
            if len(parts) < 3:
                parts.append(part)
            else:
                extra += 1
        peer = parts[0]
        if len(parts) != 3 or extra or parts[1] != b"":
            reply = self._unauthenticated("a control request is one frame sent from a REQ socket")
        else:
            try:
                reply = self.handle(parts[2], peer)
            except Exception as exc:  # never let a request kill the channel
                reply = refusal(f"internal error: {type(exc).__name__}: {exc}")
        if reply is not None:
            self._send(sock, peer, reply)

    def _send(self, sock, peer: bytes, reply: dict) -> None:
        try:
            sock.send_multipart([peer, b"", pack(reply)], zmq.NOBLOCK)
        except zmq.Again:  # the peer does not read its replies: its loss
            self.dropped += 1

    def _unauthenticated(self, reason: str) -> dict | None:
        """A refusal for a message that failed before authentication, within the rate limit."""
        if self._failures.take():
            return refusal(reason)
        self.dropped += 1
        return None

    # -- requests (channel thread) --------------------------------------------------------------
    def handle(self, data: bytes, peer: bytes = b"") -> dict | None:
        """The reply to one request; None: no reply now (parked until its ``set`` applies, or
        dropped by the rate limit)."""
        try:
            req = unpack(data)
        except ProtocolError as exc:
            return self._unauthenticated(str(exc))
        if not authentic(req, self._token):
            self.refused_tokens += 1
            if self.refused_tokens in (1, 10) or self.refused_tokens % 1000 == 0:  # no log flood
                log.warning("eagle3scope: control request with a wrong token refused (%d so far)", self.refused_tokens)
            if "token" in req:
                return self._unauthenticated("wrong token: this server takes signed requests (nonce, ts, mac);"
                                             " upgrade eagle3scope on the client side")
            return self._unauthenticated("wrong token: read it from the server's EAGLE3SCOPE_CONTROL_TOKEN_FILE")
        try:
            self._fresh(req)
            cmd = check_request(req)
        except ProtocolError as exc:
            return refusal(str(exc))
        if cmd == "list":
            return self.describe()
        return self._set(req, peer)

    def _fresh(self, req: dict) -> None:
        """Accept each nonce once within the replay window (older requests are refused by time)."""
        now = time.time()
        nonce = check_freshness(req, now)
        nonces = self._nonces
        while nonces and (len(nonces) >= MAX_NONCES or next(iter(nonces.values())) < now - 2 * REPLAY_WINDOW_S):
            nonces.popitem(last=False)
        if nonce in nonces:
            raise ProtocolError("replayed request: this nonce was used before")
        nonces[nonce] = now

    def describe(self) -> dict:
        f = self.facts
        on, captured = capture_of(f)
        pending = self._pending
        why_not = f.why_not or ("" if on else _CAPTURE_OFF) or f.graphs.refusal(recapture=True)
        return {
            "ok": True,
            "configured": f.configured,
            "current": self.current,
            "captured": captured,
            "capture_on": on,
            "num_layers": f.num_layers,
            "expected": f.expected,
            "rule": f.rule,
            "family": f.family,
            "draft_path": f.draft_path,
            "changeable": not why_not,  # with graphs captured: only by a set that asks to recapture them
            "why_not": why_not,
            "pending": None if pending is None else pending["id"],
            "tp_size": f.tp_size,
            "ranks": self.ranks,
            "graphs": f.graphs.describe(),
            "presets": [p.to_dict() for p in aux_layers.presets(f.num_layers, f.expected, f.rule, f.configured,
                                                                  first_layer=f.first_layer)],
        }

    def _set(self, req: dict, peer: bytes) -> dict | None:
        f = self.facts
        rid = req.get("id") or uuid.uuid4().hex[:12]
        layers = req.get("layers")
        reason = f.why_not or ("" if capture_of(f)[0] else _CAPTURE_OFF) or f.graphs.refusal(bool(req.get("recapture")))
        captured = None
        if not reason:
            try:
                captured = aux_layers.check_layers(layers, num_layers=f.num_layers, expected=f.expected, rule=f.rule,
                                                   first_layer=f.first_layer)
            except aux_layers.LayerError as exc:
                reason = str(exc)
        if reason:
            self._publish(layers if isinstance(layers, list) else None, None, False, reason, rid)
            return refusal(reason, id=rid)
        entry = {"id": rid, "layers": list(layers), "captured": captured,
                 "recapture": bool(req.get("recapture")) and f.graphs.captured}
        with self._cond:
            self._outcomes.pop(rid, None)  # a reused request id must wait for its own outcome
            superseded, self._pending = self._pending, entry
        if superseded is not None:
            self._finish(superseded, refusal(f"superseded by request {rid} before any step ran", id=superseded["id"]),
                         superseded["layers"])
        queued = {"ok": True, "status": "queued", "id": rid, "layers": entry["layers"], "captured": captured}
        wait = float(req.get("wait_s", DEFAULT_WAIT_S))
        if wait <= 0 or len(self._parked) >= MAX_PARKED:
            return queued
        self._parked.append((peer, rid, time.monotonic() + wait, queued))
        return None

    def _answer_parked(self, sock) -> None:
        """Reply to parked ``set`` requests whose outcome arrived or whose ``wait_s`` ran out."""
        if not self._parked:
            return
        now, still = time.monotonic(), []
        for peer, rid, deadline, queued in self._parked:
            with self._cond:
                outcome = self._outcomes.get(rid)
            if outcome is not None:
                self._send(sock, peer, outcome)
            elif now >= deadline:
                self._send(sock, peer, queued)
            else:
                still.append((peer, rid, deadline, queued))
        self._parked = still

    # -- applying (scheduler thread) ------------------------------------------------------------
    def _take(self) -> dict | None:
        if self._pending is None:
            return None
        with self._cond:
            entry, self._pending = self._pending, None
        return entry

    def apply_pending(self) -> None:
        """Apply a queued ``set`` on a single-rank server; called by the step hook before SGLang's
        step runs (under TP the broadcast seam carries it instead). Never raises."""
        if self._pending is None or self.collective:
            return
        entry = self._take()
        if entry is not None:
            self._conclude(entry, apply_guarded(self.shim, self.change(entry), self.facts, alone, 0))

    def take_for_broadcast(self) -> dict | None:
        """TP rank 0, as it broadcasts what it pulled: the queued ``set`` as the change every rank applies."""
        if self._pending is None or not self.collective:
            return None
        entry = self._take()
        if entry is not None:
            self._inflight = entry
            return self.change(entry)
        return None

    def change(self, entry: dict) -> dict:
        """What every rank needs to apply ``entry`` (and to put the set in effect now back)."""
        return {"id": entry["id"], "layers": entry["layers"], "captured": entry["captured"], "previous": self.current,
                "recapture": entry["recapture"]}

    def concluded(self, change: dict, outcome: dict) -> None:
        """The broadcast seam's outcome for a change this channel sent."""
        entry, self._inflight = self._inflight, None
        if entry is not None and entry["id"] == change["id"]:
            self._conclude(entry, outcome)

    def _conclude(self, entry: dict, outcome: dict) -> None:
        if outcome.get("ok"):
            self.current = list(entry["layers"])
            log.info("eagle3scope: aux layers set to %s (captured %s) by control request %s", entry["layers"],
                     outcome.get("captured"), entry["id"])
        if "ranks" in outcome:
            self.ranks = outcome["ranks"]
        self._finish(entry, outcome, entry["layers"])

    def _finish(self, entry: dict, outcome: dict, layers) -> None:
        applied = bool(outcome.get("ok"))
        self._publish(layers, outcome.get("captured"), applied, outcome.get("error", ""), entry["id"],
                      outcome.get("pause_ms"))
        with self._cond:
            self._outcomes[entry["id"]] = outcome
            while len(self._outcomes) > _KEEP_OUTCOMES:
                self._outcomes.popitem(last=False)
            self._cond.notify_all()

    def _publish(self, layers, captured, applied: bool, reason: str, rid: str, pause_ms=None) -> None:
        pub = self.shim.publisher
        if pub is not None:
            body = dict(layers=layers, captured=captured, applied=applied, reason=reason, origin="control",
                                 request_id=rid)
            if pause_ms is not None:  # the target's graphs were recaptured: serving paused this long
                body["pause_ms"] = pause_ms
            pub.submit("config", body)
            if applied:
                self.shim.verdict.applied_change(body)


_CAPTURE_OFF = ("the target does not capture aux states (use_aux_hidden_state is false); switching capture on "
                "live is not supported")


def start(shim, scheduler, dp_rank: int, tp_rank: int = 0) -> AuxChannel | None:
    """Open the channel when the environment asks for it; every refusal to start is logged.
    Never raises: the publisher's startup must go on whatever happens here."""
    try:
        return _start(shim, scheduler, dp_rank, tp_rank)
    except Exception as exc:
        log.warning("eagle3scope: control channel not started: %s: %s", type(exc).__name__, exc)
        return None


def _start(shim, scheduler, dp_rank: int, tp_rank: int) -> AuxChannel | None:
    endpoint = os.environ.get(ENV_CONTROL, "").strip()
    if not endpoint:
        return None
    token_file = os.environ.get(ENV_TOKEN_FILE, "").strip()
    if not token_file:
        log.warning("eagle3scope: control channel not started: %s is set but %s is not", ENV_CONTROL, ENV_TOKEN_FILE)
        return None
    try:
        token = read_token(token_file)
        endpoint = resolve_bind_endpoint(endpoint_for_dp_rank(endpoint, dp_rank))
    except (TokenError, ValueError) as exc:
        log.warning("eagle3scope: control channel not started: %s", exc)
        return None
    if not is_loopback(endpoint):
        log.warning("eagle3scope: control channel not started: %s is not a loopback endpoint (use an SSH tunnel)", endpoint)
        return None
    channel = AuxChannel(shim, endpoint, token, gather(shim, scheduler, tp_rank))
    try:
        channel.start()
    except zmq.ZMQError as exc:
        log.warning("eagle3scope: control channel not started: cannot bind %s: %s", endpoint, exc)
        return None
    shim.aux_channel = channel
    blocked = channel.facts.why_not
    log.info("eagle3scope: control channel on %s%s", channel.endpoint, f" (changes refused: {blocked})" if blocked else "")
    return channel
