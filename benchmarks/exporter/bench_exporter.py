"""Exporter cost: CPU at N steps/s, scrape time, and memory with 64 publishers.

1. CPU: publisher processes (the shim's real :class:`Publisher`, synthetic top-k 1 steps) send a
   fixed total rate for ``--seconds`` to a real ``eagle3scope exporter`` process, scraped once a
   second as Prometheus would; the exporter's utime+stime (/proc) from before the first step until
   it has counted every step sent (``eagle3scope_steps_total``), divided by the seconds of load.
2. Scrape time: wall time of ``GET /metrics`` (median and p95 of 50) with 1 and 64 publishers.
3. Memory: the exporter's resident set before any publisher and after 64 publishers sent
   ``--steps-each`` steps each (its state per publisher is bounded: a 512-request-step window).

Usage: python benchmarks/exporter/bench_exporter.py [--rates 1000 10000] [--seconds 10] [--bs 4] [--publishers 64]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from multiprocessing import Process
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT))  # the checkout: benchmarks.support

from benchmarks.support.synthetic import hello_body, load_body, step_body  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def rss_mb(pid: int) -> float:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE / 1e6


def publish(endpoint: str, src: str, rate: float, seconds: float, bs: int, start_at: float) -> None:
    """Child process: hello + load, then ``rate`` steps/s for ``seconds`` in 10 ms bursts."""
    from eagle3scope_shim.publisher import Publisher

    pub = Publisher(endpoint, src, queue_size=1 << 16, hwm=1 << 17, sticky_interval_s=0.5)
    pub.start()
    pub.set_sticky("hello", hello_body())
    pub.set_sticky("load", load_body())
    bodies = [step_body(i, bs=bs) for i in range(1000)]
    time.sleep(max(0.0, start_at - time.time()))
    start = time.monotonic()
    sent = 0
    while (now := time.monotonic()) - start < seconds:
        due = int((now - start) * rate)
        while sent < due:
            pub.submit("step", dict(bodies[sent % 1000], seq=sent, t_ns=time.time_ns()))
            sent += 1
        time.sleep(0.01)
    time.sleep(1.0)
    Path(tempfile.gettempdir(), f"e3s-bench-{os.getpid()}.sent").write_text(f"{sent} {pub.dropped}")
    pub.close(1.0)


class ExporterProcess:
    def __init__(self, endpoints: list[str]) -> None:
        args = [sys.executable, "-m", "eagle3scope", "exporter", "--listen", "127.0.0.1:0"]
        for ep in endpoints:
            args += ["--connect", ep]
        self.proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        self.url = self.proc.stderr.readline().split(" on ", 1)[1].strip()

    def scrape(self) -> tuple[float, str]:
        t = time.perf_counter()
        with urllib.request.urlopen(self.url, timeout=30) as r:
            text = r.read().decode()
        return time.perf_counter() - t, text

    def total(self, name: str) -> float:
        return sum(float(line.rsplit(" ", 1)[1]) for line in self.scrape()[1].splitlines() if line.startswith(name + "{"))

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(20)
        self.proc.stderr.close()


def endpoints_for(n: int) -> list[str]:
    base = tempfile.mkdtemp(prefix="e3s-bench-")
    return [f"ipc://{base}/p{i}" for i in range(n)]


def run_publishers(endpoints: list[str], rate_each: float, seconds: float, bs: int, delay: float) -> list[Process]:
    start_at = time.time() + delay
    procs = [Process(target=publish, args=(ep, f"bench:{i}:dp0", rate_each, seconds, bs, start_at))
             for i, ep in enumerate(endpoints)]
    for p in procs:
        p.start()
    return procs


def sent_counts(procs: list[Process]) -> tuple[int, int]:
    sent = dropped = 0
    for p in procs:
        p.join(60)
        f = Path(tempfile.gettempdir(), f"e3s-bench-{p.pid}.sent")
        s, d = f.read_text().split()
        f.unlink()
        sent, dropped = sent + int(s), dropped + int(d)
    return sent, dropped


def bench_cpu(rate: int, seconds: float, bs: int, publishers: int) -> dict:
    """CPU the exporter spends on ``seconds`` of load at ``rate`` steps/s (scraped once a second),
    counted from before the first step until it has counted every step sent: CPU seconds per second
    of load, which holds whether or not a busy machine let it keep pace in real time."""
    endpoints = endpoints_for(publishers)
    exporter = ExporterProcess(endpoints)
    try:
        procs = run_publishers(endpoints, rate / publishers, seconds, bs, delay=2.0)
        time.sleep(1.0)
        c0 = cpu_seconds(exporter.proc.pid)
        while any(p.is_alive() for p in procs):
            exporter.scrape()  # a Prometheus scraping every second
            time.sleep(1.0)
        sent, dropped = sent_counts(procs)
        counted, deadline = 0, time.monotonic() + 120
        while counted < sent and time.monotonic() < deadline:
            counted = int(exporter.total("eagle3scope_steps_total"))
            time.sleep(0.5)
        cpu = cpu_seconds(exporter.proc.pid) - c0
        return {"rate": rate, "cores": cpu / seconds, "us_per_step": cpu / max(counted, 1) * 1e6, "sent": sent,
                "dropped_by_shim": dropped, "counted": counted}
    finally:
        exporter.close()


def scrape_times(exporter: ExporterProcess, n: int = 50) -> dict:
    times = sorted(exporter.scrape()[0] * 1e3 for _ in range(n))
    _, text = exporter.scrape()
    samples = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    return {"median_ms": statistics.median(times), "p95_ms": times[int(0.95 * n) - 1], "samples": samples,
            "bytes": len(text)}


def bench_fleet(publishers: int, steps_each: int, bs: int, seconds: float) -> dict:
    """Resident memory and scrape time once ``publishers`` sent ``steps_each`` steps each and the
    exporter counted them all (frames still queued in its socket would count as memory otherwise)."""
    endpoints = endpoints_for(publishers)
    exporter = ExporterProcess(endpoints)
    try:
        time.sleep(1.0)
        rss_before = rss_mb(exporter.proc.pid)
        procs = run_publishers(endpoints, steps_each / seconds, seconds, bs, delay=2.0)
        sent, dropped = sent_counts(procs)
        counted, lost, deadline = 0, 0, time.monotonic() + 180
        while counted < sent and time.monotonic() < deadline:
            counted = int(exporter.total("eagle3scope_steps_total"))
            lost = int(exporter.total("eagle3scope_frames_lost_total"))
            time.sleep(1.0)
        return {"publishers": publishers, "rss_before_mb": rss_before, "rss_after_mb": rss_mb(exporter.proc.pid),
                "sent": sent, "counted": counted, "lost": lost, "dropped_by_shim": dropped,
                "scrape": scrape_times(exporter)}
    finally:
        exporter.close()


def in_process(publishers: int, steps_each: int, bs: int, n: int = 20) -> tuple[float, float]:
    """(CPU ms of one scrape: collect + exposition, Python heap MB of the fleet state) in-process,
    with ``publishers`` that sent ``steps_each`` steps each."""
    import gc
    import tracemalloc

    from prometheus_client import generate_latest

    from eagle3scope.exporter.service import Exporter
    from eagle3scope.wire import decode_frame
    from benchmarks.support.synthetic import session_frames

    with Exporter([endpoints_for(1)[0]], "127.0.0.1:0") as exporter:
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        for i in range(publishers):
            exporter.fleet.ingest(decode_frame(raw) for raw in session_frames(steps_each, src=f"bench:{i}:dp0", bs=bs))
        gc.collect()
        heap = (tracemalloc.get_traced_memory()[0] - base) / 1e6
        tracemalloc.stop()
        generate_latest(exporter.registry)
        t = time.process_time()
        for _ in range(n):
            generate_latest(exporter.registry)
        return (time.process_time() - t) / n * 1e3, heap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", type=int, nargs="*", default=[1000, 10000])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--bs", type=int, default=4)
    parser.add_argument("--cpu-publishers", type=int, default=4, help="Publishers sharing each CPU-test rate.")
    parser.add_argument("--publishers", type=int, default=64)
    parser.add_argument("--steps-each", type=int, default=2000)
    parser.add_argument("--fleet-seconds", type=float, default=20.0, help="Seconds over which the fleet sends.")
    args = parser.parse_args()
    print(f"load before: {os.getloadavg()[0]:.2f} (1 min)")
    for rate in args.rates:
        r = bench_cpu(rate, args.seconds, args.bs, args.cpu_publishers)
        print(f"CPU at {rate:,} steps/s (bs={args.bs}, {args.cpu_publishers} publishers, scraped 1/s): "
              f"{r['cores']:.2f} cores ({r['us_per_step']:.0f} us CPU per step); sent {r['sent']:,}, "
              f"counted {r['counted']:,}, dropped by shim {r['dropped_by_shim']}")
    for n in (1, args.publishers):
        r = bench_fleet(n, args.steps_each, args.bs, args.fleet_seconds)
        s = r["scrape"]
        scrape_ms, heap_mb = in_process(n, args.steps_each, args.bs)
        print(f"{n} publisher(s), {r['sent']:,} steps sent over {args.fleet_seconds:g} s, {r['counted']:,} counted, "
              f"{r['lost']:,} frames lost in transit: RSS {r['rss_before_mb']:.1f} MB -> {r['rss_after_mb']:.1f} MB "
              f"(state on the heap, in-process: {heap_mb:.1f} MB); scrape median {s['median_ms']:.1f} ms, "
              f"p95 {s['p95_ms']:.1f} ms, {s['samples']:,} samples, {s['bytes'] / 1e3:.0f} kB; "
              f"one scrape costs {scrape_ms:.1f} ms CPU (in-process)")
    print(f"load after: {os.getloadavg()[0]:.2f} (1 min)")


if __name__ == "__main__":
    main()
