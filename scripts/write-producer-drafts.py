"""Write tiny EAGLE-3 drafts the way each producer's own writer does, into tests/doctor/data/producers/.

The doctor's predictions are tested on these files (tests/doctor/test_doctor_producer_writers.py), so
they must be what the producers write, not what eagle3scope believes they write:

- ``modelopt-default`` and ``modelopt-no-rope-override``: written by nvidia-modelopt 0.47.0 itself
  (``mtsp.convert`` with its EAGLE3_DEFAULT_CFG, then ``export_speculative_decoding``, which calls
  ``EagleExporter.export``) on a random 8-layer Llama target; the second with
  ``eagle_export_rope_scaling={}``, the option that turns its rope injection off.
- ``angelslim-custom-layers``: a stand-in. angelslim 0.5.0's draft module does not import here (its
  ``angelslim.utils`` pulls ``datasets``, and the wheel lacks a subpackage), so this writes what its
  ``Eagle3LlamaForCausalLM.save_pretrained`` would (compressor/speculative/train/models/draft/llama_eagle3.py:
  a LlamaConfig with its class name in ``architectures``, the draft config's top-level
  ``aux_hidden_states_layer_ids`` that trainer/online_eagle3_trainer.py reads, the tensors its
  ``__init__`` creates: midlayer.*, fc, norm, embed_tokens, lm_head, d2t, t2d), trained on ids [0, 2, 5].
- ``specforge-default``: a stand-in. specforge 0.2.0 pins a CUDA torch (an ~11 GB install), so this
  writes what its ``export_to_sglang`` does (specforge/export/to_sglang.py: ``save_pretrained`` of the
  LlamaForCausalLMEagle3 draft config, embeddings dropped); the aux layers are a training-run argument
  (config/schema.py ``aux_hidden_state_layer_ids``) and leave no trace in the files.

Run with the modelopt env (scripts/build-modelopt-env.sh):
    ~/.cache/eagle3scope/venv-modelopt-0.47.0/bin/python scripts/write-producer-drafts.py
Seeds are fixed; the outputs are a few KB each and committed.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

OUT = Path(__file__).resolve().parent.parent / "tests" / "doctor" / "data" / "producers"
TARGET = dict(hidden_size=16, intermediate_size=32, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
              num_hidden_layers=8, vocab_size=64, max_position_embeddings=256, rope_theta=10000.0)
DRAFT_VOCAB = 32


def modelopt(name: str, **options) -> None:
    import modelopt.torch.speculative as mtsp
    from modelopt.torch.export import export_speculative_decoding
    from modelopt.torch.speculative.config import EAGLE3_DEFAULT_CFG

    torch.manual_seed(0)
    base = LlamaForCausalLM(LlamaConfig(**TARGET)).to(torch.bfloat16)
    cfg = copy.deepcopy(EAGLE3_DEFAULT_CFG["config"])
    cfg["eagle_architecture_config"].update(intermediate_size=32, num_attention_heads=2, num_key_value_heads=1,
                                            head_dim=8, draft_vocab_size=DRAFT_VOCAB)
    cfg.update(eagle_use_torch_compile=False, **options)
    mtsp.convert(base, [("eagle", cfg)])
    export_speculative_decoding(base, export_dir=str(OUT / name))


def llama_draft_tensors(prefix: str, with_embed: bool) -> dict[str, torch.Tensor]:
    """The single EAGLE-3 decoder layer's tensors (first attention takes 2H: embeddings and hidden)."""
    g = torch.Generator().manual_seed(0)
    h, inter, heads, kv, hd = 16, 32, 2, 1, 8

    def w(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)

    out = {f"{prefix}self_attn.q_proj.weight": w(heads * hd, 2 * h), f"{prefix}self_attn.k_proj.weight": w(kv * hd, 2 * h),
           f"{prefix}self_attn.v_proj.weight": w(kv * hd, 2 * h), f"{prefix}self_attn.o_proj.weight": w(h, heads * hd),
           f"{prefix}mlp.gate_proj.weight": w(inter, h), f"{prefix}mlp.up_proj.weight": w(inter, h),
           f"{prefix}mlp.down_proj.weight": w(h, inter), f"{prefix}input_layernorm.weight": torch.ones(h, dtype=torch.bfloat16),
           f"{prefix}post_attention_layernorm.weight": torch.ones(h, dtype=torch.bfloat16),
           f"{prefix}hidden_norm.weight": torch.ones(h, dtype=torch.bfloat16),
           "fc.weight": w(h, 3 * h), "norm.weight": torch.ones(h, dtype=torch.bfloat16),
           "lm_head.weight": w(DRAFT_VOCAB, h)}
    if with_embed:
        out["embed_tokens.weight"] = w(TARGET["vocab_size"], h)
    kept = torch.arange(0, 2 * DRAFT_VOCAB, 2)  # every other target token
    out["d2t"] = kept - torch.arange(DRAFT_VOCAB)  # offsets, as both producers store them
    t2d = torch.zeros(TARGET["vocab_size"], dtype=torch.bool)
    t2d[kept] = True
    out["t2d"] = t2d
    return out


def draft_config(architectures: list[str], **extra) -> dict:
    fields = {k: v for k, v in TARGET.items() if k != "num_hidden_layers"}
    cfg = LlamaConfig(**fields, num_hidden_layers=1, architectures=architectures, draft_vocab_size=DRAFT_VOCAB,
                      torch_dtype="bfloat16", **extra).to_dict()
    return cfg


def stand_in(name: str, config: dict, tensors: dict) -> None:
    path = OUT / name
    path.mkdir(parents=True)
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    (path / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def main() -> None:
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    modelopt("modelopt-default")
    modelopt("modelopt-no-rope-override", eagle_export_rope_scaling={})
    stand_in("angelslim-custom-layers", draft_config(["Eagle3LlamaForCausalLM"], aux_hidden_states_layer_ids=[0, 2, 5]),
             llama_draft_tensors("midlayer.", with_embed=True))
    stand_in("specforge-default", draft_config(["LlamaForCausalLMEagle3"]),
             llama_draft_tensors("midlayer.", with_embed=False))
    (OUT / "target").mkdir()
    (OUT / "target" / "config.json").write_text(
        json.dumps(LlamaConfig(**TARGET, architectures=["LlamaForCausalLM"]).to_dict(), indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
