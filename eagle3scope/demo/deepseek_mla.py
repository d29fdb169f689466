"""The MLA EAGLE-3 draft of the DeepseekV3 family: SGLang's ``Eagle3DeepseekV2ForCausalLM``, trained for real.

SGLang 0.5.23 serves Kimi-K2.x's MLA drafts (``kimi-k2.5-eagle3-mla``) with
``sglang/srt/models/kimi_k25_eagle3.py``: an EAGLE-3 layout (``fc`` over the concatenated aux
states, one decoder layer over ``[input_layernorm(embeds), hidden_norm(h)]``, a dense MLP, its own
``lm_head`` over a reduced vocabulary with ``d2t``) whose attention is DeepSeek-V2 multi-latent
attention, its QKV-down projections (``q_a_proj``, ``kv_a_proj_with_mqa``) reading the doubled
``2 * hidden`` input. The draft here computes exactly that layer in plain torch (``_MLADraft``):
the Llama demo draft's ``fc``, norms, MLP, head and training-time-test ``unroll`` are reused as
they are; only the attention's q / k / v are MLA's (low-rank q with its norm, the shared latent kv
with its norm expanded per head by ``kv_b_proj``, decoupled interleaved rope on the 16 rope dims,
softmax scale ``qk_head_dim ** -0.5``), with the rope of the target's own config (transformers'
``DeepseekV3RotaryEmbedding``, which SGLang's ``deepseek_yarn`` rope matches on this target).

It is trained by the Llama demo's own loop (``training.train_draft``: the target's aux states of
the trained layers, the TTT unroll, the neighbour-shift loss) on the cached DeepseekV3 target, and
written in the layout NVIDIA Model-Optimizer's MLA EAGLE export writes for Kimi-K2
(``modelopt/torch/export/plugins/hf_spec_configs.py`` ``kimik2_eagle_template_config``:
``Eagle3DeepseekV2ForCausalLM``, ``model_type`` ``kimi_k2``, the MLA ranks, an ``eagle_config``
with output-of-layer aux ids ``[1, n//2-1, n-4]``; ``hf_spec_export.py``
``KIMIK2_EAGLE_SINGLE_LAYER``: ``layers.0.self_attn.{q_a_proj, q_a_layernorm, q_b_proj,
kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj}``, unfused ``mlp.{gate,up,down}_proj``,
``fc``, ``norm``, ``lm_head``, ``d2t``; as ``benchmarks/support/draft_checkpoints.py`` reproduces it). Its ids
``[1, 3, 4]`` reach the trained layers through the DeepseekV2 family's conditional ``+1`` (a first
id of 1 is read as output-of-layer numbering: captured ``[2, 4, 5]``).

Cached on its own, under ``$EAGLE3SCOPE_CACHE/models/deepseek-mla-<version>/``, the version
the recipe's key of this file (``cache.recipe_key``) after the DeepseekV3 models' version: a change to this draft retrains only the
draft, from the cached target. ``python -m eagle3scope.demo.deepseek_mla --cache DIR`` (engine
venv) builds from a shell (the target first, if it is not cached). torch is imported only inside
the build.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from eagle3scope.demo import cache, deepseek
from eagle3scope.demo import model_files, recipe, replay, training
from eagle3scope.demo.llama_draft import make_draft as make_llama_draft
from eagle3scope.demo.scenarios import Scenario
from eagle3scope.demo.server import cache_dir as cache_root

#: The draft layer's MLA shape: the target's (SGLang shares the target's MLA layout with the draft),
#: with the Llama demo draft's MLP width.
MLA = {k: deepseek.TARGET[k] for k in ("num_attention_heads", "num_key_value_heads", "q_lora_rank", "kv_lora_rank",
                                        "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")}
#: Model-Optimizer's output-of-layer ids ``sorted({1, n//2-1, n-4})`` (= the Llama demo's), which the
#: DeepseekV2 family's rule captures one deeper: the trained inputs of layers [2, 4, 5].
MODELOPT_AUX_IDS = sorted({1, deepseek.TARGET["num_hidden_layers"] // 2 - 1, deepseek.TARGET["num_hidden_layers"] - 4})


@dataclass(frozen=True)
class DeepseekMLAPaths(deepseek.DeepseekPaths):
    """The DeepseekV3 family's models plus the MLA draft (its own cache entry)."""

    #: ``Eagle3DeepseekV2ForCausalLM`` in Model-Optimizer's layout.
    draft_mla: Path

    def mla_stats(self) -> dict:
        """Build figures of the MLA draft (its own stamp)."""
        return cache.stats(self.draft_mla.parent)


#: Top-level names that only find, load or report the cache: they are not part of the recipe.
CACHE_LOCATORS = frozenset({"DeepseekMLAPaths", "version", "_root", "_with_mla", "cached", "ensure_models", "build",
                            "main", "CACHE_LOCATORS"})


def version() -> str:
    """The recipe's key: this file's code and constants, after the DeepseekV3 models' (the target it trains on)."""
    return cache.recipe_key(sys.modules[__name__], apart=CACHE_LOCATORS, parents=(deepseek.version(),))


def _root(cache_dir: Path | str | None) -> Path:
    return Path(cache_dir or cache_root()) / "models" / f"deepseek-mla-{version()}"


def _with_mla(base: deepseek.DeepseekPaths, root: Path) -> DeepseekMLAPaths:
    return DeepseekMLAPaths(**base.__dict__, draft_mla=root / "draft-mla")


def cached(cache_dir: Path | str | None = None) -> DeepseekMLAPaths | None:
    """The family's models with the MLA draft, or None while either still has to be built."""
    base = deepseek.cached(cache_dir)
    root = _root(cache_dir)
    return _with_mla(base, root) if base and cache.stamped(root) else None


def ensure_models(cache_dir: Path | str | None = None, progress=None, python: Path | str | None = None) -> DeepseekMLAPaths:
    """From any venv: the cached models, else a build in the engine venv (target first if needed)."""
    return cache.build_in_engine(sys.modules[__name__], cache_dir, progress, python)


def build(cache_dir: Path | str | None = None, progress=None) -> DeepseekMLAPaths:
    """The DeepseekV3 models (cached or built), then the MLA draft on them (cached on its own)."""
    say = progress or (lambda msg: None)
    base = deepseek.build(cache_dir, progress)
    root = _root(cache_dir)
    cache.build_once(root, lambda tmp: _build(base, tmp / "draft-mla", say), version())
    say(f"DeepseekV3 MLA draft ready at {root}")
    return _with_mla(base, root)


# ---------------------------------------------------------------- the draft (torch)


def make_draft(embed):
    """The Llama demo draft with SGLang's ``Eagle3MLADecoderLayer`` as its layer (same ``unroll``)."""
    import torch
    from torch import nn
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
        DeepseekV3RotaryEmbedding,
        apply_rotary_pos_emb_interleave,
    )

    base = type(make_llama_draft(embed))
    hidden = deepseek.TARGET["hidden_size"]
    heads, nope, rope_dim, v_dim = (MLA[k] for k in ("num_attention_heads", "qk_nope_head_dim", "qk_rope_head_dim",
                                                     "v_head_dim"))
    q_rank, kv_rank = MLA["q_lora_rank"], MLA["kv_lora_rank"]
    # ``unroll`` scales scores by the Llama layer's head_dim ** -0.5; MLA's is qk_head_dim ** -0.5
    # (yarn mscale 1 at factor 1), folded into q.
    q_scale = (nope + rope_dim) ** -0.5 / (hidden // recipe.TARGET["num_attention_heads"]) ** -0.5

    class Draft(base):
        """``fc`` -> Eagle3MLADecoderLayer -> ``norm`` -> ``lm_head``, as kimi_k25_eagle3.py runs it."""

        def __init__(self):
            super().__init__()
            llama_layer = self.layers[0]
            norm = type(self.norm)  # RMSNorm with the target's eps, as SGLang's (config.rms_norm_eps)
            attn = nn.Module()
            attn.q_a_proj = nn.Linear(2 * hidden, q_rank, bias=False)
            attn.q_a_layernorm = norm(q_rank)
            attn.q_b_proj = nn.Linear(q_rank, heads * (nope + rope_dim), bias=False)
            attn.kv_a_proj_with_mqa = nn.Linear(2 * hidden, kv_rank + rope_dim, bias=False)
            attn.kv_a_layernorm = norm(kv_rank)
            attn.kv_b_proj = nn.Linear(kv_rank, heads * (nope + v_dim), bias=False)
            attn.o_proj = nn.Linear(heads * v_dim, hidden, bias=False)
            layer = nn.Module()
            layer.self_attn = attn
            layer.mlp = llama_layer.mlp  # DeepseekV2MLP: silu(gate) * up -> down, as the Llama one
            layer.input_layernorm = llama_layer.input_layernorm
            layer.hidden_norm = llama_layer.hidden_norm
            layer.post_attention_layernorm = llama_layer.post_attention_layernorm
            self.layers = nn.ModuleList([layer])
            self.rotary = DeepseekV3RotaryEmbedding(deepseek.target_config())

        def qkv(self, tokens, h, pos):
            layer = self.layers[0]
            attn = layer.self_attn
            x = torch.cat([layer.input_layernorm(self.embed(tokens)), layer.hidden_norm(h)], -1)
            b, n = tokens.shape
            q = attn.q_b_proj(attn.q_a_layernorm(attn.q_a_proj(x))).view(b, n, heads, nope + rope_dim).transpose(1, 2)
            q_nope, q_rot = q.split([nope, rope_dim], -1)
            latent, k_rot = attn.kv_a_proj_with_mqa(x).split([kv_rank, rope_dim], -1)
            kv = attn.kv_b_proj(attn.kv_a_layernorm(latent)).view(b, n, heads, nope + v_dim).transpose(1, 2)
            k_nope, v = kv.split([nope, v_dim], -1)
            cos, sin = self.rotary(x, pos)
            q_rot, k_rot = apply_rotary_pos_emb_interleave(q_rot, k_rot.view(b, 1, n, rope_dim), cos, sin)
            q = torch.cat([q_nope, q_rot], -1) * q_scale
            return q, torch.cat([k_nope, k_rot.expand(b, heads, n, rope_dim)], -1), v

        def finish(self, attn_out, residual):
            layer = self.layers[0]
            b, _, n, _ = attn_out.shape
            residual = layer.self_attn.o_proj(attn_out.transpose(1, 2).reshape(b, n, heads * v_dim)) + residual
            out = layer.mlp(layer.post_attention_layernorm(residual)) + residual
            return self.lm_head(self.norm(out)), out

    return Draft()


def _build(base: deepseek.DeepseekPaths, out: Path, say) -> dict:
    import resource

    import torch
    from transformers import DeepseekV3ForCausalLM

    torch.manual_seed(recipe.SEED)
    torch.set_num_threads(1)  # as the target's build: these matrices are too small to share
    stats: dict = {}
    t0 = time.monotonic()
    target = DeepseekV3ForCausalLM.from_pretrained(str(base.target), dtype=torch.float32).eval()
    say("training the MLA EAGLE-3 draft (Eagle3DeepseekV2ForCausalLM) on the DeepseekV3 target's aux states ...")
    # The Llama demo's loop, with this draft in place of its Llama one.
    draft, draft_ids = training.train_draft(target, say, stats, make_draft=make_draft)
    stats.update(replay.replay_stats(target, draft, draft_ids, say))
    stats["draft_train_s"] = round(time.monotonic() - t0, 1)
    _write(draft, draft_ids, out, base.target)
    stats["build_s"] = round(time.monotonic() - t0, 1)
    stats["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return stats


def draft_config(target_dir: Path) -> dict:
    """Model-Optimizer's Kimi-K2 MLA EAGLE config (kimik2_eagle_template_config), at this size."""
    target = json.loads((Path(target_dir) / "config.json").read_text())
    return {
        "architectures": ["Eagle3DeepseekV2ForCausalLM"],
        "model_type": "kimi_k2",
        "hidden_size": deepseek.TARGET["hidden_size"],
        **MLA,
        "intermediate_size": recipe.DRAFT_INTERMEDIATE,
        "hidden_act": "silu",
        "num_hidden_layers": 1,
        "vocab_size": deepseek.TARGET["vocab_size"],
        "draft_vocab_size": recipe.DRAFT_VOCAB,
        "max_position_embeddings": deepseek.TARGET["max_position_embeddings"],
        "rms_norm_eps": deepseek.TARGET["rms_norm_eps"],
        # the target's rope (Kimi-K2's template copies the target's yarn block the same way), interleaved
        "rope_parameters": dict(target.get("rope_parameters") or deepseek.ROPE),
        "rope_interleave": target.get("rope_interleave", True),
        "tie_word_embeddings": False,
        "bos_token_id": target["bos_token_id"],
        "eos_token_id": target["eos_token_id"],
        "torch_dtype": "float32",
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(MODELOPT_AUX_IDS), "use_aux_hidden_state": True,
                         "use_input_layernorm_in_first_layer": True, "use_last_layernorm": True,
                         "use_mtp_layernorm": False, "next_layer_regular": True, "parallel_draft_step": 1,
                         "parallel_draft_heads_num_layers": 1},
    }


def _write(draft, draft_ids, out: Path, target_dir: Path) -> None:
    from eagle3scope.demo.tiny import write_draft

    tensors = model_files.draft_tensors(draft, draft_ids, "layers.0.")
    # Model-Optimizer's export: no t2d buffer, no rotary cache; the embedding is kept (SGLang shares the target's).
    tensors = {k: v for k, v in tensors.items() if k != "t2d" and not k.startswith("rotary.")}
    write_draft(out, draft_config(target_dir), tensors)


# ---------------------------------------------------------------- scenarios

SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("healthy-mla", "DeepseekV3 target with the MLA draft SGLang serves for Kimi-K2.x "
                 "(Eagle3DeepseekV2ForCausalLM, Model-Optimizer layout, ids [1, 3, 4] captured as [2, 4, 5])",
                 "healthy", source="draft_mla"),
        Scenario("healthy-mla-kimi", "the MLA draft on the Kimi-K2.5 wrapper (text only), the pairing "
                 "kimi-k2.5-eagle3-mla is published for", "healthy", source="draft_mla", target="target_kimi"),
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
