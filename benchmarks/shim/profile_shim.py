"""Where the shim's cost lands in the scheduler process: py-spy samples of every thread, and the
shim's share of them, with and without the shim, under a steady sequential workload.

Usage: .venv/bin/pip install py-spy; .venv/bin/python benchmarks/shim/profile_shim.py on|off [--seconds 40]
Starts the real CPU server (tiny random target + random draft), sends 64-token requests one after
another, records the scheduler process with ``py-spy record --threads --nonblocking --rate 100
--format raw``, and prints per-thread sample counts, the shim's own samples (a sample whose
deepest eagle3scope frame is not a hook calling SGLang's original function) grouped by the shim
function and what it called, and the per-thread-role CPU seconds from /proc over the same window.
py-spy samples wall time of running threads: on a loaded box a thread waiting for a core or the
GIL is counted where it stands, so the shares say where waiting happens too.
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the checkout: benchmarks.support

from benchmarks.support import procstat  # noqa: E402


def attribute(raw: str, calls_original: tuple[str, ...]) -> dict:
    """Per-thread samples and the shim's own, from py-spy's raw (collapsed) output."""
    total, shim, where = collections.Counter(), collections.Counter(), collections.Counter()
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        frames, n = stack.split(";"), int(count)
        thread = frames[0].split(": ")[-1]
        total[thread] += n
        deepest = [i for i, f in enumerate(frames) if "eagle3scope" in f]
        if not deepest or frames[deepest[-1]].endswith(calls_original):
            continue
        i = deepest[-1]
        shim[thread] += n
        callee = frames[i + 1].split(" (")[0] if i + 1 < len(frames) else ""
        where[f"{thread}: {frames[i].split(' (')[0]} -> {callee}"] += n
    return {"samples": dict(total), "shim_samples": dict(shim),
            "shim_share": {t: round(shim[t] / total[t], 4) for t in total},
            "shim_top": dict(where.most_common(12))}


def _original_call_lines() -> tuple[str, ...]:
    """``guard.py:LINE)`` of each place the fail-closed wrapper calls SGLang's original."""
    source = Path(__file__).resolve().parents[2] / "instrumentation" / "eagle3scope_shim" / "guard.py"
    return tuple(f"guard.py:{n})" for n, text in enumerate(source.read_text().splitlines(), 1)
                 if "original(*args, **kwargs)" in text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("label", choices=("on", "off"))
    parser.add_argument("--seconds", type=int, default=40)
    args = parser.parse_args()
    from eagle3scope.demo.server import SGLangServer, cache_dir
    from eagle3scope.demo.tiny import MODELS_DIRNAME
    from eagle3scope.live.subscriber import Subscriber
    from eagle3scope.wire.endpoints import fresh_ipc_endpoint

    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    root = cache_dir() / "models" / MODELS_DIRNAME
    endpoint = fresh_ipc_endpoint()
    env = {"EAGLE3SCOPE_ENDPOINT": endpoint} if args.label == "on" else {}
    out = Path(tempfile.mkdtemp(prefix="e3s-profile-")) / "raw.txt"
    with Subscriber([endpoint]) as sub, SGLangServer(root / "target", root / "draft-random", env=env) as server:
        server.post("/generate", {"text": "warm up", "sampling_params": {"max_new_tokens": 8, "temperature": 0}})
        scheduler = next(pid for pid, p in procstat.snapshot(server.proc.pid).items() if p["name"] == "sglang::scheduler")
        stop = threading.Event()

        def workload():
            i = 0
            while not stop.is_set():
                server.post("/generate", {"text": f"profile prompt {i}", "sampling_params": {
                    "max_new_tokens": 64, "temperature": 0, "ignore_eos": True}})
                i += 1

        load = threading.Thread(target=workload)
        load.start()
        time.sleep(2)
        before = procstat.snapshot(server.proc.pid)
        subprocess.run([spy, "record", "--pid", str(scheduler), "--duration", str(args.seconds), "--rate", "100",
                        "--threads", "--nonblocking", "--format", "raw", "--output", str(out)],
                       check=True, capture_output=True)
        spent = procstat.delta(before, procstat.snapshot(server.proc.pid))
        stop.set()
        load.join()
        frames = sum(1 for f in sub.poll(timeout_ms=500) if f.kind == "step")
    report = attribute(out.read_text(), _original_call_lines())
    print(json.dumps({"label": args.label, **report, "scheduler_thread_cpu_s": spent["thread_cpu_s"].get("sglang::scheduler"),
                      "step_frames": frames}, indent=1))


if __name__ == "__main__":
    main()
