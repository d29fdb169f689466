"""The control channel's request contract at its edges (wire/control_protocol.py; README "Bounds":
signed with a nonce and a time, accepted once, within 60 s, 64 KiB per message): what the server side
accepts and refuses, field by field, and that a nonce is remembered (accepted once) while bounded
memory forgets the oldest. Through the protocol's functions and the shim's `AuxChannel.handle`."""

from __future__ import annotations

import time

import pytest

from eagle3scope.wire.control_protocol import (MAX_ID_CHARS, MAX_MESSAGE_BYTES, MAX_NONCE_CHARS,
                                               MAX_RECAPTURE_WAIT_S, MAX_WAIT_S, MIN_NONCE_CHARS, ProtocolError,
                                               authentic, check_freshness, check_request, pack, sign, unpack)
from eagle3scope_shim import aux_channel, control_facts
from support.shim_state import make_shim

TOKEN = "t" * 64


def test_the_bounds_are_the_documented_ones():
    assert (MIN_NONCE_CHARS, MAX_NONCE_CHARS, MAX_ID_CHARS, MAX_WAIT_S, MAX_RECAPTURE_WAIT_S) == (16, 64, 64, 10.0, 300.0)
    assert MAX_MESSAGE_BYTES == 64 * 1024


@pytest.mark.parametrize("nonce, ok", [("n" * 16, True), ("n" * 64, True), ("n" * 15, False), ("n" * 65, False),
                                       (12345678901234567890, False), (None, False)])
def test_a_nonce_is_a_string_of_16_to_64_characters(nonce, ok):
    req = {"cmd": "list", "ts": 100.0, "nonce": nonce}
    if ok:
        assert check_freshness(req, 100.0) == nonce
    else:
        with pytest.raises(ProtocolError, match="nonce"):
            check_freshness(req, 100.0)


@pytest.mark.parametrize("ts", ["100", None, [100.0]])
def test_a_time_that_is_not_a_number_is_refused(ts):
    with pytest.raises(ProtocolError, match="within 60 s"):
        check_freshness({"ts": ts, "nonce": "n" * 32}, 100.0)


@pytest.mark.parametrize("fields, ok", [
    ({"cmd": "list"}, True),
    ({"cmd": "set", "layers": [1], "id": "i" * 64, "wait_s": 0, "recapture": False}, True),
    ({"cmd": "set", "layers": [1], "id": "i"}, True),  # one character is an id
    ({"cmd": "set", "layers": [1], "wait_s": 10}, True),
    ({"cmd": "set", "layers": [1], "wait_s": 300.0, "recapture": True}, True),
    ({"cmd": "set", "layers": [1], "wait_s": 10.01}, False),
    ({"cmd": "set", "layers": [1], "wait_s": 300.01, "recapture": True}, False),
    ({"cmd": "set", "layers": [1], "wait_s": -0.01}, False),
    ({"cmd": "set", "layers": [1], "wait_s": "2"}, False),
    ({"cmd": "set", "layers": [1], "recapture": 1}, False),
    ({"cmd": "set", "layers": [1], "id": "i" * 65}, False),
    ({"cmd": "set", "layers": [1], "id": ""}, False),
    ({"cmd": "set", "layers": [1], "id": "a\nb"}, False),
    ({"cmd": "set", "layers": [1], "id": 5}, False),
    ({"cmd": "list", "layers": [1]}, False),
    ({"cmd": "cycle"}, False),
    ({"cmd": None}, False),
])
def test_each_command_takes_exactly_its_fields_within_their_ranges(fields, ok):
    req = sign(fields, TOKEN)
    if ok:
        assert check_request(req) == fields["cmd"]
    else:
        with pytest.raises(ProtocolError):
            check_request(req)


def test_a_mac_of_the_wrong_shape_or_over_unpackable_values_is_not_authentic():
    signed = sign({"cmd": "list"}, TOKEN)
    assert authentic(signed, TOKEN)
    for mac in (None, 5, signed["mac"][:-1], signed["mac"] + "0", signed["mac"].upper()):
        assert not authentic({**signed, "mac": mac}, TOKEN), mac
    assert not authentic({**signed, "odd": object()}, TOKEN)
    # 64 characters that are not ASCII: refused, not raised (the channel would answer an internal error)
    for mac in ("\u00e9" * 64, signed["mac"][:-1] + "\u00e9"):
        assert authentic({**signed, "mac": mac}, TOKEN) is False


# a request signed by another release's client: the MAC is HMAC-SHA256 under the token over msgpack
# {"fields": [[key, value], ...]} sorted by key, every field but "mac" (so a renamed key or packing breaks it)
PINNED = {"cmd": "set", "layers": [2, 17, 31], "id": "r1", "nonce": "0123456789abcdef0123456789abcdef",
          "ts": 1700000000.5, "mac": "69b42352e15a2531a98fa8a7ca6ce045e3323b9f9122f0b179a85e0f1a0866aa"}


def test_a_request_signed_to_the_pinned_vector_is_authentic_and_any_change_is_not():
    assert authentic(PINNED, TOKEN)
    for changed in ({"ts": 1700000000.25}, {"nonce": "f" * 32}, {"layers": [2, 17]}, {"id": "r2"}):
        assert not authentic({**PINNED, **changed}, TOKEN), changed
    assert not authentic(PINNED, "u" * 64)
    resigned = sign({"cmd": "set", "layers": [2, 17, 31], "id": "r1"}, TOKEN, now=1700000000.5)
    assert authentic({**resigned, "nonce": PINNED["nonce"], "mac": PINNED["mac"]}, TOKEN)


def test_messages_past_64_kib_are_refused_before_decoding():
    assert unpack(pack({"cmd": "list", "pad": "x" * 4000})) == {"cmd": "list", "pad": "x" * 4000}
    with pytest.raises(ProtocolError):
        unpack(b"\x00" * (MAX_MESSAGE_BYTES + 1))
    with pytest.raises(ProtocolError):
        unpack(b"\xc1")


def _channel() -> aux_channel.AuxChannel:
    facts = control_facts.ControlFacts()
    facts.family, facts.rule, facts.num_layers, facts.expected, facts.configured = "LlamaForCausalLM", "+1", 8, 3, [2]
    return aux_channel.AuxChannel(make_shim(), "tcp://127.0.0.1:1", TOKEN, facts)


def test_a_nonce_is_accepted_once_and_the_memory_forgets_the_oldest_first(monkeypatch):
    channel = _channel()
    req = pack(sign({"cmd": "list"}, TOKEN))
    assert channel.handle(req)["ok"]
    again = channel.handle(req)
    assert not again["ok"] and "replayed request" in again["error"]
    monkeypatch.setattr(aux_channel, "MAX_NONCES", 3)
    first = sign({"cmd": "list"}, TOKEN)
    fresh = [first] + [sign({"cmd": "list"}, TOKEN) for _ in range(3)]
    for r in fresh:
        assert channel.handle(pack(r))["ok"]
    assert channel.handle(pack(first))["ok"]  # pushed out by the bound: accepted again (still within 60 s)
    assert not channel.handle(pack(fresh[-1]))["ok"]  # the newest are still remembered


@pytest.mark.parametrize("skew_s", [60.0, 30.0, 0.0, -60.0])
def test_a_nonce_is_remembered_for_as_long_as_its_request_could_still_be_accepted(monkeypatch, skew_s):
    """A request stamped ``skew_s`` ahead of the server's clock (a client's clock that far off, at most
    the 60 s window) is accepted at 10,000 s and stays acceptable by time until 10,000 + skew_s + 60:
    up to that very moment a replay of it is refused as replayed, and just after it by time. Nonces
    are kept two windows from when they were seen, so other requests seen meanwhile change nothing."""
    now = [10_000.0]
    monkeypatch.setattr(aux_channel.time, "time", lambda: now[0])
    channel = _channel()
    ahead = pack(sign({"cmd": "list"}, TOKEN, now=now[0] + skew_s))
    assert channel.handle(ahead)["ok"]
    end = 10_000.0 + skew_s + 60  # the last moment its time is within the window
    for now[0] in [t for t in (10_000.0, 10_059.0, 10_061.0, 10_090.0, end) if t <= end]:
        assert channel.handle(pack(sign({"cmd": "list"}, TOKEN)))["ok"]  # others' requests in between
        again = channel.handle(ahead)
        assert not again["ok"] and again["error"] == "replayed request: this nonce was used before", now[0]
    now[0] = end + 0.5
    assert "not within 60 s" in channel.handle(ahead)["error"]


def test_a_stale_or_future_request_is_refused_with_the_reason():
    channel = _channel()
    for ts in (time.time() - 61, time.time() + 61):
        reply = channel.handle(pack(sign({"cmd": "list"}, TOKEN, now=ts)))
        assert not reply["ok"] and "within 60 s" in reply["error"]
    wrong = channel.handle(pack(sign({"cmd": "list"}, "u" * 64)))
    assert not wrong["ok"] and "wrong token" in wrong["error"] and channel.refused_tokens == 1
    old_client = channel.handle(pack({"cmd": "list", "token": TOKEN}))
    assert not old_client["ok"] and "upgrade eagle3scope on the client side" in old_client["error"]


@pytest.mark.parametrize("check, req, error", [
    ("fresh", {"ts": 30.0, "nonce": "n" * 32},
     "request time is not within 60 s of the server's clock (a replayed request, or clocks apart)"),
    ("fresh", {"ts": 100.0, "nonce": "n"}, "request nonce must be a string of 16..64 characters"),
    ("request", {"cmd": "nope"}, "unknown command 'nope'; commands are: list, set"),
    ("request", {"cmd": "list", "b": 1, "a": 2}, "unknown field(s) for 'list': a, b"),
    ("request", {"cmd": "set", "layers": [1], "id": ""}, "request id must be a printable string of 1..64 characters"),
    ("request", {"cmd": "set", "layers": [1], "recapture": 1}, "recapture must be true or false"),
    ("request", {"cmd": "set", "layers": [1], "wait_s": 11}, "wait_s must be a number in 0..10.0"),
    ("request", {"cmd": "set", "layers": [1], "wait_s": 301, "recapture": True}, "wait_s must be a number in 0..300.0"),
    ("unpack", b"\xc1", "not a msgpack control message: FormatError: "),
    ("unpack", pack([1]), "control message must be a map, got list"),
    ("unpack", b"x" * (MAX_MESSAGE_BYTES + 1), "control message of 65537 bytes exceeds the 65536-byte limit"),
])
def test_each_refusal_says_why_in_the_words_a_client_shows(check, req, error):
    """A refusal's reason is the `error` of the `{ok: false, error}` reply, which `eagle3scope aux`
    and the TUI print: each reason, exactly."""
    run = {"fresh": lambda: check_freshness(req, 100.0), "request": lambda: check_request(req),
           "unpack": lambda: unpack(req)}[check]
    with pytest.raises(ProtocolError) as refused:
        run()
    assert str(refused.value) == error
