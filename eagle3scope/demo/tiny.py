"""Tiny seeded models for running the real SGLang engine on a CPU: a Llama target and a random EAGLE-3 draft.

Everything is generated offline and deterministically (same seed, same bytes
of weights): an offline byte-level BPE tokenizer trained with `tokenizers` on a
built-in synthetic corpus, a random `LlamaForCausalLM` saved by transformers,
and a random `LlamaForCausalLMEagle3` draft saved with safetensors in the
speculators layout (`layers.0.*`, `fc`, `d2t`, `t2d`). Needs torch,
transformers, safetensors and tokenizers: run it with the engine venv's
python (``python -m eagle3scope.demo.tiny OUT_DIR``).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

BOS, EOS = "<|bos|>", "<|eos|>"
# Folder name under <cache>/models; bump it when the generated files change.
MODELS_DIRNAME = "tiny-random-v2"

TARGET_SHAPE = dict(
    hidden_size=128,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=256,
    vocab_size=1024,
)
# SGLang captures configured aux id `i` at the output of target layer i; on a
# 4-layer target the ids must stay <= 2 (eagle3scope.wire.aux_layers: the +1 rule).
DEFAULT_AUX_LAYER_IDS = (0, 1, 2)


def synthetic_corpus(n_lines: int = 4000, seed: int = 0) -> list[str]:
    """Deterministic pseudo-English lines: words made of a fixed syllable inventory."""
    rng = random.Random(seed)
    syllables = [c + v for c in "bdfghklmnprstvwz" for v in "aeiou"] + ["th", "ing", "er", "an", "st"]
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 3))) for _ in range(600)]
    weights = [1.0 / (i + 1) for i in range(len(words))]  # Zipf-like, so merges have structure
    return [
        " ".join(rng.choices(words, weights, k=rng.randint(4, 14))) + rng.choice([".", ",", "?", "!"])
        for _ in range(n_lines)
    ]


def write_tokenizer(out_dir: str | Path, vocab_size: int = 1024, seed: int = 0) -> Path:
    """Train a byte-level BPE tokenizer offline and save it as a transformers fast tokenizer.

    Writes tokenizer.json and tokenizer_config.json; ids 0/1 are BOS/EOS.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(synthetic_corpus(seed=seed), trainer=trainer)
    tok.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": EOS,
        "add_bos_token": False,
        "model_max_length": 2048,
        "clean_up_tokenization_spaces": False,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return out


def target_config(**overrides):
    """The tiny target's LlamaConfig (float32, untied head, BOS 0 / EOS 1)."""
    from transformers import LlamaConfig

    fields = dict(
        TARGET_SHAPE,
        max_position_embeddings=2048,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
        torch_dtype="float32",
    )
    fields.update(overrides)
    return LlamaConfig(**fields)


def write_target(out_dir: str | Path, seed: int = 0, *, with_tokenizer: bool = True, **config_overrides) -> Path:
    """Save a randomly initialised LlamaForCausalLM (transformers' own writer) plus its tokenizer."""
    import torch
    from transformers import LlamaForCausalLM

    out = Path(out_dir)
    torch.manual_seed(seed)
    config = target_config(**config_overrides)
    model = LlamaForCausalLM(config).to(torch.float32).eval()
    model.save_pretrained(out, safe_serialization=True)
    if with_tokenizer:
        write_tokenizer(out, vocab_size=config.vocab_size, seed=seed)
    return out


def draft_config(target_dir: str | Path, *, draft_vocab_size: int = 256,
                 aux_layer_ids=DEFAULT_AUX_LAYER_IDS, use_aux_hidden_state: bool = True) -> dict:
    """config.json of a one-layer EAGLE-3 draft sized from the target's config."""
    target = json.loads((Path(target_dir) / "config.json").read_text())
    keys = ("hidden_size", "num_attention_heads", "num_key_value_heads", "intermediate_size",
            "vocab_size", "max_position_embeddings", "rms_norm_eps", "rope_theta",
            "bos_token_id", "eos_token_id", "hidden_act")
    config = {k: target[k] for k in keys if k in target}
    config.update(
        architectures=["LlamaForCausalLMEagle3"],
        model_type="llama",
        num_hidden_layers=1,
        draft_vocab_size=draft_vocab_size,
        target_hidden_size=target["hidden_size"],
        tie_word_embeddings=False,
        torch_dtype="float32",
        eagle_config={
            "eagle_aux_hidden_state_layer_ids": list(aux_layer_ids),
            "use_aux_hidden_state": use_aux_hidden_state,
        },
    )
    return config


def vocab_maps(draft_token_ids, vocab_size: int):
    """(d2t, t2d) for a draft vocabulary given as sorted target ids.

    d2t[i] is the offset target_id - i (SGLang adds arange to it); t2d is a
    bool mask over the target vocabulary marking the ids the draft can emit.
    """
    import torch

    ids = torch.as_tensor(sorted(draft_token_ids), dtype=torch.int64)
    d2t = ids - torch.arange(ids.numel())
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[ids] = True
    return d2t, t2d


def random_draft_state(config: dict, draft_token_ids, seed: int = 1, layer_prefix: str = "layers.0.") -> dict:
    """Random draft weights, no embed (SGLang shares the target's).

    layer_prefix names the decoder layer's weights: "layers.0." (speculators,
    SGLang >= 0.5.12) or "midlayer." (SpecForge / EAGLE reference, SGLang <= 0.5.11).
    """
    import torch

    g = torch.Generator().manual_seed(seed)
    h, inter = config["hidden_size"], config["intermediate_size"]
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    hd = h // heads
    n_aux = len(config["eagle_config"]["eagle_aux_hidden_state_layer_ids"])

    def w(*shape):
        return torch.randn(*shape, generator=g) * 0.02

    d2t, t2d = vocab_maps(draft_token_ids, config["vocab_size"])
    layer = {
        "hidden_norm.weight": torch.ones(h),
        "input_layernorm.weight": torch.ones(h),
        "post_attention_layernorm.weight": torch.ones(h),
        "self_attn.q_proj.weight": w(heads * hd, 2 * h),
        "self_attn.k_proj.weight": w(kv * hd, 2 * h),
        "self_attn.v_proj.weight": w(kv * hd, 2 * h),
        "self_attn.o_proj.weight": w(h, heads * hd),
        "mlp.gate_proj.weight": w(inter, h),
        "mlp.up_proj.weight": w(inter, h),
        "mlp.down_proj.weight": w(h, inter),
    }
    return {
        "fc.weight": w(h, n_aux * config["target_hidden_size"]),
        **{layer_prefix + name: t for name, t in layer.items()},
        "norm.weight": torch.ones(h),
        "lm_head.weight": w(config["draft_vocab_size"], h),
        "d2t": d2t,
        "t2d": t2d,
    }


def write_draft(out_dir: str | Path, config: dict, state: dict) -> Path:
    """Save a draft checkpoint: config.json + model.safetensors (safetensors' own writer)."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    save_file({k: v.contiguous() for k, v in state.items()}, str(out / "model.safetensors"))
    return out


def write_random_draft(out_dir: str | Path, target_dir: str | Path, *, draft_vocab_size: int = 256,
                       seed: int = 1, aux_layer_ids=DEFAULT_AUX_LAYER_IDS, layer_prefix: str = "layers.0.") -> Path:
    """A random EAGLE-3 draft for `target_dir`; its vocabulary is the first draft_vocab_size target ids."""
    config = draft_config(target_dir, draft_vocab_size=draft_vocab_size, aux_layer_ids=aux_layer_ids)
    state = random_draft_state(config, range(draft_vocab_size), seed=seed, layer_prefix=layer_prefix)
    return write_draft(out_dir, config, state)


def write_tiny_pair(root: str | Path, seed: int = 0) -> tuple[Path, Path]:
    """root/target, root/draft-random (layers.0.*) and root/draft-random-midlayer (same weights,
    midlayer.*), written once (a `.complete` marker makes it idempotent)."""
    root = Path(root)
    target, draft = root / "target", root / "draft-random"
    marker = root / ".complete"
    if not marker.exists():
        write_target(target, seed=seed)
        write_random_draft(draft, target, seed=seed + 1)
        write_random_draft(root / "draft-random-midlayer", target, seed=seed + 1, layer_prefix="midlayer.")
        marker.write_text("ok\n")
    return target, draft


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    target, draft = write_tiny_pair(args.out_dir, seed=args.seed)
    print(json.dumps({"target": str(target), "draft": str(draft)}))


if __name__ == "__main__":
    main()
