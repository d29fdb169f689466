"""The files the demo models are served from: the target (transformers' checkpoint and a word-level
tokenizer over the demo language's vocabulary) and the trained draft in the three layouts its
producers write (SGLang/HF with ``layers.0.*`` names, SpecForge's ``midlayer.*``, speculators' own
config, which vLLM reads).
"""

from __future__ import annotations

import json
from pathlib import Path

from eagle3scope.demo import tiny
from eagle3scope.demo.language import vocabulary
from eagle3scope.demo.recipe import AUX_LAYER_IDS, DRAFT_INTERMEDIATE, DRAFT_VOCAB, TARGET, TTT_STEPS, target_config


def write_target(model, out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    vocab = {tok: i for i, tok in enumerate(vocabulary())}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "pad_token": "<pad>",
                "add_bos_token": False,
                "model_max_length": TARGET["max_position_embeddings"],
            },
            indent=1,
        )
    )


def draft_tensors(draft, draft_ids, layer_prefix: str) -> dict:

    tensors = {}
    for name, value in draft.state_dict().items():
        if not name.startswith("embed."):
            tensors[name.replace("layers.0.", layer_prefix, 1)] = value.clone()
    # SGLang replaces it with the target's (set_embed); SpecForge and speculators save it anyway.
    tensors["embed_tokens.weight"] = draft.embed.weight.detach().clone()
    tensors["d2t"], tensors["t2d"] = tiny.vocab_maps(draft_ids.tolist(), TARGET["vocab_size"])
    return tensors


def draft_config(target_dir: Path) -> dict:
    """The SGLang / HF ``config.json`` of the healthy draft (the form SpecForge writes)."""

    config = tiny.draft_config(target_dir, draft_vocab_size=DRAFT_VOCAB, aux_layer_ids=AUX_LAYER_IDS)
    config["intermediate_size"] = DRAFT_INTERMEDIATE
    return config


def speculators_config(target_dir: Path) -> dict:
    """speculators' ``Eagle3SpeculatorConfig`` as it serialises it (vLLM reads this format)."""
    layer = target_config().to_dict()
    layer.update(num_hidden_layers=1, intermediate_size=DRAFT_INTERMEDIATE, architectures=["LlamaForCausalLM"])
    return {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "speculators_version": "0.9.0",
        "speculators_config": {
            "algorithm": "eagle3",
            "default_proposal_method": "greedy",
            "proposal_methods": [
                {"proposal_type": "greedy", "speculative_tokens": TTT_STEPS, "accept_tolerance": 0.0, "verifier_accept_k": 1}
            ],
            "verifier": {"name_or_path": str(target_dir), "architectures": ["LlamaForCausalLM"]},
        },
        "transformer_layer_config": layer,
        "draft_vocab_size": DRAFT_VOCAB,
        "norm_before_residual": False,
        "target_hidden_size": None,
        # speculators numbers aux layers by layer input: SGLang's output-of-layer ids + 1.
        "eagle_aux_hidden_state_layer_ids": [i + 1 for i in AUX_LAYER_IDS],
        "torch_dtype": "float32",
    }


def write_drafts(draft, draft_ids, paths, final_target: Path) -> None:
    """The three draft layouts into ``paths`` (a :class:`~eagle3scope.demo.models.ModelPaths`); the
    speculators config names ``final_target``, where the target will be served from."""

    for out, prefix, config in (
        (paths.draft, "layers.0.", draft_config(paths.target)),
        (paths.draft_midlayer, "midlayer.", draft_config(paths.target)),
        (paths.draft_speculators, "layers.0.", speculators_config(final_target)),
    ):
        tiny.write_draft(out, config, draft_tensors(draft, draft_ids, prefix))
