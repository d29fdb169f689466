"""The seeds' model family for real: a tiny DeepseekV3 target (MLA + MoE) and its EAGLE-3 drafts.

The seeds' failure happened on Kimi-K2.5: a DeepseekV3-architecture target wrapped as
``KimiK25ForConditionalGeneration``, with a Llama-style EAGLE-3 draft trained by ``speculators``.
This module builds that family small enough for a CPU: a DeepseekV3 target with multi-latent
attention (``q_lora_rank`` / ``kv_lora_rank``, decoupled rope), eight routed experts in two groups
(biased grouped ``noaux_tc`` routing: one group, top-2 in it) plus a shared expert after one dense layer, trained on the demo
language like the Llama demo target; the same weights behind the Kimi-K2.5 wrapper class (text
only); and the Llama-style draft (SpecForge's Kimi-K2 config is a Llama draft too) trained on the
target's aux states with the Llama demo's own training code.

The draft is trained on the inputs of layers ``[2, 4, 5]`` = ``[2, n//2, n-3]``, the layers the
seeds' draft used on Kimi's 61 (``[2, 30, 58]``) and SGLang's own default. It is written the way
its producer writes it: speculators' input-of-layer ids ``[2, 4, 5]``, which the DeepseekV2 family
(0.5.13 on) captures as given, and ``layers.0.*`` weight names.

Cached under ``$EAGLE3SCOPE_CACHE/models/deepseek-<version>/``, the version the recipe's key of this
file (``cache.recipe_key``) and of the Llama demo code it reuses; ``python -m eagle3scope.demo.deepseek --cache DIR`` (engine venv)
builds from a shell. torch and transformers are imported only inside the build.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from eagle3scope.demo import cache
from eagle3scope.demo import model_files, recipe, replay, training
from eagle3scope.demo import models as llama_demo
from eagle3scope.demo import scenarios
from eagle3scope.demo.scenarios import Scenario
from eagle3scope.demo.server import cache_dir as cache_root

#: The target: the Llama demo target's width, depth and vocabulary (so the draft and its training
#: carry over unchanged), with DeepseekV3's attention and MoE.
TARGET = dict(
    vocab_size=recipe.TARGET["vocab_size"],
    hidden_size=recipe.TARGET["hidden_size"],
    num_hidden_layers=recipe.TARGET["num_hidden_layers"],
    max_position_embeddings=recipe.TARGET["max_position_embeddings"],
    rms_norm_eps=recipe.TARGET["rms_norm_eps"],
    intermediate_size=256,
    num_attention_heads=4,
    num_key_value_heads=4,
    q_lora_rank=64,
    kv_lora_rank=64,
    qk_rope_head_dim=16,
    qk_nope_head_dim=32,
    v_head_dim=32,
    n_routed_experts=8,
    num_experts_per_tok=2,
    n_shared_experts=1,
    moe_intermediate_size=32,
    n_group=2,
    topk_group=1,
    first_k_dense_replace=1,
    routed_scaling_factor=1.0,
)
#: Keys DeepSeek's own config.json carries that transformers' DeepseekV3Config leaves out and
#: SGLang's deepseek_v2.py reads.
DEEPSEEK_CONFIG_EXTRAS = dict(moe_layer_freq=1, scoring_func="sigmoid", topk_method="noaux_tc", ep_size=1)
#: SGLang's CPU rope factory wants a rope_scaling block; yarn with factor 1 is plain rope.
ROPE = {"rope_type": "yarn", "factor": 1.0, "rope_theta": 10000.0, "beta_fast": 32, "beta_slow": 1,
        "mscale": 1.0, "mscale_all_dim": 1.0,
        "original_max_position_embeddings": recipe.TARGET["max_position_embeddings"]}
#: speculators' input-of-layer ids of the trained layers (the Llama demo's output-of-layer ids + 1).
SPECULATORS_AUX_IDS = [i + 1 for i in recipe.AUX_LAYER_IDS]


@dataclass(frozen=True)
class DeepseekPaths(llama_demo.ModelPaths):
    """The Llama demo's layout (``target`` is the plain DeepseekV3 one) plus the Kimi-K2.5 wrapper."""

    #: The same weights as ``target`` behind ``KimiK25ForConditionalGeneration`` (text only).
    target_kimi: Path


#: Top-level names that only find, load or report the cache: they are not part of the recipe.
CACHE_LOCATORS = frozenset({"DeepseekPaths", "version", "cached", "ensure_models", "build", "_paths", "main",
                            "CACHE_LOCATORS"})


def version() -> str:
    """The recipe's key: this file's code and constants, after the Llama demo's (whose code it trains with)."""
    return cache.recipe_key(sys.modules[__name__], apart=CACHE_LOCATORS, parents=(llama_demo.version(),))


def _paths(root: Path) -> DeepseekPaths:
    return DeepseekPaths(
        root=root, target=root / "target", draft=root / "draft", draft_midlayer=root / "draft-midlayer",
        draft_speculators=root / "draft-speculators", aux_layer_ids=tuple(SPECULATORS_AUX_IDS),
        num_target_layers=TARGET["num_hidden_layers"], target_kimi=root / "target-kimi")


def cached(cache_dir: Path | str | None = None) -> DeepseekPaths | None:
    """The built models for this version, or None when they still have to be built."""
    paths = _paths(Path(cache_dir or cache_root()) / "models" / f"deepseek-{version()}")
    return paths if cache.stamped(paths.root) else None


def ensure_models(cache_dir: Path | str | None = None, progress=None, python: Path | str | None = None) -> DeepseekPaths:
    """From any venv: the cached models, else a build in the engine venv (progress lines passed on)."""
    return cache.build_in_engine(sys.modules[__name__], cache_dir, progress, python)


def build(cache_dir: Path | str | None = None, progress=None) -> DeepseekPaths:
    """Build (or find cached) the target, its Kimi wrapper and the drafts; a second builder waits."""
    say = progress or (lambda msg: None)
    root = Path(cache_dir or cache_root()) / "models" / f"deepseek-{version()}"
    cache.build_once(root, lambda tmp: _build(_paths(tmp), _paths(root), say), version())
    say(f"DeepseekV3 demo models ready at {root}")
    return _paths(root)


def target_config():
    """transformers' DeepseekV3Config of the tiny target."""
    from transformers import DeepseekV3Config

    return DeepseekV3Config(**TARGET, rope_parameters=dict(ROPE), hidden_act="silu", tie_word_embeddings=False,
                            bos_token_id=1, eos_token_id=2, pad_token_id=3, architectures=["DeepseekV3ForCausalLM"])


def _build(paths: DeepseekPaths, final: DeepseekPaths, say) -> dict:
    import resource

    import torch
    from transformers import DeepseekV3ForCausalLM

    torch.manual_seed(recipe.SEED)
    # One thread: these matrices are too small to share, and on a busy machine more threads spin
    # (a step cost 3-4x the CPU time with two threads under load).
    torch.set_num_threads(1)
    stats: dict = {}
    t0 = time.monotonic()
    say("training the DeepseekV3 target (MLA + MoE) on the demo language ...")
    target = training.train_target(say, stats, model=DeepseekV3ForCausalLM(target_config()))
    stats["target_train_s"] = round(time.monotonic() - t0, 1)
    _write_target(target, paths)
    t1 = time.monotonic()
    say("training the Llama-style EAGLE-3 draft on its aux states ...")
    draft, draft_ids = training.train_draft(target, say, stats)
    stats["draft_train_s"] = round(time.monotonic() - t1, 1)
    stats.update(replay.replay_stats(target, draft, draft_ids, say))
    _write_drafts(draft, draft_ids, paths, final)
    stats["build_s"] = round(time.monotonic() - t0, 1)
    stats["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return stats


def _write_target(model, paths: DeepseekPaths) -> None:
    """The DeepseekV3 checkpoint (transformers' writer) and the same weights as a Kimi-K2.5 checkpoint."""
    from safetensors.torch import load_file, save_file

    model_files.write_target(model, paths.target)
    config = json.loads((paths.target / "config.json").read_text())
    config.update(DEEPSEEK_CONFIG_EXTRAS)
    (paths.target / "config.json").write_text(json.dumps(config, indent=1))
    kimi = paths.target_kimi
    kimi.mkdir(parents=True)
    (kimi / "config.json").write_text(json.dumps(kimi_config(config), indent=1))
    weights = load_file(str(paths.target / "model.safetensors"))
    save_file({"language_model." + k: v for k, v in weights.items()}, str(kimi / "model.safetensors"))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(paths.target / name, kimi / name)


def kimi_config(text_config: dict) -> dict:
    """Kimi-K2.5's config.json around a DeepseekV3 text config, text only.

    ``language_model_only`` is the checkpoint-side switch SGLang 0.5.23 reads to serve a
    multimodal-family config with a tokenizer instead of Kimi's remote-code media processor; the
    vision tower is still built (tiny here: its weights are not in the checkpoint and never run).
    """
    vision = dict(num_hidden_layers=1, hidden_size=32, vt_hidden_size=32, intermediate_size=64, num_attention_heads=2,
                  init_pos_emb_height=8, init_pos_emb_width=8, text_hidden_size=text_config["hidden_size"])
    return {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
            "text_config": text_config, "vision_config": vision, "language_model_only": True,
            "bos_token_id": text_config["bos_token_id"], "eos_token_id": text_config["eos_token_id"],
            "pad_token_id": text_config["pad_token_id"], "torch_dtype": "float32"}


def draft_config(target_dir: Path) -> dict:
    """The SGLang / HF config of the Llama-style draft, with speculators' ids (captured as given)."""
    config = model_files.draft_config(target_dir)
    llama = recipe.TARGET  # the draft layer is the Llama demo's (it is trained by that code)
    config.update(num_key_value_heads=llama["num_key_value_heads"], rope_theta=llama["rope_theta"],
                  rms_norm_eps=llama["rms_norm_eps"])
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = list(SPECULATORS_AUX_IDS)
    return config


def speculators_config(kimi_dir: Path) -> dict:
    """speculators' serialised config, verifier Kimi-K2.5 (the seeds' draft)."""
    config = model_files.speculators_config(kimi_dir)
    config["speculators_config"]["verifier"]["architectures"] = ["KimiK25ForConditionalGeneration"]
    return config


def _write_drafts(draft, draft_ids, paths: DeepseekPaths, final: DeepseekPaths) -> None:
    from eagle3scope.demo.tiny import write_draft

    for out, prefix, config in (
        (paths.draft, "layers.0.", draft_config(paths.target)),
        (paths.draft_midlayer, "midlayer.", draft_config(paths.target)),
        (paths.draft_speculators, "layers.0.", speculators_config(final.target_kimi)),
    ):
        write_draft(out, config, model_files.draft_tensors(draft, draft_ids, prefix))


# ---------------------------------------------------------------- scenarios


def _aux_plus_one(config: dict, models) -> None:
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [i + 1 for i in models.aux_layer_ids]


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("healthy", "DeepseekV3 target (MLA + MoE), the trained draft with speculators' ids [2, 4, 5]",
                 "healthy"),
        Scenario("healthy-kimi", "the same weights served as KimiK25ForConditionalGeneration (text only), as in "
                 "the seeds", "healthy", target="target_kimi"),
        Scenario("seeds", "the seeds' break on the Kimi-K2.5 wrapper: aux capture off, the target's 128-wide state "
                 "equals the draft's hidden size, so fc is skipped without a word", "lower",
                 "the seeds (Kimi-K2.5 + speculators draft, acceptance 1.00)", config_edit=scenarios._aux_off,
                 target="target_kimi"),
        Scenario("aux-plus-one", "ids one past the trained layers ([3, 5, 6]): what SGLang <= 0.5.12's plain +1 "
                 "captured for speculators' [2, 4, 5] on this family (0.5.13 on: as given unless the first id "
                 "is 1)", "lower", "sglang-compat.md D5; sglang PR 25454", config_edit=_aux_plus_one),
    )
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=None, help="cache root (default $EAGLE3SCOPE_CACHE)")
    paths = build(parser.parse_args(argv).cache, progress=lambda msg: print(msg, flush=True))
    print(json.dumps(paths.__dict__, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
