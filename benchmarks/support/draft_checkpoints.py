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
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

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


def angelslim_config(ids: list[int] | None = None) -> dict:
    """AngelSlim's save_pretrained output (angelslim 0.5.0 compressor/speculative/train/models/draft/llama_eagle3.py
    Eagle3LlamaForCausalLM, a LlamaConfig): its class name, and custom aux layers only as the top-level
    aux_hidden_states_layer_ids its trainer reads (output-of-layer, target_model_wrapper.py)."""
    cfg = {**llama_fields(), "architectures": ["Eagle3LlamaForCausalLM"], "num_hidden_layers": 1,
           "draft_vocab_size": DRAFT_VOCAB, "torch_dtype": "bfloat16"}
    return {**cfg, "aux_hidden_states_layer_ids": ids} if ids is not None else cfg


def speculators_config() -> dict:
    """As speculators' Eagle3SpeculatorConfig serialises (aux ids by layer input: SGLang's + 1)."""
    return {
        "architectures": ["Eagle3DraftModel"], "speculators_model_type": "eagle3", "speculators_version": "0.9.0",
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


# -- other producers' published layouts, at tiny sizes (same key names, same config fields) ----------


def speculators_converted_config() -> dict:
    """`speculators convert` (speculators/convert/eagle/eagle3_converter.py, 0.9.0): a LlamaConfig layer
    built from the EAGLE/SpecForge config, eagle_aux_hidden_state_layer_ids left None unless passed."""
    cfg = speculators_config()
    cfg["architectures"] = ["Eagle3Speculator"]  # the converter's model class
    cfg["eagle_aux_hidden_state_layer_ids"] = None
    cfg["transformer_layer_config"]["pretraining_tp"] = 1
    return cfg


def modelopt_config(layers: int = 1, target_layers: int = TARGET_LAYERS) -> dict:
    """Model-Optimizer's export (modelopt/torch/export/plugins/hf_spec_configs.py llama_eagle_template_config,
    nvidia-modelopt 0.47): aux ids are its default [1, n//2-1, n-4] in output-of-layer numbering
    (plugins/hf_eagle.py default_eagle_aux_layer_ids, forward hooks on those layers)."""
    n = target_layers
    return {**llama_fields(), "architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": layers,
            "draft_vocab_size": DRAFT_VOCAB, "bos_token_id": None, "eos_token_id": None, "pad_token_id": None,
            "torch_dtype": "bfloat16", "use_cache": True, "rope_scaling": None, "attention_bias": False,
            "mlp_bias": False, "pretraining_tp": 1, "head_dim": HEAD_DIM,
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": sorted({1, n // 2 - 1, n - 4}),
                             "use_aux_hidden_state": True, "use_input_layernorm_in_first_layer": True,
                             "use_last_layernorm": True, "use_mtp_layernorm": False, "next_layer_regular": True,
                             "parallel_draft_step": 1, "parallel_draft_heads_num_layers": 1}}


def modelopt_tensors(layers: int = 1, upper_prefix: str = "layers.{i}.") -> dict[str, np.ndarray]:
    """hf_spec_export.py LLAMA_EAGLE_SINGLE_LAYER: layers.0.* (+ layers.N.* plain decoder layers: attention,
    mlp, input_layernorm, post_attention_layernorm, no hidden_norm), fc, norm, lm_head, d2t; no t2d."""
    out = tensors("layers.0.")
    del out["t2d"], out["embed_tokens.weight"]
    covered = np.concatenate([np.arange(16), np.arange(16, TARGET_VOCAB, 3)[:DRAFT_VOCAB - 16]])
    out["d2t"] = covered - np.arange(DRAFT_VOCAB)  # offsets that are not arange, so no t2d is needed to read them
    rng = np.random.default_rng(1)
    for i in range(1, layers):
        p = upper_prefix.format(i=i)
        for name, shape in (("self_attn.q_proj.weight", (HEADS * HEAD_DIM, H)), ("self_attn.k_proj.weight", (KV_HEADS * HEAD_DIM, H)),
                            ("self_attn.v_proj.weight", (KV_HEADS * HEAD_DIM, H)), ("self_attn.o_proj.weight", (H, HEADS * HEAD_DIM)),
                            ("mlp.gate_proj.weight", (INTER, H)), ("mlp.up_proj.weight", (INTER, H)),
                            ("mlp.down_proj.weight", (H, INTER)), ("input_layernorm.weight", (H,)),
                            ("post_attention_layernorm.weight", (H,))):
            out[p + name] = rng.standard_normal(shape).astype(np.float16)
    return out


KV_LORA, Q_LORA, ROPE_DIM, NOPE_DIM, V_DIM = 8, 12, 4, 4, 8


def modelopt_mla_config(target_layers: int = 61) -> dict:
    """hf_spec_configs.py kimik2_eagle_template_config: Eagle3DeepseekV2ForCausalLM, model_type kimi_k2."""
    n = target_layers
    return {"architectures": ["Eagle3DeepseekV2ForCausalLM"], "model_type": "kimi_k2", "hidden_size": H,
            "num_attention_heads": HEADS, "num_key_value_heads": HEADS, "intermediate_size": INTER,
            "kv_lora_rank": KV_LORA, "q_lora_rank": Q_LORA, "qk_rope_head_dim": ROPE_DIM, "qk_nope_head_dim": NOPE_DIM,
            "v_head_dim": V_DIM, "num_hidden_layers": 1, "vocab_size": TARGET_VOCAB, "draft_vocab_size": DRAFT_VOCAB,
            "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": sorted({1, n // 2 - 1, n - 4}), "use_aux_hidden_state": True,
                             "use_input_layernorm_in_first_layer": True, "use_last_layernorm": True,
                             "use_mtp_layernorm": False, "next_layer_regular": True, "parallel_draft_step": 1,
                             "parallel_draft_heads_num_layers": 1}}


def modelopt_mla_tensors() -> dict[str, np.ndarray]:
    """hf_spec_export.py KIMIK2_EAGLE_SINGLE_LAYER key names."""
    rng = np.random.default_rng(2)

    def w(*shape):
        return rng.standard_normal(shape).astype(np.float16)

    p = "layers.0.self_attn."
    out = {f"{p}q_a_proj.weight": w(Q_LORA, 2 * H), f"{p}q_a_layernorm.weight": w(Q_LORA),
           f"{p}q_b_proj.weight": w(HEADS * (NOPE_DIM + ROPE_DIM), Q_LORA),
           f"{p}kv_a_proj_with_mqa.weight": w(KV_LORA + ROPE_DIM, 2 * H), f"{p}kv_a_layernorm.weight": w(KV_LORA),
           f"{p}kv_b_proj.weight": w(HEADS * (NOPE_DIM + V_DIM), KV_LORA), f"{p}o_proj.weight": w(H, HEADS * V_DIM)}
    for name in ("mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight", "hidden_norm.weight",
                 "input_layernorm.weight", "post_attention_layernorm.weight"):
        out["layers.0." + name] = tensors("layers.0.")["layers.0." + name]
    base = modelopt_tensors()
    out.update({k: base[k] for k in ("fc.weight", "norm.weight", "lm_head.weight", "d2t")})
    return out


def eagle_authors_config() -> dict:
    """SafeAILab/EAGLE eagle/traineagle3/config.json: the target's class in architectures, draft_vocab_size,
    no eagle_config (trained on the inputs of layers [2, n//2, n-3], modeling_llama_kv.py)."""
    return {**llama_fields(), "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 1,
            "draft_vocab_size": DRAFT_VOCAB, "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 0,
            "torch_dtype": "float16", "transformers_version": "4.28.1", "use_cache": True}


def eagle_authors_tensors() -> dict[str, np.ndarray]:
    """eagle/traineagle3/cnets.py Model: midlayer, fc, norm, lm_head, d2t, t2d buffers (no embed_tokens saved)."""
    out = tensors("midlayer.")
    del out["embed_tokens.weight"]
    return out


def sglang_canonical_config() -> dict:
    """SpecForge configs/llama3-70B-ealge3.json (and lmsys' published sglang-EAGLE3 drafts): no eagle_config,
    so SGLang's default capture, which is what SpecForge trains on without --aux-layers."""
    cfg = specforge_config()
    del cfg["eagle_config"]
    return cfg


def specforge_kimi_config() -> dict:
    """SpecForge configs/kimi-k2-eagle3.json: ids [2, 30, 58] for Kimi-K2's 61 layers, model_type kimi_k2."""
    return {**specforge_config(), "model_type": "kimi_k2", "max_window_layers": 48, "rope_scaling": None,
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58], "use_aux_hidden_state": True}}


def deepseek_target(path: Path, layers: int = 61, arch: str = "DeepseekV3ForCausalLM") -> Path:
    """A DeepseekV3-family target's config (Kimi-K2 is DeepseekV3ForCausalLM with 61 layers)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({**llama_fields(), "architectures": [arch], "model_type": "deepseek_v3",
                                                  "num_hidden_layers": layers}))
    return path


def producer_layout(name: str, root: Path) -> tuple[Path, Path]:
    """(draft dir, target dir) of one producer's layout."""
    llama, deepseek = target(root / "llama-target"), deepseek_target(root / "ds-target")
    upper = {k.replace("layers.", "midlayer."): v for k, v in modelopt_tensors(2).items()}
    return {
        "speculators": lambda: (write(root / name, tensors("layers.0."), speculators_config()), llama),
        "speculators-converted": lambda: (write(root / name, tensors("layers.0."), speculators_converted_config()), llama),
        "specforge": lambda: (specforge(root / name), llama),
        "sglang": lambda: (write(root / name, tensors(), sglang_canonical_config()), llama),
        "specforge-kimi": lambda: (write(root / name, tensors(), specforge_kimi_config()), deepseek),
        "modelopt": lambda: (write(root / name, modelopt_tensors(), modelopt_config()), llama),
        "modelopt-kimi": lambda: (write(root / name, modelopt_tensors(), modelopt_config(target_layers=61)), deepseek),
        "modelopt-2-layers": lambda: (write(root / name, modelopt_tensors(2), modelopt_config(2)), llama),
        "midlayer-N": lambda: (write(root / name, upper, modelopt_config(2)), llama),
        "modelopt-mla": lambda: (write(root / name, modelopt_mla_tensors(), modelopt_mla_config()), deepseek),
        "eagle": lambda: (write(root / name, eagle_authors_tensors(), eagle_authors_config()), llama),
        "angelslim": lambda: (write(root / name, tensors(), angelslim_config()), llama),
    }[name]()


# -- a trained draft re-expressed in what a producer's writer wrote ---------------------------------

PRODUCER_WRITTEN = Path(__file__).resolve().parents[2] / "tests/doctor/data/producers"
_DTYPE_FIELDS = ("torch_dtype", "dtype")


def in_written_layout(trained: Path, written: Path, out: Path) -> Path:
    """``trained``'s weights and sizes in the layout of ``written`` (a draft a producer's writer produced,
    tests/doctor/data/producers/): its tensor names (decoder-layer prefix; embeddings and t2d kept only
    where it writes them), its config fields and flags (class name, injected rope scaling, eagle_config
    flags), and the trained aux ids under the key it uses, if any."""
    trained_config = json.loads((trained / "config.json").read_text())
    config = json.loads((written / "config.json").read_text())
    config.update({k: v for k, v in trained_config.items() if k in config and k not in ("architectures", "eagle_config")})
    if "head_dim" in config:
        config["head_dim"] = config["hidden_size"] // config["num_attention_heads"]
    config.update({k: trained_config["torch_dtype"] for k in _DTYPE_FIELDS if k in config})
    ids = trained_config["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    if "eagle_config" in config:
        config["eagle_config"] = {**config["eagle_config"], "eagle_aux_hidden_state_layer_ids": ids}
    if "aux_hidden_states_layer_ids" in config:
        config["aux_hidden_states_layer_ids"] = ids
    with safe_open(str(written / "model.safetensors"), "np") as f:
        names = set(f.keys())
    layer_prefix = "midlayer." if any(n.startswith("midlayer.") for n in names) else "layers.0."
    weights = {n.replace("layers.0.", layer_prefix, 1): w for n, w in load_file(str(trained / "model.safetensors")).items()
               if n.startswith("layers.0.") or n in names}
    return write(out, weights, config)
