"""Promises the README and RELIABILITY.md make that no other fast test pinned (an audit's finding: each of
these survived as a planted one-line bug). Each test names the promise it holds."""

from __future__ import annotations

import random
import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from eagle3scope.wire import decode_frame, encode_frame
from eagle3scope.wire.control_protocol import REPLAY_WINDOW_S, ProtocolError, authentic, check_freshness, sign
from eagle3scope.wire.loss import FrameLoss
from eagle3scope.wire.schema import FrameError
from eagle3scope.wire.bodies import MAX_TOKEN_ID
from benchmarks.support.analysis_streams import H, session
from benchmarks.support.synthetic import step_body
from support.cli import invoke
from support.recordings import record

TOKEN = "t" * 64

# -- README "Bounds": control requests are signed (HMAC-SHA256) with a nonce and a time ---------------


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["cmd", "nonce", "ts", "ids", "recapture"]), st.data())
def test_the_mac_covers_every_field_nonce_and_time_included(field, data):
    signed = sign({"cmd": "set", "ids": [1, 2, 3], "recapture": False}, TOKEN, now=1000.0)
    assert authentic(signed, TOKEN)
    forged = dict(signed)
    original = forged[field]
    replacement = data.draw({
        "cmd": st.sampled_from(["list", "cycle"]), "nonce": st.text("0123456789abcdef", min_size=32, max_size=32),
        "ts": st.floats(0, 1e9), "ids": st.lists(st.integers(0, 60), max_size=4), "recapture": st.just(True),
    }[field].filter(lambda v: v != original))
    forged[field] = replacement
    assert not authentic(forged, TOKEN)  # a captured request cannot be re-dated or given a fresh nonce
    assert not authentic(signed, "u" * 64)


def test_the_replay_window_is_60_seconds_either_way():
    assert REPLAY_WINDOW_S == 60
    req = sign({"cmd": "list"}, TOKEN, now=10_000.0)
    for now in (10_000.0, 10_000.0 + REPLAY_WINDOW_S, 10_000.0 - REPLAY_WINDOW_S):
        assert check_freshness(req, now) == req["nonce"]
    for now in (10_000.0 + REPLAY_WINDOW_S + 0.01, 10_000.0 - REPLAY_WINDOW_S - 0.01):
        with pytest.raises(ProtocolError, match="within 60 s"):
            check_freshness(req, now)


# -- README "Bounds": frame bodies validated before any consumer sees them -----------------------------


@pytest.mark.parametrize("key", ["draft_ids", "accepted_ids"])
@pytest.mark.parametrize("bad", [-1, -(1 << 40), MAX_TOKEN_ID + 1])
def test_token_ids_outside_the_vocabulary_range_are_refused(key, bad):
    body = step_body(1, bs=2, rng=random.Random(0))
    body[key][1][0] = bad
    with pytest.raises(FrameError, match=rf"b\.{key}"):
        decode_frame(encode_frame("step", body, src="x", n=0, t=1))
    body[key][1][0] = MAX_TOKEN_ID  # the boundary itself is a valid id
    assert decode_frame(encode_frame("step", body, src="x", n=0, t=1)).body[key][1][0] == MAX_TOKEN_ID


# -- schema.py: the heartbeat's `dropped` is the shim's running total, not a per-interval count --------


def _heartbeat(n: int, dropped: int) -> object:
    return decode_frame(encode_frame("heartbeat", {"steps": n, "dropped": dropped, "hook_failures": 0, "queued": 0},
                                     src="x", n=n, t=n))


def test_heartbeat_dropped_is_cumulative():
    loss = FrameLoss()
    notes = [loss.observe(_heartbeat(n, dropped)) for n, dropped in enumerate((5, 5, 7))]
    assert loss.shim_dropped == 7 and loss.lost == 7  # not 5 + 5 + 7
    assert notes[1] == () and notes[2] == ("2 new frame(s) dropped by the shim (total 7)",)


# -- README "CI gate": exit 1 on a failure even when the evidence is also incomplete -------------------


def _damage_last_batch(path: str) -> None:
    con = sqlite3.connect(path)
    with con:
        con.execute("UPDATE batches SET crc = crc + 1 WHERE id = (SELECT MAX(id) FROM batches)")
    con.close()


def test_a_failure_outranks_incomplete_evidence(tmp_path):
    broken = record(tmp_path / "broken.e3s", session(600, bs=2, accept_p=0.7, algorithm="EAGLE",
                                                    step_kw={"feature_width": H, "fc": False,
                                                             "capture": {"on": False, "layers": None}}))
    healthy = record(tmp_path / "healthy.e3s", session(600, bs=2, accept_p=0.7))
    assert invoke("check", broken).exit_code == 1 and invoke("check", healthy).exit_code == 0
    for path in (broken, healthy):
        _damage_last_batch(path)
    assert invoke("check", healthy).exit_code == 3  # nothing failed, part of the file damaged: inconclusive
    assert invoke("check", broken).exit_code == 1  # what was seen is already wrong: the failure wins


# -- README "Bounds": each frame-body bound is accepted at its value and refused one past it -----------

from eagle3scope.wire.bodies import INT64_MAX, MAX_BATCH, MAX_DEPTH, MAX_DRAFT_TOKENS, MAX_NAME, MAX_TEXT  # noqa: E402


def _step(bs: int, drafts: int = 1, rid: str = "r") -> dict:
    return {"seq": 1, "bs": bs, "rids": [rid] * bs, "draft_ids": [[1] * drafts] * bs, "accepted": [0] * bs,
            "bonus": [1] * bs, "accepted_ids": [[1]] * bs}


def _nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = {"x": value}
    return value


def _round_trip(kind: str, body: dict) -> dict:
    return decode_frame(encode_frame(kind, body, src="x", n=0, t=1)).body


@pytest.mark.parametrize("what, at_bound, past_it, field", [
    ("requests per step", lambda: _step(MAX_BATCH), lambda: _step(MAX_BATCH + 1), "b.bs"),
    ("draft tokens per request", lambda: _step(1, MAX_DRAFT_TOKENS), lambda: _step(1, MAX_DRAFT_TOKENS + 1),
     "b.draft_ids"),
    ("accepted drafts per request", lambda: {**_step(1), "accepted": [MAX_DRAFT_TOKENS]},
     lambda: {**_step(1), "accepted": [MAX_DRAFT_TOKENS + 1]}, "b.accepted"),
    ("name length", lambda: _step(1, rid="r" * MAX_NAME), lambda: _step(1, rid="r" * (MAX_NAME + 1)), "b.rids"),
    ("text length", lambda: {**_step(1), "note": "t" * MAX_TEXT}, lambda: {**_step(1), "note": "t" * (MAX_TEXT + 1)},
     "b.note"),
    ("nesting", lambda: {**_step(1), "extra": _nested(MAX_DEPTH - 1)}, lambda: {**_step(1), "extra": _nested(MAX_DEPTH)},
     "b.extra"),
    ("signed 64-bit ints", lambda: {**_step(1), "extra": INT64_MAX}, lambda: {**_step(1), "extra": INT64_MAX + 1},
     "b.extra"),
])
def test_each_body_bound_holds_exactly_where_the_readme_puts_it(what, at_bound, past_it, field):
    assert (MAX_BATCH, MAX_DRAFT_TOKENS, MAX_NAME, MAX_TEXT, MAX_DEPTH) == (65_536, 1_024, 4_096, 65_536, 8)
    body = at_bound()
    assert _round_trip("step", body) == body, what
    with pytest.raises(FrameError, match=field.replace(".", r"\.")):
        _round_trip("step", past_it())


def test_a_step_may_carry_every_field_the_schema_knows():
    """A body with all the optional fields at once is valid (the unknown-field check is a strict subset test)."""
    body = step_body(1, bs=2, rng=random.Random(0))
    body.update(num_steps=3, accepted_path=[list(range(a)) for a in body["accepted"]], discarded=["gone"])
    assert _round_trip("step", body) == body


def test_gate_fails_with_1_when_a_broken_stream_also_ends_before_n_steps():
    """README "CI gate": `gate` exits 1 on a failure even when fewer than N steps arrived (not 3)."""
    from support.gating import Publisher, gate

    frames = session(120, accept_p=0.0, algorithm="EAGLE",
                     step_kw={"feature_width": H, "fc": False, "capture": {"on": False, "layers": None}})
    with Publisher(frames) as pub:
        done = gate("--connect", pub.endpoint, "--steps", "100000", "--timeout", "4")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "ERROR   aux-capture-off" in done.stdout and "decode steps" in done.stderr


# -- README "Bounds": one frame and the subscriber queue ------------------------------------------------


def test_max_frame_bytes_is_clamped_to_8_mib_and_the_queue_holds_200000_frames():
    import zmq

    from eagle3scope.live.subscriber import Subscriber
    from eagle3scope.wire.endpoints import fresh_ipc_endpoint
    from eagle3scope.wire.schema import DEFAULT_MAX_FRAME_BYTES, MAX_FRAME_BYTES

    assert (DEFAULT_MAX_FRAME_BYTES, MAX_FRAME_BYTES) == (1 << 20, 8 << 20)
    for asked, used in ((None, 1 << 20), (1 << 30, 8 << 20), (3 << 20, 3 << 20)):
        sub = Subscriber([fresh_ipc_endpoint()], **({} if asked is None else {"max_frame_bytes": asked}))
        try:
            assert sub.max_frame_bytes == used
            assert sub._sock.getsockopt(zmq.MAXMSGSIZE) == used  # ZeroMQ refuses larger ones before buffering
            assert sub._sock.getsockopt(zmq.RCVHWM) == 200_000
        finally:
            sub.close()
