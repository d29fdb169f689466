"""The frame-body contract field by field (README "Bounds": frame bodies validated before any consumer
sees them; a bad frame is reported naming its field): each field below accepts the values at the edges
of its range and refuses the first value past them, with a FrameError whose message names the field's
path and shows what was sent. The ranges are written out here, from the shim's own bodies, not read
from the validator."""

from __future__ import annotations

import copy
import random
import re

import msgpack
import pytest

from eagle3scope.wire import decode_frame, encode_frame
from eagle3scope.wire.schema import FrameError, SchemaVersionError
from eagle3scope.wire.bodies import BodyError, read
from benchmarks.support.synthetic import hello_body, load_body, step_body

I64 = (1 << 63) - 1
TOKEN = (1 << 31) - 1
GOOD = {
    "hello": hello_body(parallel={"tp_size": 2, "dp_size": 1}, publisher_rank={"tp_rank": 0, "reason": "first"},
                        siblings=["ipc:///x/1"], seams={"v2.step": "attached"},
                        graphs={"captured": [{"mode": "decode", "bs": 4, "width": 8, "fc": False}],
                                "target_aux": {"on": True, "layers": [2, 4]}}),
    "load": load_body(),
    "config": {"layers": [1, 3, 4], "captured": [2, 4, 5], "applied": True, "reason": "", "origin": "control",
               "request_id": "r1"},
    "heartbeat": {"steps": 10, "dropped": 0, "hook_failures": 0, "queued": 0, "shim_us": {"v2.step": 3.5},
                  "step_us": 100.0, "publisher_us": 2.0, "ring": {"slots": 4, "capacity": 8}},
    "hook": {"seam": "draft_forward", "status": "attached", "detail": None},
    "step": {**step_body(5, bs=2, rng=random.Random(1)), "num_steps": 3},
}

NAME, TEXT = 4096, 1 << 16
# (kind, path, accepted values, refused values)
FIELDS = [
    ("hello", "pid", [0, I64, None], [-1, I64 + 1, "7", 1.5, True]),
    ("hello", "started", [0, I64], [-1, "x"]),
    ("hello", "tp_rank", [0, 1 << 20], [-1, (1 << 20) + 1]),
    ("hello", "dp_rank", [0, 1 << 20], [(1 << 20) + 1, [0]]),
    ("hello", "host", ["h" * NAME, None], ["h" * (NAME + 1), 5]),
    ("hello", "sglang_version", ["0.5.23"], [0.523, ["0.5.23"]]),
    ("hello", "worker", ["v2"], [2]),
    ("hello", "control", [None, "ipc:///c"], [{"x": 1}]),
    ("hello", "parallel.tp_size", [1, 1 << 20], [0, (1 << 20) + 1]),
    ("hello", "publisher_rank.tp_rank", [0], [-1]),
    ("hello", "publisher_rank.reason", ["r" * TEXT], ["r" * (TEXT + 1)]),
    ("hello", "siblings", [[], ["s" * NAME], ["e"] * 256], [["s" * (NAME + 1)], "ipc://x", [1], ["e"] * 257]),
    ("hello", "server_args.num_steps", [0, 1024, None], [-1, 1025, "3"]),
    ("hello", "server_args.topk", [0, 1024], [1025]),
    ("hello", "server_args.num_draft_tokens", [0, 1024], [-1]),
    ("hello", "server_args.cuda_graph", [True, False, None], [1, "true"]),
    ("hello", "server_args.dtype", ["bfloat16", 3, None], [[1], {"a": 1}]),
    ("hello", "seams.v2.step", ["attached"], [5]),
    ("hello", "graphs.target_aux.on", [True], ["on"]),
    ("hello", "graphs.target_aux.layers", [[-1, 1 << 20]], [[-2], [(1 << 20) + 1], "2,4"]),
    ("load", "hidden_size", [0, TOKEN], [-1, TOKEN + 1, "4096"]),
    ("load", "num_target_layers", [0, 1 << 20], [(1 << 20) + 1]),
    ("load", "draft_class", ["c" * NAME], ["c" * (NAME + 1), 1]),
    ("load", "fc.in", [0, TOKEN], [-1]),
    ("load", "fc.shape", [[1, 2], [TOKEN] * 8], [[1] * 9, [-1], [1.5]]),
    ("load", "aux.configured", [[-1], [1 << 20], [0] * 4096], [[-2], [0] * 4097, [1, "2"]]),
    ("load", "aux.use_aux", [True, None], ["yes"]),
    ("load", "aux.calls", [0, I64], [-1]),
    ("load", "weights.consumed", [[], ["w" * NAME]], [["w" * (NAME + 1)], [1], "fc.weight"]),
    ("load", "d2t.min", [-I64 - 1, I64], [I64 + 1]),
    ("load", "d2t.size", [0], [-1]),
    ("load", "d2t.injective", [False], [0]),
    ("load", "lm_head.source", ["checkpoint"], [1]),
    ("load", "lm_head.parallel_dim", [0, 7], [8, -1]),
    ("load", "lm_head.parallel_size", [1, 1 << 20], [0]),
    ("config", "layers", [[1, 2], None], [[1.5], 3]),
    ("config", "applied", [False], ["no"]),
    ("config", "reason", ["r" * TEXT], ["r" * (TEXT + 1)]),
    ("config", "origin", ["control"], [7]),
    ("config", "request_id", [5, "r", None], [[1]]),
    ("heartbeat", "steps", [0, I64], [-1, "10"]),
    ("heartbeat", "dropped", [0, I64], [-1, 1.0]),
    ("heartbeat", "hook_failures", [0], [-1]),
    ("heartbeat", "queued", [0], [-5]),
    ("heartbeat", "step_us", [0, 1e15, None], [-1.0, 1e16, "1"]),
    ("heartbeat", "publisher_us", [0.0], [-0.5]),
    ("heartbeat", "shim_us", [None, {"s" * NAME: 1.0}, {f"s{i}": 1.0 for i in range(256)}],
     [{"s" * (NAME + 1): 1.0}, {f"s{i}": 1.0 for i in range(257)}, {"a": -1.0}, [1.0]]),
    ("heartbeat", "ring.capacity", [0], [-1]),
    ("hook", "seam", ["s" * NAME], ["s" * (NAME + 1), ["x"]]),
    ("hook", "detail", ["d" * TEXT, None], ["d" * (TEXT + 1)]),
    ("step", "num_steps", [3, 1024, None], [-1, 1025]),
    ("step", "mode", ["decode", None], [3]),
    ("step", "t_ns", [0, I64, None], [-1, I64 + 1]),
    ("step", "draft_ms", [0.0, -1e15, 1e15, None], [1e16, float("inf"), "1"]),
    ("step", "capture.on", [False, None], ["off"]),
    ("step", "capture.layers", [[2, 4], None], [["2"]]),
]


def _set(body: dict, path: str, value: object) -> dict:
    body = copy.deepcopy(body)
    parent, key = body, path
    if path.startswith("seams."):
        parent, key = body["seams"], path[len("seams."):]
    else:
        *parents, key = path.split(".")
        for name in parents:
            parent = parent.setdefault(name, {})
    parent[key] = value
    return body


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 20 else text[:10]


CASES = [(kind, path, value, ok) for kind, path, good, bad in FIELDS
         for value, ok in [*((v, True) for v in good), *((v, False) for v in bad)]]


@pytest.mark.parametrize("kind, path, value, ok", CASES,
                         ids=[f"{k}.{p}={'ok' if ok else 'bad'}{i}" for i, (k, p, _, ok) in enumerate(CASES)])
def test_each_field_accepts_its_range_and_refuses_past_it_naming_the_field(kind, path, value, ok):
    body = _set(GOOD[kind], path, value)
    raw = encode_frame(kind, body, src="dp0", n=3, t=4)
    if ok:
        assert decode_frame(raw).body == body
        return
    with pytest.raises(FrameError) as info:
        decode_frame(raw)
    message = str(info.value)
    assert _path(message.split("frame: ", 1)[1]) == _path(f"b.{path}"), message
    assert (info.value.kind, info.value.src) == (kind, "dp0")
    if not isinstance(value, (dict, list)) and not (isinstance(value, str) and len(value) > 20):
        assert f"got {_shown(value)}" in message or type(value).__name__ in message, message


def test_a_rounds_budget_bounds_its_accepted_drafts():
    body = _set(GOOD["step"], "num_steps", max(GOOD["step"]["accepted"]) - 1)
    with pytest.raises(FrameError, match=r"b\.accepted: items must not exceed the round's num_steps"):
        decode_frame(encode_frame("step", body, src="dp0", n=0, t=0))


def test_the_good_bodies_are_good():
    for kind, body in GOOD.items():
        assert decode_frame(encode_frame(kind, body, src="dp0", n=0, t=0)).body == body


def test_unknown_fields_are_kept_as_plain_data_and_checked_as_such():
    for kind in ("hello", "load", "heartbeat", "hook", "config", "step"):
        body = {**GOOD[kind], "future_field": {"nested": [1, "x", 2.5, None]}}
        assert decode_frame(encode_frame(kind, body, src="dp0", n=0, t=0)).body == body
        bad = {**GOOD[kind], "future_field": {"nested": [float("nan")]}}
        with pytest.raises(FrameError, match=r"b\.future_field\.nested"):
            decode_frame(encode_frame(kind, bad, src="dp0", n=0, t=0))
    unknown_kind = {"a": {"b": [1, 2]}}
    assert decode_frame(encode_frame("newkind", unknown_kind, src="dp0", n=0, t=0)).body == unknown_kind


# -- what a refusal says ------------------------------------------------------------------------
# The message is what `record`, `watch` and the exporter's log show for a dropped frame (once per
# publisher and kind): the field's path, why, and what was sent, cut to 60 characters. Exact texts,
# one per way a body can be refused, written out here from the README's bounds.

STEP = {"seq": 1, "bs": 1, "rids": ["r"], "draft_ids": [[5, 6]], "accepted": [1], "bonus": [1], "accepted_ids": [[5, 9]]}
LONG = "s" * 100
LONG_SHOWN = "'" + "s" * 27 + "..." + "s" * 28 + "'"  # a hostile value is shown in 60 characters, never whole


def _nest(depth: int) -> list:
    """``depth`` lists, one inside the other, around a 1."""
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def _step(**fields) -> dict:
    return {**STEP, **fields}


P = "b.passes[]"
REFUSALS = [
    # plain data, in a kind the schema does not know and in the fields it does not name
    ("new", {"a": 1 << 63}, "b.a: integer outside the signed 64-bit range, got 9223372036854775808"),
    ("new", {"a": [0, -(1 << 63) - 1]}, "b.a[1]: integer outside the signed 64-bit range, got -9223372036854775809"),
    ("new", {"a": {"x": float("inf")}}, "b.a.x: number must be finite, got inf"),
    ("new", {"a": "t" * 65537}, "b.a: text longer than 65536 characters, got 65537"),
    ("new", {"a": _nest(8)}, "b.a[0][0][0][0][0][0][0]: nested deeper than 8, got 'list'"),
    ("new", {"a": {"k": {3: 1}}}, "b.a.k: map keys must be strings, got 3"),
    ("new", {"a": (1,)}, "b.a: not plain data, got 'tuple'"),
    ("new", {"a": [1, 1 << 200]}, "b.a[1]: integer outside the signed 64-bit range, got "
     "1606938044258990275541962092...62602522202993782792835301376"),
    ("hello", {"future": _nest(8)}, "b.future[0][0][0][0][0][0][0]: nested deeper than 8, got 'list'"),
    ("hello", {"future": {"x": float("nan")}}, "b.future.x: number must be finite, got nan"),
    ("hello", {5: 1}, "b: map keys must be strings, got 5"),
    # the named fields of each kind, one per checker
    ("hello", {"pid": -1}, "b.pid: must be an integer in [0, 9223372036854775807] or null, got -1"),
    ("hello", {"parallel": {"tp_size": 0}}, "b.parallel.tp_size: must be an integer in [1, 1048576] or null, got 0"),
    ("hello", {"parallel": 5}, "b.parallel: must be a map or null, got 'int'"),
    ("hello", {"parallel": {1: 2}}, "b.parallel: map keys must be strings, got 1"),
    ("hello", {"host": 5}, "b.host: must be a string of at most 4096 characters or null, got 5"),
    ("hello", {"server_args": {"dtype": [1]}}, "b.server_args.dtype: must be a number, string, boolean or null, got 'list'"),
    ("hello", {"server_args": {"extra": [1]}}, "b.server_args.extra: must be a number, string, boolean or null, got 'list'"),
    ("hello", {"server_args": {"extra": float("inf")}}, "b.server_args.extra: number must be finite, got inf"),
    ("hello", {"server_args": {"cuda_graph": 1}}, "b.server_args.cuda_graph: must be true, false or null, got 1"),
    ("hello", {"siblings": "ipc://x"}, "b.siblings: must be a list of names or null (at most 256), got 'ipc://x'"),
    ("hello", {"siblings": ["e"] * 257},
     "b.siblings: must be a list of names or null (at most 256), got ['e', 'e', 'e', 'e', 'e', 'e', ...]"),
    ("hello", {"siblings": [LONG * 41]}, f"b.siblings: items must be names (strings), got {LONG_SHOWN}"),
    ("hello", {"graphs": {"captured": 5}}, "b.graphs.captured: must be a list of at most 4096 maps or null, got 5"),
    ("hello", {"graphs": {"captured": [None]}}, "b.graphs.captured: must be a list of at most 4096 maps or null, got [None]"),
    ("hello", {"graphs": {"captured": [5]}}, "b.graphs.captured[]: must be a map or null, got 'int'"),
    ("hello", {"graphs": {"captured": [{"bs": -1}]}},
     "b.graphs.captured[].bs: must be an integer in [0, 65536] or null, got -1"),
    ("load", {"aux": {"configured": "1"}}, "b.aux.configured: must be a list of at most 4096 integers or null, got '1'"),
    ("load", {"aux": {"configured": [1, -2]}}, "b.aux.configured: items must be integers in [-1, 1048576], got -2"),
    ("load", {"weights": {"consumed": "fc"}}, "b.weights.consumed: must be a list of names or null, got 'fc'"),
    ("load", {"weights": {"consumed": [1]}}, "b.weights.consumed: items must be names (strings), got 1"),
    ("config", {"applied": "no"}, "b.applied: must be true, false or null, got 'no'"),
    ("config", {"pause_ms": -1.0}, "b.pause_ms: must be a non-negative finite number or null, got -1.0"),
    ("hook", {"detail": "d" * 65537}, f"b.detail: must be a string of at most 65536 characters or null, got "
     f"{chr(39)}{'d' * 27}...{'d' * 28}{chr(39)}"),
    ("heartbeat", {"shim_us": [1.0]}, "b.shim_us: must be a map of at most 256 seams or null, got [1.0]"),
    ("heartbeat", {"shim_us": {LONG * 41: 1.0}}, f"b.shim_us: keys must be seam names, got {LONG_SHOWN}"),
    ("heartbeat", {"shim_us": {LONG: -1.0}}, f"b.shim_us.{'s' * 60}: must be a non-negative finite number or null, got -1.0"),
    ("heartbeat", {"step_us": 1e16}, "b.step_us: must be a non-negative finite number or null, got 1e+16"),
    # the step, checked inline
    ("step", _step(seq=-1), "b.seq: must be a non-negative 64-bit integer, got -1"),
    ("step", _step(seq=None), "b.seq: must be a non-negative 64-bit integer, got None"),
    ("step", _step(bs=65537), "b.bs: must be an integer in [0, 65536], got 65537"),
    ("step", _step(rids=["r", "s"]), "b.rids: must be a list of length bs=1, got ['r', 's']"),
    ("step", _step(accepted_ids=None), "b.accepted_ids: must be a list of length bs=1, got None"),
    ("step", _step(rids=[5]), "b.rids: items must be request ids (strings), got 5"),
    ("step", _step(accepted=[1025]), "b.accepted: items must be integers in [0, 1024], got 1025"),
    ("step", _step(bonus=[2]), "b.bonus: items must be 0 or 1, got 2"),
    ("step", _step(draft_ids=[[5] * 1025]),
     "b.draft_ids: items must be lists of at most 1024 token ids, got [5, 5, 5, 5, 5, 5, ...]"),
    ("step", _step(accepted_ids=[[-1]]), "b.accepted_ids: token ids must be integers in [0, 2147483647], got -1"),
    ("step", _step(accepted_ids=[[5] * 1026]),  # 1,024 accepted drafts and the bonus at most
     "b.accepted_ids: items must be lists of at most 1025 token ids, got [5, 5, 5, 5, 5, 5, ...]"),
    ("step", _step(passes="x"), "b.passes: must be a list of at most 1024 maps, got 'x'"),
    ("step", _step(passes=None), "b.passes: must be a list of at most 1024 maps, got None"),
    ("step", _step(passes=[5]), f"{P}: must be a map, got 5"),
    ("step", _step(passes=[{"n": None}]), f"{P}.n: must be an integer in [1, 1048576], got None"),
    ("step", _step(passes=[{"n": 0}]), f"{P}.n: must be an integer in [1, 1048576], got 0"),
    ("step", _step(passes=[{"width": -1}]), f"{P}.width: must be an integer in [0, 2147483647] or null, got -1"),
    ("step", _step(passes=[{"fc": "y"}]), f"{P}.fc: must be true, false or null, got 'y'"),
    ("step", _step(passes=[{"mode": 5}]), f"{P}.mode: must be a string of at most 4096 characters or null, got 5"),
    ("step", _step(passes=[{"mode": "decode", "graph_bs": -1}]),
     f"{P}.graph_bs: must be an integer in [0, 65536] or null, got -1"),
    ("step", _step(t_ns=-1), "b.t_ns: must be a non-negative 64-bit integer or null, got -1"),
    ("step", _step(mode=5), "b.mode: must be a name, got 5"),
    ("step", _step(capture=5), "b.capture: must be a map or null, got 'int'"),
    ("step", _step(capture={"on": "y"}), "b.capture.on: must be true, false or null, got 'y'"),
    ("step", _step(draft_ms="1"), "b.draft_ms: must be a finite number or null, got '1'"),
    ("step", _step(verify_ms=10 ** 16), "b.verify_ms: must be a finite number or null, got 10000000000000000"),
    ("step", _step(extend_ms=-1e16), "b.extend_ms: must be a finite number or null, got -1e+16"),
    ("step", _step(extra={"x": float("nan")}), "b.extra.x: number must be finite, got nan"),
    ("step", _step(num_steps=1025), "b.num_steps: must be an integer in [0, 1024] or null, got 1025"),
    ("step", _step(num_steps=0), "b.accepted: items must not exceed the round's num_steps=0, got 1"),
    ("step", _step(accepted_path="x"), "b.accepted_path: must be a list of length bs=1, got 'x'"),
    ("step", _step(accepted_path=[[0, 1]]), "b.accepted_path: items must list one draft node per accepted draft, got [0, 1]"),
    ("step", _step(accepted_path=[[2]]), "b.accepted_path: nodes must index the request's 2 draft_ids, got 2"),
    ("step", _step(discarded="x"), "b.discarded: must be a list of at most 65536 request ids, got 'x'"),
    ("step", _step(discarded=[5]), "b.discarded: items must be names (strings), got 5"),
    ("step", _step(ctx_len=[1, 2]), "b.ctx_len: must be a list of length bs=1, got [1, 2]"),
    ("step", _step(ctx_len=[-1]), "b.ctx_len: items must be integers in [0, 2147483647], got -1"),
    ("step", _step(ctx_len=[True]), "b.ctx_len: items must be integers in [0, 2147483647], got True"),
    ("step", _step(greedy=[1]), "b.greedy: items must be true or false, got 1"),
    ("step", _step(greedy="x"), "b.greedy: must be a list of length bs=1, got 'x'"),
]


#: maps keyed by seam: a refusal names the map (the key may be a hostile string of any length)
SEAM_MAPS = ("b.seams", "b.shim_us")


def _path(message: str) -> str:
    """The field a refusal names, list positions left out (``b.passes[0].n`` and ``b.passes[].n`` alike)."""
    path = re.sub(r"\[[^\]]*\]", "", message.removeprefix("invalid hello frame: ").split(": ", 1)[0])
    return next((m for m in SEAM_MAPS if path.startswith(m + ".")), path)


@pytest.mark.parametrize("kind, body, message", REFUSALS, ids=[f"{i}-{m.split(':')[0]}" for i, (_, _, m) in enumerate(REFUSALS)])
def test_each_refusal_says_which_field_and_what_was_sent(kind, body, message):
    """The field's path as written here; the value sent, cut to 60 characters, where one was sent."""
    with pytest.raises(BodyError) as info:
        read(kind, body)
    said = str(info.value)
    assert _path(said) == _path(message), said
    shown = message.rsplit(", got ", 1)[1]
    type_named = shown in ("'int'", "'list'", "'tuple'", "'dict'")  # the old wording named the type, not the value
    if re.fullmatch(r"-?[\d.e+]+|'[^'.]{1,20}'|True", shown) and not type_named and "[...]" not in said:
        assert said.endswith(f", got {shown}"), said
    assert len(said) < 400


def test_the_deepest_nesting_and_the_widest_values_are_accepted():
    """One level less than the refusals above, and each range's last value, pass."""
    for kind in ("new", "hello", "step"):
        base = STEP if kind == "step" else {}
        read(kind, {**base, "future": _nest(7), "big": [(1 << 63) - 1, -(1 << 63)], "text": "t" * 65536})
    read("step", _step(passes=[{"n": 1 << 20, "width": (1 << 31) - 1, "fc": None, "mode": "m" * 4096}],
                       draft_ids=[[5] * 1024], accepted_ids=[[(1 << 31) - 1] * 1025], num_steps=1,
                       accepted_path=[[1]], discarded=["d"] * 65536, draft_ms=1e15, verify_ms=-10 ** 15,
                       ctx_len=[(1 << 31) - 1], greedy=[False]))
    read("heartbeat", {"shim_us": {f"s{i}": 0 for i in range(256)}, "step_us": 1e15, "publisher_us": 0})
    read("hello", {"graphs": {"captured": None, "target_aux": None}, "parallel": None, "siblings": None})


ENVELOPES = [
    ({"v": [1]}, FrameError, "frame has no valid schema version 'v': [1]"),
    ({"v": [1, "0"]}, FrameError, "frame has no valid schema version 'v': [1, '0']"),
    ({"v": ["1", 0]}, FrameError, "frame has no valid schema version 'v': ['1', 0]"),
    ({"v": [True, 0]}, FrameError, "frame has no valid schema version 'v': [True, 0]"),
    ({"v": [2, 0]}, SchemaVersionError, "frame uses eagle3scope schema 2.0, this viewer understands 1.x: upgrade eagle3scope"),
    ({"v": [0, 3]}, SchemaVersionError, "frame uses obsolete eagle3scope schema 0.3: upgrade the shim in the server"),
    ({"k": ""}, FrameError, "frame has no kind 'k': ''"),
    ({"k": 5}, FrameError, "frame has no kind 'k': '5'"),
    ({"k": "k" * 4097}, FrameError, f"frame has no kind 'k': '{'k' * 60}'"),
    ({"src": 5}, FrameError, "frame has no publisher id 'src': '5'"),
    ({"src": "s" * 4097}, FrameError, f"frame has no publisher id 'src': '{'s' * 60}'"),
    ({"n": -1}, FrameError, "frame counter 'n' and time 't' must be non-negative 64-bit integers"),
    ({"t": 1 << 63}, FrameError, "frame counter 'n' and time 't' must be non-negative 64-bit integers"),
    ({"t": 1.0}, FrameError, "frame counter 'n' and time 't' must be non-negative 64-bit integers"),
    ({"b": [1]}, FrameError, "frame body 'b' must be a map, got list"),
    ({"b": {**STEP, "bs": -1}}, FrameError, "invalid step frame: b.bs: Expected `int` >= 0, got -1"),
]


@pytest.mark.parametrize("change, error, message", ENVELOPES, ids=[m[:40] for _, _, m in ENVELOPES])
def test_each_envelope_refusal_says_exactly_why_and_names_what_it_could_read(change, error, message):
    frame = {"v": [1, 0], "k": "step", "src": "dp0", "n": 3, "t": 4, "b": STEP, **change}
    with pytest.raises(error) as info:
        decode_frame(msgpack.packb(frame))
    assert type(info.value) is error and str(info.value) == message
    kind = frame["k"] if "k" not in change and "v" not in change else None
    src = frame["src"] if kind and "src" not in change else None
    assert (info.value.kind, info.value.src) == (kind, src)


def test_bytes_that_are_no_frame_are_refused_saying_why():
    for data, message in [("x", "frame must be bytes, got str"), (msgpack.packb([1]), "frame must be a map, got list"),
                          (b"\x00" * 11, "frame of 11 bytes exceeds the 10-byte limit"),
                          (msgpack.packb(msgpack.ExtType(5, b"x")), "not a msgpack frame: ValueError: "),
                          (b"\xc1", "not a msgpack frame: FormatError: ")]:
        with pytest.raises(FrameError) as info:
            decode_frame(data, max_bytes=10)
        assert str(info.value).startswith(message) and (info.value.kind, info.value.src) == (None, None)
        assert str(info.value) == message or message.endswith(": ")  # msgpack's own words follow
    raw = encode_frame("step", STEP, src="s", n=0, t=0)
    assert decode_frame(raw, max_bytes=len(raw)).body == STEP  # a frame of exactly the limit is read
    with pytest.raises(FrameError, match=f"^frame of {len(raw)} bytes exceeds the {len(raw) - 1}-byte limit$"):
        decode_frame(raw, max_bytes=len(raw) - 1)


def test_the_envelope_as_encoded_and_as_a_reader_writes_it_back():
    import time

    raw = msgpack.unpackb(encode_frame("hook", {"seam": "x"}, src="dp0", n=7, t=9))
    assert raw == {"v": [1, 0], "k": "hook", "src": "dp0", "n": 7, "t": 9, "b": {"seam": "x"}}
    before = time.time_ns()
    stamped = decode_frame(encode_frame("hook", {}, src="dp0", n=0))
    assert before <= stamped.t <= time.time_ns()  # no t: the sender's clock now
    newer = decode_frame(msgpack.packb({**raw, "v": [1, 4]}))
    assert newer.to_dict() == {**raw, "v": [1, 4]} and newer.minor == 4 and newer.known
    longest = decode_frame(msgpack.packb({**raw, "k": "k" * 4096, "src": "s" * 4096}))  # names of 4,096 characters
    assert (longest.kind, longest.src, longest.known) == ("k" * 4096, "s" * 4096, False)
    with pytest.raises(FrameError, match=r"^not a msgpack frame: ValueError: "):
        decode_frame(msgpack.packb({**raw, 5: 1}))  # map keys are strings, the envelope's too
    blob = decode_frame(encode_frame("new", {"blob": b"\x00\xff"}, src="dp0", n=0, t=0))
    assert blob.body == {"blob": b"\x00\xff"}  # bytes travel as msgpack bin, not as text


def test_extension_types_are_refused_even_where_a_caller_lets_their_length_through():
    from eagle3scope.wire.schema import unpack_untrusted

    data = msgpack.packb({"x": msgpack.ExtType(5, b"ab")})
    with pytest.raises(FrameError) as info:
        unpack_untrusted(data, limits={"max_ext_len": 16})
    assert str(info.value) == "not a msgpack frame: FrameError: msgpack extension type 5 is not allowed"
