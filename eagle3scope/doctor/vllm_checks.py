"""What vLLM will do with a draft checkpoint: the doctor's prediction for ``--engine vllm``.

The checkpoint-level facts (files, producer, the layers the draft was trained on, d2t) come from
the SGLang diagnosis, which reads them without regard to the engine; what vLLM then does is
predicted here from :data:`eagle3scope.doctor.engine_facts.VLLM`: which target layers it captures
(ids as given, deduplicated and sorted, its default when none), the ``fc`` it builds against the
states it will capture (fewer states: the engine starts, then dies on the first request in fc),
the weights its loader renames, drops or never writes (it checks nothing it did not write), and
where the embedding and head come from.
"""

from __future__ import annotations

import re
from pathlib import Path

from eagle3scope.doctor.engine_facts import (
    SGLANG,
    VLLM,
    VLLM_DRAFT_CLASS,
    vllm_capture_problem,
    vllm_fc_states,
    vllm_ids,
    vllm_release,
)
from eagle3scope.doctor.aux_check import int_list
from eagle3scope.doctor.findings import Diagnosis
from eagle3scope.doctor.run_checks import diagnose, guarded
from eagle3scope.wire.aux_layers import vllm_captured

#: Findings of the SGLang diagnosis about the checkpoint itself, true whatever the engine.
ENGINE_NEUTRAL = {"unsafe-entry", "pickle-weights", "no-weights", "weights-unreadable", "duplicate-tensors",
                  "target-unreadable", "config-missing", "config-field-invalid", "config-incomplete", "d2t-absolute",
                  "d2t-invalid", "d2t-mismatch", "d2t-missing", "t2d-invalid", "vocab-mismatch",
                  "hidden-width-mismatch", "check-failed"}
#: Checkpoint names (after vLLM's renames) its Eagle3LlamaForCausalLM has a place for.
_KNOWN = re.compile(r"^(model\.layers\.\d+\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj)\.weight"
                    r"|model\.layers\.\d+\.(input_layernorm|post_attention_layernorm|hidden_norm)\.weight"
                    r"|model\.(fc|norm|embed_tokens|input_norm)\.weight|model\.fc_norm\.\d+\.weight"
                    r"|lm_head\.weight|draft_id_to_target_id|mask_hidden"
                    r"|model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq)$")
_LAYER_PARTS = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
                "input_layernorm.weight", "post_attention_layernorm.weight", "hidden_norm.weight")


def vllm_name(name: str) -> str | None:
    """The parameter name vLLM's ``load_weights`` gives a checkpoint name (None: dropped on purpose)."""
    if any(d in name for d in VLLM.dropped):
        return None
    for old, new in VLLM.renames:
        name = name.replace(old, new)
    return name if name.startswith("lm_head") or name == "draft_id_to_target_id" else "model." + name


def is_speculators(config: dict) -> bool:
    return isinstance(config.get("speculators_config"), dict)


def diagnose_for_vllm(draft_dir: str | Path, *, vllm_version: str | None = None,
                      target_dir: str | Path | None = None) -> Diagnosis:
    """Raises ValueError only for a vLLM release whose facts were not read (a usage error)."""
    version = vllm_release(vllm_version)
    basis = diagnose(draft_dir, sglang_version=SGLANG.releases[0], target_dir=target_dir)
    dx = Diagnosis(basis.checkpoint, version, basis.layout, basis.given, engine="vllm",
                   loader_text=f"{version} llama_eagle3.Eagle3LlamaForCausalLM.load_weights: drops "
                               + ", ".join(VLLM.dropped) + "; renames " + ", ".join(f"{a} -> {b}" for a, b in VLLM.renames)
                               + "; checks nothing it did not write")
    for name in ("producer", "assumptions", "target", "target_class", "trained_capture", "trained_known",
                 "d2t_offsets", "renames", "unmappable", "mappings"):
        setattr(dx, name, getattr(basis, name))
    config = dx.checkpoint.config if isinstance(dx.checkpoint.config, dict) else None
    # a speculators config keeps the decoder's fields in transformer_layer_config, which vLLM translates itself
    neutral = ENGINE_NEUTRAL - ({"config-incomplete"} if config and is_speculators(config) else set())
    dx.findings = [f for f in basis.findings if f.id in neutral]
    if config is None or not dx.checkpoint.tensors:
        return dx
    dx.config = dict(config)
    for check in (_check_architecture, _check_capture, _check_weights):
        guarded(dx, check, config)
    return dx


def _check_architecture(dx: Diagnosis, config: dict) -> None:
    archs = config.get("architectures") if isinstance(config.get("architectures"), list) else []
    if is_speculators(config) or (archs and archs[0] in VLLM.draft_classes):
        return
    named = archs[0] if archs else "a draft without architectures"
    dx.add("architecture", "error", f"vLLM {dx.sglang_version} does not serve {named} as an EAGLE-3 Llama draft", {"architectures": archs, "vllm_draft_classes": list(VLLM.draft_classes)},
           f"`eagle3scope fix --for-vllm` writes architectures [{VLLM_DRAFT_CLASS}].")
    dx.config = {**dx.config, "architectures": [VLLM_DRAFT_CLASS]}
    dx.config_edits.append(f"architectures {archs} -> [{VLLM_DRAFT_CLASS}]")


def _fc_in_checkpoint(dx: Diagnosis) -> tuple[str, tuple] | None:
    return next(((n, i.shape) for n, i in dx.checkpoint.tensors.items() if n.endswith("fc.weight")), None)


def _check_capture(dx: Diagnosis, config: dict) -> None:
    eagle = config.get("eagle_config") if isinstance(config.get("eagle_config"), dict) else {}
    fc = _fc_in_checkpoint(dx)
    if eagle.get("use_aux_hidden_state") is False:
        dx.add("aux-capture-off", "error" if fc else "warning",
               "eagle_config.use_aux_hidden_state is false: vLLM drops fc.weight and feeds the last hidden state"
               + (", but the checkpoint has a trained fc" if fc else ""),
               {"use_aux_hidden_state": False, "fc_in_checkpoint": bool(fc),
                "dropped_at_load": list(VLLM.dropped_without_aux)},
               "Set use_aux_hidden_state to true (`eagle3scope fix --for-vllm` does)." if fc else
               "Without a trained fc the draft may have been trained on the last hidden state only.")
        if fc:
            dx.config = {**dx.config, "eagle_config": {**eagle, "use_aux_hidden_state": True}}
            dx.config_edits.append("eagle_config.use_aux_hidden_state false -> true (the checkpoint's fc was trained "
                                   "on aux states)")
        return
    n = (dx.target or {}).get("num_hidden_layers")
    ids, key = vllm_ids(config)
    if ids is not None and not int_list(ids):
        dx.add("config-field-invalid", "error", f"{key} is not a list of layer numbers: vLLM matches none of them",
               {key: str(ids)[:200]}, "List the layer ids the draft was trained on as integers.")
        return
    states = vllm_fc_states(config)
    captured = vllm_captured(ids, n) if ids or n else None
    evidence = {"ids": ids, "read_from": key or "none: vLLM's default (2, n//2, n-3)", "num_target_layers": n,
                "captured_by_vllm": captured if captured is not None else "the default (2, n//2, n-3)",
                "fc_built_for_states": states}
    if ids is not None:
        problem = vllm_capture_problem(captured, n) if n else None
        effective = [c for c in captured if not n or 0 <= c <= n]
        if len(effective) != states or problem:
            dx.add("fc-shape", "error", f"vLLM {dx.sglang_version} starts, then dies on the first request in fc: it "
                   f"captures {len(effective)} state(s) {effective} for an fc built for {states}",
                   {**evidence, "duplicates": sorted({i for i in ids if ids.count(i) > 1}),
                    "never_captured": [c for c in captured if c not in effective]},
                   (problem + "; " if problem else "") + "list as many distinct layers as fc takes, each within "
                   f"0..{n if n else 'n'} (vLLM captures ids as given, deduplicated and sorted).")
    hidden = config.get("target_hidden_size") or (dx.target or {}).get("hidden_size")
    if fc and type(hidden) is int and hidden > 0:
        width = hidden * states
        if len(fc[1]) == 2 and fc[1][1] != width:
            dx.add("fc-shape", "error", f"vLLM builds fc for {states} aux state(s) ({width} wide); the checkpoint's "
                   f"{fc[0]} is {list(fc[1])}: the load fails", {**evidence, "fc_shape": list(fc[1])},
                   "State as many aux ids in eagle_config as the fc was trained for.")
    trained = dx.trained_capture
    if not dx.trained_known and trained is not None and dx.producer and dx.producer.numbering == "sglang":
        dx.trained_known = True  # written for SGLang: trained on what SGLang captures for these ids
        dx.assumptions.append(f"the draft was trained on the layers SGLang {SGLANG.releases[0]} captures for its ids "
                              f"({sorted(trained)})")
    if dx.trained_known and trained is not None and captured is not None and sorted(trained) != captured:
        lower = len(trained) == len(captured) and all(c == t - 1 for c, t in zip(captured, sorted(trained)))
        dx.add("aux-layers-mismatch", "error",
               f"vLLM {dx.sglang_version} captures layers {captured}, the draft was trained on {sorted(trained)}"
               + (": one layer lower (ids in SGLang's numbering)" if lower else ""),
               {**evidence, "trained_on": sorted(trained), "numbering": "vLLM: " + VLLM.numbering},
               f"`eagle3scope fix DRAFT --out NEW --for-vllm` writes ids {sorted(trained)} (vLLM captures them as given).")
        dx.aux_ids = sorted(trained)
        if is_speculators(config):  # vLLM's speculators translation copies the top-level key only
            dx.config = {**dx.config, "eagle_aux_hidden_state_layer_ids": dx.aux_ids}
            where = "eagle_aux_hidden_state_layer_ids"
        else:
            dx.config = {**dx.config, "eagle_config": {**eagle, "eagle_aux_hidden_state_layer_ids": dx.aux_ids}}
            dx.config.pop("eagle_aux_hidden_state_layer_ids", None)  # read first by vLLM: one place only
            where = "eagle_config"
        dx.config_edits.append(f"aux ids {ids if ids else 'none (vLLM default ' + str(captured) + ')'} -> {dx.aux_ids} in "
                               f"{where} (vLLM captures ids as given)")
    elif dx.trained_known and trained is not None:
        dx.aux_ids = sorted(trained)


def _placed(names: list[str], renames: dict[str, str], want: list[str]) -> tuple[dict[str, str], list[str], list[str]]:
    """vLLM's parameter name -> checkpoint name, the names it has no place for, and the wanted
    parameters nothing writes, after ``renames`` (checkpoint name -> name written)."""
    mapped = {v: n for n in names if (v := vllm_name(renames.get(n, n))) is not None}
    unknown = sorted(n for v, n in mapped.items() if not _KNOWN.match(v))
    return mapped, unknown, [w for w in want if w not in mapped]


def _check_weights(dx: Diagnosis, config: dict) -> None:
    """On the names as written (the renames the SGLang diagnosis found are what fix would write)."""
    names = list(dx.checkpoint.tensors)
    layers = config.get("num_hidden_layers")
    layers = layers if type(layers) is int and 1 <= layers <= 64 else 1  # an unreadable count: config-field-invalid
    want = [f"model.layers.{i}.{p}" for i in range(layers) for p in _LAYER_PARTS] + ["model.norm.weight"]
    eagle = config.get("eagle_config") if isinstance(config.get("eagle_config"), dict) else {}
    if eagle.get("use_aux_hidden_state", True) is not False:
        want.append("model.fc.weight")
    mapped, unknown, unwritten = _placed(names, {}, want)
    dx.renames = {n: r for n, r in dx.renames.items() if n in unknown}  # only what vLLM cannot place
    renamed, unknown_after, unwritten_after = _placed(names, dx.renames, want)
    dx.unmappable = unknown_after + unwritten_after  # what a rename cannot fix
    dropped = [n for n in names if vllm_name(n) is None]
    if dropped or any(n != vllm_name(n) for n in names):
        dx.add("loader-renames", "info", "vLLM's loader drops and renames these checkpoint names",
               {"dropped": dropped, "renames": [f"{a} -> {b}" for a, b in VLLM.renames]})
    if unknown:
        dx.add("weights-crash", "error", "vLLM has no parameter for some checkpoint names: start-up fails",
               {"names": unknown}, "Rename them to the layers.0.* / fc / norm / lm_head layout "
               "(`eagle3scope fix --for-vllm` does where the name is unambiguous).")
    if unwritten:
        dx.add("weights-unwritten", "error", "Draft parameters no checkpoint tensor writes keep their random init "
               "(vLLM does not check)", {"unwritten": unwritten},
               "Ship the trained tensors under the names vLLM maps (layers.0.* or midlayer.*).")
    head = "lm_head.weight" in renamed  # names vLLM cannot place stop it earlier: the copy's view
    embed = "model.embed_tokens.weight" in renamed
    draft_vocab, vocab = config.get("draft_vocab_size"), (dx.target or {}).get("vocab_size") or config.get("vocab_size")
    dx.add("embedding-head-sharing", "info",
           f"vLLM takes {'the checkpoint' if embed else 'the target'}'s embedding and "
           f"{'the checkpoint' if head else 'the target'}'s lm_head",
           {"embed_tokens": "own (shared only if identical to the target's)" if embed else "target's",
            "lm_head": "own (shared only if identical to the target's)" if head else "target's",
            "rule": "has_own_embed_tokens / has_own_lm_head, set by process_eagle_weight"})
    if not head and isinstance(draft_vocab, int) and vocab and draft_vocab != vocab:
        dx.add("lm-head-mismatch", "error", f"No lm_head in the checkpoint: vLLM shares the target's "
               f"{vocab}-row head with a {draft_vocab}-id draft vocabulary", {"draft_vocab_size": draft_vocab,
                                                                                "target_vocab_size": vocab},
               "Ship the draft's trained lm_head ([draft_vocab_size, hidden_size]).")
