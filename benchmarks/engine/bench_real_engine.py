"""Real SGLang 0.5.23 on CPU: server start time and request/round times, EAGLE-3 vs plain decoding.

Usage: .venv/bin/python benchmarks/engine/bench_real_engine.py [--prompts 2] [--tokens 32] [--repeats 3]
Needs the engine venv (scripts/build-engine-env.sh). Generates the tiny random
target + random draft (eagle3scope/demo/tiny.py) into the cache, then for each
server (with the draft, without it) prints: start time (spawn -> /health_generate
answers), the first request, and the best warm request; for EAGLE-3 also the
time per speculative round (request time / spec_verify_ct), for plain decoding
the time per token step. float32, greedy, num_steps 3, topk 1, 4 draft tokens.
The 1-minute load average is printed too: on a shared machine it explains the spread.
"""

import argparse
import json
import os
import subprocess
import time

from eagle3scope.demo.server import SGLangServer, cache_dir, engine_python
from eagle3scope.demo.tiny import MODELS_DIRNAME


def timed_requests(server, prompts, tokens, repeats):
    times, outs = [], None
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        outs = server.generate(prompts, max_new_tokens=tokens, temperature=0)
        times.append(time.perf_counter() - t0)
    return times[0], min(times[1:]), outs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    python = engine_python()
    root = cache_dir() / "models" / MODELS_DIRNAME
    subprocess.run([str(python), "-m", "eagle3scope.demo.tiny", str(root)], check=True, capture_output=True)
    prompts = [f"bench prompt {i} kimo tuviro" for i in range(args.prompts)]
    for label, draft in (("eagle3", root / "draft-random"), ("plain", None)):
        with SGLangServer(root / "target", draft) as server:
            first, warm, outs = timed_requests(server, prompts, args.tokens, args.repeats)
        figures = {"server": label, "load_avg_1m": round(os.getloadavg()[0], 1),
                   "start_s": round(server.startup_s, 1),
                   "first_request_s": round(first, 3), "warm_request_s": round(warm, 3)}
        if draft is not None:
            rounds = max(o["meta_info"]["spec_verify_ct"] for o in outs)
            figures["spec_verify_ct"] = rounds
            figures["ms_per_round"] = round(1000 * warm / rounds, 1)
            figures["spec_accept_length"] = round(outs[0]["meta_info"]["spec_accept_length"], 2)
        else:
            figures["ms_per_token_step"] = round(1000 * warm / args.tokens, 1)
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
