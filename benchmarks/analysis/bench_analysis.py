"""Analysis figures for BENCHMARKS.md: SessionState.ingest throughput and violations() latency.

Run: ``.venv/bin/python benchmarks/analysis/bench_analysis.py [--steps 200000] [--compare REV]``. Frames are
decoded beforehand (benchmarks/support/analysis_streams.py), so ``ingest`` alone is timed: one core, one
thread; "read + ingest" times ``decode_frame`` (validation into the typed records) and ``ingest``
from the frames' bytes, what ``check`` pays per frame. ``--compare REV`` runs the ingest figures of
git revision REV (exported to a temporary folder) and of this checkout in one run, alternating,
each in a fresh interpreter, and prints both. Goal: ingest >= 50k steps/s; violations() cheap
enough to call ~10x/s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

#: the checkout whose code is measured (``--compare`` points a child at an exported revision)
TREE = Path(os.environ.get("E3S_BENCH_TREE") or Path(__file__).resolve().parents[2])
sys.path[:0] = [str(TREE)]

from benchmarks.support.analysis_streams import H, session  # noqa: E402
from eagle3scope.analysis import SessionState, analyse  # noqa: E402
from eagle3scope.wire import decode_frame, encode_frame  # noqa: E402


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


def bench_read(steps: int, bs: int, repeats: int = 3) -> dict:
    """decode_frame and ingest from each frame's bytes (what check and replay pay per frame)."""
    frames = [encode_frame(f.kind, f.body, src=f.src, n=f.n, t=f.t) for f in session(steps, bs=bs, accept_p=0.7)]
    rates = []
    for _ in range(repeats):
        state = SessionState()
        ingest = state.ingest
        start = time.perf_counter()
        for raw in frames:
            ingest(decode_frame(raw))
        rates.append(steps / (time.perf_counter() - start))
    return {"bs": bs, "steps_per_s": max(rates)}


def ingest_figures(steps: int) -> list[str]:
    out = []
    for bs in (1, 4, 32):
        r = bench_ingest(steps // max(1, bs // 4), bs)
        out.append(f"ingest bs={bs:>2}: {r['steps_per_s']:>9,.0f} steps/s wall ({r['request_steps_per_s']:,.0f} "
                   f"request-steps/s), {r['cpu_steps_per_s']:,.0f} steps per CPU-second")
    for bs in (1, 4):
        r = bench_read(steps // 4, bs)
        out.append(f"read + ingest bs={bs:>2}: {r['steps_per_s']:>9,.0f} steps/s wall")
    return out


def _own_bench(tree: Path) -> list[str]:
    """A revision measured by its own copy of this script (older ones kept it at benchmarks/ and
    their stream helpers under tests/), with ``--ingest-only`` where that copy has it."""
    script = next(p for p in (tree / "benchmarks" / "analysis" / "bench_analysis.py",
                              tree / "benchmarks" / "bench_analysis.py") if p.exists())
    return [str(script), *(["--ingest-only"] if "--ingest-only" in script.read_text() else [])]


def compare(rev: str, steps: int, rounds: int = 2) -> None:
    """REV's figures and this checkout's, alternating in fresh interpreters, in one run."""
    import subprocess
    import tempfile

    root = Path(__file__).resolve().parents[2]
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(root), "archive", rev], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        sides = {f"{rev}": tmp, "this checkout": str(root)}
        for i in range(rounds):
            for name, tree in sides.items():
                env = {**os.environ, "E3S_BENCH_TREE": tree, "PYTHONPATH": f"{tree}:{tree}/instrumentation"}
                run = subprocess.run([sys.executable, *_own_bench(Path(tree)), "--steps", str(steps)], env=env,
                                     check=True, capture_output=True, text=True)
                print(f"-- {name} (round {i + 1})\n{run.stdout}", end="", flush=True)


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
    ap.add_argument("--compare", metavar="REV", help="also measure git revision REV, in the same run")
    ap.add_argument("--ingest-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.compare:
        compare(args.compare, args.steps)
        print(f"load average while measuring: {os.getloadavg()[0]:.1f}")
        return
    print("\n".join(ingest_figures(args.steps)))
    if args.ingest_only:
        return
    for n in (1, 8):
        r = bench_violations(n)
        print(f"violations() with {n} publisher(s) ({r['violations']} firing): median {r['median_ms']:.3f} ms, "
              f"p99 {r['p99_ms']:.3f} ms")
    r = bench_analyse(args.steps // 2)
    print(f"analyse (check) bs=4: {r['steps_per_s']:,.0f} steps/s wall, {r['cpu_steps_per_s']:,.0f} steps per CPU-second")
    print(f"load average while measuring: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
