"""The control channel's wire protocol (ZeroMQ REQ/REP, msgpack maps), shared by shim and client.

Off unless the server's environment has ``EAGLE3SCOPE_CONTROL`` (a loopback endpoint) and
``EAGLE3SCOPE_CONTROL_TOKEN_FILE`` (a 0600 file, see :mod:`eagle3scope.control.token`).

Requests: ``{"token": str, "cmd": str, ...}``; exactly these commands and fields:

``list``
    reply ``{ok, configured, current, captured, capture_on, num_layers, expected, rule, family,
    draft_path, changeable, why_not, pending, presets: [Preset.to_dict()]}``. ``configured`` = the
    draft config's ids, ``current`` = the ids in effect (None = SGLang's default), ``captured`` =
    the target's ``layers_to_capture``, ``expected`` = states the draft's ``fc`` takes.
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

Every refusal is ``{ok: false, error: reason}`` and changes nothing. ``cycle`` is client-side: a
sequence of ``set`` while watching the step stream.
"""

from __future__ import annotations

import msgpack

from eagle3scope.wire.schema import unpack_untrusted

ENV_CONTROL = "EAGLE3SCOPE_CONTROL"
ENV_TOKEN_FILE = "EAGLE3SCOPE_CONTROL_TOKEN_FILE"

COMMANDS = {"list": frozenset({"token", "cmd"}),
            "set": frozenset({"token", "cmd", "layers", "id", "wait_s", "recapture"})}
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


def check_request(req: dict) -> str:
    """The command of a structurally valid request (token not checked); raises ProtocolError."""
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
