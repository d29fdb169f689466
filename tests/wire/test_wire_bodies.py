"""The typed bodies of ``eagle3scope/wire/bodies.py`` are what validation checks: every field of
every kind, nested maps included, is held to its declared bound (a value just inside passes, one
of the wrong type or just outside is refused), and the frames of the recording an older release
wrote still validate and name only declared fields. The engine side (every body the real shim
sends names only declared fields) is tests/shim/test_shim_engine.py::test_every_body_names_only_typed_fields."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from support.declared import undeclared
from eagle3scope.wire import KINDS, bodies, decode_frame
from eagle3scope.wire.validate import BodyError, validate_body

OLD_FILE = Path(__file__).parents[1] / "data" / "session-format1.e3s"

#: the smallest valid body of each kind (a step of no requests)
BASE = {"step": {"seq": 1, "bs": 0, "rids": [], "draft_ids": [], "accepted": [], "bonus": [], "accepted_ids": []}}


def _good(kind, bound) -> list:
    """Values a field of this bound accepts (null aside)."""
    t = type(bound)
    if t is bodies.Int:
        return [bound.lo, bound.hi]
    if t is bodies.Text:
        return ["", "x" * bound.limit]
    if t is bodies.Flag:
        return [True, False]
    if t is bodies.Number:
        return [-1.5, 0, 1e15]
    if t is bodies.Duration:
        return [0, 2.5]
    if t is bodies.Scalar:
        return ["x", 1, 1.5, True]
    if t is bodies.IntList:
        return [[], [bound.lo, bound.hi], [bound.lo] * bound.max_len]
    if t is bodies.NameList:
        return [[], ["a", "b"]]
    if t is bodies.Fields:
        return [{}]
    if t in (bodies.MapList, bodies.PerSeam):
        return [[] if t is bodies.MapList else {}]  # an item's good values: under the bad ones' nested cases
    if t is bodies.PerRequest:
        return [[]] if bound.required else [None, []]
    raise AssertionError(bound)


def _bad(kind, bound) -> list:
    """Values a field of this bound refuses: the wrong type, just outside, or a nested field's bad value."""
    t = type(bound)
    if t is bodies.Int:
        return ["1", 1.0, True, bound.lo - 1, bound.hi + 1] + ([] if bound.optional else [None])
    if t is bodies.Text:
        return [5, ["x"], "x" * (bound.limit + 1)]
    if t is bodies.Flag:
        return [1, "true"]
    if t is bodies.Number:
        return ["1", 1e16, [1.0]]
    if t is bodies.Duration:
        return [-1, "1", 1e16]
    if t is bodies.Scalar:
        return [[1], {"a": 1}]
    if t is bodies.IntList:
        return [5, [bound.lo - 1], [bound.hi + 1], ["1"], [bound.lo] * (bound.max_len + 1)]
    if t is bodies.NameList:
        return [5, [1], ["x" * (bodies.MAX_NAME + 1)]] + ([["a"] * (bound.max_len + 1)] if bound.max_len else [])
    if t is bodies.Fields:
        out: list = [5, [], "x"]
        if typing.is_typeddict(kind):
            out += [{name: bad} for name, (k, b) in bodies.bounds(kind).items() for bad in _bad(k, b)]
        if bound.values is not None:
            out += [{"zz_not_named": bad} for bad in _bad(None, bound.values)]
        return out
    if t is bodies.MapList:
        item = typing.get_args(kind)[0]
        return [5, [None], [5], [{}] * (bound.max_len + 1)] + ([] if bound.optional else [None]) + [[{name: bad}] for name, (k, b) in bodies.bounds(item).items() for bad in _bad(k, b)]
    if t is bodies.PerSeam:
        return [5, {"s" * (bodies.MAX_NAME + 1): 1}] + [{"seam": bad} for bad in _bad(None, bound.values)]
    if t is bodies.PerRequest:
        return ["x", 5, [1]] if bound.required else ["x", 5, [[0]]]
    raise AssertionError(bound)


FIELDS = [(kind, name, k, b) for kind, typed in bodies.BODIES.items() for name, (k, b) in bodies.bounds(typed).items()]


def test_every_kind_has_a_type_and_only_those():
    assert KINDS == tuple(bodies.BODIES) == ("hello", "load", "step", "config", "heartbeat", "hook", "finish")
    assert bodies.PER_REQUEST == ("rids", "draft_ids", "accepted", "bonus", "accepted_ids", "accepted_path", "ctx_len",
                                  "greedy", "constrained")


@pytest.mark.parametrize("kind, name, field_type, bound", FIELDS, ids=[f"{k}.{n}" for k, n, _, _ in FIELDS])
def test_each_field_is_held_to_its_declared_bound(kind, name, field_type, bound):
    base = BASE.get(kind, {})
    optional = getattr(bound, "optional", True) and not (type(bound) is bodies.PerRequest and bound.required)
    good = [0] if (kind, name) == ("step", "bs") else _good(field_type, bound)  # bs: the lists' length
    for value in good + ([None] if optional else []):
        validate_body(kind, {**base, name: value})
    for value in _bad(field_type, bound):
        with pytest.raises(BodyError):
            validate_body(kind, {**base, name: value})


def test_constrained_holds_one_flag_per_request():
    one = {**BASE["step"], "bs": 1, "rids": ["r"], "draft_ids": [[]], "accepted": [0], "bonus": [1], "accepted_ids": [[5]]}
    validate_body("step", {**one, "constrained": [True]})
    for bad in ([1], [None], ["true"], [True, False], []):
        with pytest.raises(BodyError, match="constrained"):
            validate_body("step", {**one, "constrained": bad})


def test_fields_no_type_names_pass_as_plain_data_only():
    """Newer minor versions add fields: allowed, as plain data."""
    for kind in KINDS:
        validate_body(kind, {**BASE.get(kind, {}), "zz_newer": {"a": [1, 2.5, "x", None]}})
        with pytest.raises(BodyError):
            validate_body(kind, {**BASE.get(kind, {}), "zz_newer": float("nan")})


def test_an_old_recording_still_validates_and_names_only_declared_fields():
    """The file format is an interface: the frames an older release recorded decode as they did."""
    from eagle3scope.store import SessionReader

    seen: dict[str, int] = {}
    with SessionReader(OLD_FILE) as reader:
        for _, frame in reader.frames():
            decode_frame(_encode(frame))
            seen[frame.kind] = seen.get(frame.kind, 0) + 1
            assert undeclared(frame.body, bodies.BODIES[frame.kind]) == [], frame.kind
    assert {"hello", "load", "step", "heartbeat"} <= set(seen), seen


def _encode(frame) -> bytes:
    from eagle3scope.wire import encode_frame

    return encode_frame(frame.kind, frame.body, src=frame.src, n=frame.n, t=frame.t)
