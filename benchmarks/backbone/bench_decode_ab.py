"""Decode cost per step frame of the checkout at TREE: ``decode_frame`` over 2,000 step frames at bs=1
and bs=64, best of 7 runs, CPU time. Run it on a ``git archive`` of an older revision and on this
checkout, alternately, to compare the two in one sitting (BENCHMARKS.md, "Backbone").

Run: ``.venv/bin/python benchmarks/backbone/bench_decode_ab.py TREE`` (TREE: a checkout's root).
The frames come from TREE's own synthetic bodies (``benchmarks/support/synthetic.py``, or where an
older checkout kept them), loaded by path so each tree is measured with its own code.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

FRAMES, RUNS = 2000, 7


def _synthetic(tree: Path):
    path = next(p for p in (tree / "benchmarks/support/synthetic.py", tree / "tests/support/synthetic.py") if p.exists())
    spec = importlib.util.spec_from_file_location("synthetic", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    tree = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2]).resolve()
    sys.path[:0] = [str(tree)]
    synthetic = _synthetic(tree)
    from eagle3scope.wire import decode_frame, encode_frame

    for bs in (1, 64):
        raws = [encode_frame("step", synthetic.step_body(i, bs=bs), src="p", n=i, t=i) for i in range(FRAMES)]
        best = float("inf")
        for _ in range(RUNS):
            start = time.process_time()
            for raw in raws:
                decode_frame(raw)
            best = min(best, (time.process_time() - start) / FRAMES)
        print(f"{tree.name} bs={bs}: {best * 1e6:.1f} µs/step")


if __name__ == "__main__":
    main()
