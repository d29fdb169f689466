"""Checks of a draft checkpoint against what one SGLang release will do with it.

``diagnose`` returns findings (stable ids shared with the live rules where the break is the same:
``weights-dropped``, ``d2t-absolute``, ``lm-head-mismatch``, ``aux-layers-mismatch``, ...) and the
facts ``fix`` needs: which keys to rename, whether d2t can be converted, the SGLang config to write.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from eagle3scope.wire.aux_layers import default_capture, specforge_defaults
from eagle3scope.doctor.checkpoint import INT_DTYPES, Checkpoint, open_checkpoint
from eagle3scope.doctor.loader_layouts import (
    LoaderLayout,
    Mapping,
    canonical_name,
    expected_params,
    layout_for,
    map_name,
    num_aux,
)

DEFAULT_SGLANG = "0.5.23"
SGLANG_DRAFT_CLASS = "LlamaForCausalLMEagle3"


@dataclass
class Finding:
    id: str
    severity: str  # "error" | "warning" | "info"
    title: str
    evidence: dict
    fix: str = ""

    def to_dict(self) -> dict:
        return {"id": self.id, "severity": self.severity, "title": self.title, "evidence": self.evidence, "fix": self.fix}


@dataclass
class Diagnosis:
    checkpoint: Checkpoint
    sglang_version: str
    layout: LoaderLayout
    findings: list[Finding] = field(default_factory=list)
    config: dict | None = None  # the config SGLang will read once fix's config edits are applied
    config_edits: list[str] = field(default_factory=list)  # what fix changes in config.json, and why
    mappings: dict[str, Mapping] = field(default_factory=dict)  # per checkpoint name, after fix's renames
    renames: dict[str, str] = field(default_factory=dict)  # checkpoint name -> name this release loads
    unmappable: list[str] = field(default_factory=list)
    d2t_offsets: object = None  # numpy array to write instead of an absolute d2t (when unambiguous)
    refusals: list[str] = field(default_factory=list)  # why fix would have to guess

    def add(self, id: str, severity: str, title: str, evidence: dict, fix: str = "") -> None:
        self.findings.append(Finding(id, severity, title, evidence, fix))

    @property
    def exit_code(self) -> int:
        severities = {f.severity for f in self.findings}
        return 2 if "error" in severities else 1 if "warning" in severities else 0

    def to_dict(self) -> dict:
        return {
            "draft": str(self.checkpoint.path),
            "sglang_version": self.sglang_version,
            "loader": self.layout.label + (f" ({self.layout.note})" if self.layout.note else ""),
            "tensors": len(self.checkpoint.tensors),
            "findings": [f.to_dict() for f in self.findings],
            "fixable": {"renames": self.renames, "d2t_to_offsets": self.d2t_offsets is not None,
                        "config_edits": self.config_edits},
            "refusals": self.refusals,
        }


def installed_sglang() -> str:
    """The SGLang version to check against when none is given: the installed one, else 0.5.23."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sglang")
    except PackageNotFoundError:
        return DEFAULT_SGLANG


def read_target_config(target: str | Path | None) -> dict | None:
    if target is None:
        return None
    cfg = json.loads((Path(target) / "config.json").read_text())
    return cfg.get("text_config") or cfg


def speculators_to_sglang(config: dict) -> tuple[dict | None, str | None]:
    """speculators' Eagle3SpeculatorConfig -> the flat HF config SGLang's LlamaForCausalLMEagle3 reads.

    speculators numbers aux layers by layer input (HF ``hidden_states[i]``); SGLang's configured ids
    are output-of-layer (it adds 1), so the ids are shifted down by one.
    """
    layer = dict(config.get("transformer_layer_config") or {})
    if not layer.get("hidden_size"):
        return None, "transformer_layer_config has no hidden_size"
    ids = config.get("eagle_aux_hidden_state_layer_ids")
    if ids is not None and min(ids) < 1:
        return None, f"aux layer id 0 (the embeddings) has no SGLang equivalent: {ids}"
    out = {k: v for k, v in layer.items() if k not in ("architectures", "_attn_implementation")}
    out.update(architectures=[SGLANG_DRAFT_CLASS], draft_vocab_size=config.get("draft_vocab_size"),
               model_type=layer.get("model_type") or "llama")
    eagle = {"use_aux_hidden_state": True}
    if ids is not None:
        eagle["eagle_aux_hidden_state_layer_ids"] = [i - 1 for i in ids]
    for flag in ("norm_before_fc", "fc_norm", "norm_output"):
        if config.get(flag):
            out[flag] = True
    if config.get("target_hidden_size"):
        out["target_hidden_size"] = config["target_hidden_size"]
    out["eagle_config"] = eagle
    if out.get("model_type") not in (None, "llama"):
        return None, f"transformer_layer_config is a {out['model_type']} layer; SGLang's EAGLE-3 draft is a Llama layer"
    return out, None


def diagnose(draft_dir: str | Path, *, sglang_version: str | None = None, target_dir: str | Path | None = None) -> Diagnosis:
    version = sglang_version or installed_sglang()
    dx = Diagnosis(open_checkpoint(draft_dir), version, layout_for(version))
    ckpt, layout = dx.checkpoint, dx.layout
    if not layout.has_eagle3:
        dx.add("no-eagle3", "error", f"SGLang {version} has no EAGLE-3 support", {"sglang_version": version},
               "Use SGLang 0.4.4.post2 or newer (0.5.12+ maps both midlayer.* and layers.0.* names).")
        dx.refusals.append("this SGLang release cannot serve EAGLE-3 drafts")
        return dx
    target = read_target_config(target_dir)
    _check_files(dx)
    _check_config(dx)
    if dx.config is None or not ckpt.tensors:
        return dx
    try:
        params = expected_params(layout, dx.config)
    except (KeyError, TypeError) as exc:
        dx.add("config-incomplete", "error", "config.json lacks fields the draft model is built from",
               {"missing": str(exc)}, "Add the Llama fields (hidden_size, num_attention_heads, intermediate_size, ...).")
        dx.refusals.append("config.json is incomplete")
        return dx
    _check_names(dx, params)
    _check_shapes(dx, params)
    _check_head(dx, params)
    _check_vocab_map(dx, target)
    _check_aux_layers(dx, target)
    _check_target(dx, target)
    return dx


def _check_files(dx: Diagnosis) -> None:
    ckpt = dx.checkpoint
    if ckpt.pickles and not ckpt.files:
        dx.add("pickle-weights", "error", "Weights are pickled (pytorch_model.bin), not safetensors",
               {"files": ckpt.pickles},
               "Pickle files can run code when loaded, so eagle3scope does not open them. Convert once in a "
               "trusted environment: torch.load(...) then safetensors.torch.save_file(state_dict, 'model.safetensors').")
        dx.refusals.append("the weights are pickled")
    elif not ckpt.files and not ckpt.errors:
        dx.add("no-weights", "error", "No *.safetensors file in the draft directory", {"path": str(ckpt.path)},
               "Point at the directory that holds model.safetensors and config.json.")
        dx.refusals.append("there are no weights")
    for err in ckpt.errors:
        dx.add("weights-unreadable", "error", "A weight file cannot be read (truncated or damaged?)", {"detail": err},
               "Download or copy the checkpoint again; compare the file sizes with the source.")
    if ckpt.errors:
        dx.refusals.append("some weight files are unreadable")
    if ckpt.duplicates:
        dx.add("duplicate-tensors", "error", "The same tensor name appears in more than one file",
               {"names": ckpt.duplicates[:10], "count": len(ckpt.duplicates)}, "Keep one copy of each tensor.")
        dx.refusals.append("tensor names are duplicated across files")


def _check_config(dx: Diagnosis) -> None:
    ckpt = dx.checkpoint
    if ckpt.config is None:
        dx.add("config-missing", "error", "The draft has no usable config.json", {"detail": ckpt.config_error},
               "Write the draft's config.json (architectures [LlamaForCausalLMEagle3], hidden_size, draft_vocab_size, "
               "eagle_config.eagle_aux_hidden_state_layer_ids, ...), as SpecForge does.")
        dx.refusals.append("config.json is missing or unreadable")
        return
    config = ckpt.config
    if config.get("speculators_model_type"):
        converted, why = speculators_to_sglang(config)
        dx.add("config-speculators-format", "error", "config.json is speculators' format, which SGLang does not read",
               {"architectures": config.get("architectures"), "speculators_model_type": config.get("speculators_model_type"),
                "eagle_aux_hidden_state_layer_ids": config.get("eagle_aux_hidden_state_layer_ids")},
               "`eagle3scope fix` writes the flat LlamaForCausalLMEagle3 config SGLang reads, with the aux layer ids "
               "moved from speculators' input-of-layer numbering to SGLang's (minus 1)." if converted else why or "")
        if converted is None:
            dx.refusals.append(f"the speculators config cannot be converted: {why}")
            return
        dx.config = converted
        dx.config_edits.append("speculators format -> SGLang LlamaForCausalLMEagle3 config (aux ids "
                               f"{config.get('eagle_aux_hidden_state_layer_ids')} -> "
                               f"{converted['eagle_config'].get('eagle_aux_hidden_state_layer_ids')})")
        return
    dx.config = config
    archs = config.get("architectures") or []
    if SGLANG_DRAFT_CLASS not in archs:
        dx.add("architecture", "warning", f"architectures is {archs}, not [{SGLANG_DRAFT_CLASS}]",
               {"architectures": archs}, f"The doctor models {SGLANG_DRAFT_CLASS}; other draft classes load differently.")
    flags = [f for f in ("norm_before_fc", "fc_norm", "use_aux_norm") if config.get(f) or (config.get("eagle_config") or {}).get(f)]
    if flags and not dx.layout.fc_norms:
        dx.add("eagle-config-ignored", "error", f"SGLang {dx.sglang_version} ignores {', '.join(flags)}",
               {"flags": flags, "loader": dx.layout.label},
               "The draft was trained with normalised aux states that this release does not apply: use SGLang 0.5.12+.")
    if dx.layout.single_layer_only and config.get("num_hidden_layers", 1) != 1:
        dx.add("multi-layer-draft", "error", f"SGLang {dx.sglang_version} supports one draft decoder layer only",
               {"num_hidden_layers": config.get("num_hidden_layers")}, "Use SGLang 0.5.12 or newer.")


def _candidates(name: str) -> list[str]:
    """Names a dropped key may have been meant as: the key with leading components removed
    (wrapper prefixes such as ``module.`` or ``draft_model.``), bare or under the decoder layer."""
    parts = name.split(".")
    out = []
    for i in range(1, len(parts) - 1):
        rest = ".".join(parts[i:])
        out += [rest, f"layers.0.{rest}", f"midlayer.{rest}"]
    return out


def _slot_shape(params: dict, m: Mapping):
    want = params.get(m.param)
    return want.get(m.shard) if isinstance(want, dict) else want


def _check_names(dx: Diagnosis, params: dict) -> None:
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
        for cand in _candidates(name):
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
    silent = [n for n, action in dropped.items() if action == "skipped"]
    if silent:
        dx.add("weights-dropped", "error", f"SGLang {dx.sglang_version} silently skips {len(silent)} checkpoint tensor(s)",
               {"skipped": len(silent), "examples": silent[:8], "renamable": len([n for n in silent if n in dx.renames]),
                "params_left_random": left_random, "loader": layout.label},
               "Run `eagle3scope fix DRAFT --out NEW --for-sglang V`: it renames the keys this release maps."
               if all(n in dx.renames for n in silent) else
               "Some names have no counterpart in SGLang's draft model (a different architecture?): "
               + ", ".join(n for n in silent if n not in dx.renames)[:300])
    crash = [n for n, action in dropped.items() if action == "crash"]
    if crash:
        dx.add("weights-crash", "error", f"SGLang {dx.sglang_version} raises KeyError on these names at load",
               {"names": crash[:8]}, "Rename them with `eagle3scope fix` or use SGLang 0.5.12+.")
    logged = [n for n, action in dropped.items() if action == "logged"]
    if logged:
        dx.add("weights-dropped", "warning", "The loader logs 'not found in params_dict' and skips these tensors",
               {"names": logged[:8], "count": len(logged)}, "Rename them with `eagle3scope fix`.")
    if dx.unmappable:
        dx.refusals.append("tensors without a counterpart in the draft model: " + ", ".join(dx.unmappable[:5]))
    missing = _unwritten(params, written)  # even after fix's renames
    if missing:
        dx.add("weights-unwritten", "error", f"{len(missing)} draft parameter(s) get no checkpoint tensor (random init)",
               {"params": missing[:8], "count": len(missing)},
               "The checkpoint lacks these tensors (or names them in a way fix cannot map); retrain or re-export.")
        dx.refusals.append("draft parameters have no tensor to load from")


def _unwritten(params: dict, written: dict[str, set]) -> list[str]:
    """Parameters (or shards of fused ones) no tensor writes: they keep their random init.
    embed_tokens is replaced by the target's and lm_head is judged by _check_head."""
    missing = []
    for param, shape in params.items():
        if param in ("model.embed_tokens.weight", "lm_head.weight"):
            continue
        need = set(shape) if isinstance(shape, dict) else {None}
        if not need <= written.get(param, set()):
            missing.append(param)
    return missing


def _check_shapes(dx: Diagnosis, params: dict) -> None:
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
    if fc:
        cfg = dx.config
        target_hidden = cfg.get("target_hidden_size") or cfg["hidden_size"]
        k_trained = fc["shape"][1] / target_hidden if len(fc["shape"]) == 2 else None
        dx.add("fc-shape", "error", "fc does not match the number of aux layers x the target hidden size",
               {"fc_shape": fc["shape"], "expected": fc["expected"], "num_aux_configured": num_aux(cfg),
                "target_hidden_size": target_hidden, "num_aux_trained": k_trained},
               "Give eagle_config.eagle_aux_hidden_state_layer_ids as many ids as fc was trained on, and set "
               "target_hidden_size to the target's hidden_size.")
    if bad:
        dx.add("shape-mismatch", "error", f"{len(bad)} tensor(s) have the wrong shape for this config",
               {"tensors": dict(list(bad.items())[:8])}, "The checkpoint and config.json disagree: use the config it was trained with.")
    if fc or bad:
        dx.refusals.append("tensor shapes disagree with the config")


def _check_head(dx: Diagnosis, params: dict) -> None:
    cfg, ckpt = dx.config, dx.checkpoint
    if cfg.get("tie_word_embeddings"):
        return
    draft_vocab, hidden = cfg.get("draft_vocab_size"), cfg["hidden_size"]
    heads = [n for n, m in dx.mappings.items() if m.param == "lm_head.weight"]
    if not heads:
        if draft_vocab is not None or not dx.layout.head_from_target_without_draft_vocab:
            dx.add("lm-head-mismatch", "error", "No lm_head in the checkpoint while draft_vocab_size is set: random head",
                   {"draft_vocab_size": draft_vocab, "lm_head_present": False},
                   "Export the draft's trained lm_head.weight [draft_vocab_size, hidden_size] with the checkpoint. "
                   "(Setting draft_vocab_size to null makes SGLang use the target's head, right only if the draft "
                   "was trained that way.)")
            dx.refusals.append("lm_head is missing: there is nothing to restore it from")
        else:
            dx.add("lm-head-from-target", "info", "No lm_head and no draft_vocab_size: SGLang uses the target's head",
                   {"draft_vocab_size": None})
        return
    shape = list(ckpt.tensors[heads[0]].shape)
    rows = draft_vocab if draft_vocab is not None else cfg["vocab_size"]
    if shape != [rows, hidden]:
        dx.add("lm-head-mismatch", "error", "lm_head has the wrong shape", {"shape": shape, "expected": [rows, hidden],
               "draft_vocab_size": draft_vocab}, "Set draft_vocab_size to the head's row count, or re-export the head.")
        dx.refusals.append("lm_head shape disagrees with draft_vocab_size")


def _check_vocab_map(dx: Diagnosis, target: dict | None) -> None:
    import numpy as np

    cfg, ckpt = dx.config, dx.checkpoint
    draft_vocab = cfg.get("draft_vocab_size")
    target_vocab = (target or {}).get("vocab_size") or cfg.get("vocab_size")
    d2t_name = next((n for n, m in dx.mappings.items() if m.action == "d2t"), None)
    t2d_name = next((n for n, m in dx.mappings.items() if m.action == "ignored"), None)
    if d2t_name is None:
        if draft_vocab and target_vocab and draft_vocab < target_vocab:
            dx.add("d2t-missing", "error", "draft_vocab_size < the target vocabulary, but there is no d2t",
                   {"draft_vocab_size": draft_vocab, "target_vocab_size": target_vocab},
                   "Add the d2t offsets the draft was trained with (target id = i + d2t[i]).")
            dx.refusals.append("d2t is missing")
        elif dx.layout.d2t_required:
            dx.add("d2t-missing", "error", f"SGLang {dx.sglang_version} crashes without d2t", {},
                   "Add d2t = zeros(draft_vocab_size) (identity mapping) or use SGLang 0.4.9+.")
        return
    info = ckpt.tensors[d2t_name]
    if info.dtype not in INT_DTYPES or len(info.shape) != 1:
        dx.add("d2t-invalid", "error", "d2t must be a 1-D integer tensor", {"dtype": info.dtype, "shape": list(info.shape)},
               "Re-export d2t as int64 offsets.")
        dx.refusals.append("d2t is not a 1-D integer tensor")
        return
    d2t = ckpt.load(d2t_name).astype(np.int64)
    n = d2t.shape[0]
    ar = np.arange(n, dtype=np.int64)
    as_offsets = d2t + ar
    evidence = {"size": int(n), "draft_vocab_size": draft_vocab, "target_vocab_size": target_vocab,
                "min": int(d2t.min()) if n else None, "max": int(d2t.max()) if n else None}
    if draft_vocab is not None and n != draft_vocab:
        dx.add("d2t-invalid", "error", "d2t length differs from draft_vocab_size", evidence,
               "Use the d2t that belongs to this draft.")
        dx.refusals.append("d2t length differs from draft_vocab_size")
        return
    t2d_ids = None
    if t2d_name is not None:
        t2d = ckpt.load(t2d_name)
        evidence["t2d_shape"] = list(t2d.shape)
        evidence["t2d_true"] = int(np.count_nonzero(t2d))
        if target_vocab and t2d.shape != (target_vocab,):
            dx.add("t2d-invalid", "warning", "t2d is not a mask over the target vocabulary", evidence,
                   "SGLang ignores t2d; re-export it as a bool mask of length target vocab.")
        else:
            t2d_ids = np.nonzero(t2d)[0]
    out_of_range = int(((as_offsets < 0) | (as_offsets >= target_vocab)).sum()) if target_vocab else 0
    injective = len(np.unique(as_offsets)) == n
    consistent = t2d_ids is not None and np.array_equal(t2d_ids, np.sort(as_offsets))
    absolute_by_t2d = t2d_ids is not None and not consistent and np.array_equal(t2d_ids, np.sort(d2t))
    abs_valid = bool(n) and target_vocab and d2t.min() >= 0 and d2t.max() < target_vocab and len(np.unique(d2t)) == n
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
    dx.add("d2t-absolute" if out_of_range else "d2t-invalid", "error",
           "d2t maps draft ids outside the target vocabulary or onto the same target id", evidence,
           "The table is neither valid offsets nor valid absolute ids; use the d2t exported with this draft.")
    dx.refusals.append("d2t is inconsistent and cannot be converted unambiguously")


def _check_aux_layers(dx: Diagnosis, target: dict | None) -> None:
    cfg = dx.config
    eagle = cfg.get("eagle_config")
    n = (target or {}).get("num_hidden_layers")
    top = cfg.get("eagle_aux_hidden_state_layer_ids")
    if top is not None and (not eagle or eagle.get("eagle_aux_hidden_state_layer_ids") is None):
        # 0.5.23 spec_aux_hidden_state.py reads only eagle_config[...] (a bare except falls back to defaults)
        dx.add("aux-layers-mismatch", "error", "Aux layer ids are at the top level of config.json, where SGLang ignores them",
               {"top_level_ids": top, "eagle_config": eagle, "default_captured": default_capture(n) if n else "[2, n//2, n-3]"},
               "`eagle3scope fix` moves them into eagle_config.eagle_aux_hidden_state_layer_ids.")
        eagle = {**(eagle or {}), "eagle_aux_hidden_state_layer_ids": list(top)}
        dx.config = {**{k: v for k, v in cfg.items() if k != "eagle_aux_hidden_state_layer_ids"}, "eagle_config": eagle}
        dx.config_edits.append(f"eagle_aux_hidden_state_layer_ids {top} moved into eagle_config")
        cfg = dx.config
    if not eagle or eagle.get("eagle_aux_hidden_state_layer_ids") is None:
        dx.add("aux-layers-mismatch", "warning", "No eagle_config.eagle_aux_hidden_state_layer_ids: SGLang uses its default",
               {"eagle_config": eagle, "default_captured": default_capture(n) if n else "[2, n//2, n-3]"},
               "Write the layer ids the draft was trained on into eagle_config (output-of-layer numbering).")
        return
    if eagle.get("use_aux_hidden_state") is False:
        trained_fc = any(m.param == "model.fc.weight" for m in dx.mappings.values())
        dx.add("aux-capture-off", "error" if trained_fc else "warning",
               "eagle_config.use_aux_hidden_state is false" + (" but the checkpoint has a trained fc" if trained_fc else ""),
               {"use_aux_hidden_state": False, "fc_in_checkpoint": trained_fc},
               "SGLang will capture no aux states and skip fc, so the draft sees features it was not trained on: "
               "set use_aux_hidden_state to true." if trained_fc else
               "Without a trained fc the draft may have been trained on the last hidden state only; if it was "
               "trained on aux states, set use_aux_hidden_state to true.")
    ids = list(eagle["eagle_aux_hidden_state_layer_ids"])
    evidence = {"configured": ids, "captured_by_sglang": [i + 1 for i in ids]}
    if len(set(ids)) != len(ids):
        dx.add("aux-layers-mismatch", "warning", "Duplicate aux layer ids", evidence, "List each layer once.")
    if not n:
        return
    evidence["num_target_layers"] = n
    past = [i for i in ids if i + 1 > n - 1 or i < 0]
    if past:
        dx.add("aux-layers-out-of-range", "error", "Aux layer ids outside the target (SGLang captures id+1)",
               {**evidence, "out_of_range": past},
               f"Ids must lie in 0..{n - 2} in SGLang's output-of-layer numbering (it captures the input of layer id+1).")
        return
    if ids == default_capture(n):
        dx.add("aux-layers-mismatch", "warning", "Ids equal the input-of-layer defaults; SGLang will shift them by one",
               {**evidence, "input_of_layer_defaults": default_capture(n), "output_of_layer_defaults": specforge_defaults(n)},
               f"If the draft was trained with speculators (input-of-layer numbering), write {specforge_defaults(n)}.")


def _check_target(dx: Diagnosis, target: dict | None) -> None:
    if not target:
        return
    cfg = dx.config
    expected_hidden = cfg.get("target_hidden_size") or cfg["hidden_size"]
    if target.get("hidden_size") and target["hidden_size"] != expected_hidden:
        dx.add("hidden-width-mismatch", "error", "The target's hidden size differs from what the draft's fc expects",
               {"target_hidden_size": target["hidden_size"], "draft_expects": expected_hidden},
               "Set target_hidden_size in the draft config, or use the target the draft was trained for.")
    if target.get("vocab_size") and cfg.get("vocab_size") and target["vocab_size"] != cfg["vocab_size"]:
        dx.add("vocab-mismatch", "error", "The draft's vocab_size differs from the target's",
               {"target_vocab_size": target["vocab_size"], "draft_vocab_size_field": cfg["vocab_size"]},
               "Use the target the draft was trained for (same tokenizer).")
