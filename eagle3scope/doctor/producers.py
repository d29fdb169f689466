"""Who wrote a draft checkpoint, and the conventions that follow from it.

A producer is recognised from config fields and tensor names; each producer's conventions come
from its own source (cited per entry). The one that matters most is how the aux-layer ids in the
config number the target's layers, because SGLang reads them as *configured ids* that a per-family
rule turns into captured layers (``wire/aux_layers``):

- ``input-of-layer``: id ``i`` is the hidden state entering layer ``i`` (HF ``hidden_states[i]``,
  vLLM's ``aux_hidden_state_layers``). speculators (vllm datagen), the EAGLE authors.
- ``output-of-layer``: id ``i`` is the output of layer ``i`` (a forward hook on layer ``i``), so the
  input of layer ``i + 1``. Model-Optimizer (``hf_eagle.py`` registers forward hooks), SpecForge's
  HF backend, AngelSlim (its target wrapper takes ``hidden_states[id + 1]``).
- ``sglang``: the ids went through SGLang's own ``set_eagle3_layers_to_capture`` during training
  (SpecForge's SGLang backend, ``eagle3_target_model.py``), so they mean whatever the family rule
  of the training release made of them.
- ``recorded``: eagle3scope's ``fix`` wrote the captured layers into ``eagle3scope_fix``.

Every assumption made is returned as a sentence, so the doctor can say it, not hide it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from eagle3scope.wire.aux_layers import default_capture

FIX_KEY = "eagle3scope_fix"
#: Model-Optimizer's eagle_config fields (modelopt/torch/export/plugins/hf_spec_configs.py).
MODELOPT_EAGLE_FIELDS = ("use_input_layernorm_in_first_layer", "use_last_layernorm", "use_mtp_layernorm",
                         "next_layer_regular", "parallel_draft_step", "parallel_draft_heads_num_layers")
MLA_KEYS = ("q_a_proj", "kv_a_proj_with_mqa", "kv_b_proj")
#: AngelSlim's draft classes (angelslim 0.5.0 compressor/speculative/train/models/draft/llama_eagle3.py);
#: save_pretrained writes the class name into architectures.
ANGELSLIM_CLASSES = ("Eagle3LlamaForCausalLM", "CosyVoice3Eagle3LlamaForCausalLM")
#: The draft config's top-level key AngelSlim's trainer reads its aux layers from (trainer/online_eagle3_trainer.py).
ANGELSLIM_IDS_KEY = "aux_hidden_states_layer_ids"


@dataclass
class Producer:
    name: str  # speculators | speculators-converted | specforge | modelopt | modelopt-mla | angelslim | eagle | sglang | eagle3scope-fix | unknown
    label: str
    numbering: str  # input-of-layer | output-of-layer | sglang | recorded
    signs: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    version: str | None = None

    def to_dict(self) -> dict:
        return {"name": self.name, "label": self.label, "version": self.version, "aux_id_numbering": self.numbering,
                "signs": self.signs, "assumptions": self.assumptions}


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def recognise(config: dict | None, names: list[str], pickles: list[str]) -> Producer:
    """The producer of a checkpoint from its config (None when unusable) and tensor names."""
    cfg = config or {}
    archs = cfg.get("architectures") if isinstance(cfg.get("architectures"), list) else []
    eagle = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    midlayer = any(n.startswith("midlayer.") for n in names)
    layers0 = any(n.startswith("layers.0.") for n in names)
    if isinstance(cfg.get(FIX_KEY), dict):
        source = _text(cfg[FIX_KEY].get("producer")) or "unknown"
        return Producer("eagle3scope-fix", f"eagle3scope fix (from {source})", "recorded",
                        [f"config.json has {FIX_KEY}"],
                        [f"the captured layers recorded by fix ({FIX_KEY}.trained_capture) are the ones the draft "
                         "was trained on"])
    if cfg.get("speculators_model_type") is not None or "transformer_layer_config" in cfg:
        return _speculators(cfg)
    angelslim = [a for a in archs if a in ANGELSLIM_CLASSES]
    if ANGELSLIM_IDS_KEY in cfg or (angelslim and midlayer):
        return Producer("angelslim", "AngelSlim", "output-of-layer",
                        ([f"architectures {angelslim}"] if angelslim else []) +
                        ([f"top-level {ANGELSLIM_IDS_KEY}"] if ANGELSLIM_IDS_KEY in cfg else []) +
                        (["midlayer.* names"] if midlayer else []),
                        ["ids are output-of-layer: AngelSlim takes hidden_states[id + 1] (angelslim 0.5.0 "
                         "compressor/speculative/train/models/target/target_model_wrapper.py "
                         "_extract_auxiliary_hidden_states); without ids its default [1, n//2-1, n-4], which "
                         "SGLang's default capture matches"])
    if "Eagle3DeepseekV2ForCausalLM" in archs or any(k in n for n in names for k in MLA_KEYS):
        return Producer("modelopt-mla", "Model-Optimizer (MLA EAGLE-3 draft, kimik2 decoder)", "output-of-layer",
                        [f"architectures {archs}" if archs else "MLA tensor names (q_a_proj, kv_a_proj_with_mqa)"],
                        ["ids are output-of-layer (Model-Optimizer hooks each layer's output, hf_eagle.py); the "
                         "checkpoint names follow kimik2 (hf_spec_export.py KIMIK2_EAGLE_SINGLE_LAYER)"])
    if any(k in eagle for k in MODELOPT_EAGLE_FIELDS):
        return Producer("modelopt", "Model-Optimizer", "output-of-layer",
                        ["eagle_config has Model-Optimizer's fields (" +
                         ", ".join(k for k in MODELOPT_EAGLE_FIELDS if k in eagle) + ")"],
                        ["ids are output-of-layer: Model-Optimizer registers a forward hook on each listed layer "
                         "(modelopt/torch/speculative/plugins/hf_eagle.py); an empty list meant its default "
                         "[1, n//2-1, n-4]"])
    if archs == ["LlamaForCausalLM"] and "draft_vocab_size" in cfg and (midlayer or pickles):
        return Producer("eagle", "the EAGLE authors (SafeAILab/EAGLE)", "input-of-layer",
                        ["architectures [LlamaForCausalLM] with draft_vocab_size" +
                         (" and pickled weights" if pickles else " and midlayer.* names")],
                        ["trained on the inputs of target layers [2, n//2, n-3] (EAGLE's modeling_llama_kv.py "
                         "captures before layers 2, n//2, n-3), which is SGLang's default"])
    if "LlamaForCausalLMEagle3" in archs and midlayer:
        if eagle.get("eagle_aux_hidden_state_layer_ids") is None:
            return Producer("sglang", "SpecForge / SGLang (lmsys) release", "sglang",
                            ["architectures [LlamaForCausalLMEagle3], midlayer.* names, no aux ids"],
                            ["no ids: trained on SGLang's default capture [2, n//2, n-3], as SpecForge does "
                             "without --aux-layers and lmsys' published drafts are"])
        return Producer("specforge", "SpecForge", "sglang",
                        ["architectures [LlamaForCausalLMEagle3], midlayer.* names, eagle_config"],
                        ["ids are SGLang's configured ids: SpecForge's SGLang backend passes them to the target's "
                         "own set_eagle3_layers_to_capture (eagle3_target_model.py), so the family rule of the "
                         "release it trained with applies; assumed: the same rule as the release checked here"])
    if "LlamaForCausalLMEagle3" in archs and layers0:
        return Producer("unknown", "LlamaForCausalLMEagle3 with layers.N.* names (Model-Optimizer without its "
                        "eagle_config fields, or a re-export)", "sglang", ["layers.0.* names"],
                        ["ids are SGLang's configured ids (output-of-layer for the +1 families)"])
    return Producer("unknown", "unknown producer", "sglang", [],
                    ["ids are SGLang's configured ids (output-of-layer for the +1 families)"])


def _speculators(cfg: dict) -> Producer:
    """speculators names the model class it saved: ``Eagle3DraftModel`` is a trained draft
    (models/eagle3/core.py, 0.3.0+), ``Eagle3Speculator`` a `speculators convert` output
    (convert/eagle/eagle3_legacy_model.py, 0.3.0+; in 0.2 the only class, trained or converted)."""
    version = _text(cfg.get("speculators_version"))
    archs = cfg.get("architectures") if isinstance(cfg.get("architectures"), list) else []
    ids = cfg.get("eagle_aux_hidden_state_layer_ids")
    signs = ["speculators_model_type" if "speculators_model_type" in cfg else "transformer_layer_config"]
    signs += [f"speculators_version {version}"] if version else []
    signs += [f"architectures {archs}"] if archs else []
    label = f"speculators{' ' + version if version else ''}"
    base = ("ids are input-of-layer (speculators extracts hidden states with vLLM, whose aux layer i is the "
            "state entering layer i; speculators/models/utils.py resolve_target_layer_ids)")
    default = ("no ids: the draft was trained on the verifier default [2, n//2, n-3] (vLLM's), which is SGLang's "
               "default capture too")
    try:
        old = version is not None and tuple(int(x) for x in version.split(".")[:2]) < (0, 3)
    except ValueError:
        old = False
    if "Eagle3Speculator" in archs and not old:
        return Producer("speculators-converted", f"{label} (`speculators convert` output)", "input-of-layer", signs,
                        [base + "; for a converted draft they are the ids given to `speculators convert`, which "
                                "must be in that numbering too (ids copied from the EAGLE/SpecForge config are "
                                "output-of-layer: one too deep)", default if ids is None else
                         "ids as given to the converter"], version)
    return Producer("speculators", label, "input-of-layer", signs,
                    [base, default if ids is None else
                     "if this draft was trained on ids in output-of-layer numbering (copied from a SpecForge or "
                     "Model-Optimizer config), every aux layer is one too deep: write those ids minus 1"], version)


def training_capture(producer: Producer, ids: list[int] | None, num_layers: int | None,
                     served: list[int] | None, recorded: list[int] | None = None) -> tuple[list[int] | None, bool]:
    """The target layers (captured indices: input of layer c) the draft was trained on, and whether
    that is known (False: the producer's convention leaves it to the serving rule).

    ``served`` is what SGLang captures for these ids; None when it cannot be resolved (no layer count).
    """
    if producer.numbering == "recorded":
        return recorded, recorded is not None
    if producer.numbering == "input-of-layer":
        if ids is None:
            return (default_capture(num_layers), True) if num_layers else (None, True)
        return list(ids), True
    if producer.numbering == "output-of-layer":
        if not ids:
            return ([i + 1 for i in sorted({1, max(0, num_layers // 2 - 1), max(0, num_layers - 4)})], True) \
                if num_layers else (None, True)
        if num_layers and max(ids) == num_layers:
            # no layer n has an output: the list ends at the final state, so it numbers captured
            # states (as SGLang's GPT-OSS rule reads such a list, gpt_oss.py 0.5.23)
            return list(ids), True
        return [i + 1 for i in ids], True
    return served, False

