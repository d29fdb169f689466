"""Total validation of frame bodies: after :func:`validate_body` every consumer may trust the types.

``decode_frame`` calls it for every frame, so record, watch, replay, check and export never see an
unvalidated body. The fields and their bounds are those of :mod:`bodies` (one ``TypedDict`` per kind):
the tables here are derived from them at import. A body is plain data (str keys, ints within SQLite's signed 64-bit range, finite
floats, bounded nesting) and each field a consumer computes with has its documented type and a
bounded range; list lengths per request are bounded by :data:`MAX_DRAFT_TOKENS`, which caps what
SGLang's spec config can ask for (``speculative_num_draft_tokens``) with a wide margin. Fields
the schema does not name are allowed (newer minor versions add some) but must be plain data.
Anything else raises :class:`~eagle3scope.wire.schema.FrameError`: the frame is dropped whole.
"""

from __future__ import annotations

import math
import reprlib
import typing

from eagle3scope.wire import bodies
from eagle3scope.wire.bodies import (  # noqa: F401  (the bounds, under the names readers import them by)
    INT64_MAX,
    INT64_MIN,
    MAX_BATCH,
    MAX_CONTEXT,
    MAX_DEPTH,
    MAX_DRAFT_TOKENS,
    MAX_NAME,
    MAX_PUBLISHERS,
    MAX_SEAMS,
    MAX_TEXT,
    MAX_TOKEN_ID,
)

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


def _seam_map(values):
    """seam name -> ``values``, for at most MAX_SEAMS seams, or null."""
    def check(value, path):
        if value is None:
            return
        if type(value) is not dict or len(value) > MAX_SEAMS:
            _fail(path, f"must be a map of at most {MAX_SEAMS} seams or null", value)
        for seam, item in value.items():
            if type(seam) is not str or len(seam) > MAX_NAME:
                _fail(path, "keys must be seam names", seam)
            values(item, f"{path}.{seam[:60]}")
    return check


def _duration(value, path):
    """A non-negative finite number (µs of some interval) or null."""
    if value is not None and (type(value) not in (int, float) or not 0 <= value <= 1e15):
        _fail(path, "must be a non-negative finite number or null", value)


def _maps(fields: dict, max_len: int, optional: bool = True):
    """A list of at most ``max_len`` maps of ``fields`` (or null when ``optional``)."""
    item = _map(fields)

    def check(value, path):
        if (value is not None or not optional) and (type(value) is not list or len(value) > max_len or None in value):
            _fail(path, f"must be a list of at most {max_len} maps" + (" or null" if optional else ""), value)
        for x in value or ():
            item(x, f"{path}[]")
    return check


# -- the checkers of bodies.py's types ---------------------------------------------------------
def _checker(kind: object, spec: object):
    """The checker of a field of type ``kind`` bounded by ``spec``."""
    t = type(spec)
    if t is bodies.Int:
        return _int(spec.lo, spec.hi, spec.optional)
    if t is bodies.Text:
        return _str(spec.limit)
    if t is bodies.Flag:
        return _bool
    if t is bodies.Number:
        return _num
    if t is bodies.Duration:
        return _duration
    if t is bodies.Scalar:
        return _scalar
    if t is bodies.IntList:
        return _ints(spec.lo, spec.hi, spec.max_len)
    if t is bodies.NameList:
        return _names if spec.max_len is None else (lambda value, path: _names(value, path, spec.max_len))
    if t is bodies.Fields:
        named = fields(kind) if typing.is_typeddict(kind) else {}
        return _map(named, None if spec.values is None else _checker(None, spec.values))
    if t is bodies.MapList:
        return _maps(fields(typing.get_args(kind)[0]), spec.max_len, spec.optional)
    if t is bodies.PerSeam:
        return _seam_map(_checker(None, spec.values))
    raise TypeError(f"no checker for {spec!r}")  # PerRequest: check_step's own


def fields(typed) -> dict:
    """field -> checker for a ``TypedDict`` of :mod:`bodies`."""
    return {name: _checker(kind, spec) for name, (kind, spec) in bodies.bounds(typed).items()}


_BODIES = {kind: fields(typed) for kind, typed in bodies.BODIES.items() if kind != "step"}

_STEP = bodies.bounds(bodies.Step)
_PASS = fields(bodies.Pass)
_PASS_EAGER = frozenset(("mode", "width", "fc", "n"))  # the fields of every pass, checked inline
_CAPTURE = _map(fields(bodies.Capture))
_STEP_TIMES = tuple(name for name, (_, spec) in _STEP.items() if type(spec) is bodies.Number)
_STEP_DURATIONS = tuple(name for name, (_, spec) in _STEP.items() if type(spec) is bodies.Duration)
_STEP_LISTS = tuple(name for name, (_, spec) in _STEP.items() if type(spec) is bodies.PerRequest and spec.required)
_STEP_KNOWN = frozenset(_STEP)


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
    if not p.keys() <= _PASS_EAGER:  # a replayed pass's fields, or ones the schema does not name
        _check_fields(p, _PASS, path)


def check_step(body: dict) -> None:
    """A step body: the per-request lists agree with ``bs`` and hold what the analysis indexes.
    Written out rather than run through the derived checkers (the most frequent frame, checked on
    every ingest); tests/wire/test_wire_bodies.py holds it to every field's bound in ``bodies.Step``."""
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
    for key in _STEP_DURATIONS:
        value = get(key)
        if value is not None:
            _duration(value, f"b.{key}")
    _check_variants(body, bs)
    if not body.keys() <= _STEP_KNOWN:
        check_plain({key: value for key, value in body.items() if key not in _STEP_KNOWN}, "b")


def _check_variants(body: dict, bs: int) -> None:
    """The optional fields of trees, adaptive steps and constrained requests, consistent with
    ``accepted``: a round's budget bounds its accepted drafts; a tree's path names one draft node per
    accepted draft; ``constrained`` has one flag per request."""
    get = body.get
    budget, path, discarded, constrained = get("num_steps"), get("accepted_path"), get("discarded"), get("constrained")
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
    _per_request_values(body, bs)


def _per_request_values(body: dict, bs: int) -> None:
    """The optional per-request facts the slices read: a context length, a greedy flag and a
    grammar flag per request."""
    get = body.get
    ctx = get("ctx_len")
    if ctx is not None:
        if type(ctx) is not list or len(ctx) != bs:
            _fail("b.ctx_len", f"must be a list of length bs={bs}", ctx)
        for n in ctx:
            if type(n) is not int or not 0 <= n <= MAX_CONTEXT:
                _fail("b.ctx_len", f"items must be integers in [0, {MAX_CONTEXT}]", n)
    for name in ("greedy", "constrained"):
        flags = get(name)
        if flags is None:
            continue
        if type(flags) is not list or len(flags) != bs:
            _fail(f"b.{name}", f"must be a list of length bs={bs}", flags)
        for flag in flags:
            if type(flag) is not bool:
                _fail(f"b.{name}", "items must be true or false", flag)


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
