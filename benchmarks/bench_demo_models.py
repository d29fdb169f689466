"""Demo models: build time and peak memory, then SGLang's own acceptance length per scenario.

Usage: .venv/bin/python benchmarks/bench_demo_models.py [--family llama|deepseek] [--fresh] [--prompts 8]
[--tokens 64] [--scenario NAME ...]
--fresh builds into a new temporary cache (the build-time figure); otherwise the cached models
are used (built first if missing). Then each scenario gets its own real SGLang CPU server
(float32, greedy, num_steps 3, topk 1, 4 draft tokens) and one batch of demo prompts; printed
per scenario: mean ``meta_info.spec_accept_length``, the summed ``spec_correct_drafts_histogram``
(how many verify rounds accepted 0..3 drafts), server start time and the wall time per speculative
round (the batch's generate time over its most verify rounds). The 1-minute load average
is printed too: on a shared machine it explains the spread of the times.
"""

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from eagle3scope.demo import families, models
from eagle3scope.demo.server import SGLangServer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fresh", action="store_true")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--family", choices=families.FAMILIES, default="llama")
    parser.add_argument("--scenario", action="append")
    args = parser.parse_args()
    scenarios = families.scenarios_of(args.family)

    cache = Path(tempfile.mkdtemp(prefix="e3s-bench-")) if args.fresh else None
    t0 = time.monotonic()
    paths = families.ensure_models(args.family, cache, progress=lambda m: print("  " + m, flush=True))
    stats = paths.stats()
    if hasattr(paths, "mla_stats"):  # the DeepseekV3 family's MLA draft, cached on its own
        stats["mla_draft"] = paths.mla_stats()
    print(json.dumps({"models": str(paths.root), "wall_s": round(time.monotonic() - t0, 1), **stats,
                      "loadavg_1m": os.getloadavg()[0]}), flush=True)

    prompts = models.demo_prompts(args.prompts, seed=7)
    work = Path(tempfile.mkdtemp(prefix="e3s-scenarios-"))
    for name in args.scenario or list(scenarios):
        spec = scenarios[name].prepare(paths, work)
        server = SGLangServer(spec.target_dir, spec.draft_dir, algorithm=spec.algorithm,
                              extra_args=spec.extra_args, log_path=work / f"{name}.log")
        with server:
            t = time.monotonic()
            out = server.generate(prompts, max_new_tokens=args.tokens)
            wall = time.monotonic() - t
        hist = [sum(col) for col in zip(*(r["meta_info"]["spec_correct_drafts_histogram"] for r in out))]
        print(json.dumps({
            "scenario": name,
            "accept_length": round(statistics.mean(r["meta_info"]["spec_accept_length"] for r in out), 3),
            "correct_drafts_histogram": hist,
            "start_s": round(server.startup_s, 1),
            "round_ms": round(1000 * wall / max(r["meta_info"]["spec_verify_ct"] for r in out), 1),
            "loadavg_1m": os.getloadavg()[0],
        }), flush=True)


if __name__ == "__main__":
    main()
