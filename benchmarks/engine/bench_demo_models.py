"""Demo models: build time and peak memory, then SGLang's own acceptance length per scenario.

Usage: .venv/bin/python benchmarks/engine/bench_demo_models.py [--family llama|deepseek] [--fresh] [--prompts 8]
[--tokens 64] [--scenario NAME ...]
--fresh builds into a new temporary cache (the build-time figure); otherwise the cached models
are used (built first if missing). Then each scenario gets its own real SGLang CPU server
(float32, num_steps 3, topk 1, 4 draft tokens) and one batch of demo prompts per prompt family
(code-like, chat-like) and temperature (0: greedy verify; 0.8: SGLang's sampling verify); printed
per scenario and temperature: mean ``meta_info.spec_accept_length`` overall and per prompt family,
the summed ``spec_correct_drafts_histogram`` (verify rounds that accepted 0..3 drafts), the
per-position rates it implies (each given the one before was accepted, as ``check`` reports
them), server start time and the wall time per speculative round (generate time over the most
verify rounds). The 1-minute load average is printed too: it explains the spread of the times.
"""

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from eagle3scope.demo import families, language, models
from eagle3scope.demo.server import SGLangServer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fresh", action="store_true")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--family", choices=families.FAMILIES, default="llama")
    parser.add_argument("--scenario", action="append")
    parser.add_argument("--temperature", type=float, action="append", help="default: 0 and 0.8")
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

    prompt_sets = {kind: models.demo_prompts(args.prompts, seed=7, family=kind) for kind in language.families()}
    work = Path(tempfile.mkdtemp(prefix="e3s-scenarios-"))
    for name in args.scenario or list(scenarios):
        spec = scenarios[name].prepare(paths, work)
        server = SGLangServer(spec.target_dir, spec.draft_dir, algorithm=spec.algorithm,
                              extra_args=spec.extra_args, log_path=work / f"{name}.log")
        with server:
            for temperature in args.temperature or (0.0, 0.8):
                row, every, wall, rounds = {"scenario": name, "temperature": temperature}, [], 0.0, 0
                for kind, prompts in prompt_sets.items():
                    t = time.monotonic()
                    out = server.generate(prompts, max_new_tokens=args.tokens, temperature=temperature)
                    wall += time.monotonic() - t
                    rounds += max(r["meta_info"]["spec_verify_ct"] for r in out)
                    row[kind] = round(statistics.mean(r["meta_info"]["spec_accept_length"] for r in out), 3)
                    every += out
                hist = [sum(col) for col in zip(*(r["meta_info"]["spec_correct_drafts_histogram"] for r in every))]
                at_least = [sum(hist[i:]) for i in range(len(hist))]
                row.update(
                    accept_length=round(statistics.mean(r["meta_info"]["spec_accept_length"] for r in every), 3),
                    per_position=[round(at_least[i] / at_least[i - 1], 3) if at_least[i - 1] else None
                                  for i in range(1, len(hist))],
                    correct_drafts_histogram=hist, start_s=round(server.startup_s, 1),
                    round_ms=round(1000 * wall / rounds, 1),
                    loadavg_1m=os.getloadavg()[0])
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
