"""Hostile frames: arbitrary msgpack values through decode -> validate -> ingest -> store -> read.

Each case interleaves hostile frames (arbitrary envelopes and bodies, and realistic bodies with one
value anywhere replaced by a hostile one) with good frames, and sends them down the path every
consumer takes: ``decode_frame`` (which validates), the viewer's ``SessionState`` with the rules,
the export rows, the recorder's ``SessionWriter``, then a ``SessionReader`` of the file and the
``check`` report. Asserted: nothing but ``FrameError`` escapes, every good frame comes back from
the file in order, and every frame the validator lets through is consumed without an error.
"""

from __future__ import annotations

import json
import random
import time
import tracemalloc

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eagle3scope.analysis import SessionState
from eagle3scope.commands.check import render_text
from eagle3scope.gate.result import check_result
from eagle3scope.live.subscriber import Subscriber
from eagle3scope.store import SessionReader, SessionWriter
from eagle3scope.store.rows import step_rows
from eagle3scope.wire import SCHEMA_MAJOR, SCHEMA_MINOR, FrameError, decode_frame, encode_frame
from eagle3scope.wire.schema import DEFAULT_MAX_FRAME_BYTES
from support.hostile_support import Tally, hostile_values, mutated
from benchmarks.support.synthetic import hello_body, load_body, step_body

GOOD_BODIES = {
    "hello": hello_body(), "load": load_body(),
    "step": {**step_body(5, bs=3), "ctx_len": [17, 300, 9000], "greedy": [True, False, True],
             "constrained": [False, True, False]},
    "finish": {"seq": 5, "dropped": 0, "requests": [{"rid": "r0", "verify_ct": 3, "correct_drafts": 4,
                                                     "histogram": [1, 1, 1]}]},
    "config": {"layers": [1, 3, 4], "captured": [2, 4, 5], "applied": True, "reason": "", "origin": "control",
               "request_id": "r1"},
    "heartbeat": {"steps": 10, "dropped": 0, "hook_failures": 0, "queued": 0},
    "hook": {"seam": "draft_forward", "status": "attached", "detail": None},
}
KINDS = sorted(GOOD_BODIES)


def _raw(obj) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


@st.composite
def hostile_frames(draw):
    """Bytes of one hostile frame: a mutated realistic body, an arbitrary body, or an arbitrary envelope."""
    kind = draw(st.sampled_from(KINDS))
    shape = draw(st.sampled_from(["mutated", "body", "envelope"]))
    if shape == "mutated":
        body = draw(mutated(GOOD_BODIES[kind]))
    elif shape == "body":
        body = draw(hostile_values)
    else:
        env = {"v": [SCHEMA_MAJOR, SCHEMA_MINOR], "k": kind, "src": "evil", "n": 1, "t": 1, "b": GOOD_BODIES[kind]}
        env[draw(st.sampled_from(["v", "k", "src", "n", "t", "b"]))] = draw(hostile_values)
        return _raw(env)
    env = {"v": [SCHEMA_MAJOR, SCHEMA_MINOR], "k": kind, "src": draw(st.sampled_from(["dp0", "evil"])),
           "n": draw(st.integers(0, 2**63 - 1)), "t": draw(st.integers(0, 2**63 - 1)), "b": body}
    try:
        return _raw(env)
    except (OverflowError, ValueError, TypeError):  # msgpack cannot even carry it: not a frame anyone can send
        return _raw({"b": None})


def _good(seq: int) -> bytes:
    t = 1_700_000_000_000_000_000 + seq * 1_000_000
    return encode_frame("step", step_body(seq, bs=2, t_ns=t), src="dp0", n=seq, t=t)


def _consume(frame, state: SessionState) -> None:
    """What watch/replay (state + rules), export (rows, jsonl) and record (the writer) do with a frame."""
    state.ingest(frame)
    if frame.kind == "step":
        step_rows(frame)
    json.dumps(frame.to_dict(), default=repr)


FRAMES = Tally("frames", "decode-validate-ingest-store-read")


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(hostile_frames(), min_size=1, max_size=6))
def test_hostile_frames_never_escape_and_good_frames_after_them_are_all_kept(tmp_path_factory, bad_frames):
    path = tmp_path_factory.mktemp("hostile") / "s.e3s"
    state = SessionState()
    kept, good = [], []
    FRAMES.add(cases=1)
    tracemalloc.start()
    try:
        with SessionWriter(path) as writer:
            for i, bad in enumerate(bad_frames):
                for raw in (bad, _good(i)):
                    try:
                        frame = decode_frame(raw)
                    except FrameError:
                        continue
                    except Exception:
                        FRAMES.add(crashes=1)
                        raise
                    try:
                        _consume(frame, state)
                        writer.add(raw, frame)
                    except Exception:
                        FRAMES.add(crashes=1)
                        raise
                    kept.append(frame.to_dict())
                    if raw is not bad:
                        good.append(frame.to_dict())
        state.violations()
        result = check_result(state, state.violations(), [])
        json.dumps(result)
        render_text(result)
        with SessionReader(path) as reader:
            back = [f.to_dict() for _, f in reader.frames()]
            errors = list(reader.errors)
        FRAMES.peak(tracemalloc.get_traced_memory()[1])
    finally:
        tracemalloc.stop()
    if back != kept or errors:
        FRAMES.add(silent_losses=1)
    assert errors == [] and back == kept
    assert [f for f in back if f["src"] == "dp0" and f["k"] == "step" and f["b"] in [g["b"] for g in good]]


@pytest.mark.parametrize("kind", KINDS)
def test_realistic_bodies_are_valid(kind):
    """The validator accepts what the shim sends (benchmarks/support/synthetic.py mirrors the shim's bodies)."""
    assert decode_frame(encode_frame(kind, GOOD_BODIES[kind], src="dp0", n=0)).body == GOOD_BODIES[kind]


@pytest.mark.parametrize("kind, body, field", [
    ("step", {**step_body(1), "seq": 2**64 - 1}, "b.seq"),
    ("step", {**step_body(1), "t_ns": 2**63}, "b.t_ns"),
    ("step", {**step_body(1), "accepted": [2**40]}, "b.accepted"),
    ("step", {**step_body(1), "draft_ids": [["x"]]}, "b.draft_ids"),
    ("step", {**step_body(1), "draft_ids": [[1.5, 2]]}, "b.draft_ids"),
    ("step", {**step_body(1), "capture": 7}, "b.capture"),
    ("step", {**step_body(1), "passes": [{"mode": "decode", "n": None}]}, "b.passes"),
    ("step", {**step_body(1), "draft_ms": float("nan")}, "b.draft_ms"),
    ("step", {**step_body(1), "draft_ids": [list(range(2000))]}, "b.draft_ids"),
    ("hello", {**hello_body(), "server_args": [1, 2]}, "b.server_args"),
    ("hello", {**hello_body(), "server_args": {"num_steps": "3"}}, "b.server_args.num_steps"),
    ("load", {**load_body(), "hidden_size": "4096"}, "b.hidden_size"),
    ("load", {**load_body(), "aux": {"configured": [1, "2"]}}, "b.aux.configured"),
    ("load", {**load_body(), "weights": {"consumed": "fc.weight"}}, "b.weights.consumed"),
    ("heartbeat", {"dropped": -1}, "b.dropped"),
    ("hook", {"seam": ["x"]}, "b.seam"),
    ("config", {"layers": 5}, "b.layers"),
])
def test_each_absurd_value_is_refused_naming_its_field(kind, body, field):
    with pytest.raises(FrameError, match=field.replace(".", r"\.").replace("[", r"\[")) as info:
        decode_frame(encode_frame(kind, body, src="dp0", n=0))
    assert (info.value.kind, info.value.src) == (kind, "dp0")


def test_nested_bytes_keys_are_refused():
    body = {**step_body(1), "passes": [{b"mode": "x"}]}
    with pytest.raises(FrameError, match="keys must be strings"):
        decode_frame(_raw({"v": [SCHEMA_MAJOR, SCHEMA_MINOR], "k": "step", "src": "dp0", "n": 0, "t": 0, "b": body}))


def test_subscriber_reports_bad_frames_once_per_kind_and_publisher_and_keeps_the_good_ones(synthetic_publisher):
    """Over a real socket: bad frames of two kinds from two publishers between good ones."""
    pub = synthetic_publisher
    tally = Tally("frames", "subscriber over a socket")
    rng = random.Random(3)
    with Subscriber([pub.endpoint]) as sub:
        pub.wait_subscribed()
        sent_good, got = [], []
        for i in range(300):
            src = rng.choice(["dp0", "dp1"])
            bad_kind = rng.choice(["step", "load"])
            bad = {**(step_body(i) if bad_kind == "step" else load_body()), "hidden_size": "x", "seq": "x"}
            pub.send(bad_kind, bad, src=src, n=i)
            good = encode_frame("step", step_body(i), src="dp0", n=i)
            sent_good.append(good)
            pub.send_raw(good)
            if i % 50 == 0:
                got += [raw for raw, f in sub.poll_raw(0) if f.src == "dp0"]
        pub.send_raw(b"\x00" * (DEFAULT_MAX_FRAME_BYTES + 1))  # over the size bound: the connection is reset
        deadline = time.monotonic() + 10
        while len(got) < len(sent_good) and time.monotonic() < deadline:
            got += [raw for raw, f in sub.poll_raw(50) if f.src == "dp0"]
        reports = sub.take_reports()
        tally.add(cases=600)
    assert sorted((src, kind) for src, kind, _ in reports) == [("dp0", "load"), ("dp0", "step"), ("dp1", "load"),
                                                                ("dp1", "step")]
    assert sum(sub.bad_by.values()) == 300 and sub.take_reports() == []
    if got != sent_good:
        tally.add(silent_losses=len(sent_good) - len(got))
    tally.emit()
    assert got == sent_good


def test_publishers_beyond_the_cap_are_refused_and_reported_once(tmp_path):
    """Frames naming ever new publishers cannot grow the subscriber without bound."""
    from eagle3scope.wire.schema import MAX_PUBLISHERS

    with Subscriber([f"ipc://{tmp_path}/nobody"]) as sub:
        for i in range(MAX_PUBLISHERS + 50):
            sub._accept(encode_frame("heartbeat", GOOD_BODIES["heartbeat"], src=f"p{i}", n=0))
        reports = sub.take_reports()
        assert len(sub.sources) == MAX_PUBLISHERS and sub.bad_frames == 50
        assert len(reports) == 50 and all("more than" in error for _, _, error in reports)
        for i in range(10_000):  # bad frames under ever new names: the per-(src, kind) table is bounded too
            sub._accept(encode_frame("step", {"seq": "x"}, src=f"q{i}", n=0))
        assert len(sub.bad_by) <= MAX_PUBLISHERS * 8 + 1 and sum(sub.bad_by.values()) == 10_050
