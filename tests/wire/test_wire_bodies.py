"""The records of ``eagle3scope/wire/bodies.py`` are what validation checks: every field of every
kind, nested maps included, is held to its declared bound (a value just inside passes, one of the
wrong type or just outside is refused), judged here by an acceptance written from the declaration
alone (:func:`accepts`), and the frames of the recording an older release wrote still validate and
name only declared fields. The engine side (every body the real shim sends names only declared
fields) is tests/shim/test_shim_engine.py::test_every_body_names_only_typed_fields."""

from __future__ import annotations

import math
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings, strategies as st
from msgspec import inspect

from eagle3scope.wire import KINDS, bodies, decode_frame, encode_frame
from eagle3scope.wire.bodies import BodyError, read
from support.declared import declared_fields as _fields, undeclared

OLD_FILE = Path(__file__).parents[1] / "data" / "session-format1.e3s"
OLD_OBSERVABLE = {"b.observable.draft_passes", "b.observable.verify"}

#: the smallest valid body of each kind (a step of no requests)
BASE = {"step": {"seq": 1, "bs": 0, "rids": [], "draft_ids": [], "accepted": [], "bonus": [], "accepted_ids": []}}


# -- what a declaration accepts, read from it alone ----------------------------------------------
def _in(value, t) -> bool:
    lo = t.ge if t.ge is not None else -math.inf
    hi = t.le if t.le is not None else math.inf
    return lo <= value <= hi


def accepts(t, value) -> bool:
    """Whether a field declared as ``t`` (msgspec's type info) accepts ``value`` as msgpack decoded it."""
    if isinstance(t, inspect.UnionType):
        return any(accepts(m, value) for m in t.types)
    if isinstance(t, inspect.NoneType):
        return value is None
    if isinstance(t, inspect.BoolType):
        return type(value) is bool
    if isinstance(t, inspect.IntType):
        return type(value) is int and _in(value, t)
    if isinstance(t, inspect.FloatType):
        return type(value) in (int, float) and math.isfinite(value) and _in(value, t)
    if isinstance(t, inspect.StrType):
        return type(value) is str and (t.max_length is None or len(value) <= t.max_length)
    if isinstance(t, inspect.ListType):
        return type(value) is list and (t.max_length is None or len(value) <= t.max_length) \
            and all(accepts(t.item_type, v) for v in value)
    if isinstance(t, inspect.DictType):
        return type(value) is dict and (t.max_length is None or len(value) <= t.max_length) \
            and all(accepts(t.key_type, k) and accepts(t.value_type, v) for k, v in value.items())
    if isinstance(t, inspect.StructType):
        fields = _fields(t.cls)
        return type(value) is dict and all(accepts(fields[k].type, v) for k, v in value.items() if k in fields)
    raise AssertionError(t)


def candidates(t) -> list:
    """Values at and just past each edge of ``t``, of its type and of others, nested ones included."""
    if isinstance(t, inspect.UnionType):
        return [v for m in t.types for v in candidates(m)]
    if isinstance(t, inspect.NoneType):
        return [None]
    if isinstance(t, inspect.BoolType):
        return [True, False, 1, "true"]
    if isinstance(t, (inspect.IntType, inspect.FloatType)):
        edges = [e for e in (t.ge, t.le) if e is not None]
        past = [e - 1 for e in edges[:1]] + [e + 1 if isinstance(t, inspect.IntType) else e * 10 + 1 for e in edges[1:]]
        return [*edges, *past, 0, "1", 1.5, True, [1]]
    if isinstance(t, inspect.StrType):
        n = t.max_length or 8
        return ["", "x" * n, "x" * (n + 1), 5, ["x"]]
    if isinstance(t, inspect.ListType):
        items = candidates(t.item_type)
        out = [[], 5, "x", *([item] for item in items)]
        if t.max_length is not None and t.max_length <= 8192:
            good = next(v for v in items if accepts(t.item_type, v))
            out += [[good] * t.max_length, [good] * (t.max_length + 1)]
        return out
    if isinstance(t, inspect.DictType):
        values = candidates(t.value_type)
        out = [{}, 5, [], *({"seam": v} for v in values)]
        if t.max_length is not None:
            good = next(v for v in values if accepts(t.value_type, v))
            out += [{f"s{i}": good for i in range(t.max_length + 1)}]
        return out
    if isinstance(t, inspect.StructType):
        return [{}, 5, [], "x", *({f.encode_name: v} for f in inspect.type_info(t.cls).fields for v in candidates(f.type))]
    raise AssertionError(t)


def _expected(kind: str, name: str, t, value) -> bool:
    if kind == "step" and name in bodies.PER_REQUEST and isinstance(value, list) and value:
        return False  # a step of no requests: every per-request list is empty
    return accepts(t, value)


FIELDS = [(kind, name, f) for kind, typed in bodies.BODIES.items() for name, f in _fields(typed).items()]


def test_every_kind_has_a_record_and_only_those():
    assert KINDS == tuple(bodies.BODIES) == ("hello", "load", "step", "config", "heartbeat", "hook", "finish")
    assert bodies.PER_REQUEST == ("rids", "draft_ids", "accepted", "bonus", "accepted_ids", "accepted_path", "ctx_len",
                                  "greedy", "constrained")


@pytest.mark.parametrize("kind, name, field", FIELDS, ids=[f"{k}.{n}" for k, n, _ in FIELDS])
def test_each_field_is_held_to_its_declared_bound(kind, name, field):
    base = BASE.get(kind, {})
    for value in candidates(field.type):
        if (kind, name) == ("step", "bs") and value not in (0, None):
            continue  # bs is the lists' length: its range is the next test's
        body = {**base, name: value}
        if _expected(kind, name, field.type, value):
            read(kind, body)
        else:
            with pytest.raises(BodyError):
                read(kind, body)


def test_a_required_field_left_out_is_refused():
    for name in ("seq", "bs", "rids", "draft_ids", "accepted", "bonus", "accepted_ids"):
        with pytest.raises(BodyError, match=name):
            read("step", {k: v for k, v in BASE["step"].items() if k != name})
    assert [f.encode_name for f in inspect.type_info(bodies.Step).fields if f.required] == \
        ["seq", "bs", "rids", "draft_ids", "accepted", "bonus", "accepted_ids"]
    for kind in KINDS:
        if kind != "step":
            read(kind, {})  # every other field is optional: older shims lack the newer ones


def _one(**extra) -> dict:
    return {**BASE["step"], "bs": 1, "rids": ["r"], "draft_ids": [[3, 4]], "accepted": [1], "bonus": [1],
            "accepted_ids": [[3, 9]], **extra}


@given(bs=st.integers(0, 6), lengths=st.lists(st.integers(0, 7), min_size=9, max_size=9))
@settings(max_examples=60, deadline=None)
def test_every_per_request_list_holds_one_item_per_request(bs, lengths):
    item = {"rids": "r", "draft_ids": [1], "accepted": 1, "bonus": 1, "accepted_ids": [1, 2], "accepted_path": [0],
            "ctx_len": 5, "greedy": True, "constrained": False}
    body = {"seq": 1, "bs": bs}
    for name, n in zip(bodies.PER_REQUEST, lengths):
        body[name] = [item[name]] * n
    fits = all(n == bs for n in lengths)
    if fits:
        step = read("step", body)
        assert [r.rid for r in step.requests] == ["r"] * bs and step.committed == 2 * bs
    else:
        with pytest.raises(BodyError):
            read("step", body)


def test_constrained_holds_one_flag_per_request():
    read("step", _one(constrained=[True]))
    for bad in ([1], [None], ["true"], [True, False], []):
        with pytest.raises(BodyError, match="constrained"):
            read("step", _one(constrained=bad))


def test_fields_no_record_declares_pass_as_plain_data_only():
    """Newer minor versions add fields: allowed as plain data, and kept in the map as sent."""
    for kind in KINDS:
        body = {**BASE.get(kind, {}), "zz_newer": {"a": [1, 2.5, "x", None]}}
        frame = decode_frame(encode_frame(kind, body, src="s", n=0, t=1))
        assert frame.body["zz_newer"] == {"a": [1, 2.5, "x", None]} and not hasattr(frame.record, "zz_newer")
        for bad in (float("nan"), 1 << 64, "x" * (bodies.MAX_TEXT + 1)):
            with pytest.raises(BodyError):
                read(kind, {**BASE.get(kind, {}), "zz_newer": bad})
    with pytest.raises(BodyError, match="passes"):
        read("step", {**BASE["step"], "passes": [{"n": 1, "zz": float("inf")}]})
    with pytest.raises(BodyError, match="server_args"):
        read("hello", {"server_args": {"zz": [1]}})  # a server argument is a scalar, named or not


def test_the_hello_reads_the_publisher_index_under_its_old_name_too():
    assert read("hello", {"publisher_index": 3}).publisher_index == 3
    assert read("hello", {"dp_rank": 2}).publisher_index == 2  # recordings of older shims
    assert read("hello", {"publisher_index": 1, "dp_rank": 2}).publisher_index == 1
    assert read("hello", {}).publisher_index is None


def test_the_engine_and_its_version_from_either_shape_of_hello():
    old = read("hello", {"sglang_version": "0.5.23"})
    new = read("hello", {"engine": "vllm", "engine_version": "0.32.0"})
    assert (old.engine_id, old.engine_label, old.sglang_release) == ("sglang", "SGLang 0.5.23", "0.5.23")
    assert (new.engine_id, new.engine_label, new.sglang_release) == ("vllm", "vLLM 0.32.0", None)


def test_observable_names_the_schema_lacks_are_typed_away():
    """Fixtures once sent ``observable={"draft_passes": True, "verify": True}``; the record has no
    such flags, so nothing can read them, and the passes stay unknown (as an older shim's)."""
    hello = read("hello", {"observable": {"draft_passes": True, "verify": True}})
    assert not hasattr(hello.observable, "draft_passes")
    assert set(hello.observable.pass_visibility.values()) == {"unknown"}
    seen = read("hello", {"observable": {"passes_draft_decode": True, "graph_draft_decode": True}})
    assert seen.observable.pass_visibility["draft decode"] == "graph"


def test_an_old_recording_still_validates_and_names_only_declared_fields():
    """The file format is an interface: the frames an older release recorded decode as they did."""
    from eagle3scope.store import SessionReader

    seen: dict[str, int] = {}
    with SessionReader(OLD_FILE) as reader:
        for _, frame in reader.frames():
            decode_frame(encode_frame(frame.kind, frame.body, src=frame.src, n=frame.n, t=frame.t))
            seen[frame.kind] = seen.get(frame.kind, 0) + 1
            # its hello carries the fixtures' old observable names (typed away, the test above)
            assert set(undeclared(frame.body, bodies.BODIES[frame.kind])) <= OLD_OBSERVABLE, frame.kind
    assert {"hello", "load", "step", "heartbeat"} <= set(seen), seen


def test_a_record_packs_as_the_map_of_its_fields():
    """The shim may hand the packer a record or a map: the frame decodes to the same record."""
    record = bodies.Hook(seam="verify", status="failed", detail="x")
    frame = decode_frame(encode_frame("hook", record, src="s", n=0, t=1))
    assert frame.body == {"seam": "verify", "status": "failed", "detail": "x"} and frame.record == record
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(bodies.Config(applied=True))) == {"applied": True}
