"""Bounds figures for RELIABILITY.md: how big a SessionState gets on hostile streams, and how fast it ingests them.

Run: ``.venv/bin/python benchmarks/reliability/bench_state_bounds.py [--n 10000] [--budget-s 120]``.

Each stream is valid frame by frame (built and decoded through the wire codec, so the validator
ran) and hostile only in what it adds up to: a new ``src`` on every frame, or one publisher
sending a new seam, forward mode, hidden width, aux config or a higher draft id on every frame.
Ingest is timed without tracing (stopped after ``--budget-s``, the frames done are reported),
then run again under tracemalloc for the bytes the state keeps. The last line is the hot path on
an honest session, for comparison.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the checkout: benchmarks.support

from benchmarks.support.analysis_streams import H, Stream, healthy_load, hello, session, step  # noqa: E402
from eagle3scope.analysis import SessionState  # noqa: E402
from eagle3scope.wire import Frame, decode_frame, encode_frame  # noqa: E402

HEARTBEAT = {"steps": 1, "dropped": 0, "hook_failures": 0, "queued": 0}


def many_publishers(n: int, kind: str) -> list[Frame]:
    body = step(0, 1, [1]) if kind == "step" else HEARTBEAT
    return [decode_frame(encode_frame(kind, body, src=f"p{i}", n=0, t=1 + i)) for i in range(n)]


def one_publisher(n: int, what: str) -> list[Frame]:
    s = Stream()
    frames = [s.frame("hello", hello()), s.frame("load", healthy_load())]
    for i in range(n):
        if what == "seams":
            frames.append(s.frame("hook", {"seam": f"seam{i}", "status": "attached", "detail": None}))
        elif what == "configs":
            frames.append(s.frame("config", {"layers": [1, 3, 4], "captured": [2, 4, 5], "applied": True,
                                             "reason": "", "origin": "control", "request_id": i}))
        else:
            body = step(i, s.t, [1])
            if what == "modes":
                body["passes"] = [{"mode": f"mode{i}", "width": H, "fc": False, "n": 1}]
            elif what == "widths":
                body["passes"] = [{"mode": "decode", "width": H + 1 + i, "fc": False, "n": 1}]
            else:  # rising draft ids
                body["draft_ids"] = [[i, i, i]]
            frames.append(s.frame("step", body))
    return frames


def sizes(state: SessionState) -> dict:
    pubs = list(state.publishers.values())
    widths = [len(ps.widths) for pub in pubs for ps in pub.passes.values()]
    return {
        "publishers": len(pubs),
        "seams": max((len(p.hooks) for p in pubs), default=0),
        "modes": max((len(p.passes) for p in pubs), default=0),
        "widths": max(widths, default=0),
        "rises": max((len(p.draft_max_rises) for p in pubs), default=0),
        "segments": len(state.segments),
        "events": len(state.events),
    }


def ingest(frames: list[Frame], budget_s: float) -> tuple[SessionState, int, float]:
    state = SessionState()
    start = time.perf_counter()
    done = 0
    for frame in frames:
        state.ingest(frame)
        done += 1
        if done % 256 == 0 and time.perf_counter() - start > budget_s:
            break
    return state, done, time.perf_counter() - start


def retained_bytes(frames: list[Frame]) -> int:
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    state = SessionState()
    for frame in frames:
        state.ingest(frame)
    kept = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return kept


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10_000, help="hostile frames per one-publisher stream")
    ap.add_argument("--publishers", type=int, default=20_000, help="distinct src in the many-publisher streams")
    ap.add_argument("--budget-s", type=float, default=120.0, help="stop ingesting one stream after this long")
    args = ap.parse_args()
    streams = {f"{args.publishers:,} src, one step each": many_publishers(args.publishers, "step"),
               f"{args.publishers:,} src, one heartbeat each": many_publishers(args.publishers, "heartbeat")}
    for what in ("seams", "modes", "widths", "configs", "rising draft ids"):
        streams[f"{args.n:,} {what}"] = one_publisher(args.n, what)
    for name, frames in streams.items():
        state, done, elapsed = ingest(frames, args.budget_s)
        complete = done == len(frames)
        kept = f"{retained_bytes(frames) / 2**20:.1f} MiB kept" if complete else "not traced"
        print(f"{name}: {done:,}/{len(frames):,} frames in {elapsed:.2f} s ({done / elapsed:,.0f} frames/s), {kept}; "
              + ", ".join(f"{k} {v:,}" for k, v in sizes(state).items()))
    frames = session(20_000, bs=4)
    best = min(ingest(frames, float("inf"))[2] for _ in range(3))
    print(f"honest session, 20,000 steps bs=4: {20_000 / best:,.0f} steps/s")
    print(f"load average while measuring: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
