"""What a producer's export writes into config.json that SGLang applies otherwise than training did.

Model-Optimizer (nvidia-modelopt 0.47.0) is the case: its ``EagleExporter._export_config``
(modelopt/torch/export/plugins/hf_spec_export.py) writes ``eagle_export_rope_scaling`` as the
draft's ``rope_scaling`` whenever the training rope_type was ``default``; the option's default
(modelopt/torch/speculative/config.py) is yarn with factor 32. SGLang's draft attention builds
its rotary embedding from that field (llama_eagle3.py ``get_rope``), so the draft runs a RoPE it
never saw (an outside audit served the same weights with and without it on SGLang 0.5.23, CPU, 16
greedy requests x 48 tokens: accept length 3.047 against 3.224, -5.5 %).
Its EAGLE-3 layer also trains with ``use_input_layernorm_in_first_layer`` (attention sees
``hidden_norm(input_layernorm(h))``, plugins/modeling_eagle.py ``_eagle3_attention_forward_pre_hook``;
megatron_eagle.py keeps the first layer's input_layernorm only when the flag is set), while
SGLang's llama_eagle3.py computes ``hidden_norm(h)``.
"""

from __future__ import annotations

import json

from eagle3scope.doctor.findings import Diagnosis

MODELOPT = ("modelopt", "modelopt-mla")
#: modelopt/torch/speculative/config.py (0.47.0) EagleConfig.eagle_export_rope_scaling default.
MODELOPT_EXPORT_ROPE_SCALING = {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 2048}
#: The SGLang module that builds each Model-Optimizer draft's first layer (hidden_norm(h) in both).
SERVING_MODULE = {"modelopt": "llama_eagle3.py", "modelopt-mla": "kimi_k25_eagle3.py"}
SOURCE = "nvidia-modelopt 0.47.0 modelopt/torch/export/plugins/hf_spec_export.py EagleExporter._export_config"


def _rope_type(rope: dict) -> object:
    return rope.get("rope_type", rope.get("type"))


def check_producer_flags(dx: Diagnosis) -> None:
    if dx.config is None or dx.producer is None or dx.producer.name not in MODELOPT:
        return
    _export_rope_scaling(dx)
    _first_layer_input_norm(dx)


def _export_rope_scaling(dx: Diagnosis) -> None:
    """The option's default is read as injected (only a training on exactly that yarn config would
    export the same dict); any other non-default rope on a Model-Optimizer export is either the
    training's or a custom override (0.47.0 allows an override only beside a default training rope,
    config.py ``_check_rope_scaling_consistency``), which no file tells: fix asks instead of guessing."""
    rope = dx.config.get("rope_scaling")
    if not isinstance(rope, dict) or _rope_type(rope) in (None, "default"):
        return
    shown = json.dumps(rope)[:120]
    evidence = {"rope_scaling": rope, "producer": dx.producer.label, "written_by": SOURCE,
                "export_default": MODELOPT_EXPORT_ROPE_SCALING}
    if rope == MODELOPT_EXPORT_ROPE_SCALING:
        dx.add("rope-scaling-injected", "error", "Model-Optimizer's export added yarn rope scaling (factor 32) the "
               "draft was not trained with; SGLang applies it", evidence,
               "`eagle3scope fix` removes rope_scaling: the export writes eagle_export_rope_scaling only when "
               "training used rope_type default (an audit on SGLang 0.5.23 measured -5.5 % accept length with it).")
        dx.config = {k: v for k, v in dx.config.items() if k != "rope_scaling"}
        dx.config_edits.append(f"rope_scaling {shown} removed: Model-Optimizer's export injected its "
                               "eagle_export_rope_scaling default; the draft trained with rope_type default")
        return
    dx.add("rope-scaling-unknown", "warning", f"rope_scaling is {_rope_type(rope)!s:.20}: the training's, or "
           "Model-Optimizer's export override?", evidence,
           "Model-Optimizer writes eagle_export_rope_scaling in place of the training's default rope. If the draft "
           "was trained with rope_type default, remove rope_scaling from config.json; if it was trained with "
           "this rope_scaling, keep it.")
    dx.refuse(f"was this draft trained with rope_scaling {shown}? Model-Optimizer's export writes its "
              "eagle_export_rope_scaling there when training used rope_type default: if so, remove rope_scaling; "
              "if trained with it, fix has nothing to change there")


def _first_layer_input_norm(dx: Diagnosis) -> None:
    eagle = dx.config.get("eagle_config") if isinstance(dx.config.get("eagle_config"), dict) else {}
    if eagle.get("use_input_layernorm_in_first_layer") is not True:
        return
    note = ("Model-Optimizer trained the first layer on hidden_norm(input_layernorm(h)) "
            "(use_input_layernorm_in_first_layer); SGLang computes hidden_norm(h), so acceptance may be lower than "
            "in training (not measured)")
    dx.notes.append(note)
    dx.add("producer-flag-ignored", "warning", "use_input_layernorm_in_first_layer is true, and SGLang does not "
           "apply it", {"flag": "eagle_config.use_input_layernorm_in_first_layer", "value": True,
                        "trained_by": "nvidia-modelopt 0.47.0 modelopt/torch/speculative/plugins/modeling_eagle.py "
                                      "_eagle3_attention_forward_pre_hook; plugins/megatron_eagle.py",
                        "served_by": f"sglang srt/models/{SERVING_MODULE[dx.producer.name]}: hidden_norm(h)"},
           note + ". Nothing in config.json changes that: retrain with the flag off to serve on SGLang as trained.")
