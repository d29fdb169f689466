"""Steps the shim's snapshot ring drops, by ring size and step rate: the real ``HostRing`` and
``Publisher`` driven as SGLang's scheduler drives them (a slot, a copy, the event recorded, the
step queued; the publisher waits on the event, builds the body and hands the slot back), with the
device modelled (benchmarks/support/device_events.py: each step's device work done 1 ms after its event
is recorded). No GPU: what is measured is whether the publisher is woken in time.

``before``: the ring does not wake the publisher, which then wakes only at 64 queued events or on
its 0.5 s timer (how the shim worked until the ring woke it). ``after``: the ring wakes it when half
its slots are in use, and at the first refused slot.

Usage: PYTHONPATH=.:instrumentation .venv/bin/python benchmarks/shim/bench_ring_rates.py [--seconds 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the checkout: benchmarks.support

from benchmarks.support.ring_rates import drops_at  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per cell and arm")
    parser.add_argument("--slots", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--rates", type=float, nargs="+", default=[100, 200])
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for slots in args.slots:
            for rate in args.rates:
                row = {"slots": slots, "steps_per_s": rate}
                for arm, wakes in (("before", False), ("after", True)):
                    taken, dropped = drops_at(slots, rate, args.seconds, Path(tmp) / f"{arm}{slots}-{rate:g}",
                                              ring_wakes=wakes)
                    row[f"{arm}_dropped_pct"] = round(100 * dropped / taken, 1)
                rows.append(row)
    print("| slots | steps/s | dropped before | dropped after |")
    print("|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['slots']} | {r['steps_per_s']:g} | {r['before_dropped_pct']} % | {r['after_dropped_pct']} % |")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
