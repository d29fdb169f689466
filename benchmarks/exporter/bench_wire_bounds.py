"""Wire-bound figures (RELIABILITY.md): 256 publishers whose hellos each name 3,000 seams of 200 characters,
folded into the exporter's fleet and scraped once (series, /metrics size, scrape time, peak RSS).

``.venv/bin/python benchmarks/exporter/bench_wire_bounds.py [PUBLISHERS] [SEAMS]``; run with ``PYTHONPATH``
at an older checkout for the "before" figures.
"""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the checkout: benchmarks.support

from prometheus_client import CollectorRegistry, generate_latest  # noqa: E402

from benchmarks.support.analysis_streams import session  # noqa: E402
from eagle3scope.exporter.fleet import Fleet  # noqa: E402
from eagle3scope.exporter.metrics import FleetCollector  # noqa: E402
from eagle3scope.wire import Frame  # noqa: E402


def main(publishers: int = 256, n_seams: int = 3000) -> None:
    base = session(20, bs=1)
    seams = {f"seam-{i:05d}-" + "x" * 200: "attached" for i in range(n_seams)}
    fleet = Fleet(forget_after_s=None)
    started = time.perf_counter()
    for p in range(publishers):
        frames = [Frame(f.kind, f"h:{p}:dp0", f.n, f.t, dict(f.body)) for f in base]
        frames[0].body["seams"] = seams
        fleet.ingest(frames)
    ingest_s = time.perf_counter() - started
    registry = CollectorRegistry()
    registry.register(FleetCollector(fleet))
    started = time.perf_counter()
    text = generate_latest(registry)
    scrape_s = time.perf_counter() - started
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"publishers {publishers} seams {n_seams}: ingest {ingest_s:.2f} s, hook_status series "
          f"{text.count(b'eagle3scope_hook_status{'):,}, /metrics {len(text) / 1e6:.1f} MB, scrape {scrape_s:.2f} s, "
          f"peak RSS {rss:.0f} MiB")


if __name__ == "__main__":
    main(*map(int, sys.argv[1:]))
