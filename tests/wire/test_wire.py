"""The wire schema decodes what it encodes, and refuses hostile or incompatible bytes cleanly."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eagle3scope.wire import (
    KINDS,
    SCHEMA_MAJOR,
    SCHEMA_MINOR,
    FrameError,
    SchemaVersionError,
    decode_frame,
    encode_frame,
    frame_of_packed,
    frame_packer,
)
from eagle3scope.wire.schema import MAX_FRAME_BYTES
from benchmarks.support.synthetic import hello_body, load_body, step_body

# -- strategies -----------------------------------------------------------------------------------
scalars = (
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False) | st.text(max_size=40)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=12), inner, max_size=6),
    max_leaves=30,
)
generic_bodies = st.dictionaries(st.text(max_size=12), values, max_size=8)
token = st.integers(min_value=0, max_value=200_000)


@st.composite
def step_bodies(draw):
    bs = draw(st.integers(min_value=0, max_value=8))
    k = draw(st.integers(min_value=1, max_value=8))
    drafts = [draw(st.lists(token, min_size=k, max_size=k)) for _ in range(bs)]
    accepted = [draw(st.integers(min_value=0, max_value=k)) for _ in range(bs)]
    bonus = [draw(st.sampled_from([0, 1])) for _ in range(bs)]
    passes = draw(st.lists(st.fixed_dictionaries({
        "mode": st.sampled_from(["draft_extend", "decode", "extend", "draft_extend_v2"]),
        "width": st.integers(min_value=1, max_value=3 * 16384), "fc": st.booleans(),
        "n": st.integers(min_value=1, max_value=8)}), max_size=4))
    body = {
        "seq": draw(st.integers(min_value=0, max_value=2**62)), "t_ns": draw(st.integers(min_value=0, max_value=2**63 - 1)),
        "mode": draw(st.sampled_from(["decode", "prefill"])), "bs": bs,
        "rids": [draw(st.text(min_size=1, max_size=16)) for _ in range(bs)],
        "draft_ids": drafts, "accepted": accepted, "bonus": bonus,
        "accepted_ids": [d[:a] + [draw(token)] * b for d, a, b in zip(drafts, accepted, bonus)],
        "passes": passes,
        "capture": draw(st.none() | st.fixed_dictionaries({"on": st.booleans(), "layers": st.lists(token, max_size=4)})),
        "draft_ms": draw(st.none() | st.floats(0, 1e4)), "verify_ms": draw(st.none() | st.floats(0, 1e4)),
        "extend_ms": None,
    }
    if draw(st.booleans()):  # a tree round with its own budget, and requests SGLang discarded
        body["num_steps"] = draw(st.integers(min_value=max(accepted, default=0), max_value=16))
        body["accepted_path"] = [draw(st.permutations(range(k)))[:a] for a in accepted]
        body["discarded"] = draw(st.lists(st.text(max_size=16), max_size=3))
    return body


envelope = dict(src=st.text(max_size=24), n=st.integers(min_value=0, max_value=2**63 - 1),
                t=st.integers(min_value=0, max_value=2**63 - 1))


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from([k for k in KINDS if k != "step"]), body=generic_bodies, **envelope)
def test_every_non_step_kind_round_trips_or_is_refused_by_name(kind, body, src, n, t):
    """Arbitrary bodies: either they are valid for the kind and come back unchanged, or the
    validator refuses them with a FrameError that names the kind and the publisher."""
    try:
        frame = decode_frame(encode_frame(kind, body, src=src, n=n, t=t))
    except FrameError as exc:
        assert (exc.kind, exc.src) == (kind, src) and f"invalid {kind} frame" in str(exc)
        return
    assert (frame.kind, frame.src, frame.n, frame.t, frame.body, frame.minor) == (kind, src, n, t, body, SCHEMA_MINOR)
    assert frame.known


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(body=step_bodies(), **envelope)
def test_step_round_trips(body, src, n, t):
    frame = decode_frame(encode_frame("step", body, src=src, n=n, t=t))
    assert frame.kind == "step" and frame.body == body and (frame.src, frame.n, frame.t) == (src, n, t)


_PACKER = frame_packer()  # one packer across every example, as the publisher thread keeps one


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(sorted(KINDS)), body=st.one_of(step_bodies(), generic_bodies), **envelope)
def test_frames_packed_in_parts_are_the_envelope_packed_whole(kind, body, src, n, t):
    """encode_frame packs the body, then the envelope around it (frame_of_packed: the publisher packs a
    burst's bodies before it numbers and sends them): the bytes are those of the whole envelope packed
    at once, with a kept packer or a fresh one."""
    whole = msgpack.packb({"v": [SCHEMA_MAJOR, SCHEMA_MINOR], "k": kind, "src": src, "n": n, "t": t, "b": body},
                          use_bin_type=True)
    assert encode_frame(kind, body, src=src, n=n, t=t, packer=_PACKER) == whole == encode_frame(kind, body, src=src, n=n, t=t)
    assert frame_of_packed(kind, _PACKER.pack(body), src=src, n=n, t=t, packer=_PACKER) == whole


def test_a_kept_packer_is_clean_after_a_body_it_could_not_pack():
    """The publisher reports a body that does not pack (a tensor left in it) and goes on with the
    same packer: the next frame must not carry the failed one's bytes."""
    packer = frame_packer()
    with pytest.raises(TypeError):
        encode_frame("step", {"seq": 1, "bad": object()}, src="s", n=0, t=1, packer=packer)
    good = {"seq": 2}
    assert encode_frame("hook", good, src="s", n=1, t=2, packer=packer) == encode_frame("hook", good, src="s", n=1, t=2)


@pytest.mark.parametrize("change, field", [
    ({"num_steps": 1}, "b.accepted"),  # more drafts accepted than the round proposed
    ({"num_steps": -1}, "b.num_steps"),
    ({"accepted_path": [[0], [0, 1]]}, "b.accepted_path"),  # one node per accepted draft
    ({"accepted_path": [[0, 1], [0, 5]]}, "b.accepted_path"),  # a node past the request's draft_ids
    ({"accepted_path": [[0, 1]]}, "b.accepted_path"),  # one list per request
    ({"discarded": ["r", 3]}, "b.discarded"),
])
def test_tree_and_budget_fields_are_checked_against_the_step(change, field):
    body = {**step_body(1, bs=2), "accepted": [2, 2], "accepted_path": [[0, 1], [2, 0]], "num_steps": 3}
    body["accepted_ids"] = [d[:2] + [1] for d in body["draft_ids"]]
    assert decode_frame(encode_frame("step", body, src="s", n=0)).body == body
    with pytest.raises(FrameError, match=field.replace(".", r"\.")):
        decode_frame(encode_frame("step", {**body, **change}, src="s", n=0))


def test_realistic_bodies_round_trip():
    for kind, body in (("hello", hello_body()), ("load", load_body()), ("step", step_body(7, bs=64))):
        assert decode_frame(encode_frame(kind, body, src="dp0", n=1)).body == body


@settings(max_examples=300)
@given(st.binary(max_size=512))
def test_garbage_bytes_raise_only_frame_error(data):
    try:
        decode_frame(data)
    except FrameError:
        pass


def test_every_truncation_of_a_frame_is_refused():
    data = encode_frame("step", step_body(3, bs=4), src="dp0", n=9)
    for cut in range(len(data)):
        with pytest.raises(FrameError):
            decode_frame(data[:cut])


def _raw(obj) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def _env(**over):
    frame = {"v": [SCHEMA_MAJOR, SCHEMA_MINOR], "k": "hook", "src": "dp0", "n": 0, "t": 1, "b": {"seam": "x"}}
    frame.update(over)
    return frame


def test_extension_types_are_refused():
    with pytest.raises(FrameError, match="ext"):
        decode_frame(_raw(_env(b={"x": msgpack.ExtType(1, b"os.system")})))


@pytest.mark.parametrize("container", [
    lambda: [0] * ((1 << 18) + 1),
    lambda: {str(i): 0 for i in range((1 << 12) + 1)},
    lambda: "x" * ((1 << 20) + 1),
])
def test_oversized_containers_are_refused(container):
    with pytest.raises(FrameError):
        decode_frame(_raw(_env(b={"big": container()})))


def test_oversized_frame_is_refused_before_parsing():
    with pytest.raises(FrameError, match="exceeds"):
        decode_frame(b"\x00" * (MAX_FRAME_BYTES + 1))


@pytest.mark.parametrize("frame, message", [
    ([1, 2], "must be a map"),
    (_env(v="1.0"), "schema version"),
    (_env(v=[1]), "schema version"),
    (_env(k=5), "kind"),
    (_env(k=""), "kind"),
    (_env(src=None), "publisher id"),
    (_env(n="7"), "integers"),
    (_env(t=1.5), "integers"),
    (_env(t=2**64 - 1), "64-bit"),
    (_env(n=-1), "64-bit"),
    (_env(b=[1]), "body"),
    (_env(k="step", b={"seq": 1, "bs": 2, "rids": ["a"], "draft_ids": [[], []], "accepted": [0, 0], "bonus": [1, 1],
                        "accepted_ids": [[1], [1]]}), "length bs=2"),
    (_env(k="step", b={"seq": 1, "bs": 1, "rids": ["a"], "draft_ids": [[]], "accepted": [0], "bonus": [2],
                        "accepted_ids": [[1]]}), "bonus"),
    (_env(k="step", b={"seq": "1", "bs": 0}), "seq"),
])
def test_wrong_types_are_refused(frame, message):
    with pytest.raises(FrameError, match=message):
        decode_frame(_raw(frame))


def test_non_bytes_input_is_refused():
    with pytest.raises(FrameError):
        decode_frame("not bytes")  # type: ignore[arg-type]


def test_newer_major_is_refused_with_upgrade_hint():
    with pytest.raises(SchemaVersionError, match="upgrade eagle3scope"):
        decode_frame(_raw(_env(v=[SCHEMA_MAJOR + 1, 0])))


def test_older_major_is_refused():
    with pytest.raises(SchemaVersionError, match="obsolete"):
        decode_frame(_raw(_env(v=[SCHEMA_MAJOR - 1, 9])))


def test_newer_minor_and_unknown_kind_are_tolerated():
    frame = decode_frame(_raw(_env(v=[SCHEMA_MAJOR, SCHEMA_MINOR + 3], k="telemetry", b={"new": [1, 2]})))
    assert frame.minor == SCHEMA_MINOR + 3 and frame.kind == "telemetry" and not frame.known
    assert frame.body == {"new": [1, 2]}
