"""Run in the engine venv: build SGLang's real LlamaForCausalLMEagle3 for each draft directory given,
load the checkpoint with its own ``load_weights`` and print, as one JSON object per line, the
parameters (name -> shape) and which of them the checkpoint wrote (or the error the class raised
on the config). The doctor's loader model is
checked against this (tests/doctor/test_doctor_engine.py).

Usage: python tests/engine_side/eagle3_loader_probe.py DRAFT_DIR [DRAFT_DIR ...]
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")


def main(drafts: list[str]) -> None:
    import torch
    from safetensors.torch import load_file
    from transformers import LlamaConfig

    from sglang.srt.runtime_context import get_parallel
    from sglang.srt.server_args import ServerArgs
    from sglang.test.parallel_groups import publish

    first = Path(drafts[0])
    publish(ServerArgs(model_path=str(first), device="cpu", speculative_algorithm="EAGLE3",
                       speculative_draft_model_path=str(first), skip_server_warmup=True), role="scheduler")
    # one process, no pipeline parallelism: the only runtime fact model construction reads
    get_parallel().override_permanently(
        pp_group=SimpleNamespace(is_first_rank=True, is_last_rank=True, rank_in_group=0, world_size=1))
    from sglang.srt.models.llama_eagle3 import LlamaForCausalLMEagle3

    for draft in map(Path, drafts):
        config = LlamaConfig(**json.loads((draft / "config.json").read_text()))
        try:
            model = LlamaForCausalLMEagle3(config)
        except Exception as exc:  # the class refuses this config: that is the answer for this draft
            print(json.dumps({"draft": str(draft), "error": f"{type(exc).__name__}: {exc}"}), flush=True)
            continue
        params = dict(model.named_parameters())
        with torch.no_grad():
            for p in params.values():
                p.fill_(float("nan"))
        weights = {}
        for file in sorted(draft.glob("*.safetensors")):
            weights.update(load_file(str(file)))
        model.load_weights(iter(weights.items()))
        print(json.dumps({
            "draft": str(draft),
            "params": {n: list(p.shape) for n, p in params.items()},
            "written": sorted(n for n, p in params.items() if not torch.isnan(p.float()).any()),
            "partly": sorted(n for n, p in params.items() if torch.isnan(p.float()).any() and not torch.isnan(p.float()).all()),
            "hot_token_id": None if model.hot_token_id is None else model.hot_token_id.tolist(),
        }), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
