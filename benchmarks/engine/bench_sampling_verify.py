"""CPU cost of the sampling-verify stand-in against the greedy verify it replaces on CPU.

Usage (engine venv, cpu_engine importable):
    PYTHONPATH=cpu_engine/src ~/.cache/eagle3scope/venv-sglang-0.5.23/bin/python benchmarks/engine/bench_sampling_verify.py
Chain trees as SGLang builds them at steps 3 / topk 1 / 4 draft tokens, target probabilities over
the vocabulary; per batch size, the process CPU time per call (median of repeats) of
``tree_speculative_sampling_target_only`` and of ``verify_tree_greedy_cpu``, and the 1-minute load.
"""

import argparse
import json
import os
import statistics
import time

import torch

import sgl_kernel


def chain(bs: int, n: int, vocab: int, gen: torch.Generator) -> dict:
    nxt = torch.tensor([list(range(1, n)) + [-1]] * bs)
    return dict(
        candidates=torch.randint(0, vocab, (bs, n), generator=gen), retrive_index=torch.arange(bs * n).view(bs, n),
        retrive_next_token=nxt, retrive_next_sibling=torch.full((bs, n), -1),
        target_probs=torch.randn(bs, n, vocab, generator=gen).softmax(-1),
    )


def cpu_per_call(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    n, steps = 4, 4
    for bs in (1, 2, 8):
        t = chain(bs, n, args.vocab, gen)

        def sampled():
            sgl_kernel.tree_speculative_sampling_target_only(
                predicts=torch.zeros(bs * n, dtype=torch.int32), accept_index=torch.full((bs, steps), -1, dtype=torch.int32),
                accept_token_num=torch.zeros(bs, dtype=torch.int32), candidates=t["candidates"],
                retrive_index=t["retrive_index"], retrive_next_token=t["retrive_next_token"],
                retrive_next_sibling=t["retrive_next_sibling"], uniform_samples=torch.rand(bs, n, generator=gen),
                uniform_samples_for_final_sampling=torch.rand(bs, generator=gen), target_probs=t["target_probs"],
                draft_probs=torch.zeros_like(t["target_probs"]))

        def greedy():
            sgl_kernel.verify_tree_greedy_cpu(
                torch.zeros(bs * n, dtype=torch.int32), torch.full((bs, steps), -1, dtype=torch.int32),
                torch.zeros(bs, dtype=torch.int32), t["candidates"], t["retrive_index"], t["retrive_next_token"],
                t["retrive_next_sibling"], t["target_probs"].argmax(-1))

        print(json.dumps({"bs": bs, "vocab": args.vocab,
                          "sampling_verify_ms": round(1e3 * cpu_per_call(sampled, args.repeats), 3),
                          "greedy_verify_ms": round(1e3 * cpu_per_call(greedy, args.repeats), 3),
                          "loadavg_1m": os.getloadavg()[0]}), flush=True)


if __name__ == "__main__":
    main()
