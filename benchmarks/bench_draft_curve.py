"""The demo draft's replayed acceptance against its training budget, on the cached target (no rebuild).

Usage (engine venv, this checkout on PYTHONPATH, the demo models already built):
  PYTHONPATH=.:instrumentation:cpu_engine/src ~/.cache/eagle3scope/venv-sglang-0.5.23/bin/python \
      benchmarks/bench_draft_curve.py [STEPS ...]   (default: 40 60 80 120 300)
For each budget it trains the build's own draft (``models._train_draft``, one-cycle schedule over
that many steps, one thread) and prints one JSON line with ``models.replay_stats``: per prompt
family, the greedy replay (accept length, per position), the sampled-verify replay at temperature
0.8, and the greedy replay with aux layers one deeper. What it is for: choosing DRAFT_STEPS,
DRAFT_LR and TTT_LOSS_DECAY without paying for the target again.
"""
import json
import sys
import time

import torch
from transformers import LlamaForCausalLM

from eagle3scope.demo import models

torch.set_num_threads(1)
root = models.cached()
if root is None:
    sys.exit("build the demo models first: eagle3scope demo --prepare-only")
target = LlamaForCausalLM.from_pretrained(str(root.target), torch_dtype=torch.float32).eval()
for steps in [int(a) for a in sys.argv[1:]] or [40, 60, 80, 120, 300]:
    torch.manual_seed(models.SEED)
    models.DRAFT_STEPS = steps
    t0 = time.monotonic()
    draft, draft_ids = models._train_draft(target, lambda m: None, {})
    print(json.dumps({"draft_steps": steps, "lr": models.DRAFT_LR, "ttt_loss_decay": models.TTT_LOSS_DECAY,
                      "train_s": round(time.monotonic() - t0), **models.replay_stats(target, draft, draft_ids)}),
          flush=True)
