"""What one publisher said and what follows from it, defined once for every consumer.

A ``hello`` or ``load`` frame is read into its typed record once, as it is decoded (``wire/bodies.py``;
the state stores those on the :class:`PublisherView`); the small functions below derive what rules,
views, the exporter, ``report`` and ``gate`` need (seam statuses, capture on, aux layers in effect,
EAGLE-3 or not, the parallel layout, loss, the shim's own cost) from those records alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from eagle3scope.analysis.accounting import Accounting
from eagle3scope.analysis.stats import AcceptanceStats
from eagle3scope.wire.bodies import BLIND, Capture, CapturedGraph, Config, Hello, Load, Parallel, ServerArgs
from eagle3scope.wire.aux_layers import CaptureRule, family_rule
from eagle3scope.wire.contracts import NO_LOAD, AuxLayers, aux_layers_in_effect, capture_in_effect
from eagle3scope.wire.loss import FrameLoss

_NO_HELLO = Hello()


# -- what a hello's observable part says ---------------------------------------------------------


def pass_visibility(hello: Hello | None) -> dict[str, str]:
    """How the shim sees each draft pass on a publisher (:attr:`Observable.pass_visibility`)."""
    return (hello or _NO_HELLO).observable.pass_visibility


def replayed_passes(hello: Hello | None) -> list[str]:
    """The draft passes the hello says replay a captured graph (hello.observable's ``graph_*``)."""
    return (hello or _NO_HELLO).observable.replayed_passes


def graphs_captured(hello: Hello | None) -> list[CapturedGraph]:
    """What each draft graph captured (hello.graphs.captured)."""
    return (hello or _NO_HELLO).graphs_captured


def target_graph_aux(hello: Hello | None) -> Capture | None:
    """The aux capture the target's graphs were captured with, None when unknown."""
    return (hello or _NO_HELLO).graphs.target_aux


# -- the publisher's view ------------------------------------------------------------------------


@dataclass
class PublisherView:
    """What one publisher (one scheduler process) has told us, plus its own step aggregates."""

    src: str
    hello: Hello | None = None
    run: int = 1  # 2, 3, ... after restarts under the same src (a new pid or start time)
    began: tuple[int, int] | None = None  # (n, t) of the run's first frame: where a seek finds the run
    load: Load | None = None
    hooks: dict = field(default_factory=dict)  # seam -> {status, detail}, MAX_SEAMS of them
    unlisted_hook_frames: int = 0  # hook frames about seams past MAX_SEAMS
    unlisted_hello_seams: int = 0  # entries of hellos' seams maps past MAX_SEAMS
    applied_config: Config | None = None  # the latest applied aux-layer change
    loss: FrameLoss = field(default_factory=FrameLoss)
    last_seen_t: int | None = None
    last_seq: int | None = None
    acceptance: AcceptanceStats = field(default_factory=AcceptanceStats)
    passes: dict = field(default_factory=dict)  # mode -> PassStats (MAX_PASS_MODES, see state.py)
    unlisted_pass_calls: int = 0  # draft forwards in modes past MAX_PASS_MODES
    capture: Capture | None = None  # latest step's {on, layers}
    capture_off_steps: int = 0
    capture_off_first_seq: int | None = None
    decode_steps: int = 0
    draft_ids: int = 0
    draft_id_min: int | None = None
    draft_id_max: int | None = None
    draft_max_rises: list = field(default_factory=list)  # (seq, new max) each time the max grows (MAX_DRAFT_MAX_RISES)
    unkept_max_rises: int = 0  # rises after the first MAX_DRAFT_MAX_RISES
    draft_max_seq: int | None = None  # seq where the current maximum was first seen
    draft_min_seq: int | None = None  # seq where the current minimum was first seen
    steps_since_rules: int = 0  # this publisher's rule schedule (state.py): steps since its last pass
    rules_t: int = 0  # ... and the frame t of that pass
    rounds: object = None  # advisor.RoundLog the state feeds (its newest ADVISOR_ROUNDS decode rounds)
    accounting: Accounting = field(default_factory=Accounting)  # its tallies per request against SGLang's (finish frames)


_NO_ARGS = ServerArgs()


# -- derived facts --------------------------------------------------------------------------------


def server_args(pub: PublisherView) -> ServerArgs:
    return pub.hello.args if pub.hello is not None else _NO_ARGS


def load_of(pub: PublisherView) -> Load:
    """The load report's facts, all None before it arrived (``pub.load is None`` tells which)."""
    return pub.load if pub.load is not None else NO_LOAD


def num_steps(pub: PublisherView) -> int | None:
    """The draft chain depth k the server runs (a positive int, else None)."""
    value = server_args(pub).num_steps
    return value if type(value) is int and value > 0 else None


def seam_statuses(pub: PublisherView) -> dict[str, str]:
    """Each listed seam's latest status: the hello's startup list (re-sent, for viewers that missed
    the hook events) folded into the bounded hook table on ingest, overridden by later ``hook`` events."""
    return {seam: h.get("status") for seam, h in pub.hooks.items()}


def failed_seams(pub: PublisherView) -> dict[str, str]:
    return {seam: status for seam, status in seam_statuses(pub).items() if status in BLIND}


def hook_detail(pub: PublisherView, seam: str) -> object:
    return (pub.hooks.get(seam) or {}).get("detail")


#: The parts of a server the shim reports it cannot observe (hook status "unhooked"): SGLang's
#: speculative worker (no rounds seen) and the draft model's forward (no widths, no fc).
UNOBSERVED_PARTS = ("worker", "draft_model")


def unobserved(pub: PublisherView) -> dict[str, object]:
    """Part -> why the hooks cannot see it: the hook event's detail, else the hello's (re-sent) one."""
    statuses = seam_statuses(pub)
    sticky = pub.hello.unobserved if pub.hello is not None else {}
    return {part: hook_detail(pub, part) or sticky.get(part) for part in UNOBSERVED_PARTS if statuses.get(part) == "unhooked"}


def capture_on(pub: PublisherView) -> bool | None:
    """Whether the target captures aux states now: the latest step says, else the load report."""
    return capture_in_effect(pub.load, pub.capture)


def aux_layers(pub: PublisherView) -> AuxLayers:
    """The aux layers in effect on this publisher (wire/contracts.py: the shim derives them alike)."""
    return aux_layers_in_effect(pub.load, None if pub.capture is None else pub.capture.layers, pub.applied_config)


def capture_rule(pub: PublisherView) -> CaptureRule | None:
    """How this target's family turns configured aux ids into captured layers (None: unknown family)."""
    target = load_of(pub).target_class
    version = pub.hello.sglang_release if pub.hello is not None else None
    return family_rule(str(target), version) if target else None


def parallel(pub: PublisherView) -> Parallel | None:
    return pub.hello.parallel if pub.hello is not None else None


@dataclass(frozen=True, slots=True)
class Loss:
    frames: int
    lost_in_transit: int
    dropped_by_shim: int
    hook_failures: int

    @property
    def lost(self) -> int:
        return self.lost_in_transit + self.dropped_by_shim


def loss(pub: PublisherView) -> Loss:
    counts = pub.loss
    return Loss(counts.frames, counts.lost_in_transit, counts.shim_dropped, counts.hook_failures)


@dataclass(frozen=True, slots=True)
class ShimCost:
    """The shim's own time as its heartbeats said (``shim_us``, ``step_us``)."""

    seconds: dict[str, float]  # in its hooks, per seam, summed
    round_seconds: float  # inside the rounds, over the same heartbeats
    share: float | None  # hook time / round time of the latest heartbeat (None: no rounds in it)


def shim_cost(pub: PublisherView) -> ShimCost:
    counts = pub.loss
    return ShimCost(dict(counts.shim_s), counts.step_s, counts.shim_share)


def as_sent(body: dict | None) -> tuple | None:
    """Every field of a body as (key, text), values as JSON text; None when not received."""
    if not body:
        return None
    return tuple((key, json.dumps(value, default=str) if isinstance(value, (dict, list)) else str(value))
                 for key, value in body.items())


def sent(pub: PublisherView) -> tuple[tuple | None, tuple | None]:
    """The hello and load report as sent."""
    return (as_sent(pub.hello.sent if pub.hello is not None else None),
            as_sent(pub.load.sent if pub.load is not None else None))
