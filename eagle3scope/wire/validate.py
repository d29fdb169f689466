"""Total validation of frame bodies: after :func:`validate_body` every consumer may trust the types.

``decode_frame`` calls it for every frame, so record, watch, replay, check and export never see an
unvalidated body. A body is plain data (str keys, ints within SQLite's signed 64-bit range, finite
floats, bounded nesting) and each field a consumer computes with has its documented type and a
bounded range; list lengths per request are bounded by :data:`MAX_DRAFT_TOKENS`, which caps what
SGLang's spec config can ask for (``speculative_num_draft_tokens``) with a wide margin. Fields
the schema does not name are allowed (newer minor versions add some) but must be plain data.
Anything else raises :class:`~eagle3scope.wire.schema.FrameError`: the frame is dropped whole.
"""

from __future__ import annotations

import math
import reprlib

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
#: token ids (draft and target vocabularies) and widths fit in 31 bits
MAX_TOKEN_ID = (1 << 31) - 1
#: drafted tokens per request per step (and accepted drafts); SGLang's trees are far smaller
MAX_DRAFT_TOKENS = 1024
#: requests per step
MAX_BATCH = 1 << 16
#: characters in a name (publisher id, rid, mode, seam, version, path)
MAX_NAME = 4096
#: seams in a per-seam map (the shim has about 15; SGLang releases add a few)
MAX_SEAMS = 256
#: characters in free text (details, reasons)
MAX_TEXT = 1 << 16
#: nesting of maps and lists in a body
MAX_DEPTH = 8
#: publishers one reader tracks (the subscriber, a session state, the exporter): ``src`` is whatever a
#: frame says, so without a bound a publisher cycling its ``src`` would grow every reader without end;
#: also the most sibling endpoints a hello may list
MAX_PUBLISHERS = 256

_SCALARS = (type(None), bool, str, bytes)


class BodyError(ValueError):
    """A body field has the wrong type or an absurd value (the message names it)."""


_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = _SHORT.maxlong = 60  # a hostile value is shown, never rendered whole


def _fail(path: str, what: str, value: object) -> None:
    raise BodyError(f"{path}: {what}, got {_SHORT.repr(value)}")


def check_plain(value: object, path: str = "b", depth: int = 0) -> None:
    """Plain msgpack data a JSON export and SQLite can hold: str keys, int64 ints, finite floats."""
    t = type(value)
    if t is int:
        if not INT64_MIN <= value <= INT64_MAX:
            _fail(path, "integer outside the signed 64-bit range", value)
    elif t is float:
        if not math.isfinite(value):
            _fail(path, "number must be finite", value)
    elif t is str:
        if len(value) > MAX_TEXT:
            _fail(path, f"text longer than {MAX_TEXT} characters", len(value))
    elif t in _SCALARS:
        pass
    elif depth >= MAX_DEPTH:
        _fail(path, f"nested deeper than {MAX_DEPTH}", t.__name__)
    elif t is list:
        for i, item in enumerate(value):
            if type(item) is not int or not INT64_MIN <= item <= INT64_MAX:  # int lists: the common case
                check_plain(item, f"{path}[{i}]", depth + 1)
    elif t is dict:
        for key, item in value.items():
            if type(key) is not str:
                _fail(path, "map keys must be strings", key)
            check_plain(item, f"{path}.{key}", depth + 1)
    else:
        _fail(path, "not plain data", t.__name__)


# -- field checkers: each takes (value, path) and raises BodyError -------------------------------

def _int(lo: int = 0, hi: int = INT64_MAX, optional: bool = True):
    def check(value, path):
        if value is None and optional:
            return
        if type(value) is not int or not lo <= value <= hi:
            _fail(path, f"must be an integer in [{lo}, {hi}]" + (" or null" if optional else ""), value)
    return check


def _num(value, path):
    if value is None:
        return
    if type(value) not in (int, float) or not math.isfinite(value) or abs(value) > 1e15:
        _fail(path, "must be a finite number or null", value)


def _bool(value, path):
    if value is not None and type(value) is not bool:
        _fail(path, "must be true, false or null", value)


def _str(limit: int = MAX_NAME):
    def check(value, path):
        if value is not None and (type(value) is not str or len(value) > limit):
            _fail(path, f"must be a string of at most {limit} characters or null", value)
    return check


def _scalar(value, path):
    if type(value) not in (type(None), bool, int, float, str):
        _fail(path, "must be a number, string, boolean or null", type(value).__name__)
    check_plain(value, path)


def _ints(lo: int, hi: int, max_len: int):
    """A list of at most ``max_len`` ints in [lo, hi], or null."""
    def check(value, path):
        if value is None:
            return
        if type(value) is not list or len(value) > max_len:
            _fail(path, f"must be a list of at most {max_len} integers or null", value)
        for x in value:
            if type(x) is not int or not lo <= x <= hi:
                _fail(path, f"items must be integers in [{lo}, {hi}]", x)
    return check


def _names(value, path, max_len: int | None = None):
    if value is None:
        return
    if type(value) is not list or (max_len is not None and len(value) > max_len):
        _fail(path, "must be a list of names or null" + (f" (at most {max_len})" if max_len else ""), value)
    for x in value:
        if type(x) is not str or len(x) > MAX_NAME:
            _fail(path, "items must be names (strings)", x)


def _map(fields: dict, values=None):
    """A map or null; named ``fields`` checked, other keys plain data (``values``: their checker)."""
    def check(value, path):
        if value is None:
            return
        if type(value) is not dict:
            _fail(path, "must be a map or null", type(value).__name__)
        _check_fields(value, fields, path, values)
    return check


def _check_fields(body: dict, fields: dict, path: str, values=None) -> None:
    for key, item in body.items():
        if type(key) is not str:
            _fail(path, "map keys must be strings", key)
        check = fields.get(key)
        if check is not None:
            check(item, f"{path}.{key}")
        elif values is not None:
            values(item, f"{path}.{key}")
        else:
            check_plain(item, f"{path}.{key}", 1)


_COUNT = _int()
_NAME = _str()
_TEXT = _str(MAX_TEXT)
_LAYERS = _ints(-1, 1 << 20, 4096)

_RANK = _int(0, 1 << 20)
_SIZE = _int(1, 1 << 20)

def _maps(fields: dict, max_len: int):
    """A list of at most ``max_len`` maps of ``fields``, or null."""
    item = _map(fields)

    def check(value, path):
        if value is not None and (type(value) is not list or len(value) > max_len or None in value):
            _fail(path, f"must be a list of at most {max_len} maps or null", value)
        for x in value or ():
            item(x, f"{path}[]")
    return check

HELLO = {
    "pid": _int(), "started": _int(), "host": _NAME, "tp_rank": _RANK, "dp_rank": _RANK,
    "parallel": _map({k: _SIZE for k in ("tp_size", "dp_size", "pp_size", "attn_tp_size", "attn_dp_size", "ep_size")}),
    "publisher_rank": _map({"tp_rank": _RANK, "dp_rank": _RANK, "attn_tp_rank": _RANK, "pp_rank": _RANK,
                            "reason": _TEXT}),
    "endpoint": _NAME, "siblings": lambda value, path: _names(value, path, MAX_PUBLISHERS),
    "sglang_version": _NAME, "shim_version": _NAME, "worker": _NAME, "worker_class": _NAME, "control": _NAME,
    "server_args": _map({"num_steps": _int(0, MAX_DRAFT_TOKENS), "topk": _int(0, MAX_DRAFT_TOKENS),
                         "num_draft_tokens": _int(0, MAX_DRAFT_TOKENS), "cuda_graph": _bool}, _scalar),
    "observable": _map({}, _scalar),
    "seams": _map({}, _NAME),
    "unobserved": _map({}, _TEXT),
    "graphs": _map({"captured": _maps({"mode": _NAME, "bs": _int(0, MAX_BATCH), "width": _int(0, MAX_TOKEN_ID),
                                       "fc": _bool}, 4096),
                    "target_aux": _map({"on": _bool, "layers": _LAYERS})}),
}

_WIDTH = _int(0, MAX_TOKEN_ID)
_SHAPE = _ints(0, MAX_TOKEN_ID, 8)
#: a weight's full shape on a TP-N server and this rank's shard of it (loadreport.tensor_facts)
_TENSOR = {"shape": _SHAPE, "shard_shape": _SHAPE, "parallel_dim": _int(0, 7), "parallel_size": _SIZE,
           "org_vocab_size": _WIDTH, "padded_size": _WIDTH}
LOAD = {
    "draft_class": _NAME, "target_class": _NAME,
    "hidden_size": _WIDTH, "target_hidden_size": _WIDTH, "num_target_layers": _int(0, 1 << 20),
    "draft_vocab_size": _WIDTH, "target_vocab_size": _WIDTH,
    "fc": _map({"in": _WIDTH, "out": _WIDTH, **_TENSOR}),
    "aux": _map({"configured": _LAYERS, "captured": _LAYERS, "requested": _LAYERS, "use_aux": _bool,
                 "capture_on": _bool, "offset_rule": _NAME, "calls": _COUNT}),
    "weights": _map({"consumed": _names, "skipped": _names, "unwritten": _names, "ignored": _names}),
    "d2t": _map({"present": _bool, "size": _COUNT, "min": _int(INT64_MIN), "max": _int(INT64_MIN),
                 "target_min": _int(INT64_MIN), "target_max": _int(INT64_MIN), "out_of_range": _COUNT,
                 "injective": _bool, "t2d_consistent": _bool, "looks_absolute": _bool}),
    "lm_head": _map({"source": _NAME, **_TENSOR}),
    "embed_tokens": _map({"source": _NAME, **_TENSOR}),
}

CONFIG = {"layers": _LAYERS, "captured": _LAYERS, "applied": _bool, "reason": _TEXT, "origin": _NAME,
          "request_id": _scalar}
def _duration(value, path):
    """A non-negative finite number (µs of some interval) or null."""
    if value is not None and (type(value) not in (int, float) or not 0 <= value <= 1e15):
        _fail(path, "must be a non-negative finite number or null", value)


def _seam_durations(value, path):
    """seam name -> µs, for at most MAX_SEAMS seams, or null."""
    if value is None:
        return
    if type(value) is not dict or len(value) > MAX_SEAMS:
        _fail(path, f"must be a map of at most {MAX_SEAMS} seams or null", value)
    for seam, us in value.items():
        if type(seam) is not str or len(seam) > MAX_NAME:
            _fail(path, "keys must be seam names", seam)
        _duration(us, f"{path}.{seam[:60]}")


HEARTBEAT = {"steps": _COUNT, "dropped": _COUNT, "hook_failures": _COUNT, "queued": _COUNT,
             "shim_us": _seam_durations, "step_us": _duration, "round_shim_us": _duration,
             "publisher_us": _duration,
             "ring": _map({"slots": _COUNT, "capacity": _COUNT, "allocations": _COUNT, "late_allocations": _COUNT,
                           "oversize": _COUNT})}
HOOK = {"seam": _NAME, "status": _NAME, "detail": _TEXT}

_PASS = {"mode": _NAME, "width": _WIDTH, "fc": _bool, "n": _int(1, 1 << 20, optional=False), "replayed": _bool,
         "graph_bs": _int(0, MAX_BATCH)}
_PASS_KEYS = frozenset(_PASS)
_CAPTURE = _map({"on": _bool, "layers": _LAYERS})
_STEP_TIMES = ("draft_ms", "verify_ms", "extend_ms")
_STEP_LISTS = ("rids", "draft_ids", "accepted", "bonus", "accepted_ids")
_STEP_KNOWN = frozenset(("seq", "bs", "passes", "t_ns", "mode", "capture", "num_steps", "accepted_path", "discarded",
                         *_STEP_LISTS, *_STEP_TIMES))


def _token_lists(lists: list, path: str, max_len: int) -> None:
    for ids in lists:  # plain loops: the fastest form for the short lists of a step
        if type(ids) is not list or len(ids) > max_len:
            _fail(path, f"items must be lists of at most {max_len} token ids", ids)
        for x in ids:
            if type(x) is not int or not 0 <= x <= MAX_TOKEN_ID:
                _fail(path, f"token ids must be integers in [0, {MAX_TOKEN_ID}]", x)


def _check_pass(p: object, path: str) -> None:
    if type(p) is not dict:
        _fail(path, "must be a map", p)
    width, n, fc, mode = p.get("width"), p.get("n", 1), p.get("fc"), p.get("mode")
    if (width is not None and (type(width) is not int or not 0 <= width <= MAX_TOKEN_ID)) \
            or type(n) is not int or not 1 <= n <= 1 << 20 or (fc is not None and type(fc) is not bool) \
            or (mode is not None and (type(mode) is not str or len(mode) > MAX_NAME)):
        _check_fields(p, _PASS, path)  # names the field
        _fail(path, "'n' must be an integer >= 1", n)
    if not p.keys() <= _PASS_KEYS:
        _check_fields(p, _PASS, path)


def check_step(body: dict) -> None:
    """A step body: the per-request lists agree with ``bs`` and hold what the analysis indexes."""
    get = body.get
    seq, bs = get("seq"), get("bs")
    if type(seq) is not int or not 0 <= seq <= INT64_MAX:
        _fail("b.seq", "must be a non-negative 64-bit integer", seq)
    if type(bs) is not int or not 0 <= bs <= MAX_BATCH:
        _fail("b.bs", f"must be an integer in [0, {MAX_BATCH}]", bs)
    for key in _STEP_LISTS:
        value = get(key)
        if type(value) is not list or len(value) != bs:
            _fail(f"b.{key}", f"must be a list of length bs={bs}", value)
    if bs:
        for rid in body["rids"]:
            if type(rid) is not str or len(rid) > MAX_NAME:
                _fail("b.rids", "items must be request ids (strings)", rid)
        for acc, bonus in zip(body["accepted"], body["bonus"]):
            if type(acc) is not int or not 0 <= acc <= MAX_DRAFT_TOKENS:
                _fail("b.accepted", f"items must be integers in [0, {MAX_DRAFT_TOKENS}]", acc)
            if type(bonus) is not int or not 0 <= bonus <= 1:
                _fail("b.bonus", "items must be 0 or 1", bonus)
        _token_lists(body["draft_ids"], "b.draft_ids", MAX_DRAFT_TOKENS)
        _token_lists(body["accepted_ids"], "b.accepted_ids", MAX_DRAFT_TOKENS + 1)
    passes = get("passes", ())
    if type(passes) is not list or len(passes) > MAX_DRAFT_TOKENS:
        if passes != ():
            _fail("b.passes", f"must be a list of at most {MAX_DRAFT_TOKENS} maps", passes)
    for p in passes:
        _check_pass(p, "b.passes[]")
    t_ns, mode, capture = get("t_ns"), get("mode"), get("capture")
    if t_ns is not None and (type(t_ns) is not int or not 0 <= t_ns <= INT64_MAX):
        _fail("b.t_ns", "must be a non-negative 64-bit integer or null", t_ns)
    if mode is not None and (type(mode) is not str or len(mode) > MAX_NAME):
        _fail("b.mode", "must be a name", mode)
    if capture is not None:
        _CAPTURE(capture, "b.capture")
    for key in _STEP_TIMES:
        value = get(key)
        if value is not None and type(value) is not float:
            _num(value, f"b.{key}")
        elif value is not None and not -1e15 <= value <= 1e15:
            _fail(f"b.{key}", "must be a finite number or null", value)
    _check_variants(body, bs)
    if not body.keys() <= _STEP_KNOWN:
        check_plain({key: value for key, value in body.items() if key not in _STEP_KNOWN}, "b")


def _check_variants(body: dict, bs: int) -> None:
    """The optional fields of trees and adaptive steps, consistent with ``accepted``: a round's budget
    bounds its accepted drafts; a tree's path names one draft node per accepted draft."""
    get = body.get
    budget, path, discarded = get("num_steps"), get("accepted_path"), get("discarded")
    if budget is not None:
        if type(budget) is not int or not 0 <= budget <= MAX_DRAFT_TOKENS:
            _fail("b.num_steps", f"must be an integer in [0, {MAX_DRAFT_TOKENS}] or null", budget)
        if bs and max(body["accepted"]) > budget:
            _fail("b.accepted", f"items must not exceed the round's num_steps={budget}", max(body["accepted"]))
    if path is not None:
        if type(path) is not list or len(path) != bs:
            _fail("b.accepted_path", f"must be a list of length bs={bs}", path)
        for nodes, acc, drafts in zip(path, body["accepted"], body["draft_ids"]):
            if type(nodes) is not list or len(nodes) != acc:
                _fail("b.accepted_path", "items must list one draft node per accepted draft", nodes)
            for x in nodes:
                if type(x) is not int or not 0 <= x < len(drafts):
                    _fail("b.accepted_path", f"nodes must index the request's {len(drafts)} draft_ids", x)
    if discarded is not None:
        if type(discarded) is not list or len(discarded) > MAX_BATCH:
            _fail("b.discarded", f"must be a list of at most {MAX_BATCH} request ids", discarded)
        _names(discarded, "b.discarded")


_BODIES = {"hello": HELLO, "load": LOAD, "config": CONFIG, "heartbeat": HEARTBEAT, "hook": HOOK}


def validate_body(kind: str, body: dict) -> None:
    """Raise :class:`BodyError` unless ``body`` is a valid body of ``kind`` (unknown kinds: plain data)."""
    if kind == "step":
        check_step(body)
        return
    fields = _BODIES.get(kind)
    if fields is None:
        check_plain(body)
    else:
        _check_fields(body, fields, "b")
