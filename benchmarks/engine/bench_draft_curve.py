"""The demo draft's replayed acceptance against its training budget, on a built target (no rebuild).

Usage (engine venv, this checkout on PYTHONPATH, the demo models already built):
  PYTHONPATH=.:instrumentation:cpu_engine/src ~/.cache/eagle3scope/venv-sglang-0.5.23/bin/python \
      benchmarks/engine/bench_draft_curve.py [--target DIR] [UNROLL[+FIRST] ...]   (default: 60+120 80+120 100+120 80+0)
Each budget is DRAFT_STEPS (steps with the training-time-test unroll) plus FIRST_STEP_ONLY (steps
that train the draft's first step alone). For each it trains the build's own draft
(``training.train_draft``, one thread) and prints one JSON line with ``replay.replay_stats``: per
prompt family, the greedy replay (accept length, per position), the sampled-verify replay at
temperature 0.8, and the greedy replay with aux layers one deeper. ``--target`` takes a target
directory from another build (the target does not depend on the draft's settings, but the cache
key hashes the whole recipe). What it is for: choosing the draft's budget without paying for the
target again.
"""
import argparse
import json
import sys
import time

import torch
from transformers import LlamaForCausalLM

from eagle3scope.demo import models, recipe, replay, training

parser = argparse.ArgumentParser()
parser.add_argument("--target", help="a built target directory (default: this version's cached build)")
parser.add_argument("budgets", nargs="*", default=["60+120", "80+120", "100+120", "80+0"])
args = parser.parse_args()
torch.set_num_threads(1)
if args.target is None:
    root = models.cached()
    if root is None:
        sys.exit("build the demo models first (eagle3scope demo --prepare-only) or pass --target")
    args.target = str(root.target)
target = LlamaForCausalLM.from_pretrained(args.target, torch_dtype=torch.float32).eval()
for budget in args.budgets:
    unroll, _, first = budget.partition("+")
    torch.manual_seed(recipe.SEED)
    steps = (int(unroll), int(first or 0))
    t0 = time.monotonic()
    draft, draft_ids = training.train_draft(target, lambda m: None, {}, budget=steps)
    print(json.dumps({"draft_steps": list(steps), "lr": recipe.DRAFT_LR,
                      "ttt_loss_decay": recipe.TTT_LOSS_DECAY, "train_s": round(time.monotonic() - t0),
                      **replay.replay_stats(target, draft, draft_ids)}),
          flush=True)
