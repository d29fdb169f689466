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
other clients are served while a ``set`` waits. The scheduler thread applies it in
:meth:`AuxChannel.apply_pending`, called at the start of the next EAGLE worker step, through the
target's own ``set_eagle3_layers_to_capture``; the outcome goes out as a ``config`` event (origin
``control``, ``request_id``) and back to the parked requester (or "queued" after ``wait_s``).
Changes that could not take effect are refused up front with the reason: CUDA graphs captured
with the old set (unless the request asks for a recapture, :mod:`eagle3scope_shim.graphs`), tensor
or pipeline parallelism (other ranks hold their own copy or the last
layers), a release whose method takes no ids, an unknown model family, capture switched off.
"""

from __future__ import annotations

import inspect
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
from eagle3scope_shim import graphs
from eagle3scope_shim.seams import sglang_version
from eagle3scope_shim.state import STATE

log = logging.getLogger("eagle3scope")

_KEEP_OUTCOMES = 64
#: answered failures before authentication per second (burst: twice that); the rest are dropped
FAILURE_RATE = 20.0
#: nonces remembered (those older than the replay window are forgotten first)
MAX_NONCES = 65536
#: requests parked waiting for their ``set`` to apply
MAX_PARKED = 64
_POLL_MS = 20


class Facts:
    """What validation needs, gathered once at startup on the scheduler thread."""

    def __init__(self) -> None:
        self.target = None  # the model whose set_eagle3_layers_to_capture SGLang called
        self.inner = None  # the model that owns ``.model.layers_to_capture`` (after delegation)
        self.family: str | None = None
        self.rule: str | None = None
        self.num_layers = 0
        self.expected: int | None = None
        self.configured: list | None = None
        self.draft_path: str | None = None
        self.first_layer = 0
        self.why_not = ""  # non-empty: every set is refused with this reason
        self.graphs = graphs.GraphPlan(False)  # the target's captured graphs, and whether they can be recaptured


def _ids(value):
    return None if value is None else [int(x) for x in value]


def _defining_class(model) -> type | None:
    for cls in type(model).__mro__:
        if "set_eagle3_layers_to_capture" in cls.__dict__:
            return cls
    return None


def gather(scheduler) -> Facts:
    """Facts about this process's target and draft; ``why_not`` names the first blocker."""
    facts = Facts()
    sa = getattr(scheduler, "server_args", None)
    facts.draft_path = getattr(sa, "speculative_draft_model_path", None)
    if not STATE.workers:
        facts.why_not = "no EAGLE worker in this process (is speculative decoding on?)"
        return facts
    kind, worker, target, draft = STATE.workers[-1]
    facts.target = target
    facts.inner = inner = aux_layers.capture_owner(target)
    cfg = getattr(inner, "config", None)
    cfg = getattr(cfg, "text_config", None) or cfg
    facts.num_layers = int(getattr(cfg, "num_hidden_layers", 0) or 0)
    dcfg = draft.config
    eagle = getattr(dcfg, "eagle_config", None)
    eagle = eagle if isinstance(eagle, dict) else (vars(eagle) if eagle is not None else {})
    facts.configured = _ids(eagle.get("eagle_aux_hidden_state_layer_ids"))
    fc = getattr(getattr(getattr(draft, "model", None), "fc", None), "weight", None)
    hidden = int(getattr(dcfg, "target_hidden_size", None) or getattr(cfg, "hidden_size", 0) or 0)
    if fc is not None and hidden:
        facts.expected = int(fc.shape[1]) // hidden
    facts.first_layer = int(getattr(getattr(inner, "model", None), "start_layer", 0) or 0)
    cls = _defining_class(inner)
    facts.family = cls.__name__ if cls is not None else type(inner).__name__
    facts.rule = aux_layers.family_rule(facts.family, sglang_version())
    facts.why_not = _blocker(facts, sa, worker, cls)
    facts.graphs = graphs.plan(worker, sa, sglang_version())
    return facts


def _blocker(facts: Facts, sa, worker, cls) -> str:
    if cls is None:
        return f"{type(facts.inner).__name__} has no set_eagle3_layers_to_capture in this release"
    if "layer_ids" not in inspect.signature(inspect.unwrap(cls.__dict__["set_eagle3_layers_to_capture"])).parameters:
        return "this release's set_eagle3_layers_to_capture takes no layer ids (always its default)"
    if facts.rule is None:
        return f"unknown model family {facts.family}: eagle3scope does not know how it maps aux ids"
    for call in STATE.aux_calls:  # what SGLang did at startup must match the rule we apply
        if call["requested"] is not None and call["on"]:
            predicted = aux_layers.captured_for(call["requested"], facts.rule, facts.num_layers)
            if predicted != call["captured"]:
                return (f"SGLang captured {call['captured']} for ids {call['requested']}, not {predicted} as the "
                        f"{facts.rule} rule of {facts.family} predicts: unknown id semantics")
    if facts.expected is None:
        return "the draft has no fc layer: it takes no aux states"
    tp, pp = int(getattr(sa, "tp_size", 1) or 1), int(getattr(sa, "pp_size", 1) or 1)
    if pp > 1 or not getattr(getattr(facts.inner, "pp_group", None), "is_last_rank", True):
        return (f"pipeline parallelism (pp_size {pp}): the aux capture lives on the last pipeline rank, which "
                "this channel does not reach")
    if tp > 1:
        return f"tensor parallelism (tp_size {tp}): each rank holds its own capture list and only rank 0 is reachable"
    return ""


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

    def __init__(self, endpoint: str, token: str, facts: Facts) -> None:
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
        self.refused_tokens = 0
        self.dropped = 0  # failures left unanswered by the rate limit
        calls = STATE.aux_calls
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

    def _capture(self) -> tuple[bool, list[int]]:
        inner = self.facts.inner
        return (bool(getattr(inner, "capture_aux_hidden_states", False)),
                _ids(getattr(getattr(inner, "model", None), "layers_to_capture", None) or []))

    def describe(self) -> dict:
        f = self.facts
        on, captured = self._capture()
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
            "graphs": f.graphs.describe(),
            "presets": [p.to_dict() for p in aux_layers.presets(f.num_layers, f.expected, f.rule, f.configured,
                                                                  first_layer=f.first_layer)],
        }

    def _set(self, req: dict, peer: bytes) -> dict | None:
        f = self.facts
        rid = req.get("id") or uuid.uuid4().hex[:12]
        layers = req.get("layers")
        reason = f.why_not or ("" if self._capture()[0] else _CAPTURE_OFF) or f.graphs.refusal(bool(req.get("recapture")))
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
    def apply_pending(self) -> None:
        """Apply a queued ``set``; called by the step hook before SGLang's step runs. Never raises."""
        if self._pending is None:
            return
        with self._cond:
            entry, self._pending = self._pending, None
        if entry is None:
            return
        try:
            outcome = self._apply(entry)
        except Exception as exc:
            outcome = refusal(f"internal error: {type(exc).__name__}: {exc}", id=entry["id"])
        self._finish(entry, outcome, entry["layers"])

    def _apply(self, entry: dict) -> dict:
        f, layers, previous = self.facts, entry["layers"], self.current
        STATE.aux_change_applying = True
        try:
            try:
                f.target.set_eagle3_layers_to_capture(list(layers))
            except Exception as exc:
                f.target.set_eagle3_layers_to_capture(previous)
                return refusal(f"SGLang raised {type(exc).__name__}: {exc}; restored {previous}", id=entry["id"])
            on, captured = self._capture()
            if not on or captured != entry["captured"]:
                f.target.set_eagle3_layers_to_capture(previous)
                return refusal(f"SGLang captured {captured} (on={on}) for {layers}, expected {entry['captured']}; "
                               f"restored {previous}", id=entry["id"])
            pause_ms = None
            if entry["recapture"]:
                try:
                    pause_ms = f.graphs.recapture()
                except Exception as exc:
                    return self._recapture_failed(entry, previous, exc)
        finally:
            STATE.aux_change_applying = False
        self.current = list(layers)
        log.info("eagle3scope: aux layers set to %s (captured %s) by control request %s", layers, captured, entry["id"])
        applied = {"ok": True, "status": "applied", "id": entry["id"], "layers": list(layers), "captured": captured}
        return applied if pause_ms is None else {**applied, "pause_ms": pause_ms}

    def _recapture_failed(self, entry: dict, previous, exc: Exception) -> dict:
        """Put the previous set back and try to recapture its graphs; the refusal says how it ended."""
        self.facts.target.set_eagle3_layers_to_capture(previous)
        try:
            self.facts.graphs.recapture()
            state = "its graphs recaptured"
        except Exception as again:
            state = f"its graphs not recaptured either ({type(again).__name__}: {again}): SGLang serves eagerly"
        return refusal(f"recapturing the target's graphs failed ({type(exc).__name__}: {exc}); restored {previous}, "
                       f"{state}", id=entry["id"])

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
        pub = STATE.publisher
        if pub is not None:
            body = {"layers": layers, "captured": captured, "applied": applied, "reason": reason, "origin": "control",
                    "request_id": rid}
            if pause_ms is not None:  # the target's graphs were recaptured: serving paused this long
                body["pause_ms"] = pause_ms
            pub.submit("config", body)


_CAPTURE_OFF = ("the target does not capture aux states (use_aux_hidden_state is false); switching capture on "
                "live is not supported")


def start(scheduler, dp_rank: int) -> AuxChannel | None:
    """Open the channel when the environment asks for it; every refusal to start is logged.
    Never raises: the publisher's startup must go on whatever happens here."""
    try:
        return _start(scheduler, dp_rank)
    except Exception as exc:
        log.warning("eagle3scope: control channel not started: %s: %s", type(exc).__name__, exc)
        return None


def _start(scheduler, dp_rank: int) -> AuxChannel | None:
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
    channel = AuxChannel(endpoint, token, gather(scheduler))
    try:
        channel.start()
    except zmq.ZMQError as exc:
        log.warning("eagle3scope: control channel not started: cannot bind %s: %s", endpoint, exc)
        return None
    STATE.aux_channel = channel
    blocked = channel.facts.why_not
    log.info("eagle3scope: control channel on %s%s", channel.endpoint, f" (changes refused: {blocked})" if blocked else "")
    return channel
