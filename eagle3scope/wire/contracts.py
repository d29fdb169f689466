"""The contract rules both sides judge, defined once: the viewer (``analysis/rules.py``) over what it
has received, the shim (``eagle3scope_shim/verdict.py``) inside the server, for SGLang's own log and
``/metrics``.

Each rule is a pure function over a publisher's load report and hello (the records of
:mod:`~eagle3scope.wire.bodies`), the aux capture in effect, and for ``fc-bypassed`` the
draft passes' counts; it returns an evidence dict when the contract is broken and ``None`` otherwise.
Its id, severity, title, explanation and fix are :class:`Contract` constants here, so the log line
and the viewer say the same thing. Standard library and ``wire`` only: the shim imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import msgspec

from eagle3scope.wire.bodies import D2t, Capture, Config, Load
from eagle3scope.wire.aux_layers import (
    Engine,
    UNSTATED_FACT,
    UNSTATED_NEXT,
    captured_for,
    default_capture,
    specforge_defaults,
    unstated_severity,
    unstated_title,
)
from eagle3scope.wire.schema import FEATURE_CARRYING_MODES

#: a load report that says nothing (none received yet)
NO_LOAD = Load()


@dataclass(frozen=True)
class Contract:
    """A rule's words: stable id (CI configurations and the TUI refer to it), severity (fixed, or
    chosen from the evidence), title, explanation and fix."""

    id: str
    severity: str | Callable[[dict], str]
    title: str
    explanation: str
    fix: str
    #: (title, explanation, fix) for evidence that needs other words than the rule's; None: the rule's.
    worded: Callable[[dict], tuple[str, str, str] | None] | None = None

    def severity_of(self, evidence: dict) -> str:
        return self.severity(evidence) if callable(self.severity) else self.severity


# -- facts both sides derive alike ------------------------------------------------------------------


def wrong_algorithm(algorithm: object) -> bool:
    """A known algorithm other than EAGLE3 ("EAGLE3" or an enum str like "SpeculativeAlgorithm.EAGLE3")."""
    return algorithm is not None and str(algorithm).rsplit(".", 1)[-1].upper() != "EAGLE3"


def is_eagle3(load: Load) -> bool:
    """By class name when SGLang's is known (its EAGLE-1/2 classes, e.g. LlamaForCausalLMEagle, carry a
    2H-wide fc over cat(embeds, hidden)), else by an fc wider than the target's hidden size."""
    name = str(load.draft_class or "").lower()
    if "eagle" in name:
        return "eagle3" in name
    hidden = load.target_hidden_size or load.hidden_size
    return bool(load.fc_in and hidden and load.fc_in > hidden)


def fc_from_checkpoint(load: Load) -> bool | None:
    """Whether the checkpoint brought its own fc (then the draft was trained on aux features), whether
    or not the loader took it (vLLM skips fc.weight when use_aux_hidden_state is false)."""
    if load.weights is None:
        return None
    return any(str(n).endswith("fc.weight") for n in (*load.weights.consumed, *load.weights.skipped))


def apply_offset(ids: list[int] | None, offset_rule: str | None) -> list[int] | None:
    """Capture indices the configured ids should give.

    ``offset_rule`` is what the shim saw the target do with the ids it was handed: "none" (the
    model family uses them as given, e.g. DeepseekV2 from 0.5.13 unless the first id is 1), or
    anything else ("+1", "default" = called without ids, "other", unknown), where the Llama rule
    applies: capture the input of layer id + 1.
    """
    if ids is None:
        return None
    return captured_for(ids, "none" if offset_rule == "none" else "+1", 0)


def capture_in_effect(load: Load | None, capture: Capture | None) -> bool | None:
    """Whether the target captures aux states now: the latest step's ``capture`` says, else the load report."""
    if capture is not None:
        return capture.on
    return (load or NO_LOAD).aux.capture_on


@dataclass(frozen=True, slots=True)
class AuxLayers:
    """The aux layers in effect: a live change (``config``) wins over the load report."""

    configured: list | None  # ids as configured (None: the release's default)
    expected: list | None  # the captured indices those ids should give
    captured: list | None  # captured now: the latest step's, else what the change or the load said
    live: bool  # ``captured`` comes from a step under this configuration
    applied: bool  # set by a live change


def aux_layers_in_effect(load: Load | None, live_layers: list | None, applied: Config | None) -> AuxLayers:
    """From the load report, the latest step's captured layers (None: no step since the last change)
    and the latest applied ``config`` body (None: none)."""
    if applied is not None:
        expected = applied.captured
        return AuxLayers(applied.layers, expected, expected if live_layers is None else live_layers,
                         live_layers is not None, True)
    aux = (load or NO_LOAD).aux
    expected = apply_offset(aux.configured, aux.offset_rule)
    return AuxLayers(aux.configured, expected, aux.captured if live_layers is None else live_layers,
                     live_layers is not None, False)


@dataclass(slots=True)
class FcTally:
    """One forward mode's draft passes, fc applied or skipped, counted alike by the viewer (its
    ``PassStats``) and the shim; :func:`fc_bypassed` reads these and the mode's ``widths`` map."""

    fc_applied: int = 0
    fc_skipped: int = 0
    replayed: int = 0  # calls that replayed a captured graph (width and fc read at the caller)
    first_skip_seq: int | None = None

    def count(self, seq: int, fc, n: int, replayed: bool) -> None:
        if replayed:
            self.replayed += n
        if fc:
            self.fc_applied += n
        else:
            self.fc_skipped += n
            if self.first_skip_seq is None:
                self.first_skip_seq = seq


# -- rules ------------------------------------------------------------------------------------------


def aux_capture_off(load: Load, algorithm: object, capture_on: bool | None) -> dict | None:
    if not is_eagle3(load):
        return None
    if not (wrong_algorithm(algorithm) or capture_on is False):
        return None
    return {
        "algorithm": algorithm,
        "capture_on": capture_on,
        "use_aux_hidden_state": load.aux.use_aux,
        "fc_in": load.fc_in,
        "fc_from_checkpoint": fc_from_checkpoint(load),
    }


def fc_bypassed(load: Load, algorithm: object, passes: Mapping[str, FcTally]) -> dict | None:
    fc_in = load.fc_in
    if fc_in is None or not is_eagle3(load):
        # no fc to bypass, an EAGLE-1/2 fc (it takes H-wide target states by design), or no load
        # report yet (steps may arrive before it): what "fc skipped" means depends on the draft's class
        return None
    modes = [m for m, ps in passes.items() if m in FEATURE_CARRYING_MODES and ps.fc_skipped]
    if not modes:
        return None
    replayed = {m: passes[m].replayed for m in modes if passes[m].replayed}
    firsts = [passes[m].first_skip_seq for m in modes if passes[m].first_skip_seq is not None]
    return {
        "skipped_calls": sum(passes[m].fc_skipped for m in modes),
        "skipped_by_mode": {m: passes[m].fc_skipped for m in modes},
        **({"replayed_by_mode": replayed} if replayed else {}),  # passes seen at their caller, graphs replaying
        "width_seen": sorted({w for m in modes for w in passes[m].widths if w != fc_in}),
        "fc_in": fc_in,
        "use_aux_hidden_state": load.aux.use_aux,
        "fc_from_checkpoint": fc_from_checkpoint(load),
        "algorithm": algorithm,
        "hidden_size": load.hidden_size,
        "first_seq": min(firsts) if firsts else None,
    }


def weights_dropped(load: Load) -> dict | None:
    weights = load.weights
    if weights is None:
        return None
    skipped = list(weights.skipped)
    unwritten = [n for n in weights.unwritten if "lm_head" not in n]  # lm-head-mismatch covers the head
    if not (skipped or unwritten):
        return None
    return {
        "skipped": len(skipped),
        "unwritten": len(unwritten),
        "consumed": len(weights.consumed),
        "skipped_examples": skipped[:5],
        "unwritten_examples": unwritten[:5],
    }


def d2t_absolute(load: Load) -> dict | None:
    d2t = load.d2t
    if d2t is None or not d2t.present:
        return None
    broken = d2t.looks_absolute or (d2t.out_of_range or 0) > 0 or d2t.injective is False or d2t.t2d_consistent is False
    if not broken:
        return None
    evidence = dict(zip(D2t.__struct_fields__[1:], msgspec.structs.astuple(d2t)[1:]))  # every field but present
    evidence["target_vocab_size"] = load.target_vocab_size
    return evidence


def d2t_missing(load: Load | None) -> dict | None:
    """``load`` None: no load report yet (then only what is known elsewhere, nothing here)."""
    if load is not None and not load.d2t_reported:
        return None  # the shim did not report on d2t at all
    load = load or NO_LOAD
    d2t, draft_vocab, target_vocab = load.d2t, load.draft_vocab_size, load.target_vocab_size
    if (d2t is not None and d2t.present) or not (draft_vocab and target_vocab and draft_vocab < target_vocab):
        return None
    return {"draft_vocab_size": draft_vocab, "target_vocab_size": target_vocab, "d2t_present": False}


def lm_head_mismatch(load: Load) -> dict | None:
    head = load.lm_head
    if head is None:
        return None
    # shape is the full head on a TP-N server (older recordings: the publishing rank's own shard);
    # SGLang pads the rows (vocab_parallel_embedding.py), org_vocab_size is what was asked for
    source, shape = head.source, list(head.shape or [None, None]) + [None, None]
    rows = head.org_vocab_size if head.org_vocab_size is not None else shape[0]
    draft_vocab, target_vocab, hidden = load.draft_vocab_size, load.target_vocab_size, load.hidden_size
    consumed = load.weights.consumed if load.weights is not None else ()
    problems = []
    if source == "init":
        problems.append("random (never loaded)")
    if source == "target" and any("lm_head" in n for n in consumed):
        problems.append("checkpoint head overwritten by the target's")
    if source == "target" and draft_vocab and target_vocab and draft_vocab != target_vocab:
        problems.append("target head used with a smaller draft vocabulary")
    if draft_vocab and rows is not None and rows != draft_vocab:
        problems.append("rows differ from draft_vocab_size")
    if hidden and shape[1] is not None and shape[1] != hidden:
        problems.append("columns differ from hidden_size")
    if not problems:
        return None
    evidence = {"source": source, "shape": shape[:2], "draft_vocab_size": draft_vocab, "target_vocab_size": target_vocab,
                "hidden_size": hidden, "problems": problems}
    evidence.update({k: getattr(head, k) for k in ("org_vocab_size", "shard_shape", "parallel_size")
                     if getattr(head, k) is not None})
    return evidence


def aux_layers_mismatch(load: Load | None, layers: AuxLayers, capture_on: bool | None) -> dict | None:
    """``layers``: :func:`aux_layers_in_effect` (a live change sets what is intended from then on)."""
    known, load = load is not None, load or NO_LOAD
    n = load.num_target_layers
    intended, expected, captured = layers.configured, layers.expected, layers.captured
    if captured is None or capture_on is False:
        return None  # nothing captured: aux-capture-off's business
    captured = list(captured)
    evidence = {"configured": intended, "expected_captured": expected, "captured": captured, "num_target_layers": n,
                "offset_rule": load.aux.offset_rule}
    if expected is not None and sorted(captured) != sorted(expected):
        return {**evidence, "kind": "captured-differs-from-configured"}
    if layers.applied:
        return None  # the user picked this set live: the numbering heuristics below are about the draft's config
    if n:
        if captured == [i + 1 for i in default_capture(n)]:
            return {**evidence, "kind": "input-of-layer-ids-shifted-by-one",
                    "input_of_layer_defaults": default_capture(n), "output_of_layer_defaults": specforge_defaults(n)}
        if captured == specforge_defaults(n):
            return {**evidence, "kind": "output-of-layer-ids-used-as-input-of-layer",
                    "input_of_layer_defaults": default_capture(n), "output_of_layer_defaults": specforge_defaults(n)}
    if intended is None and is_eagle3(load) and known and load.aux.reports_configured:
        return {**evidence, "kind": "no-configured-ids-default-used", "default": default_capture(n) if n else None}
    return None


# -- their words ------------------------------------------------------------------------------------


def _opted_out_severity(evidence: dict) -> str:
    """use_aux_hidden_state false under EAGLE3 with no trained fc in the checkpoint: the draft may
    well have been trained without aux states, so only a warning. A trained fc proves otherwise."""
    opted_out = evidence.get("use_aux_hidden_state") is False and evidence.get("fc_from_checkpoint") is False
    return "warning" if opted_out and not wrong_algorithm(evidence.get("algorithm")) else "error"


def _aux_severity(evidence: dict) -> str:
    kind = evidence.get("kind")
    if kind == "no-configured-ids-default-used":
        return unstated_severity(evidence.get("position_1_acceptance"), evidence.get("window_request_steps") or 0)
    return "error" if kind == "captured-differs-from-configured" else "warning"


def _aux_worded(evidence: dict) -> tuple[str, str, str] | None:
    """Unstated layers are a fact until acceptance says otherwise: the doctor's words (wire.aux_layers).
    On vLLM (evidence ``engine``, from the hello) the numbering words name vLLM's rule: ids as given."""
    kind, vllm = evidence.get("kind"), evidence.get("engine") == Engine.VLLM
    if kind == "no-configured-ids-default-used":
        words = unstated_title(_aux_severity(evidence)), UNSTATED_FACT, UNSTATED_NEXT
        return tuple(w.replace("SGLang", "vLLM") for w in words) if vllm else words
    if vllm and kind == "output-of-layer-ids-used-as-input-of-layer":
        return VLLM_SGLANG_NUMBERING
    return None


#: A draft whose ids follow SGLang's +1 rule, served by vLLM (which captures ids as given).
VLLM_SGLANG_NUMBERING = (
    "Draft trained with SGLang numbering served on vLLM: captures layers one lower",
    "vLLM captures eagle_aux_hidden_state_layer_ids as given (the input of layer id); SGLang adds 1 for the Llama "
    "family. These ids equal the output-of-layer defaults [1, n//2-1, n-4], so the draft was almost certainly "
    "trained through SGLang's numbering on the layers one higher, and vLLM feeds it the layers one lower. The "
    "server stays healthy; acceptance drops (the demo draft: 3.15 -> 1.77 mean accept length).",
    "Write the ids vLLM needs: `eagle3scope fix DRAFT_DIR --out NEW_DIR --for-vllm` (adds 1 to each id), or check "
    "the draft first with `eagle3scope doctor DRAFT_DIR --engine both`.",
)


AUX_CAPTURE_OFF = Contract(
    "aux-capture-off", _opted_out_severity, "EAGLE-3 draft, but the target captures no aux hidden states",
    "The draft's fc expects the concatenated aux hidden states of k target layers, but the target is not "
    "capturing them (typically --speculative-algorithm EAGLE with an EAGLE-3 draft). The draft then sees only "
    "the last hidden state, fc is skipped because the widths match, and almost nothing is accepted, without "
    "any error or warning from the server. (A warning only when the draft's eagle_config sets "
    "use_aux_hidden_state false and the checkpoint has no trained fc: then it may be trained that way.)",
    "Launch with --speculative-algorithm EAGLE3; make sure the draft's config.json has an eagle_config with "
    "use_aux_hidden_state true (or leave it out) and eagle_aux_hidden_state_layer_ids set.",
)
FC_BYPASSED = Contract(
    "fc-bypassed", _opted_out_severity, "Target features reach the draft H-wide: fc skipped",
    "A draft forward that should carry the target's k x H aux features (extend / draft-extend) arrived with "
    "the width of a single hidden state, so SGLang's `hidden_states.shape[-1] != embeds.shape[-1]` test skipped "
    "fc. The draft is running on features it was never trained on. (Draft decode passes that feed back the "
    "draft's own H-wide state are normal and not counted; a warning only when the draft's eagle_config sets "
    "use_aux_hidden_state false and the checkpoint has no trained fc.)",
    "Enable aux capture: --speculative-algorithm EAGLE3, and check eagle_config / "
    "eagle_aux_hidden_state_layer_ids in the draft's config.json.",
)
WEIGHTS_DROPPED = Contract(
    "weights-dropped", "error", "Draft weights were silently dropped at load",
    "Checkpoint tensors were never consumed by the loader (their names are unknown to this SGLang release, which "
    "skips them without a warning) or draft parameters were never written (they keep their random init).",
    "Run `eagle3scope doctor DRAFT_DIR --sglang-version V` to see the key layout this release expects, then "
    "`eagle3scope fix DRAFT_DIR --out NEW_DIR --for-sglang V` to rename the keys.",
)
D2T_ABSOLUTE = Contract(
    "d2t-absolute", "error", "d2t looks like absolute ids, not offsets",
    "SGLang maps draft id i to target id i + d2t[i]. This d2t maps ids out of the target vocabulary, is not "
    "injective, or disagrees with t2d, which is what an absolute-id table (e.g. arange) looks like: draft id "
    "i then maps to 2i.",
    "Convert d2t to offsets (d2t_abs - arange(draft_vocab)): `eagle3scope fix DRAFT_DIR --out NEW_DIR`.",
)
D2T_MISSING = Contract(
    "d2t-missing", "error", "Draft vocabulary is smaller than the target's but d2t is missing",
    "With a reduced draft vocabulary the draft's ids must be mapped to target ids through d2t. Without it draft "
    "id i is read as target id i, so nearly every proposal is a different token.",
    "Add the d2t tensor (offsets, target id = i + d2t[i]) the draft was trained with to the checkpoint.",
)
LM_HEAD_MISMATCH = Contract(
    "lm-head-mismatch", "error", "Draft lm_head is missing, random, replaced or the wrong size",
    "The draft's lm_head did not come from the draft checkpoint with the right shape. With draft_vocab_size set "
    "and no lm_head in the checkpoint, SGLang keeps a randomly initialised head and warns about nothing.",
    "Ship the draft's trained lm_head (shape [draft_vocab_size, hidden_size]) in the checkpoint, or set "
    "draft_vocab_size to null only if the draft was trained on the target's head.",
)
AUX_LAYERS_MISMATCH = Contract(
    "aux-layers-mismatch", _aux_severity, "Captured aux layers differ from the draft's trained layers",
    "The target layers whose hidden states feed the draft are not the ones it was trained on: the captured set "
    "differs from the configured ids, or it matches the other numbering convention's defaults shifted by one "
    "(SGLang treats configured ids as output-of-layer and adds +1; speculators writes input-of-layer ids). "
    "Typical cost: 0.1 or more acceptance length.",
    "Set eagle_config.eagle_aux_hidden_state_layer_ids in output-of-layer numbering (SGLang adds +1), e.g. "
    "subtract 1 from speculators' input-of-layer ids; try the presets live with `eagle3scope aux cycle`.",
    _aux_worded,
)
