"""The control channel's wire protocol (ZeroMQ REQ to ROUTER, msgpack maps), shared by shim and client.

Off unless the server's environment has ``EAGLE3SCOPE_CONTROL`` (a loopback endpoint) and
``EAGLE3SCOPE_CONTROL_TOKEN_FILE`` (a 0600 file, see :mod:`eagle3scope.wire.token`).

Requests: ``{"cmd": str, ..., "nonce": str, "ts": float, "mac": str}``, one single-frame message
each. ``mac`` is the HMAC-SHA256 under the token of every other field (:func:`sign`), so the
token never travels; ``ts`` (Unix time) must lie within :data:`REPLAY_WINDOW_S` of the server's
clock and ``nonce`` (16..64 characters) is accepted once: a captured request cannot be replayed.
Exactly these commands and fields:

``list``
    reply ``{ok, configured, current, captured, capture_on, num_layers, expected, rule, family,
    draft_path, changeable, why_not, pending, tp_size, ranks, presets: [Preset.to_dict()]}``.
    ``configured`` = the draft config's ids, ``current`` = the ids in effect (None = SGLang's
    default), ``captured`` = the target's ``layers_to_capture`` (TP rank 0's), ``expected`` =
    states the draft's ``fc`` takes, ``ranks`` = every TP rank's report from the latest change
    (None before one).
``set``
    fields ``layers: [int]`` (configured-id convention, like the draft config), optional ``id``
    (request id, echoed in the reply and the ``config`` event) and ``wait_s`` (how long the reply
    waits for the change to be applied, 0..10 s, default 2). The shim validates at once; an
    accepted set is applied by the scheduler thread at the start of its next step. Reply
    ``{ok: true, status: "applied", id, layers, captured}`` once applied, ``{ok: true, status:
    "queued", id, layers, captured}`` when no step ran within ``wait_s`` (the server is idle; the
    change applies at the next step and a ``config`` event with ``request_id`` reports it; a newer
    ``set`` supersedes a queued one, reported as a refused ``config``), or ``{ok: false, error}``.
    Optional ``recapture: true``: where the target replays captured CUDA graphs (``list`` →
    ``graphs: {captured, recapture, why_not, last_pause_ms}``) a set is refused unless it asks to
    recapture them; then the scheduler recaptures the target's graphs right after the change,
    serving pauses meanwhile, and the applied reply and the ``config`` event carry ``pause_ms``
    (None when nothing was recaptured). ``wait_s`` may then be up to ``MAX_RECAPTURE_WAIT_S``.
    Under tensor parallelism (``tp_size`` > 1) every TP rank applies the set in the same scheduler
    iteration and the reply, applied or refused, adds ``ranks: [{rank, captured, on, forward_ct,
    error}]`` (``forward_ct``: SGLang's forward count on that rank when it applied; after a refusal,
    the lists once the previous set is back). One rank's failure refuses the set on all of them.

Every refusal is ``{ok: false, error: reason}`` and changes nothing. ``cycle`` is client-side: a
sequence of ``set`` while watching the step stream.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

import msgpack

from eagle3scope.wire import env
from eagle3scope.wire.schema import unpack_untrusted

ENV_CONTROL, ENV_TOKEN_FILE = env.CONTROL, env.TOKEN_FILE

AUTH_FIELDS = frozenset({"nonce", "ts", "mac"})
COMMANDS = {"list": frozenset({"cmd"}) | AUTH_FIELDS,
            "set": frozenset({"cmd", "layers", "id", "wait_s", "recapture"}) | AUTH_FIELDS}
#: how far a request's ``ts`` may be from the server's clock (seconds, either way)
REPLAY_WINDOW_S = 60.0
MIN_NONCE_CHARS, MAX_NONCE_CHARS = 16, 64
MAX_MESSAGE_BYTES = 64 * 1024
DEFAULT_WAIT_S = 2.0
MAX_WAIT_S = 10.0
MAX_RECAPTURE_WAIT_S = 300.0  # a graph capture takes seconds, minutes under torch.compile
MAX_ID_CHARS = 64

_LIMITS = dict(max_str_len=4096, max_bin_len=0, max_array_len=4096, max_map_len=64, max_ext_len=0)


class ProtocolError(ValueError):
    """A message that is not a well-formed control request or reply."""


def pack(message: dict) -> bytes:
    return msgpack.packb(message, use_bin_type=True)


def unpack(data: bytes) -> dict:
    """Decode one message from untrusted bytes; raises :class:`ProtocolError`."""
    return unpack_untrusted(data, limits=_LIMITS, max_bytes=MAX_MESSAGE_BYTES, what="control message",
                            error=ProtocolError)


def _mac(message: dict, token: str) -> str:
    fields = sorted((k, v) for k, v in message.items() if k != "mac")
    return hmac.new(token.encode("utf-8"), pack({"fields": fields}), hashlib.sha256).hexdigest()


def sign(message: dict, token: str, *, now: float | None = None) -> dict:
    """``message`` with a fresh nonce, the time and the MAC over all of it under ``token``."""
    signed = {**message, "nonce": secrets.token_hex(16), "ts": time.time() if now is None else now}
    signed["mac"] = _mac(signed, token)
    return signed


def authentic(req: dict, token: str) -> bool:
    """Whether ``req`` carries a valid MAC under ``token`` (constant-time; any other type: no)."""
    mac = req.get("mac")
    if type(mac) is not str or len(mac) != 64:
        return False
    try:
        expected = _mac(req, token)
    except (TypeError, ValueError, OverflowError):  # values msgpack cannot pack
        return False
    return hmac.compare_digest(mac.encode("ascii", "replace"), expected.encode("ascii"))


def check_freshness(req: dict, now: float) -> str:
    """The nonce of an authentic request whose ``ts`` is within the window; raises ProtocolError."""
    ts, nonce = req.get("ts"), req.get("nonce")
    if type(ts) not in (int, float) or not abs(now - ts) <= REPLAY_WINDOW_S:
        raise ProtocolError(f"request time is not within {REPLAY_WINDOW_S:.0f} s of the server's clock"
                            " (a replayed request, or clocks apart)")
    if type(nonce) is not str or not MIN_NONCE_CHARS <= len(nonce) <= MAX_NONCE_CHARS:
        raise ProtocolError(f"request nonce must be a string of {MIN_NONCE_CHARS}..{MAX_NONCE_CHARS} characters")
    return nonce


def check_request(req: dict) -> str:
    """The command of a structurally valid request (MAC not checked); raises ProtocolError."""
    cmd = req.get("cmd")
    if cmd not in COMMANDS:
        raise ProtocolError(f"unknown command {cmd!r}; commands are: {', '.join(COMMANDS)}")
    extra = set(req) - COMMANDS[cmd]
    if extra:
        raise ProtocolError(f"unknown field(s) for {cmd!r}: {', '.join(sorted(map(str, extra)))}")
    rid = req.get("id")
    if rid is not None and not (isinstance(rid, str) and 0 < len(rid) <= MAX_ID_CHARS and rid.isprintable()):
        raise ProtocolError(f"request id must be a printable string of 1..{MAX_ID_CHARS} characters")
    recapture = req.get("recapture", False)
    if type(recapture) is not bool:
        raise ProtocolError("recapture must be true or false")
    wait, most = req.get("wait_s", DEFAULT_WAIT_S), MAX_RECAPTURE_WAIT_S if recapture else MAX_WAIT_S
    if type(wait) not in (int, float) or not 0 <= wait <= most:
        raise ProtocolError(f"wait_s must be a number in 0..{most}")
    return cmd


def refusal(reason: str, **extra) -> dict:
    return {"ok": False, "error": reason, **extra}
