"""The shim's GPU checks, one prepared run on a lent CUDA machine (``benchmarks/device/device_check.sh``).

Each check runs in its own child process (a CUDA context once made cannot be undone, and a broken
capture must not spoil the next check) and reports rows of figures; the parent prints one table
and writes every row to ``OUT/device_check.json``. Without a CUDA device (or without PyTorch) it
prints "no CUDA device: skipped" and exits 0, which the CPU test suite checks.

  A  a publisher-like thread's event sync on GPU 1, without and with the device fix (the thread
     adopts the scheduler's device first): GPU 0 memory it adds. Needs two GPUs; skipped with one.
  B  a global-mode graph capture while a publisher-like thread queries and syncs an event: failed
     captures without and with the shim's own capture gate (``ring.CAPTURE_GATE``: the capturing
     thread holds it, as the shim's capture seam does; the publisher-like thread makes its event
     calls inside ``HostRing.device_work``, as the shim's publisher does).
  C  bytes freed by a ``set_embed``-style swap (SGLang deletes the draft's embedding, shares the
     target's, empties the cache) while an observer holds the draft's parameters: strong references
     (the negative control), weak references, and the shim's own ``LoadWatch`` of this checkout.
  D  stream order of the ring's non-blocking D2H copies (the shim's ``snap`` into a ``HostRing``
     slot, its event recorded after the copy): the value read after the slot's event, and a
     negative control whose event is recorded on another stream.
  E  the hook path under ``torch.cuda.set_sync_debug_mode("error")`` (``bench_shim.py
     --hook-path-only --device cuda``; any sync raises) and on this host's CPU.
  F  device against host phase times of a graph-replayed toy round (draft, verify, extend graphs
     replayed with no sync between them, as under the overlap loop), timed by the shim's own ring
     marks; and the host cost per round of those marks (six ``ring.mark`` calls) and of reading them
     on the publisher thread (``ring.device_ms``).

    python3 benchmarks/device/device_check.py [--out DIR] [--checks A,B,...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from contextlib import nullcontext
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECKS = ("A", "B", "C", "D", "E", "F")
#: seconds a check's child may run; all of them together get --budget-s (device_check.sh: the whole
#: run, recapture check included, stays under 8 minutes)
CHILD_TIMEOUT_S = {"A": 60, "B": 90, "C": 60, "D": 60, "E": 200, "F": 90}
SKIPPED = "no CUDA device: skipped"


def row(check: str, figure: str, value, expected: str = "", verdict: str = "") -> dict:
    return {"check": check, "figure": figure, "value": value, "expected": expected, "verdict": verdict}


def cuda_devices() -> int:
    """CUDA devices PyTorch sees here (0 without PyTorch); makes no context."""
    try:
        import torch
    except Exception:
        return 0
    try:
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:
        return 0


# -- A: a new thread's event sync and GPU 0 ----------------------------------------------------
def used_mib(index: int) -> float | None:
    """Memory in use on GPU ``index`` (NVML, else nvidia-smi), whoever uses it."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(index)).used / (1 << 20)
    except Exception:
        pass
    try:
        out = subprocess.run(["nvidia-smi", "-i", str(index), "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20).stdout
        return float(out.strip().splitlines()[0])
    except Exception:
        return None


def own_context_on(index: int) -> bool | None:
    """Whether NVML lists this process on GPU ``index`` (None where it cannot tell: no NVML, or a
    PID namespace that hides the host's PIDs)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(index))
    except Exception:
        return None
    return any(p.pid == os.getpid() for p in procs)


def check_a(variant: str) -> list[dict]:
    import torch

    if torch.cuda.device_count() < 2:
        return [row("A", "new thread's event sync, contexts per GPU", "skipped", "needs two GPUs",
                    f"skipped: {torch.cuda.device_count()} GPU")]
    fix = variant == "fix"
    torch.cuda.set_device(1)  # the scheduler of a rank on GPU 1
    keep = torch.ones(1 << 20, device="cuda:1")
    torch.cuda.synchronize(1)
    before, listed_before = used_mib(0), own_context_on(0)
    event = torch.cuda.Event()
    event.record()
    errors = []

    def publisher():
        try:
            if fix:  # the device fix: adopt the scheduler's device before the first event call
                torch.cuda.set_device(1)
            event.synchronize()
            event.query()
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}"[:120])

    thread = threading.Thread(target=publisher)
    thread.start()
    thread.join()
    time.sleep(1.0)  # let the driver's accounting catch up
    after, listed_after = used_mib(0), own_context_on(0)
    added = None if before is None or after is None else round(after - before, 1)
    label = "with the device fix" if fix else "without the fix"
    verdict = "" if added is None else ("context on GPU 0" if added > 100 else "no context on GPU 0")
    del keep
    return [row("A", f"GPU 0 MiB added by a GPU-1 publisher thread's event sync, {label}", added,
                "0 with the fix; 300-600 without if the finding holds", verdict + (f"; {errors[0]}" if errors else "")),
            row("A", f"this process listed on GPU 0 by NVML before / after the thread, {label}",
                f"{listed_before} / {listed_after}", "False / False with the fix", "None: NVML cannot tell here")]


# -- B: a global-mode capture while a publisher-like thread touches events ----------------------
def check_b(variant: str, tries: int = 10, depth: int = 300) -> list[dict]:
    import torch

    sys.path[:0] = [str(ROOT / "instrumentation"), str(ROOT)]
    from eagle3scope_shim import ring

    gated = variant == "gated"
    shim_ring = ring.ring_for("cuda", 64)  # its device_work(): the scheduler's device, then the gate
    x = torch.randn(512, 512, device="cuda")
    w = torch.randn(512, 512, device="cuda") / 32
    event = torch.cuda.Event()
    event.record()
    torch.cuda.synchronize()

    def chain(v):
        for _ in range(depth):
            v = torch.tanh(v @ w)
        return v

    side = torch.cuda.Stream()  # warm up off the default stream, as PyTorch asks before a capture
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            chain(x)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    stop, calls, thread_errors = threading.Event(), [0], []

    def touch():
        event.query()
        event.synchronize()

    def publisher():
        while not stop.is_set():
            try:
                if gated:
                    with shim_ring.device_work():
                        touch()
                else:
                    touch()
                calls[0] += 1
            except Exception as exc:
                thread_errors.append(f"{type(exc).__name__}: {exc}"[:120])
            time.sleep(0)

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # interleave the two threads finely, as a busy server would
    thread = threading.Thread(target=publisher, daemon=True)
    thread.start()
    failures, first = 0, ""
    for _ in range(tries):
        graph = torch.cuda.CUDAGraph()
        try:
            with ring.CAPTURE_GATE if gated else nullcontext():
                with torch.cuda.graph(graph, capture_error_mode="global"):
                    chain(x)
            graph.replay()
            torch.cuda.synchronize()
        except Exception as exc:
            failures += 1
            first = first or f"{type(exc).__name__}: {exc}"[:160]
            try:
                torch.cuda.synchronize()
            except Exception:
                pass
    stop.set()
    thread.join(timeout=10)
    sys.setswitchinterval(switch)
    label = "with the stand-in capture gate" if gated else "without a gate"
    expected = "0 with the gate; > 0 without if the finding holds"
    return [row("B", f"failed global-mode captures of {depth} matmuls, publisher thread syncing, {label}",
                f"{failures}/{tries}", expected, first),
            row("B", f"publisher-thread event calls made / raised, {label}", f"{calls[0]} / {len(thread_errors)}",
                "calls > 0 (the thread ran)", thread_errors[0] if thread_errors else "")]


# -- C: bytes freed after a set_embed-style swap -------------------------------------------------
def default_weight_loader(param, loaded_weight):
    """What LoadWatch looks up beside a model's ``load_weights`` (SGLang's name)."""
    param.data.copy_(loaded_weight)


def _toy_draft(torch, vocab: int, hidden: int):
    class Inner(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = torch.nn.Embedding(vocab, hidden, device="cuda", dtype=torch.bfloat16)

    class ToyDraft(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = Inner()

        def load_weights(self, weights):
            for _ in weights:
                pass

    return ToyDraft()


def check_c(variant: str, vocab: int = 128256, hidden: int = 4096) -> list[dict]:
    import weakref

    import torch

    target = torch.nn.Embedding(vocab, hidden, device="cuda", dtype=torch.bfloat16)
    draft = _toy_draft(torch, vocab, hidden)
    if variant == "strong":
        held = dict(draft.named_parameters())  # the negative control: what a strong observer keeps
    elif variant == "weak":
        held = {name: weakref.ref(p) for name, p in draft.named_parameters()}
    else:  # the shim's own LoadWatch, as this checkout builds it
        sys.path[:0] = [str(ROOT / "instrumentation"), str(ROOT)]
        from eagle3scope_shim.loadreport import LoadWatch

        held = LoadWatch(draft)
        held.finish()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    del draft.model.embed_tokens.weight  # SGLang's set_embed (models/llama.py 0.5.23)
    draft.model.embed_tokens.weight = target.weight
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    freed = before - torch.cuda.memory_allocated()
    size = vocab * hidden * 2
    label = {"strong": "an observer holding strong references (control)", "weak": "an observer holding weak references",
             "loadwatch": "the shim's LoadWatch (this checkout)"}[variant]
    expected = "about 0 (kept alive)" if variant == "strong" else f"{size / 1e9:.2f} GB"
    verdict = "freed" if freed >= 0.99 * size else "kept alive" if freed < 0.01 * size else "partly freed"
    del held
    return [row("C", f"GB freed by a set_embed swap of a {vocab}x{hidden} bf16 embedding, {label}",
                round(freed / 1e9, 3), expected, verdict)]


# -- D: stream order of the ring's copies ---------------------------------------------------------
def check_d(trials: int = 20, spin_cycles: int = 50_000_000) -> list[dict]:
    import types

    import torch

    sys.path[:0] = [str(ROOT / "instrumentation"), str(ROOT)]
    from eagle3scope_shim.ring import SNAPSHOTS, HostRing, snap

    SNAPSHOTS.start("cuda", 1024)  # as the scheduler's start does
    value = 7
    seen, stale = 0, 0
    side = torch.cuda.Stream()
    for control in (False, True):
        for _ in range(trials):
            source = torch.zeros(1024, dtype=torch.int64, device="cuda")
            torch.cuda.synchronize()
            torch.cuda._sleep(spin_cycles)  # the step's work is still running when the copy is queued
            source.fill_(value)
            step = types.SimpleNamespace(dropped=False, slot=None)
            view = snap(step, "ids", source)
            if control:  # an event recorded on another stream says nothing of the copy
                done = torch.cuda.Event()
                done.record(side)
                done.synchronize()
            else:
                HostRing.record(step.slot)  # as the step's post: after the step's copies, on its stream
                step.slot.event.synchronize()
            got = int(view[0])
            if control:
                stale += got != value
            else:
                seen += got == value
            torch.cuda.synchronize()
            HostRing.release(step.slot)
    return [row("D", "ring copies read after the slot's event that hold the copied value", f"{seen}/{trials}",
                f"{trials}/{trials}", "ordered" if seen == trials else "UNORDERED"),
            row("D", "negative control: reads after an event on another stream that were stale", f"{stale}/{trials}",
                "> 0 (shows the check can fail)", "control bites" if stale else "control did not bite (inconclusive)")]


# -- E: the hook path with no sync ------------------------------------------------------------------
def check_e(out: Path | None) -> list[dict]:
    rows = []
    for device in ("cuda", "cpu"):
        cmd = [sys.executable, str(ROOT / "benchmarks" / "shim" / "bench_shim.py"), "--hook-path-only", "--steps", "4000",
               "--device", device]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=90, cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": f"{ROOT / 'instrumentation'}:{ROOT}:{os.environ.get('PYTHONPATH', '')}"})
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
            verdict = "a sync raised" if "synchroniz" in tail[0].lower() else "failed"
            rows.append(row("E", f"hook path on {device}", "error", "runs with no sync", f"{verdict}: {tail[0][:160]}"))
            continue
        result = json.loads(done.stdout.strip().splitlines()[-1])
        if out is not None:
            (out / f"hook_path_{device}.json").write_text(json.dumps(result, indent=1))
        for bs in ("bs1", "bs64"):
            figures = result.get(bs, {})
            rows.append(row("E", f"hook path µs per round on {device}, {bs}, graphs / eager",
                            f"{figures.get('hook_path_graphs_us')} / {figures.get('hook_path_us')}", "<= 25 on the GPU host",
                            "no sync raised" if device == "cuda" else ""))
    return rows


# -- F: device vs host phase times, and the marks' host cost -----------------------------------------
def check_f(rounds: int = 200, batch: int = 64, hidden: int = 4096) -> list[dict]:
    import types

    import torch

    sys.path[:0] = [str(ROOT / "instrumentation"), str(ROOT)]
    from eagle3scope_shim import ring

    ring.SNAPSHOTS.start("cuda", 1024)  # as the scheduler's start does
    timed = ring.SNAPSHOTS.ring
    assert timed.timed and ring.SNAPSHOTS.timed
    w = torch.randn(hidden, hidden, device="cuda", dtype=torch.bfloat16) / 64
    xs = {"draft": torch.randn(batch, hidden, device="cuda", dtype=torch.bfloat16),
          "verify": torch.randn(batch * 4, hidden, device="cuda", dtype=torch.bfloat16),
          "extend": torch.randn(batch * 4, hidden, device="cuda", dtype=torch.bfloat16)}
    layers = {"draft": 3 * 8, "verify": 32, "extend": 8}  # three draft steps of a small draft; a deeper target
    graphs = {}
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for name, x in xs.items():
            v = x
            for _ in range(layers[name]):
                v = torch.tanh(v @ w)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    for name, x in xs.items():
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            v = x
            for _ in range(layers[name]):
                v = torch.tanh(v @ w)
        graphs[name] = graph
    torch.cuda.synchronize()
    bounds = {"draft": (ring.DRAFT_START, ring.DRAFT_END), "verify": (ring.VERIFY_START, ring.VERIFY_END),
              "extend": (ring.EXTEND_START, ring.EXTEND_END)}
    clock = time.perf_counter_ns
    host = {name: [] for name in graphs}
    device = {name: [] for name in graphs}
    mark_ns, read_ns, bare_ns = [], [], []
    for i in range(rounds + 20):
        step = types.SimpleNamespace(dropped=False, slot=None)
        spent = 0
        for name, graph in graphs.items():
            start, end = bounds[name]
            t0 = clock()
            ring.mark(step, start)
            t1 = clock()
            graph.replay()  # a launch: no sync, as under the overlap loop
            t2 = clock()
            ring.mark(step, end)
            t3 = clock()
            spent += (t1 - t0) + (t3 - t2)
            if i >= 20:
                host[name].append((t2 - t1) / 1e6)
        ring.HostRing.record(step.slot)
        step.slot.event.synchronize()  # the publisher's wait
        t0 = clock()
        phases = ring.device_ms(step.slot)
        t1 = clock()
        t2 = clock()
        t3 = clock()  # two clock reads with nothing between: what the timing itself costs
        ring.HostRing.release(step.slot)
        if i >= 20:
            mark_ns.append(spent)
            read_ns.append(t1 - t0)
            bare_ns.append(6 * (t3 - t2))  # six timed intervals in mark_ns, each holding one read
            for name in graphs:
                device[name].append(phases[f"{name}_device_ms"])
    rows = []
    for name in graphs:
        d, h = statistics.median(device[name]), statistics.median(host[name])
        rows.append(row("F", f"{name} phase ms, device / host (median of {rounds} graph-replayed rounds)",
                        f"{d:.3f} / {h:.3f}", "device >> host (host times a launch)",
                        f"host is {h / d:.1%} of device" if d else ""))
    rows.append(row("F", "host µs per round of the six ring.mark calls (median, p95)",
                    f"{statistics.median(mark_ns) / 1e3:.2f}, {sorted(mark_ns)[int(0.95 * len(mark_ns))] / 1e3:.2f}",
                    "a few µs", f"clock reads included: {statistics.median(bare_ns) / 1e3:.2f} µs"))
    rows.append(row("F", "publisher-thread µs per round reading three phases (ring.device_ms, median)",
                    f"{statistics.median(read_ns) / 1e3:.2f}", "", "after the slot's event"))
    return rows


def run_child(check: str, variant: str, out: Path | None) -> list[dict]:
    if check == "A":  # no CUDA call before it sets its device: a context made on GPU 0 first would hide one
        return check_a(variant)
    import torch

    torch.cuda.init()
    if check == "B":
        return check_b(variant)
    if check == "C":
        return check_c(variant)
    if check == "D":
        return check_d()
    if check == "E":
        return check_e(out)
    return check_f()


#: (check, variant) children, in order
PLAN = (("A", "nofix"), ("A", "fix"), ("B", "ungated"), ("B", "gated"), ("C", "strong"), ("C", "weak"),
        ("C", "loadwatch"), ("D", ""), ("E", ""), ("F", ""))


def table(rows: list[dict]) -> str:
    head = ("check", "figure", "value", "expected", "verdict / note")
    cells = [head] + [(r["check"], r["figure"], str(r["value"]), r["expected"], r["verdict"]) for r in rows]
    widths = [min(100, max(len(c[i]) for c in cells)) for i in range(len(head))]
    return "\n".join("  ".join(c[i][:widths[i]].ljust(widths[i]) for i in range(len(head))).rstrip() for c in cells)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="where device_check.json (and E's files) go")
    parser.add_argument("--checks", default=",".join(CHECKS), help="which of A-F, comma-separated")
    parser.add_argument("--budget-s", type=float, default=360.0, help="seconds for all checks together")
    parser.add_argument("--child", nargs=2, metavar=("CHECK", "VARIANT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_child(args.child[0], args.child[1], args.out)))
        return 0
    wanted = {c.strip().upper() for c in args.checks.split(",") if c.strip()}
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
    gpus = cuda_devices()
    if not gpus:
        print(SKIPPED)
        if args.out is not None:
            (args.out / "device_check.json").write_text(json.dumps({"skipped": SKIPPED, "rows": []}))
        return 0
    rows, deadline = [], time.monotonic() + args.budget_s
    for check, variant in PLAN:
        if check not in wanted:
            continue
        left = deadline - time.monotonic()
        if left < 5:
            rows.append(row(check, f"{check} {variant}".strip(), "not run", "", "out of the run's time budget"))
            continue
        cmd = [sys.executable, __file__, "--child", check, variant] + (["--out", str(args.out)] if args.out else [])
        started = time.monotonic()
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=min(CHILD_TIMEOUT_S[check], left))
            lines = done.stdout.strip().splitlines()
            got = json.loads(lines[-1]) if done.returncode == 0 and lines else None
        except subprocess.TimeoutExpired:
            done, got = None, None
        if got is None:
            why = "timed out" if done is None else ((done.stderr or done.stdout).strip().splitlines() or ["no output"])[-1]
            got = [row(check, f"{check} {variant}".strip(), "error", "", why[:200])]
        print(f"{check} {variant}: {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
        rows += got
    print(table(rows))
    if args.out is not None:
        (args.out / "device_check.json").write_text(json.dumps({"gpus": gpus, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
