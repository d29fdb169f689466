"""What a publisher says about itself (``hello``) and its load (``load``), read once into typed records.

The one place that opens these two bodies: the viewer's state, the recorder's session metadata and
the subscriber's sibling discovery all read the records, and ``analysis/facts.py`` derives the rest
from them. Bodies come from an untrusted publisher: ``wire/validate.py`` has checked the types of
the fields it knows, and everything else (``parallel`` from newer shims) is read defensively here.
"""

from __future__ import annotations

from dataclasses import dataclass, field


def _map(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def _int(value: object) -> int | None:
    return value if type(value) is int else None


def _names(value: object) -> tuple:
    return tuple(value) if isinstance(value, list) else ()


# -- what a hello says ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServerArgs:
    """The speculative-decoding arguments a hello reports (values as sent)."""

    algorithm: object = None
    num_steps: object = None
    topk: object = None
    num_draft_tokens: object = None
    cuda_graph: object = None
    model_path: object = None
    draft_model_path: object = None
    overlap_schedule: object = None  # whether SGLang runs the overlap loop (None from older shims)

    def __bool__(self) -> bool:
        """False when the hello named none of them (no ``server_args``)."""
        return any(getattr(self, name) is not None for name in self.__slots__)


@dataclass(frozen=True, slots=True)
class Parallel:
    """The server's parallel layout (hello's ``parallel``; None in recordings of older shims)."""

    tp_size: int | None = None
    dp_size: int | None = None
    pp_size: int | None = None
    attn_tp_size: int | None = None
    attn_dp_size: int | None = None
    ep_size: int | None = None


@dataclass(frozen=True, slots=True)
class Hello:
    pid: object
    host: object
    sglang_version: str | None
    shim_version: object
    worker: str | None
    tp_rank: int | None
    dp_rank: int | None
    args: ServerArgs
    seams: dict  # seam -> status at startup (state.py folds them into the bounded hook table)
    parallel: Parallel | None
    worker_class: object  # the class of SGLang's speculative worker (None from older shims)
    unobserved: dict  # part -> why the shim's hooks cannot see it (the "unhooked" details, re-sent)
    body: dict = field(repr=False)  # as sent, for the load-report screen
    started: object = None  # the shim's start time (absent from old shims): a new value is a restart
    observable: dict = field(default_factory=dict)  # what the shim sees on this server (hello.observable)
    graphs: dict = field(default_factory=dict)  # what the draft graphs captured, the target graphs' aux set
    endpoint: str | None = None  # where the publisher says it binds (the anchor for its siblings)
    siblings: tuple = ()  # the other ranks' endpoints, as the publisher wrote them
    server_args: dict = field(default_factory=dict)  # every server argument it sent (session metadata)


def read_hello(body: dict) -> Hello:
    args = _map(body.get("server_args"))
    return Hello(
        pid=body.get("pid"), host=body.get("host"), sglang_version=body.get("sglang_version"),
        shim_version=body.get("shim_version"), worker=body.get("worker"), tp_rank=_int(body.get("tp_rank")),
        dp_rank=_int(body.get("dp_rank")),
        args=ServerArgs(*(args.get(name) for name in ServerArgs.__slots__)),
        seams=_map(body.get("seams")), parallel=_parallel(body.get("parallel")), worker_class=body.get("worker_class"),
        unobserved=_map(body.get("unobserved")), body=body, started=body.get("started"),
        observable=_map(body.get("observable")), graphs=_map(body.get("graphs")),
        endpoint=body.get("endpoint") if isinstance(body.get("endpoint"), str) else None,
        siblings=_names(body.get("siblings")), server_args=args)


def _parallel(value: object) -> Parallel | None:
    if not isinstance(value, dict):
        return None
    return Parallel(*(_int(value.get(name)) for name in Parallel.__slots__))


# -- what a load report says --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Aux:
    configured: list | None = None  # the draft config's ids (None: absent, the release's default)
    captured: list | None = None  # the target's layers_to_capture at load
    use_aux: bool | None = None
    capture_on: bool | None = None
    offset_rule: str | None = None  # what the target did with the ids it was handed
    reports_configured: bool = False  # the shim said whether ids were configured (older shims did not)


@dataclass(frozen=True, slots=True)
class Weights:
    consumed: tuple = ()
    skipped: tuple = ()  # checkpoint names the loader never consumed
    unwritten: tuple = ()  # draft parameters no checkpoint tensor wrote


@dataclass(frozen=True, slots=True)
class D2t:
    present: bool | None = None
    size: int | None = None
    min: int | None = None
    max: int | None = None
    target_min: int | None = None
    target_max: int | None = None
    out_of_range: int | None = None
    injective: bool | None = None
    t2d_consistent: bool | None = None
    looks_absolute: bool | None = None


@dataclass(frozen=True, slots=True)
class LmHead:
    source: str | None = None
    shape: list | None = None  # the full head on a TP-N server; older shims: the publishing rank's shard
    org_vocab_size: int | None = None  # the rows asked for (shape[0] is SGLang's padded count)
    shard_shape: list | None = None  # this rank's shard, when the head is vocab-parallel
    parallel_size: int | None = None


@dataclass(frozen=True, slots=True)
class Load:
    draft_class: str | None
    target_class: str | None
    hidden_size: int | None
    target_hidden_size: int | None
    num_target_layers: int | None
    draft_vocab_size: int | None
    target_vocab_size: int | None
    fc_in: int | None
    fc_out: int | None
    has_fc: bool
    aux: Aux
    weights: Weights | None  # None: not reported
    d2t: D2t | None  # None: absent or not reported
    d2t_reported: bool
    lm_head: LmHead | None
    embed_source: object
    body: dict = field(repr=False)  # as sent, for the load-report screen


def read_load(body: dict) -> Load:
    fc, aux, weights = body.get("fc"), _map(body.get("aux")), body.get("weights")
    d2t, head = body.get("d2t"), body.get("lm_head")
    return Load(
        draft_class=body.get("draft_class"), target_class=body.get("target_class"),
        hidden_size=body.get("hidden_size"), target_hidden_size=body.get("target_hidden_size"),
        num_target_layers=body.get("num_target_layers"), draft_vocab_size=body.get("draft_vocab_size"),
        target_vocab_size=body.get("target_vocab_size"),
        fc_in=_map(fc).get("in"), fc_out=_map(fc).get("out"), has_fc=bool(fc),
        aux=Aux(*(aux.get(name) for name in Aux.__slots__[:-1]), reports_configured="configured" in aux),
        weights=Weights(*(_names(_map(weights).get(name)) for name in Weights.__slots__)) if weights else None,
        d2t=D2t(*(d2t.get(name) for name in D2t.__slots__)) if isinstance(d2t, dict) and d2t else None,
        d2t_reported="d2t" in body,
        lm_head=LmHead(*(head.get(name) for name in LmHead.__slots__)) if isinstance(head, dict) and head else None,
        embed_source=_map(body.get("embed_tokens")).get("source"), body=body)
