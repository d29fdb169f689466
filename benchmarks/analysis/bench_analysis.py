"""Analysis figures for BENCHMARKS.md: SessionState.ingest throughput and violations() latency.

Run: ``.venv/bin/python benchmarks/analysis/bench_analysis.py [--steps 200000]``. Frames are decoded
beforehand (benchmarks/support/analysis_streams.py), so only ``ingest`` is timed: one core, one thread.
Goal: ingest >= 50k steps/s; violations() cheap enough to call ~10x/s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the checkout: benchmarks.support

from benchmarks.support.analysis_streams import H, session  # noqa: E402
from eagle3scope.analysis import SessionState, analyse  # noqa: E402


def bench_ingest(steps: int, bs: int, repeats: int = 3) -> dict:
    frames = session(steps, bs=bs, accept_p=0.7)
    n_steps = sum(f.kind == "step" for f in frames)
    rates, cpu_rates = [], []
    for _ in range(repeats):
        state = SessionState()
        ingest = state.ingest
        start, cpu = time.perf_counter(), time.process_time()
        for f in frames:
            ingest(f)
        rates.append(n_steps / (time.perf_counter() - start))
        cpu_rates.append(n_steps / (time.process_time() - cpu))
    return {"bs": bs, "steps_per_s": max(rates), "cpu_steps_per_s": max(cpu_rates), "request_steps_per_s": max(rates) * bs}


def bench_violations(publishers: int, steps: int = 5000, calls: int = 300) -> dict:
    state = SessionState()
    for i in range(publishers):  # one healthy and one broken publisher, alternating
        broken = i % 2 == 1
        kw = {"algorithm": "EAGLE", "accept_p": 0.0,
              "step_kw": {"feature_width": H, "fc": False, "capture": {"on": False, "layers": None}}} if broken else {}
        for f in session(steps, seed=i, **kw):
            f.src = f"p{i}"
            state.ingest(f)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        state.violations()
        times.append(time.perf_counter() - start)
    return {"publishers": publishers, "violations": len(state.violations()),
            "median_ms": statistics.median(times) * 1e3, "p99_ms": sorted(times)[int(calls * 0.99) - 1] * 1e3}


def bench_analyse(steps: int) -> dict:
    """check's loop: ingest plus a rule pass every 64 steps."""
    frames = session(steps, bs=4)
    start, cpu = time.perf_counter(), time.process_time()
    analyse(frames)
    return {"steps_per_s": steps / (time.perf_counter() - start), "cpu_steps_per_s": steps / (time.process_time() - cpu)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200_000)
    args = ap.parse_args()
    for bs in (1, 4, 32):
        r = bench_ingest(args.steps // max(1, bs // 4), bs)
        print(f"ingest bs={bs:>2}: {r['steps_per_s']:>9,.0f} steps/s wall ({r['request_steps_per_s']:,.0f} request-steps/s), "
              f"{r['cpu_steps_per_s']:,.0f} steps per CPU-second")
    for n in (1, 8):
        r = bench_violations(n)
        print(f"violations() with {n} publisher(s) ({r['violations']} firing): median {r['median_ms']:.3f} ms, "
              f"p99 {r['p99_ms']:.3f} ms")
    r = bench_analyse(args.steps // 2)
    print(f"analyse (check) bs=4: {r['steps_per_s']:,.0f} steps/s wall, {r['cpu_steps_per_s']:,.0f} steps per CPU-second")
    print(f"load average while measuring: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
