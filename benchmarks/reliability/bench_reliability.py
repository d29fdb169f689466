"""Reliability figures for RELIABILITY.md: the hostile-input suite's counts per class, and memory bounds.

Run: ``.venv/bin/python benchmarks/reliability/bench_reliability.py`` (a few minutes on 2 cores).

It runs ``tests/hostile/test_hostile_*.py`` with ``EAGLE3SCOPE_RELIABILITY_OUT`` set, so every test
appends its tally (cases tried, crashes, hangs, tracebacks, silent losses, peak memory; see
``tests/support/hostile_support.py``), sums them per class and prints the table. It then measures the
transient memory of decoding the worst frame the default size bound lets through (1 MiB of
nested empty lists: the most Python objects per byte msgpack allows).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections import defaultdict
from pathlib import Path

import msgpack

REPO = Path(__file__).resolve().parents[2]
FIELDS = ("cases", "crashes", "hangs", "tracebacks", "silent_losses", "leaks")


def run_suite() -> tuple[dict, int, float, str]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "tallies.jsonl"
        env = {**os.environ, "EAGLE3SCOPE_RELIABILITY_OUT": str(out)}
        t0 = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               *sorted(str(p) for p in (REPO / "tests" / "hostile").glob("test_hostile_*.py"))],
                              cwd=REPO, env=env, capture_output=True, text=True)
        elapsed = time.monotonic() - t0
        rows = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    per_class: dict = defaultdict(lambda: {f: 0 for f in FIELDS} | {"peak_bytes": 0, "bound_bytes": None})
    for row in rows:
        agg = per_class[row["class"]]
        for f in FIELDS:
            agg[f] += row[f]
        agg["peak_bytes"] = max(agg["peak_bytes"], row["peak_bytes"])
        agg["bound_bytes"] = row["bound_bytes"] or agg["bound_bytes"]
    return dict(per_class), done.returncode, elapsed, done.stdout.strip().splitlines()[-1] if done.stdout else ""


def worst_frame_decode_peak() -> tuple[int, int]:
    """(frame bytes, traced peak bytes) for decoding 1 MiB of nested empty lists as a step body."""
    from eagle3scope.wire import FrameError, decode_frame
    from eagle3scope.wire.schema import DEFAULT_MAX_FRAME_BYTES

    per_list = 1 << 18  # msgpack's array length bound in decode_frame
    pairs = (DEFAULT_MAX_FRAME_BYTES - 4096) // 2  # [[]] packs to 2 bytes and makes 2 lists
    body = {"seq": 1, "bs": 0} | {f"junk{i}": [[[]]] * min(per_list, pairs - i * per_list)
                                   for i in range(-(-pairs // per_list))}
    raw = msgpack.packb({"v": [1, 0], "k": "step", "src": "x", "n": 0, "t": 0, "b": body})
    tracemalloc.start()
    try:
        decode_frame(raw, max_bytes=DEFAULT_MAX_FRAME_BYTES)
    except FrameError:
        pass
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return len(raw), peak


def main() -> None:
    load = os.getloadavg()
    per_class, code, elapsed, last = run_suite()
    print(f"hostile suite: exit {code}, {elapsed:.0f} s wall, load average {load[0]:.1f} at start; pytest: {last}\n")
    print("| class | cases tried | crashes | hangs | tracebacks | silent losses | leaks | peak memory (bound) |")
    print("|---|---|---|---|---|---|---|---|")
    for cls in sorted(per_class):
        agg = per_class[cls]
        bound = f" ({agg['bound_bytes'] / 2**20:.0f} MiB)" if agg["bound_bytes"] else ""
        peak = f"{agg['peak_bytes'] / 2**20:.1f} MiB{bound}" if agg["peak_bytes"] else "-"
        print(f"| {cls} | {agg['cases']} | {agg['crashes']} | {agg['hangs']} | {agg['tracebacks']} |"
              f" {agg['silent_losses']} | {agg['leaks']} | {peak} |")
    size, peak = worst_frame_decode_peak()
    print(f"\nworst frame at the default bound: {size / 2**20:.2f} MiB of nested lists -> {peak / 2**20:.0f} MiB"
          " traced while decoding (then refused and freed)")
    sys.exit(code)


if __name__ == "__main__":
    main()
