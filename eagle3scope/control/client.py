"""The viewer's side of the control channel: one REQ socket per request, bounded by a timeout.

A REQ socket that lost its reply is stuck in its send/receive lock-step, so each request gets a
fresh socket that is closed (linger 0) whatever happens: a dead or silent server costs at most
``timeout_s`` and never hangs the CLI or the TUI. Requests are signed with the token (HMAC, fresh
nonce and time, see :mod:`eagle3scope.wire.control_protocol`): the token itself never travels.
"""

from __future__ import annotations

import os
import uuid

import zmq

from eagle3scope.wire.control_protocol import (
    DEFAULT_WAIT_S,
    ENV_CONTROL,
    ENV_TOKEN_FILE,
    ProtocolError,
    pack,
    sign,
    unpack,
)
from eagle3scope.wire.token import read_token


class ControlError(Exception):
    """The server refused the request, or did not answer; the message says which and why."""

    def __init__(self, message: str, reply: dict | None = None) -> None:
        super().__init__(message)
        self.reply = reply


class ControlClient:
    def __init__(self, endpoint: str, token: str, *, timeout_s: float = 5.0) -> None:
        self.endpoint = endpoint
        self.token = token
        self.timeout_s = timeout_s

    @classmethod
    def from_options(cls, endpoint: str | None, token_file: str | None, *, timeout_s: float = 5.0) -> "ControlClient":
        """Endpoint and token file from options, else from EAGLE3SCOPE_CONTROL(_TOKEN_FILE)."""
        endpoint = endpoint or os.environ.get(ENV_CONTROL)
        token_file = token_file or os.environ.get(ENV_TOKEN_FILE)
        if not endpoint:
            raise ControlError(f"no control endpoint: pass --control ENDPOINT or set {ENV_CONTROL}")
        if not token_file:
            raise ControlError(f"no token file: pass --token-file PATH or set {ENV_TOKEN_FILE}")
        if endpoint.isdigit():
            endpoint = f"tcp://127.0.0.1:{endpoint}"
        return cls(endpoint, read_token(token_file), timeout_s=timeout_s)

    def request(self, cmd: str, *, timeout_s: float | None = None, **fields) -> dict:
        """Send one request; return the reply when ok, raise :class:`ControlError` otherwise."""
        reply = self.raw(self.sign({"cmd": cmd, **fields}), timeout_s)
        if not reply.get("ok"):
            raise ControlError(str(reply.get("error") or "refused without a reason"), reply)
        return reply

    def sign(self, message: dict) -> dict:
        """``message`` as this client sends it: nonce, time and MAC under the token added."""
        return sign(message, self.token)

    def raw(self, message: dict, timeout_s: float | None = None) -> dict:
        """Send ``message`` as is and return the reply map, ok or not (tests use it for bad requests)."""
        timeout_ms = int(1000 * (self.timeout_s if timeout_s is None else timeout_s))
        ctx = zmq.Context.instance()
        sock = ctx.socket(zmq.REQ)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDTIMEO, timeout_ms)
        sock.setsockopt(zmq.RCVTIMEO, timeout_ms)
        try:
            sock.connect(self.endpoint)
            sock.send(pack(message))
            data = sock.recv()
        except zmq.Again:
            raise ControlError(f"no answer from {self.endpoint} within {timeout_ms / 1000:.1f}s "
                               "(server not started with --control, or busy)") from None
        except zmq.ZMQError as exc:
            raise ControlError(f"control channel {self.endpoint}: {exc}") from None
        finally:
            sock.close(0)
        try:
            return unpack(data)
        except ProtocolError as exc:
            raise ControlError(f"malformed reply from {self.endpoint}: {exc}") from None

    def list(self) -> dict:
        return self.request("list")

    def set(self, layers: list[int], *, request_id: str | None = None, wait_s: float = DEFAULT_WAIT_S,
            recapture: bool = False) -> dict:
        """Ask for ``layers``; the reply's ``status`` is "applied" or "queued" (server idle). With
        ``recapture`` the server recaptures its CUDA graphs for the new set (reply ``pause_ms``)."""
        fields = {"recapture": True} if recapture else {}  # servers before the field refuse it
        return self.request("set", layers=list(layers), id=request_id or uuid.uuid4().hex[:12], wait_s=wait_s,
                            timeout_s=max(self.timeout_s, wait_s + 3.0), **fields)
