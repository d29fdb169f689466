"""The doctor's checks of the draft's tensors against the release's loader (``loader_layouts``):
every name mapped as the release maps it (what is dropped, and the one rename that would fit),
shapes, fc, embedding, head, the d2t vocabulary map, and the target's sizes (``--target``).
"""

from __future__ import annotations

import re

from eagle3scope.doctor.checkpoint import INT_DTYPES
from eagle3scope.doctor.findings import MLA_DRAFT_CLASS, Diagnosis
from eagle3scope.doctor.loader_layouts import (
    NORM_FLAGS,
    SINCE,
    LoaderLayout,
    Mapping,
    canonical_name,
    map_name,
    norm_feature,
    num_aux,
)

#: What kimi_k25_eagle3.py (0.5.12+) builds in its one MLA decoder layer (``model.midlayer.*``).
MLA_LAYER_PARAMS = ("input_layernorm", "hidden_norm", "post_attention_layernorm", "mlp.gate_up_proj", "mlp.down_proj",
                    "self_attn.fused_qkv_a_proj_with_mqa", "self_attn.q_a_layernorm", "self_attn.q_b_proj",
                    "self_attn.kv_a_layernorm", "self_attn.kv_b_proj", "self_attn.o_proj")


def mla_names(dx: Diagnosis) -> None:
    """kimi_k25_eagle3.Eagle3DeepseekV2ForCausalLM.load_weights (0.5.23) by name: ``layers.0.`` read as
    ``midlayer.``, everything else under ``model.`` but ``lm_head``; ``gate_proj`` / ``up_proj`` stacked into
    ``gate_up_proj``; ``q_a_proj`` and ``kv_a_proj_with_mqa`` held until both came, then written fused; d2t / t2d
    read as buffers; any other name logged ('skipping unexpected weight') and dropped."""
    config = dx.config or {}
    params = {f"model.midlayer.{p}.weight" for p in MLA_LAYER_PARAMS} | {"model.fc.weight", "model.norm.weight"}
    if config.get("fc_norm") or config.get("use_aux_norm"):
        params |= {f"model.fc_norm.{i}.weight" for i in range(len(
            (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") or [0, 0, 0]))}
    own_head = not config.get("tie_word_embeddings") and config.get("draft_vocab_size") is not None
    params |= {"lm_head.weight"} if own_head else set()
    optional = {"model.embed_tokens.weight"} | (set() if own_head else {"lm_head.weight"})  # shared from the target
    written: set[str] = set()
    held: dict[str, str] = {}
    dropped = []
    for name in dx.checkpoint.tensors:
        if name.split(".")[-1] in ("d2t", "t2d"):
            continue
        mapped = re.sub(r"^layers\.0\.", "midlayer.", name)
        mapped = mapped if mapped.startswith("lm_head.") else f"model.{mapped}"
        mapped = mapped.replace(".gate_proj.", ".gate_up_proj.").replace(".up_proj.", ".gate_up_proj.")
        if "q_a_proj" in mapped or "kv_a_proj_with_mqa" in mapped:
            fused = mapped.replace("kv_a_proj_with_mqa", "fused_qkv_a_proj_with_mqa").replace(
                ".q_a_proj", ".fused_qkv_a_proj_with_mqa")
            if fused in held:
                written.add(fused)
                del held[fused]
            else:
                held[fused] = name
            continue
        if mapped in params or mapped in optional:
            written.add(mapped)
        else:
            dropped.append(name)
    if dropped:
        dx.add("weights-dropped", "warning", f"{MLA_DRAFT_CLASS}'s loader logs 'skipping unexpected weight' and skips "
               f"{len(dropped)} tensor(s)", {"names": dropped[:8], "count": len(dropped), "loader": "models/kimi_k25_eagle3.py"},
               "These names have no counterpart in SGLang's MLA draft: " + summary_text(dropped))
    missing = sorted(params - written)
    if missing:
        half = sorted(held.values())
        dx.add("weights-unwritten", "error", f"{len(missing)} draft parameter(s) get no checkpoint tensor (random init)",
               {"params": missing[:8], "count": len(missing), "unpaired": half[:8]},
               "The checkpoint lacks these tensors" + (f" ({', '.join(half[:2])} came without its q_a_proj / "
                                                      "kv_a_proj_with_mqa partner, so the fused projection is never "
                                                      "written)" if half else "") + "; retrain or re-export.")
        dx.refuse("draft parameters have no tensor to load from")


def _candidates(name: str) -> list[str]:
    """Names a dropped key may have been meant as: ``midlayer.N.`` as ``layers.N.``, and the key
    with leading components removed (wrapper prefixes such as ``module.`` or ``draft_model.``),
    bare or under the decoder layer."""
    parts = name.split(".")
    out = []
    for i in range(1, len(parts) - 1):
        rest = ".".join(parts[i:])
        out += [rest, f"layers.0.{rest}", f"midlayer.{rest}"]
    return out


def _exact_candidate(name: str) -> str | None:
    """A multi-layer draft's ``midlayer.N.*`` is SGLang's ``layers.N.*`` (0.5.12+ would rewrite
    ``midlayer`` to ``layers.0`` by substring and skip ``layers.0.N.*``)."""
    parts = name.split(".")
    if len(parts) > 2 and parts[0] == "midlayer" and parts[1].isdigit():
        return ".".join(["layers", *parts[1:]])
    return None


def _fits(layout: LoaderLayout, name: str, params: dict, written: dict, shape: tuple) -> bool:
    m = map_name(layout, name, params)
    return m.action == "param" and m.shard not in written.get(m.param, ()) and tuple(_slot_shape(params, m) or ()) == shape


def _slot_shape(params: dict, m: Mapping):
    want = params.get(m.param)
    return want.get(m.shard) if isinstance(want, dict) else want


def check_names(dx: Diagnosis, params: dict) -> None:
    """Map every key as the release does; for dropped keys, find the one unfilled parameter slot
    they fit (same shape, no other key competing for it): that is a rename fix may make."""
    layout, ckpt = dx.layout, dx.checkpoint
    written: dict[str, set] = {}
    for name in ckpt.tensors:
        m = map_name(layout, name, params)
        dx.mappings[name] = m
        if m.action == "param":
            written.setdefault(m.param, set()).add(m.shard)
    dropped = {n: m.action for n, m in dx.mappings.items() if m.action in ("skipped", "logged", "crash")}
    left_random = _unwritten(params, written)  # as the checkpoint stands, before any rename
    claims: dict[tuple, list[tuple[str, Mapping]]] = {}
    for name in dropped:
        shape = tuple(ckpt.tensors[name].shape)
        fits = {}
        exact = _exact_candidate(name)
        for cand in [exact] if exact and _fits(layout, exact, params, written, shape) else _candidates(name):
            m = map_name(layout, cand, params)
            if m.action == "param" and m.shard not in written.get(m.param, ()) and tuple(_slot_shape(params, m) or ()) == shape:
                fits[(m.param, m.shard)] = m
        if len(fits) == 1:
            (slot, m), = fits.items()
            claims.setdefault(slot, []).append((name, m))
        else:
            dx.unmappable.append(name)
    for (param, shard), names in claims.items():
        if len(names) > 1:  # two keys fit the same hole: which one is meant would be a guess
            dx.unmappable += [n for n, _ in names]
            continue
        name, m = names[0]
        dx.renames[name] = canonical_name(layout, param, shard)
        dx.mappings[name] = m
        written.setdefault(param, set()).add(shard)
    _upper_layer_norms(dx, params, written)
    silent = [n for n, action in dropped.items() if action == "skipped"]
    if silent:
        groups = summarise(silent)
        dx.add("weights-dropped", "error",
               ", ".join(f"`{g}`" for g, _ in groups) + f" will be silently skipped by SGLang {dx.sglang_version}"
               if len(groups) <= 3 else f"SGLang {dx.sglang_version} silently skips {len(silent)} checkpoint tensors",
               {"skipped": len(silent), "groups": {g: c for g, c in groups}, "examples": silent[:8],
                "renamable": len([n for n in silent if n in dx.renames]),
                "params_left_random": left_random, "loader": layout.label},
               "Run `eagle3scope fix DRAFT --out NEW`: it renames the keys this release maps."
               if all(n in dx.renames for n in silent) else _unmapped_text(dx, [n for n in silent if n not in dx.renames]))
    crash = [n for n, action in dropped.items() if action == "crash"]
    if crash:
        dx.add("weights-crash", "error", f"SGLang {dx.sglang_version} raises KeyError on these names at load",
               {"names": crash[:8]}, "Rename them with `eagle3scope fix` or use SGLang 0.5.12+.")
    logged = [n for n, action in dropped.items() if action == "logged"]
    if logged:
        dx.add("weights-dropped", "warning", "The loader logs 'not found in params_dict' and skips these tensors",
               {"names": logged[:8], "count": len(logged)}, "Rename them with `eagle3scope fix`.")
    if dx.unmappable:
        other = [n for n in dx.unmappable if not norm_feature(n)]
        dx.refuse("tensors without a counterpart in the draft model: " + summary_text(other) if other else
                  _unmapped_text(dx, dx.unmappable))
    missing = _unwritten(params, written)  # even after fix's renames
    if missing:
        dx.add("weights-unwritten", "error", f"{len(missing)} draft parameter(s) get no checkpoint tensor (random init)",
               {"params": missing[:8], "count": len(missing)},
               "The checkpoint lacks these tensors (or names them in a way fix cannot map); retrain or re-export.")
        dx.refuse("draft parameters have no tensor to load from")


def _unmapped_text(dx: Diagnosis, names: list[str]) -> str:
    """Why these tensors load nowhere: EAGLE-3.x norms this release does not build (or the config
    does not switch on), else no counterpart at all."""
    norms: dict[str, list[str]] = {}
    rest = []
    for name in names:
        feature = norm_feature(name)
        (norms.setdefault(feature, []) if feature else rest).append(name)
    parts = []
    for feature, group in norms.items():
        flag = next(f for f, feat in NORM_FLAGS.items() if feat == feature)
        parts.append(f"{'the tensor' if len(group) == 1 else 'the tensors'} {summary_text(group)} "
                     f"{'is an EAGLE-3.x norm weight' if len(group) == 1 else 'are EAGLE-3.x norm weights'}: "
                     + (f"SGLang >= {SINCE[feature]} loads them" if not dx.layout.has(feature) else
                        f"SGLang builds them only with {flag}: true in config.json"))
    if rest:
        parts.append("these names have no counterpart in SGLang's draft model (a different architecture?): "
                     + summary_text(rest))
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


def _upper_layer_norms(dx: Diagnosis, params: dict, written: dict[str, set]) -> None:
    """Layers after the first: SGLang (0.5.12+, llama_eagle3.py LlamaDecoderLayer.forward) normalises
    their input with ``hidden_norm`` and never uses ``input_layernorm``, while a plain decoder layer
    (Model-Optimizer's ``layers.N`` for N >= 1) trained its pre-attention norm as ``input_layernorm``.
    That tensor is the one ``hidden_norm`` must get."""
    for name, m in list(dx.mappings.items()):
        if m.action != "param" or not m.param.endswith(".input_layernorm.weight") or ".layers.0." in m.param:
            continue
        hidden = m.param.replace(".input_layernorm.", ".hidden_norm.")
        if hidden in params and hidden not in written:
            dx.renames[name] = canonical_name(dx.layout, hidden)
            dx.mappings[name] = Mapping(name, "param", hidden)
            written[hidden] = {None}
            written.get(m.param, set()).discard(None)
            dx.add("weights-unused", "error", f"{name} loads into a norm SGLang never applies",
                   {"tensor": name, "loaded_into": m.param, "left_random": hidden},
                   f"`eagle3scope fix` renames it to {dx.renames[name]}, the norm SGLang applies before that "
                   "layer's attention.")


#: Parameters SGLang allocates but never applies: layers after the first use hidden_norm instead.
UNUSED_PARAM = re.compile(r"\.layers\.[1-9]\d*\.input_layernorm\.weight$")


def summarise(names: list[str]) -> list[tuple[str, int]]:
    """``layers.0.mlp.up_proj.weight`` ... -> ``[("layers.0.*", 10)]``: names grouped by their module prefix."""
    groups: dict[str, int] = {}
    for name in names:
        parts = name.split(".")
        skip = 1 if parts[0] == "model" and len(parts) > 3 else 0
        width = skip + (2 if len(parts) > skip + 2 and parts[skip + 1].isdigit() else 1)
        key = ".".join(parts[:width]) + ".*" if len(parts) > width + 1 else name
        groups[key] = groups.get(key, 0) + 1
    return sorted(groups.items(), key=lambda kv: -kv[1])


def summary_text(names: list[str], limit: int = 4) -> str:
    if len(names) <= limit:
        return ", ".join(names)
    groups = summarise(names)
    text = ", ".join(f"{g} ({c})" if c > 1 else g for g, c in groups[:limit])
    return f"{len(names)} tensors: {text}" + (", ..." if len(groups) > limit else "")


def _unwritten(params: dict, written: dict[str, set]) -> list[str]:
    """Parameters (or shards of fused ones) no tensor writes: they keep their random init.
    embed_tokens is replaced by the target's and lm_head is judged by check_head."""
    missing = []
    for param, shape in params.items():
        if param in ("model.embed_tokens.weight", "lm_head.weight") or UNUSED_PARAM.search(param):
            continue
        need = set(shape) if isinstance(shape, dict) else {None}
        if not need <= written.get(param, set()):
            missing.append(param)
    return missing


def check_shapes(dx: Diagnosis, params: dict) -> None:
    bad = {}
    for name, info in dx.checkpoint.tensors.items():
        m = dx.mappings[name]
        if m.action != "param" or m.param == "lm_head.weight":
            continue
        want = params[m.param]
        want = want.get(m.shard) if isinstance(want, dict) else want
        if want is not None and tuple(info.shape) != tuple(want):
            bad[name] = {"shape": list(info.shape), "expected": list(want)}
    fc = bad.pop(next((n for n in bad if n.endswith("fc.weight")), None), None)
    cfg, fixed = dx.config, dx.layout.fc_aux_states
    target_hidden = cfg.get("target_hidden_size") or cfg["hidden_size"]
    if fc:
        width = fc["shape"][1] if len(fc["shape"]) == 2 else 0
        k_trained = width // target_hidden if width % target_hidden == 0 else None
        evidence = {"fc_shape": fc["shape"], "expected": fc["expected"], "num_aux_configured": num_aux(cfg),
                    "target_hidden_size": target_hidden, "num_aux_trained": k_trained or width / target_hidden}
        if fixed and k_trained and fc["shape"][0] == cfg["hidden_size"]:
            dx.add("fc-width-unsupported", "error", f"SGLang {dx.sglang_version} builds fc for exactly {fixed} aux "
                   f"states; this draft's fc takes {k_trained}", evidence,
                   f"Serve with SGLang {SINCE['fc_from_config']} or newer: it builds fc for the configured aux "
                   "states.")
            dx.refuse(f"fc takes {k_trained} aux states: SGLang {dx.sglang_version} cannot load it; use SGLang "
                      f"{SINCE['fc_from_config']} or newer")
            fc = None
        else:
            dx.add("fc-shape", "error", "fc does not match the number of aux layers x the target hidden size",
                   evidence, _fc_hint(dx, width, k_trained))
    elif fixed and num_aux(cfg) != fixed:
        dx.add("fc-shape", "error", f"The config captures {num_aux(cfg)} aux states; fc takes {fixed}",
               {"num_aux_configured": num_aux(cfg), "fc_aux_states": fixed, "loader": dx.layout.label},
               f"Give eagle_config.eagle_aux_hidden_state_layer_ids {fixed} ids, the layers fc was trained on.")
        dx.refuse("the config and fc disagree on the number of aux states")
    if bad:
        dx.add("shape-mismatch", "error", f"{len(bad)} tensor(s) have the wrong shape for this config",
               {"tensors": dict(list(bad.items())[:8])}, "The checkpoint and config.json disagree: use the config it was trained with.")
    if fc or bad:
        dx.refuse("tensor shapes disagree with the config")


def _fc_hint(dx: Diagnosis, width: int, k_trained: int | None) -> str:
    """What makes fc load: as many ids as it was trained on, or (with --target) the target's width,
    which also stops SGLang sharing the target's embedding when it differs from hidden_size."""
    target = (dx.target or {}).get("hidden_size")
    if target and width % target == 0 and target != (dx.config.get("target_hidden_size") or dx.config["hidden_size"]):
        return f"Set target_hidden_size to {target}, the target's hidden size." + _embed_note(dx, target)
    if k_trained:
        return f"Give eagle_config.eagle_aux_hidden_state_layer_ids {k_trained} ids, as many as fc was trained on."
    return "fc was trained for another target or config: use the config.json exported with this draft."


def _embed_note(dx: Diagnosis, target_hidden: int) -> str:
    if target_hidden == dx.config["hidden_size"] or _embed_tensor(dx):
        return ""
    return (" SGLang then keeps the draft's own embedding (llama.py set_embed), and the checkpoint has none: "
            "re-export it with embed_tokens.weight.")


def _embed_tensor(dx: Diagnosis) -> str | None:
    return next((n for n, m in dx.mappings.items() if m.param == "model.embed_tokens.weight"), None) or next(
        (n for n in dx.checkpoint.tensors if n.endswith("embed_tokens.weight")), None)


def check_embedding(dx: Diagnosis, params: dict) -> None:
    """llama.py ``set_embed``: the target's embedding replaces the draft's unless the config has a
    ``target_hidden_size`` other than ``hidden_size``; then the draft's own must be in the checkpoint."""
    cfg = dx.config
    th = cfg.get("target_hidden_size")
    if th is None or th == cfg["hidden_size"] or _embed_tensor(dx):
        return
    dx.add("embed-random", "error", f"target_hidden_size {th} != hidden_size {cfg['hidden_size']}: SGLang does "
           "not share the target's embedding, and the checkpoint has none (random init)",
           {"target_hidden_size": th, "hidden_size": cfg["hidden_size"], "embed_tokens_in_checkpoint": False},
           "Re-export the draft with its embed_tokens.weight [vocab_size, hidden_size] (SpecForge leaves it out: "
           "it is the target's when the widths match).")
    dx.refuse("the draft's embedding is not in the checkpoint and SGLang will not share the target's")


def check_head(dx: Diagnosis, params: dict) -> None:
    cfg, ckpt = dx.config, dx.checkpoint
    if cfg.get("tie_word_embeddings"):
        return
    draft_vocab, hidden = cfg.get("draft_vocab_size"), cfg["hidden_size"]
    heads = [n for n, m in dx.mappings.items() if m.param == "lm_head.weight"]
    if not heads:
        if draft_vocab is not None or not dx.layout.has("head_from_target"):
            dx.add("lm-head-mismatch", "error", "No lm_head in the checkpoint while draft_vocab_size is set: random head",
                   {"draft_vocab_size": draft_vocab, "lm_head_present": False},
                   "Export the draft's trained lm_head.weight [draft_vocab_size, hidden_size] with the checkpoint. "
                   "(Setting draft_vocab_size to null makes SGLang use the target's head, right only if the draft "
                   "was trained that way.)")
            dx.refuse("lm_head is missing: there is nothing to restore it from")
        else:
            dx.add("lm-head-from-target", "info", "No lm_head and no draft_vocab_size: SGLang uses the target's head",
                   {"draft_vocab_size": None})
        return
    shape = list(ckpt.tensors[heads[0]].shape)
    rows = draft_vocab if draft_vocab is not None else cfg["vocab_size"]
    if shape != [rows, hidden]:
        dx.add("lm-head-mismatch", "error", "lm_head has the wrong shape", {"shape": shape, "expected": [rows, hidden],
               "draft_vocab_size": draft_vocab}, "Set draft_vocab_size to the head's row count, or re-export the head.")
        dx.refuse("lm_head shape disagrees with draft_vocab_size")
    elif draft_vocab is None and dx.layout.has("head_from_target"):
        dx.add("lm-head-from-target", "warning", f"draft_vocab_size is null: SGLang {dx.sglang_version} replaces the "
               f"checkpoint's {heads[0]} with the target's head", {"draft_vocab_size": None, "lm_head": heads[0]},
               f"If the draft trained its own head, set draft_vocab_size to {shape[0]} so SGLang keeps it "
               "(load_lm_head_from_target is set only when it is null); a copy of the target's head loses nothing.")


def _vocab_names(dx: Diagnosis) -> tuple[str | None, str | None]:
    """The d2t and t2d tensors, by the loader's rule (a name containing d2t / t2d)."""
    names = list(dx.checkpoint.tensors)
    d2t = next((n for n in names if "d2t" in n), None)
    t2d = next((n for n in names if "t2d" in n and n != d2t), None)
    return d2t, t2d


def check_vocab_map(dx: Diagnosis) -> None:
    import numpy as np

    cfg, ckpt = dx.config or {}, dx.checkpoint
    draft_vocab = cfg.get("draft_vocab_size")
    target_vocab = (dx.target or {}).get("vocab_size") or cfg.get("vocab_size")
    d2t_name, t2d_name = _vocab_names(dx)
    if d2t_name is None:
        if draft_vocab and target_vocab and draft_vocab < target_vocab:
            dx.add("d2t-missing", "error", "draft_vocab_size < the target vocabulary, but there is no d2t",
                   {"draft_vocab_size": draft_vocab, "target_vocab_size": target_vocab},
                   "Add the d2t offsets the draft was trained with (target id = i + d2t[i]).")
            dx.refuse("d2t is missing")
        elif dx.layout.d2t_required and ckpt.tensors:
            dx.add("d2t-missing", "error", f"SGLang {dx.sglang_version} crashes without d2t", {},
                   "Add d2t = zeros(draft_vocab_size) (identity mapping) or use SGLang 0.4.9+.")
        return
    info = ckpt.tensors[d2t_name]
    if info.dtype not in INT_DTYPES or len(info.shape) != 1:
        dx.add("d2t-invalid", "error", "d2t must be a 1-D integer tensor", {"dtype": info.dtype, "shape": list(info.shape)},
               "Re-export d2t as int64 offsets.")
        dx.refuse("d2t is not a 1-D integer tensor")
        return
    n = info.shape[0]
    evidence = {"size": int(n), "draft_vocab_size": draft_vocab, "target_vocab_size": target_vocab}
    if draft_vocab is not None and n != draft_vocab:
        dx.add("d2t-invalid", "error", "d2t length differs from draft_vocab_size", evidence,
               "Use the d2t that belongs to this draft.")
        dx.refuse("d2t length differs from draft_vocab_size")
        return
    try:
        d2t = ckpt.load(d2t_name).astype(np.int64)
        t2d = ckpt.load(t2d_name) if t2d_name is not None else None
    except (ValueError, OSError) as exc:
        dx.add("d2t-unchecked", "error", "d2t / t2d were not loaded", {**evidence, "detail": str(exc)[:200]},
               "A real d2t has one int64 per draft token (a few MB); re-export it.")
        dx.refuse("d2t could not be checked")
        return
    ar = np.arange(n, dtype=np.int64)
    as_offsets = d2t + ar
    evidence.update(min=int(d2t.min()) if n else None, max=int(d2t.max()) if n else None)
    t2d_ids = None
    if t2d is not None:
        evidence["t2d_shape"] = list(t2d.shape)
        evidence["t2d_true"] = int(np.count_nonzero(t2d))
        if (target_vocab and t2d.shape != (target_vocab,)) or t2d.ndim != 1:
            dx.add("t2d-invalid", "warning", "t2d is not a mask over the target vocabulary", evidence,
                   "SGLang ignores t2d; re-export it as a bool mask of length target vocab.")
        else:
            t2d_ids = np.nonzero(t2d)[0]
    out_of_range = int(((as_offsets < 0) | (as_offsets >= target_vocab)).sum()) if target_vocab else int((as_offsets < 0).sum())
    injective = len(np.unique(as_offsets)) == n
    consistent = t2d_ids is not None and np.array_equal(t2d_ids, np.sort(as_offsets))
    absolute_by_t2d = t2d_ids is not None and not consistent and np.array_equal(t2d_ids, np.sort(d2t))
    abs_valid = bool(n) and bool(target_vocab) and d2t.min() >= 0 and d2t.max() < target_vocab and len(np.unique(d2t)) == n
    evidence.update(out_of_range=out_of_range, injective=bool(injective),
                    t2d_consistent=None if t2d_ids is None else bool(consistent))
    if consistent or (t2d_ids is None and not out_of_range and injective):
        if t2d_ids is None and n and np.array_equal(d2t, ar):
            dx.add("d2t-absolute", "warning", "d2t equals arange: absolute ids, or offsets mapping i to 2i?", evidence,
                   "Offsets should map draft ids onto the target tokens the draft was trained on; d2t = arange is the "
                   "known bug of writing absolute ids. Add t2d so the two readings can be told apart.")
        return
    if absolute_by_t2d or (out_of_range and abs_valid):
        dx.d2t_offsets = d2t - ar
        evidence["looks_absolute"] = True
        dx.add("d2t-absolute", "error", "d2t holds absolute target ids, not offsets", evidence,
               "`eagle3scope fix` rewrites it as offsets (d2t - arange), which "
               + ("t2d confirms." if absolute_by_t2d else "is the only reading that stays inside the vocabulary."))
        return
    if t2d_ids is not None and not out_of_range and injective:
        dx.add("d2t-mismatch", "error", "d2t and t2d disagree on which target tokens the draft covers", evidence,
               "One of the two belongs to another draft vocabulary: re-export both from the training run. "
               "SGLang uses d2t only.")
        dx.refuse("d2t and t2d disagree")
        return
    dx.add("d2t-absolute" if out_of_range else "d2t-invalid", "error",
           "d2t maps draft ids outside the target vocabulary" if out_of_range else "d2t maps two draft ids onto one target id",
           evidence, "The table is neither valid offsets nor valid absolute ids; use the d2t exported with this draft.")
    dx.refuse("d2t is inconsistent and cannot be converted unambiguously")


def check_target(dx: Diagnosis) -> None:
    target, cfg = dx.target, dx.config
    if not target or not cfg:
        return
    expected_hidden = cfg.get("target_hidden_size") or cfg.get("hidden_size")
    if target.get("hidden_size") and expected_hidden and target["hidden_size"] != expected_hidden:
        fc = next((i.shape for n, i in dx.checkpoint.tensors.items() if dx.mappings.get(n) and
                   dx.mappings[n].param == "model.fc.weight"), None)
        fits = fc is not None and len(fc) == 2 and fc[1] == target["hidden_size"] * num_aux(cfg)
        dx.add("hidden-width-mismatch", "error", "The target's hidden size differs from what the draft's fc expects",
               {"target_hidden_size": target["hidden_size"], "draft_expects": expected_hidden},
               (f"fc was trained on this target's width: set target_hidden_size to {target['hidden_size']}."
                + _embed_note(dx, target["hidden_size"])) if fits else
               "Use the target the draft was trained for: its fc takes states of another width.")
    if target.get("vocab_size") and cfg.get("vocab_size") and target["vocab_size"] != cfg["vocab_size"]:
        dx.add("vocab-mismatch", "error", "The draft's vocab_size differs from the target's",
               {"target_vocab_size": target["vocab_size"], "draft_vocab_size_field": cfg["vocab_size"]},
               "Use the target the draft was trained for (same tokenizer).")
