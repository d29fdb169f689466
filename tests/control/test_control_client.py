"""The viewer's side of the control channel over a real REP socket: what `ControlClient` sends (signed,
with the fields the protocol names), how it reads a refusal, a silence and a malformed reply, and where
it takes its endpoint and token from (wire/control_protocol.py's contract; README "Bounds": control
requests are signed with a nonce and a time, and the token never travels)."""

from __future__ import annotations

import threading
import time

import pytest
import zmq

from eagle3scope.control.client import ControlClient, ControlError
from eagle3scope.wire.control_protocol import (DEFAULT_WAIT_S, ENV_CONTROL, ENV_TOKEN_FILE, authentic,
                                               check_freshness, pack, unpack)
from eagle3scope.wire.endpoints import fresh_ipc_endpoint
from eagle3scope.wire.token import create_token_file, read_token

TOKEN = "k" * 64


class Server:
    """A REP socket answering each request with the next reply (bytes as is), recording what came."""

    def __init__(self, *replies) -> None:
        self.endpoint = fresh_ipc_endpoint()
        self.sock = zmq.Context.instance().socket(zmq.REP)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(self.endpoint)
        self.replies, self.got = list(replies), []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        for reply in self.replies:
            if not self.sock.poll(10_000):
                return
            self.got.append(unpack(self.sock.recv()))
            self.sock.send(reply if isinstance(reply, bytes) else pack(reply))

    def close(self) -> None:
        self.thread.join(10)
        self.sock.close(0)


def test_requests_are_signed_fresh_and_carry_the_protocols_fields():
    server = Server({"ok": True, "status": "applied"}, {"ok": True, "status": "queued"}, {"ok": True, "current": None})
    client = ControlClient(server.endpoint, TOKEN, timeout_s=5)
    try:
        assert client.set([3, 5], request_id="r-1", wait_s=0.5) == {"ok": True, "status": "applied"}
        client.set([1], recapture=True)
        assert client.list() == {"ok": True, "current": None}
    finally:
        server.close()
    first, second, third = server.got
    for req in server.got:
        assert authentic(req, TOKEN) and not authentic(req, "j" * 64)
        assert check_freshness(req, time.time()) == req["nonce"]
        assert TOKEN not in repr(req)  # the token never travels
    assert {k: first[k] for k in ("cmd", "layers", "id", "wait_s")} == {"cmd": "set", "layers": [3, 5], "id": "r-1",
                                                                         "wait_s": 0.5}
    assert "recapture" not in first  # servers from before the field refuse it: sent only when asked
    assert second["recapture"] is True and second["wait_s"] == DEFAULT_WAIT_S
    assert len(second["id"]) == 12 and int(second["id"], 16) >= 0
    assert third["cmd"] == "list" and set(third) == {"cmd", "nonce", "ts", "mac"}
    assert len({r["nonce"] for r in server.got}) == 3


def test_a_refusal_raises_with_the_servers_reason_and_keeps_the_reply():
    server = Server({"ok": False, "error": "ids out of range"}, {"ok": False})
    client = ControlClient(server.endpoint, TOKEN, timeout_s=5)
    try:
        with pytest.raises(ControlError, match="^ids out of range$") as info:
            client.set([99])
        assert info.value.reply == {"ok": False, "error": "ids out of range"}
        with pytest.raises(ControlError, match="^refused without a reason$"):
            client.list()
    finally:
        server.close()


def test_silence_and_a_malformed_reply_are_errors_within_the_timeout():
    server = Server(b"\xc1 not msgpack")
    client = ControlClient(server.endpoint, TOKEN, timeout_s=5)
    try:
        with pytest.raises(ControlError, match="malformed reply from"):
            client.list()
    finally:
        server.close()
    silent = zmq.Context.instance().socket(zmq.REP)  # takes the request, never answers
    silent.setsockopt(zmq.LINGER, 0)
    endpoint = fresh_ipc_endpoint()
    silent.bind(endpoint)
    try:
        started = time.monotonic()
        with pytest.raises(ControlError, match=r"no answer from .* within 0\.3s"):
            ControlClient(endpoint, TOKEN, timeout_s=0.3).list()
        assert time.monotonic() - started < 3
    finally:
        silent.close(0)


def test_a_set_waits_for_its_wait_s_beyond_the_clients_timeout():
    """The reply of a set may take wait_s (the server waits for a step): the socket waits wait_s + 3 s."""
    endpoint = fresh_ipc_endpoint()
    sock = zmq.Context.instance().socket(zmq.REP)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(endpoint)

    def late() -> None:
        if sock.poll(10_000):
            sock.recv()
            time.sleep(1.0)  # longer than the client's own timeout
            sock.send(pack({"ok": True, "status": "applied"}))

    thread = threading.Thread(target=late, daemon=True)
    thread.start()
    try:
        assert ControlClient(endpoint, TOKEN, timeout_s=0.3).set([1], wait_s=0.1)["status"] == "applied"
    finally:
        thread.join(10)
        sock.close(0)


def test_endpoint_and_token_come_from_options_then_the_environment(tmp_path, monkeypatch):
    token_file = create_token_file(tmp_path)
    monkeypatch.delenv(ENV_CONTROL, raising=False)
    monkeypatch.delenv(ENV_TOKEN_FILE, raising=False)
    with pytest.raises(ControlError, match=f"--control ENDPOINT or set {ENV_CONTROL}"):
        ControlClient.from_options(None, str(token_file))
    with pytest.raises(ControlError, match=f"--token-file PATH or set {ENV_TOKEN_FILE}"):
        ControlClient.from_options("ipc:///x", None)
    monkeypatch.setenv(ENV_CONTROL, "7001")
    monkeypatch.setenv(ENV_TOKEN_FILE, str(token_file))
    client = ControlClient.from_options(None, None, timeout_s=1.5)
    assert (client.endpoint, client.token, client.timeout_s) == ("tcp://127.0.0.1:7001", read_token(token_file), 1.5)
    assert ControlClient.from_options("ipc:///given", None).endpoint == "ipc:///given"  # the option wins


def test_the_clients_errors_say_what_happened_exactly(monkeypatch):
    """The messages `eagle3scope aux` prints on an error: silence (the timeout to a tenth of a second),
    a refusal without a reason, a malformed reply, and a missing endpoint or token file."""
    silent = zmq.Context.instance().socket(zmq.REP)
    silent.setsockopt(zmq.LINGER, 0)
    endpoint = fresh_ipc_endpoint()
    silent.bind(endpoint)
    try:
        with pytest.raises(ControlError) as silence:
            ControlClient(endpoint, TOKEN, timeout_s=0.05).list()  # 50 ms: "0.1s"
    finally:
        silent.close(0)
    assert str(silence.value) == f"no answer from {endpoint} within 0.1s (server not started with --control, or busy)"
    for reply, error in (({"ok": False}, "refused without a reason"),
                         (b"\xc1", "malformed reply from {}: not a msgpack control message: FormatError: ")):
        server = Server(reply)
        try:
            with pytest.raises(ControlError) as refused:
                ControlClient(server.endpoint, TOKEN, timeout_s=5).list()
        finally:
            server.close()
        assert str(refused.value) == error.format(server.endpoint)
    monkeypatch.delenv(ENV_CONTROL, raising=False)
    monkeypatch.delenv(ENV_TOKEN_FILE, raising=False)
    with pytest.raises(ControlError, match=r"^no control endpoint: pass --control ENDPOINT or set EAGLE3SCOPE_CONTROL$"):
        ControlClient.from_options(None, None)
    with pytest.raises(ControlError, match=r"^no token file: pass --token-file PATH or set EAGLE3SCOPE_CONTROL_TOKEN_FILE$"):
        ControlClient.from_options("5555", None)
