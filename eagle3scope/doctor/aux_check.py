"""The doctor's aux-layer check: which target layers the draft was trained on (by its producer's
convention) against which ones the SGLang release will capture (by the target family's rule in
``wire/aux_layers``, the one source shared with the shim and the aux control), and the ids ``fix``
writes so the two agree.
"""

from __future__ import annotations

import json

from eagle3scope.doctor.findings import Diagnosis
from eagle3scope.doctor.producers import ANGELSLIM_IDS_KEY, FIX_KEY, training_capture
from eagle3scope.wire.aux_layers import (
    FINAL_STATE_SINCE,
    UNSTATED_FACT,
    UNSTATED_NEXT,
    WRAPPED,
    capture_problem,
    capture_since,
    captured_for,
    default_capture,
    family_rule,
    ids_for,
    unstated_title,
)
from eagle3scope.wire.releases import ERAS


#: Target class assumed when neither --target nor the draft names one (the +1 families).
ASSUMED_TARGET = "LlamaForCausalLM"


def int_list(value: object) -> bool:
    return isinstance(value, list) and len(value) <= 64 and all(type(i) is int and abs(i) < 1 << 20 for i in value)


def _raw_ids(dx: Diagnosis) -> tuple[list[int] | None, str]:
    """The ids as the producer wrote them, and where."""
    if dx.producer.name.startswith("speculators"):
        ids = (dx.checkpoint.config or {}).get("eagle_aux_hidden_state_layer_ids")
        return (ids if int_list(ids) else None), "eagle_aux_hidden_state_layer_ids"
    eagle = (dx.config or {}).get("eagle_config") or {}
    return eagle.get("eagle_aux_hidden_state_layer_ids"), "eagle_config.eagle_aux_hidden_state_layer_ids"


def _recorded(dx: Diagnosis) -> list[int] | None:
    rec = (dx.checkpoint.config or {}).get(FIX_KEY)
    cap = rec.get("trained_capture") if isinstance(rec, dict) else None
    return cap if int_list(cap) else None


def _target_class(dx: Diagnosis) -> str:
    return dx.target_class or ASSUMED_TARGET


def _move_top_level_ids(dx: Diagnosis, n: int | None) -> dict | None:
    """Ids at the top level, the flat key or AngelSlim's ``aux_hidden_states_layer_ids``: 0.5.23
    spec_aux_hidden_state.py reads only eagle_config[...] (a bare except falls back to defaults).
    Both number layers as SGLang's configured ids do (output-of-layer); the family rule's
    conversion, where it differs, is ``_translate_ids``'."""
    cfg = dx.config
    eagle = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else None
    key = next((k for k in ("eagle_aux_hidden_state_layer_ids", ANGELSLIM_IDS_KEY) if cfg.get(k) is not None), None)
    if key is None or (eagle and eagle.get("eagle_aux_hidden_state_layer_ids") is not None) \
            or dx.producer.name.startswith("speculators"):
        return eagle
    top = cfg[key]
    rule = family_rule(_target_class(dx), dx.sglang_version)
    same = n and rule and captured_for(top, rule, n) == captured_for(None, rule, n)
    who = "AngelSlim's " if key == ANGELSLIM_IDS_KEY else ""
    dx.add("aux-layers-mismatch", "info" if same else "error",
           f"{who}{key} is read by nobody in SGLang: it captures its default layers" if who else
           "Aux layer ids are at the top level of config.json, where SGLang ignores them",
           {"top_level_ids": top, "key": key, "default_captured": default_capture(n) if n else "[2, n//2, n-3]"},
           "`eagle3scope fix` moves them into eagle_config.eagle_aux_hidden_state_layer_ids" +
           (" (they equal the default, so serving is unchanged)." if same else "."))
    eagle = {**(eagle or {}), "eagle_aux_hidden_state_layer_ids": list(top)}
    dx.config = {**{k: v for k, v in cfg.items() if k != key}, "eagle_config": eagle}
    dx.config_edits.append(f"{key} {top} moved into eagle_config.eagle_aux_hidden_state_layer_ids")
    return eagle


def check_aux_layers(dx: Diagnosis) -> None:
    if dx.config is None:
        return
    n = (dx.target or {}).get("num_hidden_layers")
    eagle = _move_top_level_ids(dx, n)
    if eagle and eagle.get("use_aux_hidden_state") is False:
        trained_fc = any(m.param == "model.fc.weight" for m in dx.mappings.values())
        dx.add("aux-capture-off", "error" if trained_fc else "warning",
               "eagle_config.use_aux_hidden_state is false" + (" but the checkpoint has a trained fc" if trained_fc else ""),
               {"use_aux_hidden_state": False, "fc_in_checkpoint": trained_fc},
               "SGLang will capture no aux states and skip fc, so the draft sees features it was not trained on: "
               "set use_aux_hidden_state to true (`eagle3scope fix` does)." if trained_fc else
               "Without a trained fc the draft may have been trained on the last hidden state only; if it was "
               "trained on aux states, set use_aux_hidden_state to true.")
        if trained_fc:  # fc's 3H input exists only when training fused aux states: the repair is certain
            eagle = {**eagle, "use_aux_hidden_state": True}
            dx.config = {**dx.config, "eagle_config": eagle}
            dx.config_edits.append("eagle_config.use_aux_hidden_state false -> true (the checkpoint's fc was trained on "
                                   "aux states)")
    rule = family_rule(_target_class(dx), dx.sglang_version)
    first = capture_since(_target_class(dx))
    if rule is None and first and family_rule(_target_class(dx)) is not None:
        dx.add("aux-capture-unsupported", "error", f"SGLang {dx.sglang_version} cannot capture aux states from "
               f"{_target_class(dx)}: needs SGLang >= {first}",
               {"target_class": _target_class(dx), "first_release": first},
               f"Serve this target with SGLang {first} or newer (its set_eagle3_layers_to_capture appears there).")
        dx.refuse(f"SGLang {dx.sglang_version} has no aux capture for {_target_class(dx)}: use SGLang {first} or newer")
        return
    if rule is None:
        dx.add("aux-family-unknown", "info", f"{dx.target_class}: unknown family, cannot predict the captured layers",
               {"target_class": dx.target_class},
               "eagle3scope does not know how this target turns aux ids into layers; check the server's capture "
               "with `eagle3scope watch` (aux panel).")
        return
    speculators = dx.producer.name.startswith("speculators")
    configured = None if speculators else (eagle or {}).get("eagle_aux_hidden_state_layer_ids")
    raw, where = _raw_ids(dx)
    if n and raw and n in raw and rule != family_rule(_target_class(dx)) == "+1-unless-final":
        first = ".".join(map(str, FINAL_STATE_SINCE))
        dx.add("aux-final-state-unsupported", "error", f"Aux id {n} is the target's final hidden state: SGLang "
               f"{dx.sglang_version} cannot capture it", {where: raw, "num_target_layers": n,
                                                           "rule": f"{_target_class(dx)}: {rule}"},
               f"Serve with SGLang {first} or newer, which keeps ids that end at the final state as given.")
        dx.refuse(f"aux id {n} (the final state) needs SGLang {first} or newer")
        return
    if n and raw and n in raw and dx.producer.numbering == "output-of-layer":
        dx.assumptions.append(f"the ids end at {n}, the target's layer count: no layer {n} has an output, so they "
                              "number captured states (the last one the final hidden state), as SGLang's GPT-OSS "
                              "rule reads them")
    if raw == []:
        dx.add("aux-layers-empty", "error", f"{where} is an empty list: SGLang captures no layer",
               {where: []}, "List the layers the draft was trained on (as many as fc takes), or remove the key "
                            "to use SGLang's default.")
    if raw and len(set(raw)) != len(raw):
        dx.add("aux-layers-mismatch", "warning", "Duplicate aux layer ids", {where: raw}, "List each layer once.")
    served = None
    if configured:
        served = captured_for(configured, rule, n or 0)
    elif configured is None and n:
        served = captured_for(None, rule, n)
    trained, known = training_capture(dx.producer, raw or None, n, served, _recorded(dx))
    dx.trained_capture, dx.trained_known = trained, known
    inner = WRAPPED.get(_target_class(dx))
    evidence = {where: raw, "rule": f"{_target_class(dx)}{f' (delegates to {inner})' if inner else ''}: {rule}",
                "num_target_layers": n,
                "captured_by_sglang": served if configured is not None or n else "SGLang's default [2, n//2, n-3]",
                "trained_on": trained if trained is not None else "the default [2, n//2, n-3]" if known else "unknown"}
    _translate_ids(dx, rule, trained, known, configured, served, n)
    if not known and raw is None and not speculators:
        dx.add("aux-layers-unstated", "info", unstated_title("info"), {**evidence, "trained_on": "not stated", "what_it_means": UNSTATED_FACT},
               "If acceptance is low, " + UNSTATED_NEXT[0].lower() + UNSTATED_NEXT[1:])
    problem = capture_problem(served, n, _target_class(dx), dx.sglang_version) if served else None
    if problem:
        dx.add("aux-layers-out-of-range", "warning" if "not checked" in problem else "error",
               "Aux layer ids capture layers this release cannot capture",
               {**evidence, "out_of_range": [i for i, c in zip(configured or [], served) if c < 1 or (n and c >= n)]},
               problem)
        return
    if speculators:
        return  # SGLang cannot read this config: fix rewrites it, and _translate_ids said with which ids
    if known and trained is not None and served is not None and trained != served:
        dx.add("aux-layers-mismatch", "error",
               f"SGLang {dx.sglang_version} captures layers {served}, the draft was trained on {trained}",
               evidence, ("`eagle3scope fix` writes ids " + json.dumps(dx.aux_ids) + " (captures "
                          + json.dumps(trained) + ")") if dx.aux_ids is not None else dx.aux_ids_reason)
        return
    if known and (trained is None) != (served is None):
        dx.add("aux-layers-unchecked", "info", "Without --target the default layers cannot be resolved",
               evidence, "Pass --target TARGET_DIR to compare the captured layers with the trained ones.")
        return
    eras = {family_rule(_target_class(dx), v) for v in ERAS}
    if not known and n and configured == default_capture(n) and eras == {"+1"}:
        dx.add("aux-layers-mismatch", "warning", "Ids equal the input-of-layer defaults; SGLang will shift them by one",
               {**evidence, "input_of_layer_defaults": default_capture(n),
                "output_of_layer_defaults": [i - 1 for i in default_capture(n)]},
               f"These are speculators'/vLLM's defaults in input-of-layer numbering (sglang PR 25454): if the draft "
               f"was trained with them, write {[i - 1 for i in default_capture(n)]}.")
        return
    if not known and configured:
        _era_note(dx, configured, n, evidence)


def _set_ids(dx: Diagnosis, ids: list[int] | None) -> None:
    eagle = {k: v for k, v in (dx.config.get("eagle_config") or {}).items() if k != "eagle_aux_hidden_state_layer_ids"}
    if ids is not None:
        eagle["eagle_aux_hidden_state_layer_ids"] = ids
    dx.config = {**dx.config, "eagle_config": eagle}


def _translate_ids(dx: Diagnosis, rule: str, trained: list[int] | None, known: bool, configured, served,
                   n: int | None) -> None:
    """The ids fix writes for this release: the ones whose capture equals the trained layers."""
    speculators = dx.producer.name.startswith("speculators")
    if not known or (not speculators and served == trained):
        dx.aux_ids = configured or None
        return
    if trained is None or (not speculators and n and trained == default_capture(n)):  # SGLang's default: no ids
        dx.aux_ids = None
        if not speculators and configured is not None:
            _set_ids(dx, None)
            dx.config_edits.append(f"aux ids {configured} removed: SGLang's default capture is the trained one")
        return
    problem = capture_problem(trained, n, _target_class(dx), dx.sglang_version)
    ids = None if problem else ids_for(trained, rule, n)
    if ids is None:
        dx.aux_ids_reason = (f"the draft was trained on layers {trained}: " + problem if problem else
                             f"no ids make the {rule} rule capture {trained} on SGLang {dx.sglang_version}; serve "
                             "with a release whose rule can, or retrain on other layers")
        dx.refuse(dx.aux_ids_reason)
        return
    dx.aux_ids = ids
    if speculators or ids != configured:
        _set_ids(dx, ids)
        dx.config_edits.append(f"aux ids: {dx.producer.name} {trained} (input-of-layer) -> SGLang {ids} "
                               f"({_target_class(dx)}: {rule})" if speculators else
                               f"aux ids {configured} -> {ids} (capture {trained}, as trained; "
                               f"{_target_class(dx)}: {rule})")


def _era_note(dx: Diagnosis, configured: list[int], n: int | None, evidence: dict) -> None:
    """Where the rule's answer for these ids differs between releases, say what each one captures."""
    rules = {v: family_rule(_target_class(dx), v) for v in ERAS}
    captures = {v: captured_for(configured, r, n or 0) for v, r in rules.items() if r}
    if len({tuple(c) for c in captures.values()}) > 1:
        dx.add("aux-layers-era", "info", "These ids capture different layers on older and newer releases",
               {**evidence, "captured_by_release": captures},
               f"Trained through SGLang's own capture ({dx.producer.label}): right on releases whose rule matches "
               "the training run's. If it trained on another release line, serve with that one.")
