"""Load an EAGLE-3 draft with the installed SGLang's own model class, in-process on CPU, and run it once.

For releases whose full engine cannot run on a CPU (SGLang 0.5.10 has no CPU
EAGLE attention backend), this is how the real loader and forward are
exercised: `LlamaForCausalLMEagle3` is built under a one-process gloo group,
its own `load_weights` reads the checkpoint, and one extend pass runs
`model.model.forward` on random 3H-wide target features with a plain causal
attention stand-in for the paged backend. The report says which parameters
the loader never wrote (silently dropped checkpoint names),
whether `fc` was applied, and the draft's top-1 target ids.

Run with an engine venv's python: ``python -m eagle3scope.demo.draft_probe DRAFT_DIR``.
Only SGLang 0.5.10-style process setup (``set_global_server_args_for_scheduler``) is handled.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
from pathlib import Path
from types import SimpleNamespace


class CausalAttention:
    """Stands in for the paged attention backend: one sequence, no KV cache, GQA, causal."""

    def forward(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        import torch

        t = q.shape[0]
        q = q.view(t, layer.tp_q_head_num, layer.qk_head_dim).transpose(0, 1)
        k = k.view(t, layer.tp_k_head_num, layer.qk_head_dim).transpose(0, 1)
        v = v.view(t, layer.tp_v_head_num, layer.v_head_dim).transpose(0, 1)
        group = layer.tp_q_head_num // layer.tp_k_head_num
        k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=layer.scaling)
        return out.transpose(0, 1).reshape(t, -1)


def _init_single_process(draft_dir: Path) -> None:
    from sglang.srt.distributed.parallel_state import init_distributed_environment, initialize_model_parallel
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    init_distributed_environment(world_size=1, rank=0, local_rank=0,
                                 distributed_init_method=f"tcp://127.0.0.1:{port}", backend="gloo")
    initialize_model_parallel(1)
    set_global_server_args_for_scheduler(ServerArgs(model_path=str(draft_dir), device="cpu"))


def probe(draft_dir: str | Path, tokens: int = 6, seed: int = 0) -> dict:
    """Build, load and run the draft; return the report described in the module docstring."""
    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
    import sglang
    import torch
    from safetensors.torch import load_file
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.models.llama_eagle3 import LlamaForCausalLMEagle3
    from transformers import LlamaConfig

    draft_dir = Path(draft_dir)
    _init_single_process(draft_dir)
    config = LlamaConfig.from_pretrained(draft_dir)
    torch.manual_seed(seed)
    model = LlamaForCausalLMEagle3(config).eval()
    # NaN-fill every parameter: what is still NaN after load_weights was never written.
    params = {n: p for n, p in model.named_parameters() if not n.startswith("model.embed_tokens")}
    initial = {n: p.detach().clone() for n, p in params.items()}  # embed comes from the target
    with torch.no_grad():
        for p in params.values():
            p.fill_(float("nan"))
    checkpoint = load_file(str(draft_dir / "model.safetensors"))
    model.load_weights(iter(checkpoint.items()))
    unwritten = {n: torch.isnan(p.detach()) for n, p in params.items()}
    not_loaded = sorted(n for n, m in unwritten.items() if m.all())
    partly_loaded = sorted(n for n, m in unwritten.items() if m.any() and not m.all())
    with torch.no_grad():  # unwritten values keep their initialisation, as in the server
        for n, p in params.items():
            p[unwritten[n]] = initial[n][unwritten[n]]

    hidden = config.hidden_size
    n_aux = model.model.fc.in_features // getattr(config, "target_hidden_size", hidden)
    features = torch.randn(tokens, n_aux * getattr(config, "target_hidden_size", hidden))
    fc_inputs = []
    handle = model.model.fc.register_forward_hook(lambda m, args, out: fc_inputs.append(args[0].shape[-1]))
    batch = SimpleNamespace(
        forward_mode=ForwardMode.EXTEND, spec_info=SimpleNamespace(hidden_states=features),
        mm_input_embeds=None, contains_mm_inputs=lambda: False, attn_backend=CausalAttention(),
    )
    with torch.no_grad():
        to_logits, _ = model.model(torch.randint(0, config.vocab_size, (tokens,)), torch.arange(tokens), batch)
        logits = to_logits @ model.lm_head.weight.T
    handle.remove()
    top1 = logits.argmax(-1)
    hot = model.hot_token_id
    return {
        "sglang": sglang.__version__,
        "decoder_module": "midlayer" if hasattr(model.model, "midlayer") else "layers.0",
        "params_not_loaded": not_loaded,
        "params_partly_loaded": partly_loaded,
        "checkpoint_names": sorted(checkpoint),
        "fc_input_widths": fc_inputs,
        "logits_shape": list(logits.shape),
        "finite": bool(torch.isfinite(logits).all()),
        "draft_top1_target_ids": (hot[top1] if hot is not None else top1).tolist(),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("draft_dir")
    parser.add_argument("--tokens", type=int, default=6)
    args = parser.parse_args(argv)
    print(json.dumps(probe(args.draft_dir, tokens=args.tokens)))


if __name__ == "__main__":
    main()
