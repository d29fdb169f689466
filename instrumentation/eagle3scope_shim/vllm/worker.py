"""Hooks in the model runner's process (vLLM's Worker; the EngineCore itself with
``VLLM_ENABLE_V1_MULTIPROCESSING=0``): the draft's load, the aux capture, the draft passes and the
round's timings. Nothing is published here: each round's facts ride on the ``ModelRunnerOutput``
the runner already sends to the EngineCore (an attribute, pickled with it), where the one publisher
is (:mod:`.engine`). So the facts need no second socket, no discovery and no clock to join them:
they arrive with the round they belong to. Hook reports made while no publisher exists in this
process go along too.

Hot-path hooks read shapes and Python attributes only: no device read, no sync.
"""

from __future__ import annotations

import time
import weakref

from eagle3scope_shim import loadreport
from eagle3scope_shim.guard import Rewrite, around

#: the attribute of vLLM's ModelRunnerOutput the round's facts travel in
FACTS_ATTR = "eagle3scope"
#: checkpoint tensors vLLM's Eagle-3 loader drops on purpose (llama_eagle3.py load_weights)
IGNORED = ("t2d",)


class WorkerFacts:
    """What the worker's hooks learned: the round in progress and the load, once."""

    def __init__(self) -> None:
        self.first: tuple | None = None  # (width, fc applied, rows) of the round's first draft pass
        self.forwards = 0  # draft forwards since that pass began
        self.later_width: int | None = None
        self.capture: dict | None = None
        self.verify_ns: int | None = None
        self.draft_ns: int | None = None
        self.num_steps: int | None = None
        self.requested: list[int] | None = None  # ids vLLM handed _set_aux_hidden_state_layers
        self.aux_calls = 0
        self.watch: LoadWatch | None = None
        self.models: tuple | None = None  # (weakref draft, weakref target) after the drafter's load
        self.load_sent = False
        self.seams_sent: dict | None = None


class LoadWatch:
    """One draft ``load_weights`` call: checkpoint names read, and which parameters vLLM's loader wrote
    (every parameter's ``weight_loader`` wrapped while it loads; vLLM's loader looks it up as
    ``getattr(param, "weight_loader", default_weight_loader)``). ``unwritten`` is computed here
    because vLLM's own ``load_weights`` returns None, so its loader never checks the draft for them."""

    def __init__(self, model) -> None:
        from vllm.model_executor.model_loader.weight_utils import default_weight_loader

        params = dict(model.named_parameters())
        self.params = {name: weakref.ref(p) for name, p in params.items()}
        self.written: set[str] = set()
        self.read: list[str] = []
        self.consumed: list[str] = []
        self.skipped: list[str] = []
        self.ignored: list[str] = []
        self.tensors: dict[str, object] = {}
        self.unwritten: list[str] | None = None
        self._restore = []
        try:
            for name, param in params.items():
                # an attribute, or vLLM's BasevLLMParameter property (set and read back through it)
                had = hasattr(param, "weight_loader")
                loader = param.weight_loader if had else default_weight_loader
                param.weight_loader = self._wrap(name, loader)
                self._restore.append((param, had, loader))
        except Exception:
            self.restore()  # all or nothing: the load then runs unwatched
            raise

    def _wrap(self, name, loader):
        def weight_loader(param, loaded_weight, *args, **kwargs):
            self.written.add(name)
            return loader(param, loaded_weight, *args, **kwargs)

        return weight_loader

    def names(self, weights):
        for item in weights:
            try:
                name = item[0]
                self.read.append(name)
                if name.rsplit(".", 1)[-1] in ("d2t", "t2d"):
                    self.tensors[name.rsplit(".", 1)[-1]] = item[1].detach().to("cpu").clone()
            except Exception:
                pass
            yield item

    def restore(self) -> None:
        loadreport.restore_weight_loaders(self._restore)

    def finish(self, draft) -> None:
        """Restore the loaders; sort the names read by what vLLM's Eagle-3 loader does with them:
        ``t2d`` dropped on purpose; ``fc.`` when the draft uses no aux states and ``input_norm.``
        without ``norm_before_fc`` mapped to nothing (skipped); the rest consumed."""
        self.restore()
        # now, not later: after loading, vLLM replaces parameters (CPU repacks linear weights) and the
        # drafter takes the target's embedding or head, so the parameter objects change
        self.unwritten = [name for name in self.params if name not in self.written]
        inner = getattr(draft, "model", None)
        dropped = []
        if not getattr(inner, "use_aux_hidden_state", True):
            dropped.append("fc.")
        if not getattr(inner, "norm_before_fc", False):
            dropped.append("input_norm.")
        for name in self.read:
            if name.rsplit(".", 1)[-1] in IGNORED:
                self.ignored.append(name)
            elif any(name.startswith(p) or f".{p}" in name for p in dropped):
                self.skipped.append(name)
            else:
                self.consumed.append(name)


# -- load -----------------------------------------------------------------------------------------
def make_draft_load(state, seam):
    facts = state.worker

    def pre(self, weights, *args, **kwargs):
        watch = facts.watch = LoadWatch(self)
        return Rewrite(watch, (self, watch.names(weights), *args), kwargs)

    def post(watch, result, self, *args, **kwargs):
        watch.finish(self)

    return around(state.shim, seam, pre, post, traceable=False)


def make_draft_shared(state, seam):
    """The drafter loaded and took what it shares from the target (``SpecDecodeBaseProposer.load_model``)."""
    facts = state.worker

    def post(_t0, result, self, target_model, *args, **kwargs):
        facts.models = (weakref.ref(self.model), weakref.ref(target_model))
        facts.num_steps = int(self.num_speculative_tokens)

    return around(state.shim, seam, None, post, traceable=False)


def make_aux_layers(state, seam):
    facts = state.worker

    def post(_t0, result, self, layers, *args, **kwargs):
        facts.requested = [int(x) for x in layers]
        facts.aux_calls += 1

    return around(state.shim, seam, None, post, traceable=False)


def _configured(config) -> list[int] | None:
    ids = getattr(config, "eagle_aux_hidden_state_layer_ids", None)
    if not ids:
        ids = (getattr(config, "eagle_config", None) or {}).get("eagle_aux_hidden_state_layer_ids")
    return [int(x) for x in ids] if ids else None


def offset_rule(configured, requested) -> str | None:
    """What vLLM did with the draft's ids: used as given ("none"), its model default ("default")."""
    if requested is None:
        return None
    if configured is None:
        return "default"
    return "none" if sorted(set(configured)) == sorted(set(requested)) else "other"


def _weight(module):
    return getattr(module, "weight", None)


def _source(param, target_param, written: bool) -> str:
    if param is not None and param is target_param:
        return "target"
    return "checkpoint" if written else "init"


def fc_facts(layer) -> dict | None:
    """``{in, out}`` of the draft's fc from the layer's own sizes: on CPU vLLM repacks linear weights
    and leaves ``weight`` empty, so its shape says nothing."""
    if layer is None or getattr(layer, "input_size", None) is None:
        return None
    return {"in": int(layer.input_size), "out": int(layer.output_size), "shape": [int(layer.output_size),
                                                                                int(layer.input_size)]}


def load_body(facts: WorkerFacts) -> dict | None:
    """The load report from what the load hooks learned (``facts``), once the drafter is loaded and the target's aux layers are set."""
    if facts.models is None:
        return None
    draft, target = (ref() for ref in facts.models)
    if draft is None or target is None:
        return None
    inner, tinner = getattr(draft, "model", None), getattr(target, "model", None)
    tconfig = getattr(target, "config", None)
    dconfig = getattr(draft, "config", None)
    watch = facts.watch
    written = watch.written if watch is not None else set()
    configured = _configured(dconfig)
    captured = [int(x) for x in getattr(tinner, "aux_hidden_state_layers", ()) or ()]
    body = {
        "draft_class": type(draft).__name__,
        "target_class": type(target).__name__,
        "hidden_size": getattr(dconfig, "hidden_size", None),
        "target_hidden_size": getattr(getattr(tconfig, "get_text_config", lambda: tconfig)(), "hidden_size", None),
        "num_target_layers": getattr(tconfig, "num_hidden_layers", None),
        "draft_vocab_size": getattr(dconfig, "draft_vocab_size", None) or getattr(dconfig, "vocab_size", None),
        "target_vocab_size": getattr(tconfig, "vocab_size", None),
        "fc": fc_facts(getattr(inner, "fc", None)),
        "aux": {"configured": configured, "requested": facts.requested, "captured": captured,
                "use_aux": bool(getattr(inner, "use_aux_hidden_state", False)),
                "capture_on": bool(captured) and facts.requested is not None,
                "offset_rule": offset_rule(configured, facts.requested), "calls": facts.aux_calls},
        "lm_head": {"source": _source(_weight(getattr(draft, "lm_head", None)),
                                      _weight(getattr(target, "lm_head", None)), "lm_head.weight" in written)},
        "embed_tokens": {"source": _source(_weight(getattr(inner, "embed_tokens", None)),
                                           _weight(getattr(tinner, "embed_tokens", None)),
                                           "model.embed_tokens.weight" in written)},
        "d2t": None,
    }
    # a parameter the drafter took from the target afterwards was not the checkpoint's to write
    shared = {name for name, part in (("lm_head.weight", "lm_head"), ("model.embed_tokens.weight", "embed_tokens"))
              if body[part]["source"] == "target"}
    body["weights"] = {"consumed": watch.consumed, "skipped": watch.skipped, "ignored": watch.ignored,
                       "unwritten": [n for n in watch.unwritten if n not in shared]} if watch is not None else \
        {"consumed": None, "skipped": None, "unwritten": None}
    if watch is not None and "d2t" in watch.tensors:
        body["d2t"] = loadreport.d2t_summary(watch.tensors["d2t"], watch.tensors.get("t2d"), body["target_vocab_size"])
    return body


# -- per round ------------------------------------------------------------------------------------
def make_execute_model(state, seam):
    facts = state.worker

    def post(t0, result, *args, **kwargs):
        facts.verify_ns = time.perf_counter_ns() - t0

    return around(state.shim, seam, None, post, hot=True, step=True, traceable=False)


def make_sample_tokens(state, seam):
    """The round's sampling and drafting: reset the round's facts, read the aux capture the target's
    forward returned (list length and widths: shapes only), then hand the facts to the output."""
    shim, facts = state.shim, state.worker

    def pre(self, *args, **kwargs):
        facts.first = facts.later_width = facts.draft_ns = None
        facts.forwards = 0
        executed = getattr(self, "execute_model_state", None)
        aux = executed[6] if executed is not None and len(executed) > 6 else None
        holder = getattr(getattr(self, "model", None), "model", None)
        layers = getattr(holder, "aux_hidden_state_layers", None)
        facts.capture = {"on": bool(aux), "layers": [int(x) for x in layers] if layers else None,
                         "widths": [int(t.shape[-1]) for t in aux] if aux else []}
        return None

    def post(_ctx, result, self, *args, **kwargs):
        if not hasattr(result, "req_id_to_index"):
            return
        later = (facts.later_width, facts.forwards - 1) if facts.forwards > 1 else None
        out = {"first": facts.first, "later": later, "capture": facts.capture,
               "draft_ms": None if facts.draft_ns is None else facts.draft_ns / 1e6,
               "verify_ms": None if facts.verify_ns is None else facts.verify_ns / 1e6,
               "num_steps": facts.num_steps}
        if not facts.load_sent:
            out["load"] = load_body(facts)
            facts.load_sent = out["load"] is not None
        if shim.publisher is None:  # another process publishes: forward what it cannot see
            if shim.seams.status != facts.seams_sent:
                out["seams"] = facts.seams_sent = dict(shim.seams.status)
            if shim.pending:
                out["hooks"], shim.pending[:] = list(shim.pending), []
        setattr(result, FACTS_ATTR, out)

    # a step seam: a round is execute_model + sample_tokens (+ the scheduler's update), not one nested call
    return around(shim, seam, pre, post, hot=True, step=True, traceable=False)


def make_propose(state, seam):
    facts = state.worker

    def post(t0, result, *args, **kwargs):
        facts.draft_ns = time.perf_counter_ns() - t0

    return around(state.shim, seam, None, post, hot=True, in_step=True, traceable=False)


def make_combine(state, seam):
    """The round's first draft pass: the width the target's aux states give the draft, fc applied
    whenever the draft uses them (vLLM applies it unconditionally then)."""
    facts = state.worker

    def pre(self, hidden_states, *args, **kwargs):
        facts.first = (int(hidden_states.shape[-1]), bool(self.model.use_aux_hidden_state),
                       int(hidden_states.shape[0]))
        facts.forwards = 0

    return around(state.shim, seam, pre, None, hot=True, in_step=True, traceable=False)


def make_draft_forward(state, seam):
    """Every draft forward after the first of a round is a single-token pass at the draft's width."""
    facts = state.worker

    def pre(self, *args, **kwargs):
        facts.forwards += 1
        if facts.forwards > 1:
            hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[2]
            facts.later_width = int(hidden.shape[-1])

    return around(state.shim, seam, pre, None, hot=True, in_step=True)


FACTORIES = {
    "vllm.execute_model": make_execute_model,
    "vllm.sample_tokens": make_sample_tokens,
    "vllm.propose": make_propose,
    "vllm.combine": make_combine,
    "vllm.draft_forward": make_draft_forward,
    "vllm.draft_load": make_draft_load,
    "vllm.draft_shared": make_draft_shared,
    "vllm.aux_layers": make_aux_layers,
}
