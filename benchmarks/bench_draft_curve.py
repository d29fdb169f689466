"""Replayed acceptance of the demo draft against its training steps, on the cached target (no rebuild).

Usage (engine venv, this checkout on PYTHONPATH, the demo models already built):
  PYTHONPATH=.:instrumentation:cpu_engine/src ~/.cache/eagle3scope/venv-sglang-0.5.23/bin/python \
      benchmarks/bench_draft_curve.py [MAX_STEPS=120]
Runs the build's own ``_train_draft`` with replays, the REPLAY_GOAL stop disabled, one thread, and
prints one JSON line per family every REPLAY_EVERY steps (replayed accept length, per position,
the greedy-path sampled estimate, aux one layer deeper) until MAX_STEPS. The draft's random start
differs from the build's (the build's target training consumed the RNG first): a curve, not the
cached draft. What it is for: choosing the draft's knobs without paying for the target again.
"""
import json
import sys
import time

import torch
from transformers import LlamaForCausalLM
from eagle3scope.demo import language, models

MAX_STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 120
torch.manual_seed(models.SEED)
torch.set_num_threads(1)
root = models.cached()
target = LlamaForCausalLM.from_pretrained(str(root.target), torch_dtype=torch.float32).eval()
replays = {f: models._replay_inputs(target, f) for f in language.families(models.TARGET["vocab_size"])}
models.REPLAY_GOAL = 99.0
orig = models._replay_acceptance
calls = {"n": 0, "t0": time.monotonic()}

class Stop(Exception):
    pass

def traced(draft, draft_ids, replay, shift=0):
    out = orig(draft, draft_ids, replay, shift)
    if shift == 0:
        calls["n"] += 1
        fam = next(f for f, r in replays.items() if r is replay)
        step = (calls["n"] + 1) // 2 * models.REPLAY_EVERY
        off = orig(draft, draft_ids, replay, 1)["accept_length"]
        print(json.dumps({"step": step, "family": fam, **out, "aux_offset": off,
                          "t": round(time.monotonic() - calls["t0"])}), flush=True)
        if step >= MAX_STEPS and fam == list(replays)[-1]:
            raise Stop
    return out

models._replay_acceptance = traced
try:
    models._train_draft(target, lambda m: print(m, flush=True), {}, replays)
except Stop:
    pass
