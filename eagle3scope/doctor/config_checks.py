"""The doctor's checks of what the draft's files and config.json say: the files present, who wrote
them (``producers``), the config's field types, the draft class, flags and norms a release ignores,
and the target's config (``--target``). They leave ``dx.config`` as SGLang will read it once
``fix``'s edits are applied, which the weight checks then read.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from eagle3scope.doctor.aux_check import ASSUMED_TARGET, int_list
from eagle3scope.doctor.checkpoint import read_json
from eagle3scope.doctor.findings import MLA_DRAFT_CLASS, SGLANG_DRAFT_CLASS, Diagnosis
from eagle3scope.doctor.loader_layouts import FOREIGN_DRAFT_CLASSES, NORM_FLAGS, SINCE, registered_draft_classes
from eagle3scope.doctor.producers import ANGELSLIM_IDS_KEY, FIX_KEY
from eagle3scope.doctor.producers import recognise as recognise_producer
from eagle3scope.doctor.weight_checks import mla_names
from eagle3scope.wire.aux_layers import family_rule
from eagle3scope.wire.releases import parse_version

def _pos_int(v: object) -> bool:
    return type(v) is int and 0 < v < 1 << 40


#: Fields SGLang's draft model reads, with their type; a field of another type is a finding and is
#: left out of every check that would read it.
FIELD_TYPES: dict[str, tuple] = {
    "hidden_size": (_pos_int, "a positive integer"),
    "num_attention_heads": (_pos_int, "a positive integer"),
    "num_key_value_heads": (lambda v: v is None or _pos_int(v), "a positive integer or null"),
    "head_dim": (lambda v: v is None or _pos_int(v), "a positive integer or null"),
    "intermediate_size": (_pos_int, "a positive integer"),
    "intermediate_size_mlp": (_pos_int, "a positive integer"),
    "vocab_size": (_pos_int, "a positive integer"),
    "draft_vocab_size": (lambda v: v is None or _pos_int(v), "a positive integer or null"),
    "num_hidden_layers": (lambda v: _pos_int(v) and v <= 64, "a positive integer (at most 64)"),
    "num_aux_hidden_states": (lambda v: v is None or (_pos_int(v) and v <= 64), "a positive integer or null"),
    "target_hidden_size": (lambda v: v is None or _pos_int(v), "a positive integer or null"),
    "tie_word_embeddings": (lambda v: isinstance(v, bool), "true or false"),
    "bias": (lambda v: isinstance(v, bool), "true or false"),
    "architectures": (lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v), "a list of class names"),
    "model_type": (lambda v: isinstance(v, str), "a string"),
    "rms_norm_eps": (lambda v: type(v) in (int, float) and 0 < v < 1, "a small positive number"),
    "eagle_config": (lambda v: v is None or isinstance(v, dict), "an object or null"),
    "eagle_aux_hidden_state_layer_ids": (lambda v: v is None or int_list(v), "a list of integers or null"),
    ANGELSLIM_IDS_KEY: (lambda v: v is None or int_list(v), "a list of integers or null"),
    "norm_before_fc": (lambda v: isinstance(v, bool), "true or false"),
    "fc_norm": (lambda v: isinstance(v, bool), "true or false"),
    "norm_output": (lambda v: isinstance(v, bool), "true or false"),
}
EAGLE_FIELD_TYPES: dict[str, tuple] = {
    "eagle_aux_hidden_state_layer_ids": (lambda v: v is None or int_list(v), "a list of integers or null"),
    "use_aux_hidden_state": (lambda v: isinstance(v, bool), "true or false"),
    "norm_before_fc": (lambda v: isinstance(v, bool), "true or false"),
}
MODEL_FIELDS = ("hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")


def _short(value: object, limit: int = 60) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def checked_config(dx: Diagnosis, config: dict, where: str = "config.json") -> dict:
    """``config`` without the fields of a wrong type (each one a finding)."""
    out = dict(config)
    bad = {}
    for key, (ok, expected) in FIELD_TYPES.items():
        if key in out and not ok(out[key]):
            bad[key] = (out.pop(key), expected)
    eagle = out.get("eagle_config")
    if isinstance(eagle, dict):
        eagle = dict(eagle)
        for key, (ok, expected) in EAGLE_FIELD_TYPES.items():
            if key in eagle and not ok(eagle[key]):
                bad[f"eagle_config.{key}"] = (eagle.pop(key), expected)
        out["eagle_config"] = eagle
    if _pos_int(out.get("hidden_size")) and _pos_int(out.get("num_attention_heads")) and out.get("head_dim") is None \
            and out["hidden_size"] % out["num_attention_heads"]:
        bad["num_attention_heads"] = (out.pop("num_attention_heads"), "a divisor of hidden_size (or set head_dim)")
    for key, (value, expected) in bad.items():
        dx.add("config-field-invalid", "error", f"{where}: {key} is {_short(value, 30)}, not {expected}",
               {"field": key, "value": _short(value), "expected": expected},
               f"Correct {key} in {where}; the checks that need it were skipped.")
    if bad:
        dx.refuse("config.json has fields of the wrong type: " + ", ".join(bad))
    return out


def is_llama_draft(dx: Diagnosis) -> bool:
    archs = (dx.config or {}).get("architectures") or [SGLANG_DRAFT_CLASS]
    return SGLANG_DRAFT_CLASS in archs


def read_target(dx: Diagnosis, target_dir: str | Path | None) -> None:
    if target_dir is None:
        return
    root = Path(target_dir)
    try:
        cfg = read_json(root, root / "config.json") if root.is_dir() else None
        if cfg is None:
            raise ValueError(f"{root} is not a directory")
    except (OSError, ValueError, UnicodeDecodeError, RecursionError) as exc:
        dx.add("target-unreadable", "error", "The target's config.json cannot be read", {"detail": str(exc)[:200]},
               "Point --target at the target model's directory (the one with config.json).")
        return
    if not isinstance(cfg, dict):
        dx.add("target-unreadable", "error", "The target's config.json is not a JSON object", {"type": type(cfg).__name__},
               "Point --target at the target model's directory.")
        return
    archs = cfg.get("architectures")
    dx.target_class = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    dx.target = {k: text[k] for k in ("num_hidden_layers", "hidden_size", "vocab_size") if _pos_int(text.get(k))}


def check_files(dx: Diagnosis) -> None:
    ckpt = dx.checkpoint
    for why in ckpt.unsafe:
        dx.add("unsafe-entry", "error", "An entry of the draft directory was not opened", {"detail": why},
               "Copy the real files into the draft directory (links must stay inside it).")
        dx.refuse(why)
    if ckpt.pickles and not ckpt.files:
        dx.add("pickle-weights", "error", "Weights are pickled (pytorch_model.bin), not safetensors",
               {"files": ckpt.pickles},
               "Pickle files can run code when loaded, so eagle3scope does not open them. Convert once in a "
               "trusted environment: torch.load(...) then safetensors.torch.save_file(state_dict, 'model.safetensors').")
        dx.refuse("the weights are pickled")
    elif not ckpt.files and not ckpt.errors:
        dx.add("no-weights", "error", "No *.safetensors file in the draft directory", {"path": str(ckpt.path)},
               "Point at the directory that holds model.safetensors and config.json.")
        dx.refuse("there are no weights")
    for err in ckpt.errors:
        dx.add("weights-unreadable", "error", "A weight file cannot be read (truncated or damaged?)", {"detail": err},
               "Download or copy the checkpoint again; compare the file sizes with the source.")
    if ckpt.errors:
        dx.refuse("some weight files are unreadable")
    if ckpt.duplicates:
        dx.add("duplicate-tensors", "error", "The same tensor name appears in more than one file",
               {"names": ckpt.duplicates[:10], "count": len(ckpt.duplicates)}, "Keep one copy of each tensor.")
        dx.refuse("tensor names are duplicated across files")


def recognise(dx: Diagnosis) -> None:
    ckpt = dx.checkpoint
    dx.producer = recognise_producer(ckpt.config, list(ckpt.tensors), ckpt.pickles)
    dx.assumptions += dx.producer.assumptions
    record = (ckpt.config or {}).get(FIX_KEY)
    if isinstance(record, dict):
        for note in [n for n in record.get("notes") or [] if isinstance(n, str)][:8]:
            dx.notes.append(note)
            dx.add("producer-flag-ignored", "warning", "fix recorded a training flag SGLang does not apply",
                   {"note": note[:300]}, "Expect lower acceptance than in training, or retrain without the flag.")
        if dx.target_class is None and isinstance(record.get("target_class"), str):
            dx.target_class = record["target_class"]
            dx.assumptions.append(f"target class {dx.target_class}, as recorded by fix (pass --target to check "
                                  "against the real target)")
    if dx.target_class is None:
        verifier = _verifier_class(ckpt.config)
        if verifier:
            dx.target_class = verifier
            dx.assumptions.append(f"target class {verifier}, from the draft's speculators_config.verifier "
                                  "(pass --target to check against the real target)")
        else:
            dx.assumptions.append(f"no --target: the target is assumed to be a {ASSUMED_TARGET}-family model "
                                  "(aux ids +1), and layer counts, hidden size and vocabulary are not checked")


def _verifier_class(config: dict | None) -> str | None:
    spec = (config or {}).get("speculators_config")
    verifier = spec.get("verifier") if isinstance(spec, dict) else None
    archs = verifier.get("architectures") if isinstance(verifier, dict) else None
    return archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None


def check_config(dx: Diagnosis) -> None:
    ckpt = dx.checkpoint
    if ckpt.config is None:
        dx.add("config-missing", "error", "The draft has no usable config.json", {"detail": ckpt.config_error},
               "Write the draft's config.json (architectures [LlamaForCausalLMEagle3], hidden_size, draft_vocab_size, "
               "eagle_config.eagle_aux_hidden_state_layer_ids, ...), as SpecForge does.")
        dx.refuse("config.json is missing or unreadable")
        return
    config = ckpt.config
    if dx.producer.name.startswith("speculators"):
        config = _speculators_view(dx, config)
    config = checked_config(dx, config)
    dx.config = config
    archs = config.get("architectures") or []
    if MLA_DRAFT_CLASS in archs or dx.producer.name == "modelopt-mla":
        _mla_draft(dx)
    elif archs and SGLANG_DRAFT_CLASS not in archs:
        config = _foreign_class(dx, config, archs)
    _norm_flags(dx, config)
    _tied_head(dx)
    _target_hidden_null(dx)
    layers = config.get("num_hidden_layers", 1)
    if dx.layout.single_layer_only and layers != 1:
        dx.add("multi-layer-draft", "error", f"SGLang {dx.sglang_version} supports one draft decoder layer only",
               {"num_hidden_layers": layers}, "Use SGLang 0.5.12 or newer.")
        dx.refuse(f"a {layers}-layer draft needs SGLang 0.5.12 or newer")


def _llama_layout(names: list[str]) -> bool:
    """Tensor names of SGLang's LlamaForCausalLMEagle3 layout: an fc and a decoder layer's attention
    under ``midlayer.`` or ``layers.N.`` (optionally ``model.``-prefixed)."""
    return any(re.fullmatch(r"(model\.)?fc\.weight", n) for n in names) and any(
        re.match(r"(model\.)?(midlayer|layers\.\d+)\.self_attn\.[qkv]_proj\.", n) for n in names)


def _foreign_class(dx: Diagnosis, config: dict, archs: list) -> dict:
    """A draft class this release cannot start as an EAGLE-3 draft. Where the tensors are SGLang's
    Llama layout, the class name is the repair (and every other check follows that class)."""
    version = dx.sglang_version
    registered = registered_draft_classes(version)
    if any(a in registered for a in archs):
        return config
    name = archs[0]
    target = family_rule(name) is not None or name == "LlamaForCausalLM"
    why = ("SGLang would build a full target model" if target else
           f"SGLang {version} has no such class and refuses to start (\"Cannot find model module\")")
    if not _llama_layout(list(dx.checkpoint.tensors)):
        dx.add("architecture-unsupported", "error", f"architectures is {_short(archs, 40)}: {why}",
               {"architectures": archs, "sglang_version": version, "draft_classes": sorted(registered)},
               "Serve it with the runtime it was written for, or re-export it as one of SGLang's draft classes "
               f"({', '.join(sorted(registered))}): its tensors are not {SGLANG_DRAFT_CLASS}'s layout.")
        dx.refuse(f"{name} is no draft class of SGLang {version}, and its tensors are not {SGLANG_DRAFT_CLASS}'s")
        return config
    known = ("" if target else " (vLLM's name for the same layout)" if name in FOREIGN_DRAFT_CLASSES else "")
    dx.add("architecture", "error", f"architectures is {_short(archs, 40)}: {why}",
           {"architectures": archs, "sglang_version": version, "draft_classes": sorted(registered)},
           f"`eagle3scope fix` writes [{SGLANG_DRAFT_CLASS}]: the tensors are its layout{known}.")
    dx.config_edits.append(f"architectures {archs} -> [{SGLANG_DRAFT_CLASS}] (SGLang picks the draft class from "
                           "it; the tensors are that class's layout)")
    dx.config = config = {**config, "architectures": [SGLANG_DRAFT_CLASS]}
    return config


def _norm_flags(dx: Diagnosis, config: dict) -> None:
    """EAGLE-3.x norms a release does not build: the draft runs without normalisation it was trained with."""
    eagle = config.get("eagle_config") if isinstance(config.get("eagle_config"), dict) else {}
    flags = [f for f in NORM_FLAGS if config.get(f) or eagle.get(f)]
    missing = {f: SINCE[NORM_FLAGS[f]] for f in flags if not dx.layout.has(NORM_FLAGS[f])}
    if not missing:
        return
    first = max(missing.values(), key=parse_version)
    names = ", ".join(missing)
    dx.add("eagle-config-ignored", "error", f"SGLang {dx.sglang_version} ignores {names}: needs SGLang >= {first}",
           {"flags": list(missing), "first_release": missing, "loader": dx.layout.label},
           f"Serve with SGLang {first} or newer: this release does not build the EAGLE-3.x norm(s) {names} the "
           "draft was trained with.")
    dx.refuse(f"SGLang {dx.sglang_version} cannot apply {names}: use SGLang {first} or newer")


def _head_tensor(dx: Diagnosis) -> str | None:
    return next((n for n in dx.checkpoint.tensors if n in ("lm_head.weight", "model.lm_head.weight")), None)


def _tied_head(dx: Diagnosis) -> None:
    """``tie_word_embeddings`` true: SGLang's draft uses its embedding (the target's, once shared) as
    the head (llama_eagle3.py ``self.lm_head = self.model.embed_tokens``); a trained ``lm_head``
    then has no parameter to load into and is dropped without a word."""
    cfg = dx.config
    if not cfg.get("tie_word_embeddings") or not _pos_int(cfg.get("hidden_size")):
        return
    head, draft_vocab = _head_tensor(dx), cfg.get("draft_vocab_size")
    if head is None and draft_vocab in (None, cfg.get("vocab_size")):
        return  # tied as trained: one matrix for embedding and head
    evidence = {"tie_word_embeddings": True, "lm_head": head, "draft_vocab_size": draft_vocab}
    if head is None:
        dx.add("lm-head-tied", "error", "tie_word_embeddings is true beside a draft vocabulary: the head is the "
               "embedding, not a trained head", evidence,
               "The checkpoint has no lm_head for its draft vocabulary: export the trained lm_head.weight "
               "[draft_vocab_size, hidden_size] and set tie_word_embeddings false, or retrain.")
        dx.refuse("tie_word_embeddings is true and there is no trained lm_head to serve instead")
        return
    dx.add("lm-head-tied", "error", "tie_word_embeddings is true: SGLang ties the head to the embedding and "
           f"drops the trained {head}", evidence,
           "`eagle3scope fix` writes tie_word_embeddings false, so SGLang loads the trained head.")
    dx.config = {**cfg, "tie_word_embeddings": False}
    dx.config_edits.append(f"tie_word_embeddings true -> false (the checkpoint has a trained {head})")
    rows = dx.checkpoint.tensors[head].shape[0] if dx.checkpoint.tensors[head].shape else None
    if draft_vocab is None and _pos_int(rows):  # null would make SGLang take the target's head instead
        dx.config["draft_vocab_size"] = rows
        dx.config_edits.append(f"draft_vocab_size null -> {rows} (the trained head's rows; null takes the target's)")


def _target_hidden_null(dx: Diagnosis) -> None:
    """llama_eagle3.py reads ``target_hidden_size`` whenever the attribute exists: null builds fc
    from None and the draft fails to start."""
    if "target_hidden_size" not in dx.config or dx.config["target_hidden_size"] is not None:
        return
    dx.add("target-hidden-null", "error", "target_hidden_size is null: SGLang builds fc from it and fails to "
           "start", {"target_hidden_size": None},
           "`eagle3scope fix` removes the key (SGLang then uses hidden_size, as a null meant).")
    dx.config = {k: v for k, v in dx.config.items() if k != "target_hidden_size"}
    dx.config_edits.append("target_hidden_size null removed (SGLang reads hidden_size instead)")


def _mla_draft(dx: Diagnosis) -> None:
    """Model-Optimizer's MLA draft: served from 0.5.12 by kimi_k25_eagle3.py. Its loader is modelled by
    name (``mla_names``); shapes are not checked."""
    if MLA_DRAFT_CLASS not in registered_draft_classes(dx.sglang_version):
        dx.add("architecture-unsupported", "error", f"SGLang {dx.sglang_version} has no {MLA_DRAFT_CLASS}",
               {"architectures": dx.config.get("architectures"), "first_release": "0.5.12"},
               "Serve this MLA draft with SGLang 0.5.12 or newer (models/kimi_k25_eagle3.py).")
        dx.refuse(f"{MLA_DRAFT_CLASS} needs SGLang 0.5.12 or newer")
        return
    dx.add("not-modelled", "info", f"{MLA_DRAFT_CLASS} weights: names modelled, shapes not checked",
           {"loader": "models/kimi_k25_eagle3.py", "checked": ["tensor names", "d2t", "lm_head presence",
                                                              "aux layer ids"]},
           "A shape that does not fit fails SGLang's load with an assertion; the server log says which.")
    mla_names(dx)


def _speculators_view(dx: Diagnosis, config: dict) -> dict:
    """speculators' Eagle3SpeculatorConfig -> the flat HF config SGLang's LlamaForCausalLMEagle3 reads
    (speculators/models/eagle3/config.py, 0.9.0). The aux ids are set later, by _check_aux_layers,
    once the target family is known."""
    layer = config.get("transformer_layer_config")
    out: dict = {}
    if not isinstance(layer, dict):
        dx.add("config-field-invalid", "error", "transformer_layer_config is not an object",
               {"field": "transformer_layer_config", "value": _short(layer), "expected": "an object"},
               "Re-export the draft with speculators; the decoder layer's fields live there.")
        dx.refuse("transformer_layer_config is unusable")
    else:
        out = {k: v for k, v in layer.items() if k not in ("architectures", "_attn_implementation")}
    rope = out.get("rope_parameters")
    if isinstance(rope, dict) and "rope_theta" not in out and rope.get("rope_theta") is not None:
        # transformers 5 keeps rope_theta in rope_parameters; SGLang 0.5.10 reads only the flat field
        out["rope_theta"] = rope["rope_theta"]
        if rope.get("rope_type") not in (None, "default"):
            out["rope_scaling"] = rope
    for key in ("dtype", "torch_dtype"):
        if isinstance(config.get(key), str):
            out[key] = config[key]
    model_type = out.get("model_type") or "llama"
    out.update(architectures=[SGLANG_DRAFT_CLASS], model_type="llama")
    for key in ("draft_vocab_size", "target_hidden_size"):
        if config.get(key) is not None:
            out[key] = config[key]
    for flag in ("norm_before_fc", "fc_norm", "norm_output"):
        if config.get(flag) is True:
            out[flag] = True
    ids = config.get("eagle_aux_hidden_state_layer_ids")
    out["eagle_config"] = {"use_aux_hidden_state": True}
    dx.add("config-speculators-format", "error", "config.json is speculators' format, which SGLang does not read",
           {"speculators_model_type": _short(config.get("speculators_model_type")),
            "eagle_aux_hidden_state_layer_ids": _short(ids)},
           "`eagle3scope fix` writes the flat LlamaForCausalLMEagle3 config SGLang reads, with the aux layer ids "
           "translated from speculators' input-of-layer numbering by the target family's rule.")
    dx.config_edits.append("speculators format -> SGLang LlamaForCausalLMEagle3 config")
    if config.get("norm_before_residual") is True:
        note = ("SGLang does not implement speculators' norm_before_residual: the draft will run without it; "
                "expect lower acceptance")
        dx.notes.append(note)
        dx.add("producer-flag-ignored", "warning", "norm_before_residual is true, and SGLang does not implement it",
               {"flag": "norm_before_residual", "value": True}, note + " (or retrain without it).")
    if model_type != "llama":
        dx.add("layer-type-unsupported", "error",
               f"The draft layer is a {_short(model_type, 20)} layer; SGLang's EAGLE-3 draft is a Llama layer",
               {"transformer_layer_config.model_type": _short(model_type)},
               "Its extra tensors (e.g. qwen3's q_norm/k_norm) would be skipped silently: retrain with a llama "
               "transformer_layer_config for SGLang, or serve the draft with vLLM.")
        dx.refuse(f"a {model_type} draft layer has no SGLang equivalent: retrain with a llama "
                  "transformer_layer_config, or serve this draft with vLLM")
    return out
