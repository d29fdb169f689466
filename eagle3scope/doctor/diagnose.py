"""Checks of a draft checkpoint against what one SGLang release will do with it.

``diagnose`` returns findings (stable ids shared with the live rules where the break is the same:
``weights-dropped``, ``d2t-absolute``, ``lm-head-mismatch``, ``aux-layers-mismatch``, ...) and the
facts ``fix`` needs: which keys to rename, whether d2t can be converted, the SGLang config to write.
It never stops early: a config problem is a finding, and every check that does not depend on the
broken part still runs. Who wrote the checkpoint (``producers``) decides the conventions assumed,
and each assumption is reported.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from eagle3scope.doctor.aux_check import ASSUMED_TARGET, check_aux_layers, int_list
from eagle3scope.doctor.checkpoint import INT_DTYPES, Checkpoint, open_checkpoint, read_json
from eagle3scope.doctor.loader_layouts import (
    FOREIGN_DRAFT_CLASSES,
    NORM_FLAGS,
    SINCE,
    LoaderLayout,
    Mapping,
    canonical_name,
    expected_params,
    layout_for,
    map_name,
    norm_feature,
    num_aux,
    registered_draft_classes,
)
from eagle3scope.doctor.producers import FIX_KEY, Producer, recognise
from eagle3scope.wire.releases import installed_sglang as installed
from eagle3scope.wire.releases import parse_version
from eagle3scope.wire.severity import SEVERITY_ORDER

DEFAULT_SGLANG = "0.5.23"
SGLANG_DRAFT_CLASS = "LlamaForCausalLMEagle3"
MLA_DRAFT_CLASS = "Eagle3DeepseekV2ForCausalLM"
#: Order of importance of error findings, for the headline and the listing.
PRIORITY = ("no-eagle3", "architecture-unsupported", "architecture", "eagle-config-ignored", "fc-width-unsupported",
            "aux-capture-unsupported", "aux-final-state-unsupported", "target-hidden-null", "lm-head-tied",
            "embed-random", "weights-dropped", "weights-crash", "aux-capture-off",
            "aux-layers-mismatch", "aux-layers-out-of-range", "aux-layers-empty", "d2t-absolute", "d2t-mismatch",
            "lm-head-mismatch", "fc-shape", "hidden-width-mismatch", "weights-unwritten",
            "multi-layer-draft", "producer-flag-ignored", "layer-type-unsupported", "config-speculators-format")
#: Findings that say what the release does not do at all: the capture of aux layers was not checked.
UNCHECKED = ("aux-family-unknown", "aux-layers-unchecked")


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
    given: str = ""  # the draft directory as the user wrote it (output shows it so)
    producer: Producer | None = None
    findings: list[Finding] = field(default_factory=list)
    config: dict | None = None  # the config SGLang will read once fix's config edits are applied
    config_edits: list[str] = field(default_factory=list)  # what fix changes in config.json, and why
    mappings: dict[str, Mapping] = field(default_factory=dict)  # per checkpoint name, after fix's renames
    renames: dict[str, str] = field(default_factory=dict)  # checkpoint name -> name this release loads
    unmappable: list[str] = field(default_factory=list)
    d2t_offsets: object = None  # numpy array to write instead of an absolute d2t (when unambiguous)
    refusals: list[str] = field(default_factory=list)  # why fix would have to guess
    assumptions: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # producer flags SGLang ignores, said on every fix
    target: dict | None = None
    target_class: str | None = None
    trained_capture: list[int] | None = None  # input-of-layer indices the draft was trained on
    trained_known: bool = False
    aux_ids: list[int] | None = None  # ids that make this release capture trained_capture
    aux_ids_reason: str = ""  # why aux_ids is None when a capture is known

    def add(self, id: str, severity: str, title: str, evidence: dict, fix: str = "") -> None:
        self.findings.append(Finding(id, severity, title, evidence, fix))

    def refuse(self, why: str) -> None:
        if why not in self.refusals:
            self.refusals.append(why)

    @property
    def exit_code(self) -> int:
        severities = {f.severity for f in self.findings}
        return 2 if "error" in severities else 1 if "warning" in severities else 0

    def ordered(self) -> list[Finding]:
        return sorted(self.findings, key=lambda f: (SEVERITY_ORDER.get(f.severity, 3),
                                                    PRIORITY.index(f.id) if f.id in PRIORITY else len(PRIORITY)))

    def to_dict(self) -> dict:
        ordered = self.ordered()
        return {
            "draft": self.given or str(self.checkpoint.path),
            "sglang_version": self.sglang_version,
            "loader": self.layout.label + (f" ({self.layout.note})" if self.layout.note else ""),
            "tensors": len(self.checkpoint.tensors),
            "verdict": {0: "clean", 1: "warnings", 2: "broken"}[self.exit_code],
            "headline": headline(self),
            "producer": self.producer.to_dict() if self.producer else None,
            "target_class": self.target_class,
            "assumptions": self.assumptions,
            "notes": self.notes,
            "findings": [f.to_dict() for f in ordered],
            "fixable": {"renames": self.renames, "d2t_to_offsets": self.d2t_offsets is not None,
                        "config_edits": self.config_edits},
            "refusals": self.refusals,
        }


def headline(dx: Diagnosis) -> str:
    ordered = dx.ordered()
    if ordered and ordered[0].severity != "info":
        return ordered[0].title
    if any(f.id in UNCHECKED for f in ordered):
        return (f"clean: SGLang {dx.sglang_version} will load this draft; which target layers feed it was "
                "not checked")
    return f"clean: SGLang {dx.sglang_version} will load and feed this draft as it was trained"


def installed_sglang() -> str:
    """The SGLang version to check against when none is given: the installed one, else 0.5.23."""
    return installed() or DEFAULT_SGLANG


# -- config field types ------------------------------------------------------------------------


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


# -- diagnose ----------------------------------------------------------------------------------


def diagnose(draft_dir: str | Path, *, sglang_version: str | None = None, target_dir: str | Path | None = None) -> Diagnosis:
    """Raises ValueError only for a malformed ``sglang_version`` (a usage error); everything about
    the checkpoint and the target becomes a finding."""
    version = sglang_version or installed_sglang()
    layout = layout_for(version)
    dx = Diagnosis(open_checkpoint(draft_dir), version, layout, str(draft_dir))
    ckpt = dx.checkpoint
    _guarded(dx, _read_target, target_dir)
    for check in (_check_files, _recognise, _check_config):
        _guarded(dx, check)
    if not layout.has_eagle3:
        dx.add("no-eagle3", "error", f"SGLang {version} has no EAGLE-3 support", {"sglang_version": version},
               "Use SGLang 0.4.4.post2 or newer (0.5.12+ maps both midlayer.* and layers.0.* names).")
        dx.refuse("this SGLang release cannot serve EAGLE-3 drafts")
        return dx
    params = None
    if dx.config is not None and ckpt.tensors and _is_llama_draft(dx):
        missing = [k for k in MODEL_FIELDS if k not in dx.config]
        if missing:
            dx.add("config-incomplete", "error", "config.json lacks fields the draft model is built from",
                   {"missing": missing}, "Add the Llama fields (" + ", ".join(missing) + ") the draft was trained with.")
            dx.refuse("config.json is incomplete")
        else:
            params = expected_params(layout, dx.config)
    if params is not None:
        for check in (_check_names, _check_shapes, _check_head, _check_embedding):
            _guarded(dx, check, params)
    for check in (_check_vocab_map, check_aux_layers, _check_target):
        _guarded(dx, check)
    return dx


def _guarded(dx: Diagnosis, check, *args) -> None:
    """Run one check; an unexpected exception becomes a finding (so the others still run)."""
    try:
        check(dx, *args)
    except Exception as exc:  # noqa: BLE001 - reported, never swallowed silently
        dx.add("check-failed", "error", f"The {check.__name__.strip('_').replace('_', ' ')} check failed",
               {"error": f"{type(exc).__name__}: {exc}"[:300]},
               "The checkpoint has a shape the doctor did not expect; please report it.")
        dx.refuse(f"{check.__name__.strip('_')} could not be checked")


def _is_llama_draft(dx: Diagnosis) -> bool:
    archs = (dx.config or {}).get("architectures") or [SGLANG_DRAFT_CLASS]
    return SGLANG_DRAFT_CLASS in archs


def _read_target(dx: Diagnosis, target_dir: str | Path | None) -> None:
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


def _check_files(dx: Diagnosis) -> None:
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


def _recognise(dx: Diagnosis) -> None:
    ckpt = dx.checkpoint
    dx.producer = recognise(ckpt.config, list(ckpt.tensors), ckpt.pickles)
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


def _check_config(dx: Diagnosis) -> None:
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
    from eagle3scope.wire.aux_layers import family_rule

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


#: What kimi_k25_eagle3.py (0.5.12+) builds in its one MLA decoder layer (``model.midlayer.*``).
MLA_LAYER_PARAMS = ("input_layernorm", "hidden_norm", "post_attention_layernorm", "mlp.gate_up_proj", "mlp.down_proj",
                    "self_attn.fused_qkv_a_proj_with_mqa", "self_attn.q_a_layernorm", "self_attn.q_b_proj",
                    "self_attn.kv_a_layernorm", "self_attn.kv_b_proj", "self_attn.o_proj")


def _mla_draft(dx: Diagnosis) -> None:
    """Model-Optimizer's MLA draft: served from 0.5.12 by kimi_k25_eagle3.py. Its loader is modelled by
    name (``_mla_names``); shapes are not checked."""
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
    _mla_names(dx)


def _mla_names(dx: Diagnosis) -> None:
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
    embed_tokens is replaced by the target's and lm_head is judged by _check_head."""
    missing = []
    for param, shape in params.items():
        if param in ("model.embed_tokens.weight", "lm_head.weight") or UNUSED_PARAM.search(param):
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


def _check_embedding(dx: Diagnosis, params: dict) -> None:
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


def _check_head(dx: Diagnosis, params: dict) -> None:
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


def _check_vocab_map(dx: Diagnosis) -> None:
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


def _check_target(dx: Diagnosis) -> None:
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

