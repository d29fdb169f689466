"""The frame bodies, declared once: one msgspec ``Struct`` per kind and per nested map, each field
with its type and its bound (``Meta(ge=, le=, max_length=)``), and the facts every reader derives
from them as properties, so no reader opens a body map itself.

:func:`read` turns a decoded body map into its record, checking every field (msgspec, in C) and
the cross-field rules of a step (``__post_init__``); a body that fails is refused whole
(:class:`BodyError`, which ``schema.decode_frame`` turns into a ``FrameError``). Every field is
optional with a default (bodies of older shims lack the newer ones) except a step's ``seq``,
``bs`` and per-request lists, which a step has always carried.

Fields of newer shims: msgspec skips map keys a record does not declare (``forbid_unknown_fields``
off); they stay reachable as plain data in the map as sent, ``Frame.body``, which recordings store
byte for byte, and ``Hello.sent`` / ``Load.sent`` for the load-report screen. Keeping the map
rather than an ``extra`` field costs nothing (msgpack decoded it already) and keeps the record
free of a catch-all every reader would have to ignore. Those keys must still be plain data a JSON
export and SQLite can hold (:func:`check_plain`). What each field means is in :mod:`schema`'s
docstring.
"""

from __future__ import annotations

import math
import re
import reprlib
from typing import Annotated, ClassVar, Union

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from eagle3scope.wire.aux_layers import Engine

# -- bounds -------------------------------------------------------------------------------------
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
#: token ids (draft and target vocabularies) and widths fit in 31 bits
MAX_TOKEN_ID = (1 << 31) - 1
#: drafted tokens per request per step (and accepted drafts); SGLang's trees are far smaller
MAX_DRAFT_TOKENS = 1024
#: requests per step
MAX_BATCH = 1 << 16
#: tokens in a request's context (a step's ``ctx_len``); far above any model's window
MAX_CONTEXT = (1 << 31) - 1
#: characters in a name (publisher id, rid, mode, seam, version, path)
MAX_NAME = 4096
#: seams in a per-seam map, and seams one reader lists per publisher (the shim has about 17)
MAX_SEAMS = 256
#: characters in free text (details, reasons)
MAX_TEXT = 1 << 16
#: nesting of maps and lists in a body
MAX_DEPTH = 8
#: publishers one reader tracks (the subscriber, a session state, the exporter): ``src`` is whatever a
#: frame says, so without a bound a publisher cycling its ``src`` would grow every reader without end;
#: also the most sibling endpoints a hello may list
MAX_PUBLISHERS = 256

Count = Annotated[int, Meta(ge=0, le=INT64_MAX)]
Signed = Annotated[int, Meta(ge=INT64_MIN, le=INT64_MAX)]
Name = Annotated[str, Meta(max_length=MAX_NAME)]
Prose = Annotated[str, Meta(max_length=MAX_TEXT)]
Rank = Annotated[int, Meta(ge=0, le=1 << 20)]
Size = Annotated[int, Meta(ge=1, le=1 << 20)]
Width = Annotated[int, Meta(ge=0, le=MAX_TOKEN_ID)]
Budget = Annotated[int, Meta(ge=0, le=MAX_DRAFT_TOKENS)]
TokenId = Annotated[int, Meta(ge=0, le=MAX_TOKEN_ID)]
Layers = Annotated[list[Annotated[int, Meta(ge=-1, le=1 << 20)]], Meta(max_length=4096)]
Shape = Annotated[list[Annotated[int, Meta(ge=0, le=MAX_TOKEN_ID)]], Meta(max_length=8)]
Names = list[Name]
#: a finite number of magnitude at most 1e15 (a host time in ms)
Number = Annotated[float, Meta(ge=-1e15, le=1e15)]
#: a non-negative finite number (µs or ms of some interval)
Duration = Annotated[float, Meta(ge=0, le=1e15)]
#: plain data of one value: a number, string, boolean or null
Scalar = Union[bool, Signed, Number, Prose, None]


class Record(Struct, kw_only=True, omit_defaults=True):
    """A body or nested map: keyword fields, all with defaults unless a kind says otherwise."""


# -- seam statuses --------------------------------------------------------------------------------
#: statuses under which a hook does not see its seam: it failed, or what it wraps is absent
BLIND = ("failed", "missing")
#: a part of the server no hook can see (seam "worker" or "draft_model"; the detail says why)
UNHOOKED = "unhooked"
#: statuses the event log warns about
NOTEWORTHY = (*BLIND, UNHOOKED)


# -- hello --------------------------------------------------------------------------------------
class Parallel(Record):
    """The server's parallel layout (SGLang's names; absent from older shims' hellos)."""
    tp_size: Size | None = None
    dp_size: Size | None = None
    pp_size: Size | None = None
    attn_tp_size: Size | None = None
    attn_dp_size: Size | None = None
    ep_size: Size | None = None


class PublisherRank(Record):
    tp_rank: Rank | None = None
    dp_rank: Rank | None = None
    attn_tp_rank: Rank | None = None
    pp_rank: Rank | None = None
    reason: Prose | None = None


class ServerArgs(Record):
    """The speculative-decoding arguments a hello reports (values as sent)."""
    algorithm: Scalar = None
    num_steps: Budget | None = None
    topk: Budget | None = None
    num_draft_tokens: Budget | None = None
    dtype: Scalar = None
    cuda_graph: bool | None = None
    model_path: Scalar = None
    draft_model_path: Scalar = None
    attention_backend: Scalar = None
    overlap_schedule: bool | None = None  # whether the engine runs the overlap loop (None from older shims)

    def __bool__(self) -> bool:
        """False when the hello named none of them (no ``server_args``)."""
        return any(getattr(self, name) is not None for name in self.__struct_fields__)


#: hello.observable names of the draft passes whose width and fc the rules read
PASS_FACTS = {"passes_prefill": "prefill", "passes_draft_decode": "draft decode", "passes_draft_extend": "draft extend"}


class Observable(Record):
    """What this configuration lets the shim see (flags held to plain data, as validation always has)."""
    steps: Scalar = None
    draft_ids: Scalar = None
    accepted: Scalar = None
    passes_prefill: Scalar = None
    passes_draft_decode: Scalar = None
    passes_draft_extend: Scalar = None
    graph_prefill: Scalar = None
    graph_draft_decode: Scalar = None
    graph_draft_extend: Scalar = None
    device_timings: Scalar = None

    @property
    def pass_visibility(self) -> dict[str, str]:
        """How the shim sees each draft pass: "eager" (the draft forward's own hook), "graph" (the
        pass replays a captured graph; width and fc read where the engine hands the draft its hidden
        states), "unseen", or "unknown" (an older shim's hello)."""
        out = {}
        for fact, name in PASS_FACTS.items():
            seen, graph = getattr(self, fact), getattr(self, "graph_" + fact.removeprefix("passes_"))
            out[name] = "unseen" if seen is False else "graph" if graph is True else "eager" if graph is False else "unknown"
        return out

    @property
    def replayed_passes(self) -> list[str]:
        """The draft passes that replay a captured graph (``graph_*``)."""
        return [name for fact, name in PASS_FACTS.items() if getattr(self, "graph_" + fact.removeprefix("passes_"))]


class CapturedGraph(Record):
    mode: Name | None = None
    bs: Annotated[int, Meta(ge=0, le=MAX_BATCH)] | None = None
    width: Width | None = None
    fc: bool | None = None


class Capture(Record):
    """The target's aux capture (a step's ``capture``, the target graphs' ``target_aux``)."""
    on: bool | None = None
    layers: Layers | None = None


class Graphs(Record):
    captured: Annotated[list[CapturedGraph], Meta(max_length=4096)] | None = None
    target_aux: Capture | None = None


#: the engines a hello may name, as the viewer labels them (absent: an SGLang shim of before the field)
ENGINES = {engine.value: engine.label for engine in Engine}


class Hello(Record, dict=True):
    """What a publisher says about itself; ``sent`` is the map as sent (:func:`read`)."""
    pid: Count | None = None
    started: Count | None = None  # the shim's start time (absent from old shims): a new value is a restart
    host: Name | None = None
    tp_rank: Rank | None = None
    #: which of the server's publishers this is (its DP or attention-DP index)
    publisher_index: Rank | None = None
    #: the old key of ``publisher_index`` (recordings of older shims); read into it
    dp_rank: Rank | None = None
    parallel: Parallel | None = None
    publisher_rank: PublisherRank | None = None
    endpoint: Name | None = None  # where the publisher says it binds (the anchor for its siblings)
    siblings: Annotated[list[Name], Meta(max_length=MAX_PUBLISHERS)] | None = None
    engine: Name | None = None  # "sglang" | "vllm"; absent: sglang
    engine_version: Name | None = None
    sglang_version: Name | None = None  # older shims' engine version
    shim_version: Name | None = None
    worker: Name | None = None
    worker_class: Name | None = None  # the class of the speculative worker (None from older shims)
    control: Name | None = None
    server_args: ServerArgs | None = None
    observable: Observable | None = None
    seams: dict[str, Name] | None = None  # seam -> status at startup
    unobserved: dict[str, Prose] | None = None  # part -> why the hooks cannot see it
    graphs: Graphs | None = None

    #: maps whose keys the record does not name must hold scalars (as validation always held them)
    SCALAR_MAPS: ClassVar[tuple[str, ...]] = ("server_args", "observable")

    def __post_init__(self) -> None:
        if self.publisher_index is None:
            self.publisher_index = self.dp_rank
        for name, empty in (("server_args", ServerArgs), ("observable", Observable), ("graphs", Graphs)):
            if getattr(self, name) is None:
                setattr(self, name, empty())
        self.seams = self.seams or {}
        self.unobserved = self.unobserved or {}
        self.siblings = self.siblings or []
        self.sent = {}

    @property
    def args(self) -> ServerArgs:
        return self.server_args

    @property
    def server_args_sent(self) -> dict:
        """Every server argument as sent, ones this record does not name included (session metadata)."""
        value = self.sent.get("server_args")
        return value if isinstance(value, dict) else {}

    @property
    def identity(self) -> tuple:
        """What tells two processes apart under one ``src``: the pid and, from newer shims, the start time."""
        return self.pid, self.started

    @property
    def engine_id(self) -> str:
        """The engine's wire name: "sglang" | "vllm" (absent from older shims: sglang)."""
        return self.engine or "sglang"

    @property
    def engine_name(self) -> str:
        """The engine as the viewer labels it ("SGLang", "vLLM"; another name as sent)."""
        return ENGINES.get(self.engine_id, self.engine_id)

    @property
    def engine_release(self) -> str | None:
        """The engine's version, from either shape of hello (``engine_version``, older ``sglang_version``)."""
        return self.engine_version if self.engine_version is not None else self.sglang_version

    @property
    def sglang_release(self) -> str | None:
        """The SGLang version, for rules gated on SGLang releases (None on another engine)."""
        return self.engine_release if self.engine_id == "sglang" else None

    @property
    def engine_label(self) -> str:
        """"SGLang 0.5.23", "vLLM 0.32.0": what headers name the server by."""
        return f"{self.engine_name} {self.engine_release}"

    @property
    def graphs_captured(self) -> list[CapturedGraph]:
        return self.graphs.captured or []


# -- load ---------------------------------------------------------------------------------------
class TensorFacts(Record):
    """A weight's full shape on a TP-N server and this rank's shard of it (loadreport.tensor_facts)."""
    shape: Shape | None = None
    shard_shape: Shape | None = None
    parallel_dim: Annotated[int, Meta(ge=0, le=7)] | None = None
    parallel_size: Size | None = None
    org_vocab_size: Width | None = None
    padded_size: Width | None = None


class Fc(TensorFacts):
    in_: Width | None = msgspec.field(default=None, name="in")
    out: Width | None = None


class Aux(Record, dict=True):
    configured: Layers | None | UnsetType = UNSET  # the draft config's ids (None: absent, the release's default)
    captured: Layers | None = None  # the target's layers_to_capture at load
    requested: Layers | None = None
    use_aux: bool | None = None
    capture_on: bool | None = None
    offset_rule: Name | None = None  # "+1" | "none" | "default" | "other": what the target did with the ids
    calls: Count | None = None

    def __post_init__(self) -> None:
        #: the shim said whether ids were configured (older shims did not)
        self.reports_configured = self.configured is not UNSET
        if self.configured is UNSET:
            self.configured = None


class Weights(Record):
    consumed: Names | None = None
    skipped: Names | None = None  # checkpoint names the loader never consumed
    unwritten: Names | None = None  # draft parameters no checkpoint tensor wrote (None: not watched)
    ignored: Names | None = None

    def __post_init__(self) -> None:
        self.consumed, self.skipped = self.consumed or [], self.skipped or []
        self.unwritten, self.ignored = self.unwritten or [], self.ignored or []


class D2t(Record):
    present: bool | None = None
    size: Count | None = None
    min: Signed | None = None
    max: Signed | None = None
    target_min: Signed | None = None
    target_max: Signed | None = None
    out_of_range: Count | None = None
    injective: bool | None = None
    t2d_consistent: bool | None = None
    looks_absolute: bool | None = None


class Source(TensorFacts):
    """Where ``lm_head`` / ``embed_tokens`` came from: "checkpoint" | "target" | "init" | "tied"."""
    source: Name | None = None


def _said(record: Record | None) -> bool:
    """A nested map that named at least one field (an empty one says nothing)."""
    return record is not None and any(getattr(record, name) is not None for name in record.__struct_fields__)


class Load(Record, dict=True):
    """The draft's load report; ``sent`` is the map as sent (:func:`read`)."""
    draft_class: Name | None = None
    target_class: Name | None = None
    hidden_size: Width | None = None
    target_hidden_size: Width | None = None
    num_target_layers: Annotated[int, Meta(ge=0, le=1 << 20)] | None = None
    draft_vocab_size: Width | None = None
    target_vocab_size: Width | None = None
    fc: Fc | None = None
    aux: Aux | None = None
    weights: Weights | None = None  # None: not reported
    d2t: D2t | None | UnsetType = UNSET  # None: absent or not reported
    lm_head: Source | None = None
    embed_tokens: Source | None = None

    def __post_init__(self) -> None:
        self.d2t_reported = self.d2t is not UNSET
        self.d2t = self.d2t if self.d2t is not UNSET and _said(self.d2t) else None
        self.aux = self.aux if self.aux is not None else Aux()
        self.lm_head = self.lm_head if _said(self.lm_head) else None
        self.weights = self.weights if _said(self.weights) else None
        self.sent = {}

    @property
    def has_fc(self) -> bool:
        return _said(self.fc)

    @property
    def fc_in(self) -> int | None:
        return None if self.fc is None else self.fc.in_

    @property
    def fc_out(self) -> int | None:
        return None if self.fc is None else self.fc.out

    @property
    def embed_source(self) -> str | None:
        return None if self.embed_tokens is None else self.embed_tokens.source


# -- step ---------------------------------------------------------------------------------------
class Pass(Record):
    mode: Name | None = None
    width: Width | None = None
    fc: bool | None = None
    n: Annotated[int, Meta(ge=1, le=1 << 20)] = 1
    replayed: bool | None = None
    graph_bs: Annotated[int, Meta(ge=0, le=MAX_BATCH)] | None = None


class Request(Struct, frozen=True):
    """One request of a step: its slice of every per-request list (None: the step did not carry it)."""
    rid: str
    draft_ids: list[int]
    accepted: int
    bonus: int
    accepted_ids: list[int]
    accepted_path: list[int] | None
    ctx_len: int | None
    greedy: bool | None
    constrained: bool | None


Accepted = Annotated[int, Meta(ge=0, le=MAX_DRAFT_TOKENS)]


class Step(Record):
    """One speculative round (or one prefill). The per-request lists have ``bs`` items each."""
    seq: Count
    bs: Annotated[int, Meta(ge=0, le=MAX_BATCH)]
    rids: list[Name]
    draft_ids: list[Annotated[list[TokenId], Meta(max_length=MAX_DRAFT_TOKENS)]]
    accepted: list[Accepted]
    bonus: list[Annotated[int, Meta(ge=0, le=1)]]
    accepted_ids: list[Annotated[list[TokenId], Meta(max_length=MAX_DRAFT_TOKENS + 1)]]
    t_ns: Count | None = None
    mode: Name | None = "decode"
    passes: Annotated[list[Pass], Meta(max_length=MAX_DRAFT_TOKENS)] = []
    capture: Capture | None = None
    draft_ms: Number | None = None
    verify_ms: Number | None = None
    extend_ms: Number | None = None
    draft_device_ms: Duration | None = None
    verify_device_ms: Duration | None = None
    extend_device_ms: Duration | None = None
    num_steps: Budget | None = None  # this round's budget (adaptive steps): every accepted is at most it
    accepted_path: list[list[Annotated[int, Meta(ge=0)]]] | None = None
    discarded: Annotated[list[Name], Meta(max_length=MAX_BATCH)] | None = None
    ctx_len: list[Annotated[int, Meta(ge=0, le=MAX_CONTEXT)]] | None = None
    greedy: list[bool] | None = None
    #: per request: whether the engine constrains it by a grammar (regex, JSON schema, EBNF, structural
    #: tag); only in steps with a constrained request (absent: none, or a shim from before the field)
    constrained: list[bool] | None = None

    #: the per-request lists (what dropping a request from a step drops from each)
    PER_REQUEST: ClassVar[tuple[str, ...]] = ("rids", "draft_ids", "accepted", "bonus", "accepted_ids",
                                              "accepted_path", "ctx_len", "greedy", "constrained")

    def __post_init__(self) -> None:
        bs = self.bs
        for name in self.PER_REQUEST:
            value = getattr(self, name)
            if value is not None and len(value) != bs:
                raise ValueError(f"b.{name}: must be a list of length bs={bs}, got {len(value)} items")
        if self.num_steps is not None and bs and max(self.accepted) > self.num_steps:
            raise ValueError(f"b.accepted: items must not exceed the round's num_steps={self.num_steps}, "
                             f"got {max(self.accepted)}")
        if self.accepted_path is not None:
            for nodes, acc, drafts in zip(self.accepted_path, self.accepted, self.draft_ids):
                if len(nodes) != acc:
                    raise ValueError("b.accepted_path: items must list one draft node per accepted draft")
                if nodes and max(nodes) >= len(drafts):
                    raise ValueError(f"b.accepted_path: nodes must index the request's {len(drafts)} draft_ids, "
                                     f"got {max(nodes)}")

    @property
    def is_decode_step(self) -> bool:
        """A round that committed tokens: a decode round (not a prefill) of at least one request.
        What ``--steps N``, ``check``, the statistics and ``aux cycle`` count as a decode step."""
        return self.mode == "decode" and bool(self.accepted)

    @property
    def is_prefill(self) -> bool:
        return self.mode == "prefill"

    @property
    def committed(self) -> int:
        """Tokens the round committed: the accepted drafts and the bonus tokens."""
        return sum(self.accepted) + sum(self.bonus)

    @property
    def depth(self) -> int:
        """The longest draft of any request (a tree's node count)."""
        return max(map(len, self.draft_ids), default=0)

    @property
    def capture_on(self) -> bool | None:
        """Whether the target captured aux states in this round (None: the step does not say)."""
        return None if self.capture is None else self.capture.on

    @property
    def requests(self) -> list[Request]:
        """The step per request."""
        none = [None] * self.bs
        return [Request(*row) for row in zip(self.rids, self.draft_ids, self.accepted, self.bonus, self.accepted_ids,
                                              self.accepted_path or none, self.ctx_len or none, self.greedy or none,
                                              self.constrained or none)]


# -- config, heartbeat, hook --------------------------------------------------------------------
class Config(Record):
    layers: Layers | None = None
    captured: Layers | None = None
    applied: bool | None = None
    reason: Prose | None = None
    origin: Name | None = None  # "startup" | "control" | "runtime"
    request_id: Scalar = None
    pause_ms: Duration | None = None  # only when the change recaptured the target's graphs


class Ring(Record):
    slots: Count | None = None
    capacity: Count | None = None
    allocations: Count | None = None
    late_allocations: Count | None = None
    oversize: Count | None = None


class Heartbeat(Record):
    steps: Count | None = None
    dropped: Count | None = None
    hook_failures: Count | None = None
    queued: Count | None = None
    shim_us: Annotated[dict[Name, Duration], Meta(max_length=MAX_SEAMS)] | None = None
    step_us: Duration | None = None
    round_shim_us: Duration | None = None
    publisher_us: Duration | None = None
    ring: Ring | None = None


class Hook(Record):
    seam: Name | None = None
    status: Name | None = None  # "attached" | "missing" | "failed" | "disabled" | "unhooked"
    detail: Prose | None = None

    @property
    def blind(self) -> bool:
        """The hook does not see its seam."""
        return self.status in BLIND

    @property
    def noteworthy(self) -> bool:
        return self.status in NOTEWORTHY


# -- finish -------------------------------------------------------------------------------------
class Finished(Record):
    """The engine's own speculative counts of one request it finished (as ``meta_info`` reports them)."""
    rid: Name | None = None
    verify_ct: Count | None = None
    correct_drafts: Count | None = None
    histogram: Annotated[list[Count], Meta(max_length=MAX_DRAFT_TOKENS + 1)] | None = None

    #: the per-request counts the viewer compares with its tallies
    COUNTS: ClassVar[tuple[str, ...]] = ("verify_ct", "correct_drafts", "histogram")

    @property
    def counts(self) -> dict:
        """The counts the engine reported (a release that does not keep one leaves it out)."""
        return {name: getattr(self, name) for name in self.COUNTS if getattr(self, name) is not None}


class Finish(Record):
    seq: Count | None = None
    dropped: Count | None = None
    requests: Annotated[list[Finished], Meta(max_length=MAX_BATCH)] | None = None


#: kind -> its record; the kinds this schema knows, in this order
BODIES: dict[str, type[Record]] = {"hello": Hello, "load": Load, "step": Step, "config": Config,
                                    "heartbeat": Heartbeat, "hook": Hook, "finish": Finish}
KINDS = tuple(BODIES)
#: a step's per-request lists
PER_REQUEST = Step.PER_REQUEST


# -- reading ------------------------------------------------------------------------------------
class BodyError(ValueError):
    """A body field has the wrong type or an absurd value (the message names it)."""


_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = _SHORT.maxlong = 60  # a hostile value is shown, never rendered whole
_SCALARS = (type(None), bool, str, bytes)


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


_STEP_KEYS = frozenset(Step.__struct_encode_fields__)
_PASS_KEYS = frozenset(Pass.__struct_encode_fields__)
_CAPTURE_KEYS = frozenset(Capture.__struct_encode_fields__)


def _extra(body: dict, known: frozenset, path: str) -> None:
    """Keys a record does not declare: plain data (newer shims add some)."""
    if not body.keys() <= known:
        check_plain({key: value for key, value in body.items() if key not in known}, path)


def _check_step_extras(body: dict) -> None:
    _extra(body, _STEP_KEYS, "b")
    for p in body.get("passes") or ():
        _extra(p, _PASS_KEYS, "b.passes[]")
    capture = body.get("capture")
    if capture:
        _extra(capture, _CAPTURE_KEYS, "b.capture")


def _check_scalar_maps(body: dict) -> None:
    for name in Hello.SCALAR_MAPS:
        value = body.get(name)
        if isinstance(value, dict):
            for key, item in value.items():
                if type(item) not in (type(None), bool, int, float, str):
                    _fail(f"b.{name}.{key}", "must be a number, string, boolean or null", type(item).__name__)


_CONVERT = msgspec.convert


_STEP_PATH = re.compile(r"\.([^.\[]+)|\[(\d+)\]")


def _sent(body: dict, path: str) -> object:
    """The value at msgspec's path ``.a[0].b`` of ``body`` (``_MISSING`` where it cannot be told)."""
    value = body
    for key, index in _STEP_PATH.findall(path):
        try:
            value = value[key] if key else value[int(index)]
        except (KeyError, IndexError, TypeError):
            return _MISSING
    return value


_MISSING = object()


def _named(message: str, body: dict) -> str:
    """msgspec's "what - at `$.field[0]`" as "b.field[0]: what, got <value>" (how refusals have
    always named the field and shown what was sent); a map key that is not a string ("at `key` in
    `$...`") as "map keys must be strings"."""
    what, at, where = message.rpartition(" - at `")
    if not at:
        return message
    if where.startswith("key` in `$"):
        return f"b{where[len('key` in `$'):-1]}: map keys must be strings ({what})"
    path = where[1:-1]
    value = _sent(body, path)
    return f"b{path}: {what}" + ("" if value is _MISSING else f", got {_SHORT.repr(value)}")


def read(kind: str, body: dict) -> Record | None:
    """The record of a body of ``kind`` (None for a kind this schema does not know, whose body must be
    plain data); :class:`BodyError` when the body is not valid."""
    typed = BODIES.get(kind)
    try:
        if typed is Step:
            record = _CONVERT(body, Step, strict=True)
            _check_step_extras(body)
            return record
        check_plain(body)
        if typed is None:
            return None
        if typed is Hello:
            _check_scalar_maps(body)
        record = _CONVERT(body, typed, strict=True)
    except msgspec.ValidationError as exc:
        raise BodyError(_named(str(exc), body)) from None
    if typed is Hello or typed is Load:
        record.sent = body
    return record


def is_decode_step(body: dict | Step) -> bool:
    """A step that committed tokens (:attr:`Step.is_decode_step`), of a record or a body map as sent."""
    if isinstance(body, Step):
        return body.is_decode_step
    return body.get("mode", "decode") == "decode" and bool(body.get("accepted"))
