"""Hostile traffic against the real control channel (the shim's ROUTER thread on a TCP port).

After every kind of abuse (arbitrary bytes through a REQ socket, raw TCP bytes that are not ZMTP,
multipart and DEALER messages, oversized messages, unsigned, stale and replayed requests, a flood
of wrong tokens, a client parked in a long ``set``) a valid client must still be answered, every
time, within its timeout.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eagle3scope.control.client import ControlClient, ControlError
from eagle3scope.wire.control_protocol import MAX_MESSAGE_BYTES, REPLAY_WINDOW_S, pack, sign, unpack
from eagle3scope_shim import aux_channel
from support.hostile_support import Tally, hostile_values

CONTROL = Tally("control", "control channel")


def _still_serves(client: ControlClient) -> None:
    """The valid client is answered; a miss counts as a hang, an exception as a crash."""
    try:
        assert client.list()["ok"] is True
    except ControlError:
        CONTROL.add(hangs=1)
        raise


def _req(endpoint: str, timeout_ms: int = 3000) -> zmq.Socket:
    sock = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, timeout_ms)
    sock.setsockopt(zmq.SNDTIMEO, timeout_ms)
    sock.connect(endpoint)
    return sock


def _port(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=st.binary(max_size=300)
       | st.dictionaries(st.sampled_from(["cmd", "nonce", "ts", "mac", "token", "layers", "x"]), hostile_values).map(pack))
def test_arbitrary_single_frames_get_a_refusal(channel, payload):  # noqa: F811
    ctl, _, client, _ = channel
    ctl._failures.level = 1e9  # this test checks answers, not the rate limit
    sock = _req(ctl.endpoint)
    try:
        sock.send(payload)
        reply = unpack(sock.recv())
    finally:
        sock.close(0)
    CONTROL.add(cases=1)
    assert reply["ok"] is False and reply["error"]
    _still_serves(client)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chunks=st.lists(st.binary(min_size=1, max_size=200), min_size=1, max_size=4), linger=st.booleans())
def test_raw_tcp_bytes_do_not_stop_the_channel(channel, chunks, linger):  # noqa: F811
    ctl, _, client, _ = channel
    raw = socket.create_connection(("127.0.0.1", _port(ctl.endpoint)), timeout=2)
    try:
        for chunk in chunks:
            raw.sendall(chunk)
        if linger:  # a peer that stalls mid-handshake must not hold the channel
            _still_serves(client)
    except OSError:
        pass  # ZeroMQ hung up on the garbage: that is the point
    finally:
        raw.close()
    CONTROL.add(cases=1)
    _still_serves(client)


@pytest.mark.parametrize("parts", [
    [b"", b"x"],
    [b"a", b"b", b"c"],
    [b""] * 50,
    [pack({"cmd": "list"})],
    [b"", pack({"cmd": "list"}), pack({"cmd": "list"})],
])
def test_multipart_and_dealer_messages_are_refused_or_dropped(channel, parts):  # noqa: F811
    ctl, _, client, _ = channel
    dealer = zmq.Context.instance().socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(ctl.endpoint)
    try:
        dealer.send_multipart(parts)
        if dealer.poll(2000):
            reply = dealer.recv_multipart()
            assert unpack(reply[-1])["ok"] is False
    finally:
        dealer.close(0)
    req = _req(ctl.endpoint)
    try:
        req.send_multipart([pack({"cmd": "list"}), b"second frame"])  # multipart from a REQ socket
        assert "one frame" in unpack(req.recv())["error"]
    finally:
        req.close(0)
    CONTROL.add(cases=2)
    _still_serves(client)


def test_oversized_message_is_dropped_and_the_channel_serves_on(channel):  # noqa: F811
    ctl, _, client, _ = channel
    sock = _req(ctl.endpoint, timeout_ms=1000)
    try:
        sock.send(b"x" * (MAX_MESSAGE_BYTES + 1))
        with pytest.raises(zmq.Again):
            sock.recv()  # ZeroMQ closed that connection: no answer
    finally:
        sock.close(0)
    CONTROL.add(cases=1)
    _still_serves(client)


def test_a_captured_request_is_accepted_once(channel):  # noqa: F811
    ctl, target, client, _ = channel
    signed = client.sign({"cmd": "set", "layers": [1, 3, 4], "id": "once", "wait_s": 0})
    assert client.raw(signed)["status"] == "queued"
    ctl.apply_pending()
    again = client.raw(signed)
    assert again["ok"] is False and "replayed" in again["error"]
    old = sign({"cmd": "list"}, client.token, now=time.time() - 2 * REPLAY_WINDOW_S)
    assert "not within" in client.raw(old)["error"]
    tampered = client.sign({"cmd": "set", "layers": [1, 3, 4], "wait_s": 0}) | {"layers": [3, 5, 6]}
    assert "wrong token" in client.raw(tampered)["error"]
    assert target.calls == [[1, 3, 4]]
    CONTROL.add(cases=4)
    _still_serves(client)


def test_wrong_token_flood_is_rate_limited_and_valid_clients_still_pass(channel):  # noqa: F811
    ctl, _, client, _ = channel
    wrong = ControlClient(ctl.endpoint, "not-the-token-" * 3, timeout_s=2)
    dealer = zmq.Context.instance().socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(ctl.endpoint)
    n = 400
    t0 = time.monotonic()
    try:
        for _ in range(n):
            dealer.send_multipart([b"", pack(wrong.sign({"cmd": "list"}))])
        _still_serves(client)  # served in the middle of the flood
        answers = 0
        while dealer.poll(500):
            dealer.recv_multipart()
            answers += 1
    finally:
        dealer.close(0)
    elapsed = time.monotonic() - t0
    CONTROL.add(cases=n)
    assert ctl.refused_tokens >= n
    assert answers <= 2 * aux_channel.FAILURE_RATE + elapsed * aux_channel.FAILURE_RATE + 1
    assert ctl.dropped >= n - answers - 1
    _still_serves(client)


def test_a_long_set_does_not_block_other_clients(channel):  # noqa: F811
    ctl, _, client, _ = channel
    done = {}

    def long_set():
        done["reply"] = client.set([1, 3, 4], wait_s=4)

    parked = threading.Thread(target=long_set)
    parked.start()
    time.sleep(0.3)  # the set is parked, waiting for a step that never comes
    t0 = time.monotonic()
    for _ in range(5):
        _still_serves(client)
    served_s = time.monotonic() - t0
    parked.join(10)
    CONTROL.add(cases=6)
    assert served_s < 2.0 and not parked.is_alive() and done["reply"]["status"] == "queued"
