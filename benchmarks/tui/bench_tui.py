"""TUI cost: CPU of a real ``eagle3scope watch`` process while ingesting N steps/s, and frame time.

1. CPU: a publisher process (the shim's real :class:`Publisher`) sends synthetic steps at a fixed
   rate; ``eagle3scope watch`` runs in a 160x48 tmux pane (a real terminal); the TUI process's
   user+system CPU time is read from /proc over a window after a warm-up. The step count on its
   screen at the end is compared with the steps sent (frames lost by the viewer show there).
2. Frame time: in-process, headless, a session state holding ``--state-steps`` steps; one frame is
   what the live app does per tick at 1,000 steps/s: 125 new steps ingested (not timed), the
   refresh (copy under the lock + panel updates) and Textual's render of the changed regions,
   timed over 30 frames each on the overview and draft panels at 80x24 and 160x48, in wall-clock
   and in this process's CPU time (the figure a loaded machine distorts least).

Usage: python benchmarks/tui/bench_tui.py [--rates 1000 10000] [--seconds 10] [--bs 1]
Goal: under half a core at 1,000 steps/s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
os.environ.setdefault("EAGLE3SCOPE_TRUSTED_NETWORK", "1")  # loopback TCP figures of a trusted machine, as before CURVE
sys.path.append(str(ROOT))  # the checkout: benchmarks.support

from benchmarks.support.synthetic import hello_body, load_body, session_frames, step_body  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def publish(endpoint: str, rate: int, seconds: float, bs: int) -> None:
    """Child process: send ``rate`` steps/s for ``seconds`` in 10 ms bursts, then report."""
    from eagle3scope_shim.publisher import Publisher

    pub = Publisher(endpoint, "bench0", queue_size=1 << 16, hwm=1 << 17, sticky_interval_s=0.5)
    pub.start()
    pub.set_sticky("hello", hello_body())
    pub.set_sticky("load", load_body())
    time.sleep(1.5)  # let the viewer connect and learn hello
    bodies = [step_body(i, bs=bs) for i in range(1000)]
    start = time.monotonic()
    sent = 0
    while (now := time.monotonic()) - start < seconds:
        due = int((now - start) * rate)
        while sent < due:
            body = dict(bodies[sent % 1000], seq=sent, t_ns=time.time_ns())
            pub.submit("step", body)
            sent += 1
        time.sleep(0.01)
    time.sleep(0.5)
    print(f"SENT {sent} DROPPED {pub.dropped}", flush=True)
    pub.close(1.0)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def bench_cpu(rate: int, seconds: float, bs: int, warmup: float = 3.0) -> dict:
    port = 20000 + os.getpid() % 20000
    endpoint = f"tcp://127.0.0.1:{port}"
    socket = f"e3s-bench-{os.getpid()}"
    cfg = tempfile.mkdtemp()
    watch = Path(sys.executable).parent / "eagle3scope"
    tmux = ["tmux", "-L", socket]
    publisher = subprocess.Popen(
        [sys.executable, __file__, "--publish", endpoint, str(rate), str(warmup + seconds + 1), str(bs)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        subprocess.run([*tmux, "new-session", "-d", "-s", "bench", "-x", "160", "-y", "48",
                        f"env XDG_CONFIG_HOME={cfg} TERM=xterm-256color {watch} watch --connect {endpoint} --theme dark"], check=True)
        pid = int(subprocess.run([*tmux, "display", "-p", "-t", "bench", "#{pane_pid}"], capture_output=True, text=True, check=True).stdout)
        time.sleep(1.5 + warmup)
        c0, t0 = cpu_seconds(pid), time.monotonic()
        time.sleep(seconds)
        c1, t1 = cpu_seconds(pid), time.monotonic()
        out, _ = publisher.communicate(timeout=60)
        time.sleep(1.0)
        screen = subprocess.run([*tmux, "capture-pane", "-p", "-t", "bench"], capture_output=True, text=True).stdout
        if os.environ.get("BENCH_TUI_SCREEN"):
            print(screen)
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
        if publisher.poll() is None:
            publisher.kill()
    sent = int(re.search(r"SENT (\d+)", out).group(1))
    shown = re.search(r"│ ([\d,]+) steps  ", screen)
    refresh = re.search(r"refresh ([\d.]+) ms", screen)
    return {
        "rate": rate,
        "cores": (c1 - c0) / (t1 - t0),
        "sent": sent,
        "shown": int(shown.group(1).replace(",", "")) if shown else None,
        "refresh_ms": float(refresh.group(1)) if refresh else None,
    }


async def frame_time(size: tuple[int, int], state_steps: int, per_frame: int = 125, frames: int = 60) -> dict:
    """One frame as the live app makes it at 1,000 steps/s and 8 Hz: ``per_frame`` new steps
    ingested, an (unforced) refresh, then Textual's render of what changed."""
    from eagle3scope.tui.app import ScopeApp
    from eagle3scope.tui.feed import Feed
    from eagle3scope.wire import decode_frame

    class Preloaded(Feed):
        """A feed the benchmark fills by hand (no thread): only drawing is timed."""

        label = "bench"

        def run(self) -> None:
            pass

    stream = [decode_frame(raw) for raw in session_frames(state_steps + per_frame * frames, bs=4)]
    feed = Preloaded()
    feed.ingest(stream[:state_steps])
    app = ScopeApp(feed, theme="dark", remember=False)
    times, cpu = [], []
    pos = state_steps
    async with app.run_test(size=size) as pilot:
        for panel in ("overview", "draft"):
            app.action_panel(panel)
            await pilot.pause()
            for _ in range(frames // 2):
                feed.ingest(stream[pos : pos + per_frame])
                pos += per_frame
                start, start_cpu = time.perf_counter(), time.process_time()
                app.refresh_view()
                app.screen._compositor.render_update()
                times.append((time.perf_counter() - start) * 1000)
                cpu.append((time.process_time() - start_cpu) * 1000)
                await pilot.pause()
    p95 = int(0.95 * len(times)) - 1
    return {"size": f"{size[0]}x{size[1]}", "median_ms": statistics.median(times), "p95_ms": sorted(times)[p95],
            "cpu_median_ms": statistics.median(cpu), "cpu_p95_ms": sorted(cpu)[p95]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--bs", type=int, default=1)
    parser.add_argument("--state-steps", type=int, default=20000)
    parser.add_argument("--publish", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.publish:
        endpoint, rate, seconds, bs = args.publish
        publish(endpoint, int(rate), float(seconds), int(bs))
        return
    os.environ.setdefault("XDG_CONFIG_HOME", tempfile.mkdtemp())
    if shutil.which("tmux") is None:
        print("tmux not installed: skipping the CPU part")
    else:
        print(f"CPU of the watch process (tmux 160x48, bs={args.bs}, {args.seconds:.0f} s window):")
        for rate in args.rates:
            r = bench_cpu(rate, args.seconds, args.bs)
            print(f"  {rate:>6} steps/s: {r['cores']:.2f} cores   sent {r['sent']:,}  on screen {r['shown']}  "
                  f"refresh (copy+update) {r['refresh_ms']} ms")
    print(f"Frame time (headless, state of {args.state_steps:,} steps bs=4, +125 steps per frame, overview+draft):")
    for size in ((80, 24), (160, 48)):
        r = asyncio.run(frame_time(size, args.state_steps))
        print(f"  {r['size']:>7}: median {r['median_ms']:.1f} ms  p95 {r['p95_ms']:.1f} ms  "
              f"(CPU time: median {r['cpu_median_ms']:.1f} ms  p95 {r['cpu_p95_ms']:.1f} ms)")


if __name__ == "__main__":
    main()
