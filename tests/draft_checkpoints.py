"""Tiny EAGLE-3 draft checkpoints written with safetensors' own writer, the way the trainers write them.

SpecForge (and the EAGLE reference) name the decoder layer ``midlayer.*`` and write a flat HF
config with ``eagle_config``; speculators names it ``layers.0.*`` and writes its own config format
(``speculators_model_type``, ``transformer_layer_config``, input-of-layer aux ids). Both ship
``d2t`` (int64 offsets) and ``t2d`` (bool mask over the target vocabulary).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

H, HEADS, KV_HEADS, INTER = 16, 2, 1, 32
TARGET_VOCAB, DRAFT_VOCAB, TARGET_LAYERS = 64, 32, 8
AUX_IDS = [1, 3, 4]  # SGLang / SpecForge numbering (output of layer i) for an 8-layer target
HEAD_DIM = H // HEADS


def draft_ids() -> np.ndarray:
    """The target tokens the draft vocabulary covers: every other one, sorted."""
    return np.arange(0, TARGET_VOCAB, 2, dtype=np.int64)[:DRAFT_VOCAB]


def tensors(layer_prefix: str = "midlayer.", dtype=np.float16) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)

    def w(*shape):
        return rng.standard_normal(shape).astype(dtype)

    out = {
        "fc.weight": w(H, 3 * H),
        "norm.weight": w(H),
        "lm_head.weight": w(DRAFT_VOCAB, H),
        "embed_tokens.weight": w(TARGET_VOCAB, H),
        f"{layer_prefix}self_attn.q_proj.weight": w(HEADS * HEAD_DIM, 2 * H),
        f"{layer_prefix}self_attn.k_proj.weight": w(KV_HEADS * HEAD_DIM, 2 * H),
        f"{layer_prefix}self_attn.v_proj.weight": w(KV_HEADS * HEAD_DIM, 2 * H),
        f"{layer_prefix}self_attn.o_proj.weight": w(H, HEADS * HEAD_DIM),
        f"{layer_prefix}mlp.gate_proj.weight": w(INTER, H),
        f"{layer_prefix}mlp.up_proj.weight": w(INTER, H),
        f"{layer_prefix}mlp.down_proj.weight": w(H, INTER),
        f"{layer_prefix}input_layernorm.weight": w(H),
        f"{layer_prefix}post_attention_layernorm.weight": w(H),
        f"{layer_prefix}hidden_norm.weight": w(H),
    }
    ids = draft_ids()
    out["d2t"] = ids - np.arange(DRAFT_VOCAB, dtype=np.int64)
    t2d = np.zeros(TARGET_VOCAB, dtype=bool)
    t2d[ids] = True
    out["t2d"] = t2d
    return out


def llama_fields() -> dict:
    return {"hidden_size": H, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "intermediate_size": INTER,
            "vocab_size": TARGET_VOCAB, "rms_norm_eps": 1e-5, "max_position_embeddings": 256, "hidden_act": "silu",
            "rope_theta": 10000.0, "tie_word_embeddings": False, "model_type": "llama"}


def specforge_config(**overrides) -> dict:
    cfg = {**llama_fields(), "architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1,
           "draft_vocab_size": DRAFT_VOCAB,
           "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(AUX_IDS), "use_aux_hidden_state": True}}
    cfg.update(overrides)
    return cfg


def speculators_config() -> dict:
    """As speculators' Eagle3SpeculatorConfig serialises (aux ids by layer input: SGLang's + 1)."""
    return {
        "architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3", "speculators_version": "0.9.0",
        "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
                               "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                               "verifier": {"name_or_path": "target", "architectures": ["LlamaForCausalLM"]}},
        "transformer_layer_config": {**llama_fields(), "num_hidden_layers": 1, "architectures": ["LlamaForCausalLM"]},
        "draft_vocab_size": DRAFT_VOCAB, "norm_before_residual": False, "target_hidden_size": None,
        "eagle_aux_hidden_state_layer_ids": [i + 1 for i in AUX_IDS],
    }


def write(path: Path, weights: dict, config: dict | None, *, shards: int = 1) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    names = sorted(weights)
    if shards == 1:
        save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})
    else:
        weight_map = {}
        for i in range(shards):
            file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
            part = {n: weights[n] for n in names[i::shards]}
            save_file(part, str(path / file), metadata={"format": "pt"})
            weight_map.update({n: file for n in part})
        (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    if config is not None:
        (path / "config.json").write_text(json.dumps(config))
    return path


def specforge(path: Path, **overrides) -> Path:
    return write(path, tensors("midlayer."), specforge_config(**overrides))


def speculators(path: Path) -> Path:
    return write(path, tensors("layers.0."), speculators_config())


def target(path: Path, layers: int = TARGET_LAYERS) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({**llama_fields(), "architectures": ["LlamaForCausalLM"],
                                                  "num_hidden_layers": layers}))
    return path
