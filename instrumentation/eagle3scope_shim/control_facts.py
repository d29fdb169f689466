"""What the control channel knows of this process's target before it takes an aux-layer change: its
model family and the rule mapping aux ids to captured layers, how many aux states the draft's ``fc``
takes, its captured graphs, and the first thing that blocks every change (``why_not``), gathered once
(:func:`gather`).
"""

from __future__ import annotations

import inspect

from eagle3scope.wire import aux_layers
from eagle3scope_shim import collective, graph_capture, seams
from eagle3scope_shim.seams import sglang_version


class ControlFacts:
    """What validating and applying an aux-layer change needs, gathered once at startup on the scheduler
    thread (not the load facts of :mod:`load_facts`: these are about the target's capture and its blockers)."""

    def __init__(self) -> None:
        self.target = None  # the model whose set_eagle3_layers_to_capture SGLang called
        self.inner = None  # the model that owns ``.model.layers_to_capture`` (after delegation)
        self.family: str | None = None
        self.rule: str | None = None
        self.num_layers = 0
        self.expected: int | None = None
        self.configured: list | None = None
        self.draft_path: str | None = None
        self.first_layer = 0
        self.why_not = ""  # non-empty: every set is refused with this reason
        self.tp_size = 1  # > 1: a set rides SGLang's request broadcast to every TP rank (collective.py)
        self.graphs = graph_capture.GraphPlan(False)  # the target's captured graphs, and whether they can be recaptured


def layer_ids(value):
    return None if value is None else [int(x) for x in value]


def _defining_class(model) -> type | None:
    for cls in type(model).__mro__:
        if "set_eagle3_layers_to_capture" in cls.__dict__:
            return cls
    return None


def gather(shim, scheduler, tp_rank: int = 0) -> ControlFacts:
    """Facts about this process's target and draft; ``why_not`` names the first blocker.
    ``scheduler``: anything holding SGLang's ``server_args`` (the scheduler, its request receiver)."""
    facts = ControlFacts()
    sa = getattr(scheduler, "server_args", None)
    facts.tp_size = int(getattr(sa, "tp_size", 1) or 1)
    facts.draft_path = getattr(sa, "speculative_draft_model_path", None)
    if not shim.load.workers:
        facts.why_not = "no EAGLE worker in this process (is speculative decoding on?)"
        return facts
    kind, worker, target, draft = shim.load.workers[-1]
    facts.target = target
    facts.inner = inner = aux_layers.capture_owner(target)
    cfg = getattr(inner, "config", None)
    cfg = getattr(cfg, "text_config", None) or cfg
    facts.num_layers = int(getattr(cfg, "num_hidden_layers", 0) or 0)
    dcfg = draft.config
    eagle = getattr(dcfg, "eagle_config", None)
    eagle = eagle if isinstance(eagle, dict) else (vars(eagle) if eagle is not None else {})
    facts.configured = layer_ids(eagle.get("eagle_aux_hidden_state_layer_ids"))
    fc = getattr(getattr(getattr(draft, "model", None), "fc", None), "weight", None)
    hidden = int(getattr(dcfg, "target_hidden_size", None) or getattr(cfg, "hidden_size", 0) or 0)
    if fc is not None and hidden:
        facts.expected = int(fc.shape[1]) // hidden
    facts.first_layer = int(getattr(getattr(inner, "model", None), "start_layer", 0) or 0)
    cls = _defining_class(inner)
    facts.family = cls.__name__ if cls is not None else type(inner).__name__
    facts.rule = aux_layers.family_rule(facts.family, sglang_version())
    facts.why_not = _blocker(shim, facts, sa, worker, cls, tp_rank)
    facts.graphs = graph_capture.plan(worker, sa, sglang_version())
    return facts


def _blocker(shim, facts: ControlFacts, sa, worker, cls, tp_rank: int) -> str:
    if cls is None:
        return f"{type(facts.inner).__name__} has no set_eagle3_layers_to_capture in this release"
    if "layer_ids" not in inspect.signature(inspect.unwrap(cls.__dict__["set_eagle3_layers_to_capture"])).parameters:
        return "this release's set_eagle3_layers_to_capture takes no layer ids (always its default)"
    if facts.rule is None:
        return f"unknown model family {facts.family}: eagle3scope does not know how it maps aux ids"
    for call in shim.load.aux_calls:  # what SGLang did at startup must match the rule we apply
        if call["requested"] is not None and call["on"]:
            predicted = aux_layers.captured_for(call["requested"], facts.rule, facts.num_layers)
            if predicted != call["captured"]:
                return (f"SGLang captured {call['captured']} for ids {call['requested']}, not {predicted} as the "
                        f"{facts.rule} rule of {facts.family} predicts: unknown id semantics")
    if facts.expected is None:
        return "the draft has no fc layer: it takes no aux states"
    pp = int(getattr(sa, "pp_size", 1) or 1)
    if pp > 1 or not getattr(getattr(facts.inner, "pp_group", None), "is_last_rank", True):
        return (f"pipeline parallelism (pp_size {pp}): the aux capture lives on the last pipeline rank, which "
                "this channel does not reach")
    if facts.tp_size > 1:
        why = collective.blocker(sa, tp_rank, shim.seams.live(seams.BROADCAST))
        return f"tensor parallelism (tp_size {facts.tp_size}): {why}" if why else ""
    return ""
