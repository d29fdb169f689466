"""What the TUI's advisor costs the viewer (BENCHMARKS.md "Analysis" and "TUI"): the round log's
append per decode step and its memory, and the advice's own cost per refresh.

    .venv/bin/python benchmarks/analysis/bench_advisor_cost.py            # the figures of this checkout
    .venv/bin/python benchmarks/analysis/bench_advisor_cost.py --tree DIR # ingest only, eagle3scope from DIR
                                                                 # (e.g. a `git archive` of main)

``--tree`` imports the package from another tree (the editable install's finder is taken off
``sys.meta_path`` first), so ingest before and after a change can be run alternately on one VM.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _use_tree(tree: str) -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in getattr(f, "__module__", "")
                        and "editable" not in type(f).__module__]
    sys.path.insert(0, tree)


def ingest(steps: int) -> str:
    from bench_analysis import bench_analyse, bench_ingest

    parts = []
    for bs in (1, 4):
        r = bench_ingest(steps, bs)
        parts.append(f"ingest bs={bs} {r['cpu_steps_per_s']:,.0f}")
    parts.append(f"analyse bs=4 {bench_analyse(steps // 2)['cpu_steps_per_s']:,.0f}")
    return " | ".join(parts) + " steps per CPU-second"


def held_mb(bs: int, steps: int = 6000) -> float:
    """What one publisher's state holds after ``steps`` decode steps, frames decoded one by one."""
    import tracemalloc

    from benchmarks.support.analysis_streams import session
    from eagle3scope.analysis import SessionState
    from eagle3scope.wire import decode_frame, encode_frame

    frames = [encode_frame(f.kind, f.body, src=f.src, n=f.n, t=f.t) for f in session(steps, bs=bs, accept_p=0.7)]
    gc.collect()
    tracemalloc.start()
    state = SessionState()
    for raw in frames:
        state.ingest(decode_frame(raw))
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] / 1e6
    tracemalloc.stop()
    return held


def advisor_costs() -> list[str]:
    from collections import deque

    from benchmarks.support.analysis_streams import session
    from eagle3scope.analysis import analyse, views
    from eagle3scope.analysis.advisor import RoundLog
    from eagle3scope.analysis.state import ADVISOR_ROUNDS
    from eagle3scope.wire import decode_frame
    from benchmarks.support.advisor_rounds import chain_frames

    out = []
    for bs in (1, 4):
        bodies = [f.body for f in session(20000, bs=bs, accept_p=0.7) if f.kind == "step"]
        best = float("inf")
        for _ in range(5):
            add = RoundLog(rounds=deque(maxlen=ADVISOR_ROUNDS)).add_step
            cpu = time.process_time()
            for body in bodies:
                add(body)
            best = min(best, (time.process_time() - cpu) / len(bodies) * 1e6)
        out.append(f"RoundLog.add_step bs={bs}: {best:.2f} us per decode step (CPU, best of 5)")
    state = analyse(decode_frame(f) for f in chain_frames(3000))
    for name, fn in (("advisor_logs (under the lock)", lambda: views.advisor_logs(state)),
                     (f"advice_rows (outside it, bootstrap {views.TUI_BOOTSTRAP})",
                      lambda: views.advice_rows(views.advisor_logs(state)))):
        times = []
        for _ in range(7):
            cpu = time.process_time()
            fn()
            times.append((time.process_time() - cpu) * 1e3)
        out.append(f"{name}: best {min(times):.2f} ms, median {statistics.median(times):.2f} ms CPU "
                   f"({ADVISOR_ROUNDS} rounds, bs 1..8)")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", default=None, help="Import eagle3scope from this tree; ingest figures only.")
    parser.add_argument("--steps", type=int, default=40000)
    args = parser.parse_args()
    if args.tree:
        _use_tree(args.tree)
    sys.path.append(str(HERE.parents[1]))  # the checkout: benchmarks.support
    import eagle3scope

    print(f"{Path(eagle3scope.__file__).parent.parent}: {ingest(args.steps)}")
    if not args.tree:
        for bs in (1, 4):
            print(f"one publisher's state after 6,000 steps, bs={bs}: {held_mb(bs):.2f} MB")
        for line in advisor_costs():
            print(line)
    print(f"load average: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
