"""The frame bodies, typed once: one ``TypedDict`` per kind and per nested map, each field with its
type and, in its ``Annotated`` metadata, the bound :mod:`validate` checks it against.

The shim builds its bodies as these types, :mod:`validate` derives its field tables from them
(nothing there restates a field), and :mod:`schema`'s ``KINDS`` are the keys of :data:`BODIES`.
Every field is optional on the wire (``total=False``): bodies of older shims lack the newer ones,
and a field the schema does not name is allowed as plain data (newer minor versions add some).
What each field means is in :mod:`schema`'s docstring. Standard library only.
"""

from dataclasses import dataclass
import typing
from typing import Annotated, Any, Literal, TypedDict

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


# -- what a field may hold (validate.py turns each into its checker) ----------------------------
@dataclass(frozen=True)
class Int:
    """An integer in [lo, hi] (or null when ``optional``)."""
    lo: int = 0
    hi: int = INT64_MAX
    optional: bool = True


@dataclass(frozen=True)
class Text:
    """A string of at most ``limit`` characters, or null."""
    limit: int = MAX_NAME


@dataclass(frozen=True)
class Flag:
    """true, false or null."""


@dataclass(frozen=True)
class Number:
    """A finite number of magnitude at most 1e15, or null."""


@dataclass(frozen=True)
class Duration:
    """A non-negative finite number (µs or ms of some interval), or null."""


@dataclass(frozen=True)
class Scalar:
    """A number, string, boolean or null (plain data)."""


@dataclass(frozen=True)
class IntList:
    """A list of at most ``max_len`` integers in [lo, hi], or null."""
    lo: int
    hi: int
    max_len: int


@dataclass(frozen=True)
class NameList:
    """A list of names (at most ``max_len`` when given), or null."""
    max_len: int | None = None


@dataclass(frozen=True)
class Fields:
    """A map of the field's ``TypedDict`` (or null); its other keys hold ``values`` (plain data if None)."""
    values: Any = None


@dataclass(frozen=True)
class MapList:
    """A list of at most ``max_len`` maps of the item ``TypedDict`` (or null when ``optional``)."""
    max_len: int
    optional: bool = True


@dataclass(frozen=True)
class PerSeam:
    """seam name -> ``values``, for at most :data:`MAX_SEAMS` seams, or null."""
    values: Any


@dataclass(frozen=True)
class PerRequest:
    """One item per request: a list of length ``bs`` (a step's own check, ``validate.check_step``);
    ``required``: in every step body, else only in some (trees)."""
    required: bool = True


Count = Annotated[int, Int()]
Name = Annotated[str, Text()]
Prose = Annotated[str, Text(MAX_TEXT)]
Bool = Annotated[bool, Flag()]
Rank = Annotated[int, Int(0, 1 << 20)]
Size = Annotated[int, Int(1, 1 << 20)]
Width = Annotated[int, Int(0, MAX_TOKEN_ID)]
Budget = Annotated[int, Int(0, MAX_DRAFT_TOKENS)]
Layers = Annotated[list[int], IntList(-1, 1 << 20, 4096)]
Shape = Annotated[list[int], IntList(0, MAX_TOKEN_ID, 8)]
Names = Annotated[list[str], NameList()]
Signed = Annotated[int, Int(INT64_MIN)]

#: a seam's hook status (``hello.seams`` values, ``hook.status``)
SeamStatus = Literal["attached", "missing", "failed", "disabled", "unhooked"]


# -- hello --------------------------------------------------------------------------------------
class Parallel(TypedDict, total=False):
    tp_size: Size
    dp_size: Size
    pp_size: Size
    attn_tp_size: Size
    attn_dp_size: Size
    ep_size: Size


class PublisherRank(TypedDict, total=False):
    tp_rank: Rank
    dp_rank: Rank
    attn_tp_rank: Rank
    pp_rank: Rank
    reason: Prose


class ServerArgs(TypedDict, total=False):
    algorithm: Annotated[str, Scalar()]
    num_steps: Budget
    topk: Budget
    num_draft_tokens: Budget
    dtype: Annotated[str, Scalar()]
    cuda_graph: Bool
    model_path: Annotated[str, Scalar()]
    draft_model_path: Annotated[str, Scalar()]
    attention_backend: Annotated[str, Scalar()]
    overlap_schedule: Bool


#: an ``observable`` flag (held to plain data only, as validation always has)
Seen = Annotated[bool, Scalar()]


class Observable(TypedDict, total=False):
    """What this configuration lets the shim see."""
    steps: Seen
    draft_ids: Seen
    accepted: Seen
    passes_prefill: Seen
    passes_draft_decode: Seen
    passes_draft_extend: Seen
    graph_prefill: Seen
    graph_draft_decode: Seen
    graph_draft_extend: Seen
    device_timings: Seen


class CapturedGraph(TypedDict, total=False):
    mode: Name
    bs: Annotated[int, Int(0, MAX_BATCH)]
    width: Width
    fc: Bool


class Capture(TypedDict, total=False):
    """The target's aux capture (a step's ``capture``, the target graphs' ``target_aux``)."""
    on: Bool
    layers: Layers


class Graphs(TypedDict, total=False):
    captured: Annotated[list[CapturedGraph], MapList(4096)]
    target_aux: Annotated[Capture, Fields()]


class Hello(TypedDict, total=False):
    pid: Count
    started: Count
    host: Name
    tp_rank: Rank
    dp_rank: Rank
    parallel: Annotated[Parallel, Fields()]
    publisher_rank: Annotated[PublisherRank, Fields()]
    endpoint: Name
    siblings: Annotated[list[str], NameList(MAX_PUBLISHERS)]
    sglang_version: Name
    shim_version: Name
    worker: Name
    worker_class: Name
    control: Name
    server_args: Annotated[ServerArgs, Fields(Scalar())]
    observable: Annotated[Observable, Fields(Scalar())]
    seams: Annotated[dict[str, SeamStatus], Fields(Text())]
    unobserved: Annotated[dict[str, str], Fields(Text(MAX_TEXT))]
    graphs: Annotated[Graphs, Fields()]


# -- load ---------------------------------------------------------------------------------------
class TensorFacts(TypedDict, total=False):
    """A weight's full shape on a TP-N server and this rank's shard of it (loadreport.tensor_facts)."""
    shape: Shape
    shard_shape: Shape
    parallel_dim: Annotated[int, Int(0, 7)]
    parallel_size: Size
    org_vocab_size: Width
    padded_size: Width


#: ``in`` is a keyword: the functional form
Fc = TypedDict("Fc", {"in": Width, "out": Width, **TensorFacts.__annotations__}, total=False)


class Aux(TypedDict, total=False):
    configured: Layers
    captured: Layers
    requested: Layers
    use_aux: Bool
    capture_on: Bool
    offset_rule: Annotated[Literal["+1", "none", "default", "other"], Text()]
    calls: Count


class Weights(TypedDict, total=False):
    consumed: Names
    skipped: Names
    unwritten: Names
    ignored: Names


class D2t(TypedDict, total=False):
    present: Bool
    size: Count
    min: Signed
    max: Signed
    target_min: Signed
    target_max: Signed
    out_of_range: Count
    injective: Bool
    t2d_consistent: Bool
    looks_absolute: Bool


class Source(TensorFacts, total=False):
    """Where ``lm_head`` / ``embed_tokens`` came from: "checkpoint" | "target" | "init" | "tied"."""
    source: Name


class Load(TypedDict, total=False):
    draft_class: Name
    target_class: Name
    hidden_size: Width
    target_hidden_size: Width
    num_target_layers: Annotated[int, Int(0, 1 << 20)]
    draft_vocab_size: Width
    target_vocab_size: Width
    fc: Annotated[Fc, Fields()]
    aux: Annotated[Aux, Fields()]
    weights: Annotated[Weights, Fields()]
    d2t: Annotated[D2t, Fields()]
    lm_head: Annotated[Source, Fields()]
    embed_tokens: Annotated[Source, Fields()]


# -- step ---------------------------------------------------------------------------------------
class Pass(TypedDict, total=False):
    mode: Name
    width: Width
    fc: Bool
    n: Annotated[int, Int(1, 1 << 20, optional=False)]
    replayed: Bool
    graph_bs: Annotated[int, Int(0, MAX_BATCH)]


class Step(TypedDict, total=False):
    seq: Annotated[int, Int(optional=False)]
    t_ns: Count
    mode: Annotated[Literal["decode", "prefill"], Text()]
    bs: Annotated[int, Int(0, MAX_BATCH, optional=False)]
    rids: Annotated[list[str], PerRequest()]
    draft_ids: Annotated[list[list[int]], PerRequest()]
    accepted: Annotated[list[int], PerRequest()]
    bonus: Annotated[list[int], PerRequest()]
    accepted_ids: Annotated[list[list[int]], PerRequest()]
    passes: Annotated[list[Pass], MapList(MAX_DRAFT_TOKENS, optional=False)]
    capture: Annotated[Capture, Fields()]
    draft_ms: Annotated[float, Number()]
    verify_ms: Annotated[float, Number()]
    extend_ms: Annotated[float, Number()]
    draft_device_ms: Annotated[float, Duration()]
    verify_device_ms: Annotated[float, Duration()]
    extend_device_ms: Annotated[float, Duration()]
    num_steps: Budget
    accepted_path: Annotated[list[list[int]], PerRequest(required=False)]
    discarded: Annotated[list[str], NameList(MAX_BATCH)]
    ctx_len: Annotated[list[int], PerRequest(required=False)]
    greedy: Annotated[list[bool], PerRequest(required=False)]
    #: per request: whether SGLang constrains it by a grammar (regex, JSON schema, EBNF, structural tag);
    #: only in steps with a constrained request (absent: none, or a shim from before the field)
    constrained: Annotated[list[bool], PerRequest(required=False)]


# -- config, heartbeat, hook --------------------------------------------------------------------
class Config(TypedDict, total=False):
    layers: Layers
    captured: Layers
    applied: Bool
    reason: Prose
    origin: Annotated[Literal["startup", "control", "runtime"], Text()]
    request_id: Annotated[str, Scalar()]
    pause_ms: Annotated[float, Duration()]


class Ring(TypedDict, total=False):
    slots: Count
    capacity: Count
    allocations: Count
    late_allocations: Count
    oversize: Count


class Heartbeat(TypedDict, total=False):
    steps: Count
    dropped: Count
    hook_failures: Count
    queued: Count
    shim_us: Annotated[dict[str, float], PerSeam(Duration())]
    step_us: Annotated[float, Duration()]
    round_shim_us: Annotated[float, Duration()]
    publisher_us: Annotated[float, Duration()]
    ring: Annotated[Ring, Fields()]


class Hook(TypedDict, total=False):
    seam: Name
    status: Annotated[SeamStatus, Text()]
    detail: Prose


# -- finish -------------------------------------------------------------------------------------
class Finished(TypedDict, total=False):
    """SGLang's own speculative counts of one request it finished (its ``Req``, as ``meta_info`` reports them)."""
    rid: Name
    verify_ct: Count
    correct_drafts: Count
    histogram: Annotated[list[int], IntList(0, INT64_MAX, MAX_DRAFT_TOKENS + 1)]


class Finish(TypedDict, total=False):
    seq: Count
    dropped: Count
    requests: Annotated[list[Finished], MapList(MAX_BATCH)]


def bounds(typed) -> dict[str, tuple[Any, Any]]:
    """field -> (its type, its bound) of one of these ``TypedDict`` types."""
    hints = typing.get_type_hints(typed, include_extras=True)
    return {name: (hint.__origin__, hint.__metadata__[0]) for name, hint in hints.items()}


#: a step's per-request lists (what dropping a request from a step drops from each)
PER_REQUEST = tuple(name for name, (_, bound) in bounds(Step).items() if type(bound) is PerRequest)

#: kind -> its body type; the kinds this schema knows, in this order
BODIES: dict[str, type] = {"hello": Hello, "load": Load, "step": Step, "config": Config, "heartbeat": Heartbeat,
                           "hook": Hook, "finish": Finish}
KINDS = tuple(BODIES)


def is_decode_step(body: dict) -> bool:
    """A step body that committed tokens: a decode round (not a prefill) of at least one request.
    What ``--steps N``, ``check``, the statistics and ``aux cycle`` count as a decode step."""
    return body.get("mode", "decode") == "decode" and bool(body.get("accepted"))
