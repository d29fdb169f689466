"""The frame-body contract field by field (README "Bounds": frame bodies validated before any consumer
sees them; a bad frame is reported naming its field): each field below accepts the values at the edges
of its range and refuses the first value past them, with a FrameError whose message names the field's
path and shows what was sent. The ranges are written out here, from the shim's own bodies, not read
from the validator."""

from __future__ import annotations

import copy
import random

import pytest

from eagle3scope.wire import decode_frame, encode_frame
from eagle3scope.wire.schema import FrameError
from support.synthetic import hello_body, load_body, step_body

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
    assert f"b.{path}" in message, message
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
