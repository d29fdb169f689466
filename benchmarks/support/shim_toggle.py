"""Bench support inside the server under test: the shim's hooks switched off and on between blocks
of requests in ONE server (``bench_shim.py``'s default design), so that both arms run in the same
process, heap and core placement and the pair-to-pair noise of two servers drops out.

Loaded into every process of the server by the ``sitecustomize`` that ``bench_shim.engine`` puts on
its PYTHONPATH. A daemon thread watches the file ``$E3S_TOGGLE`` (every 5 ms, one ``stat``): when the
bench writes ``off N`` there (N: a serial number the answer repeats), each process that holds the
shim's wrapped seams puts back the function every wrapper keeps as ``__wrapped__`` (SGLang's
``HookRegistry`` sets it, as ``functools.wraps`` does for the shim's own patcher), so not one hook
frame runs; ``on`` puts the wrappers back. It answers in
``$E3S_TOGGLE.<pid>`` with the state applied and the sum of the shim's self-time cells, which must not
grow in an off block (the bench checks it: a seam SGLang calls through a reference it kept would).
The shim's publisher thread keeps running in both arms; its CPU is its own thread's, which the bench
takes out of the off arm and leaves in the on arm.

``interleave N:FIRST`` (the bench's default design) switches per ROUND instead of per block: on this
box a fixed piece of work takes 6-15 % more or less CPU from one second to the next (the host's
speed drifts: BENCHMARKS.md), which blocks of seconds cannot cancel and alternate rounds can. The
scheduler's ``run_batch`` and ``process_batch_result`` are wrapped (in both arms alike): each round
is given an arm, on and off in turn (prefill and decode rounds each in their own turn), the shim's round seams are switched to it as ``run_batch``
starts and its commit seam as that round's result is processed (under the overlap scheduler one
tick later), and each call's thread CPU time and the tokens the round added go to the round's arm.
``interleave N:FIRST`` again restarts the turns with FIRST (:meth:`Interleave.restart`); a bare
``interleave`` only reports.
"""

from __future__ import annotations

import gc
import json
import os
import pkgutil
import sys
import threading
import time

POLL_S = 0.005


def _targets() -> dict:
    shim = _shim()
    return dict(shim.seams.targets) if shim is not None else {}


def _unwrapped(raw):
    """The attribute as it was before the shim wrapped it, or None when ``raw`` is not a wrapper."""
    if isinstance(raw, (staticmethod, classmethod)):
        inner = getattr(raw.__func__, "__wrapped__", None)
        return None if inner is None else type(raw)(inner)
    return getattr(raw, "__wrapped__", None)


class Toggle:
    def __init__(self) -> None:
        self.saved: dict[str, tuple] = {}  # dotted target -> (owner, attr, wrapper, original)

    def collect(self) -> None:
        for target in _targets().values():
            if target in self.saved:
                continue
            owner_path, _, attr = target.rpartition(".")
            try:
                owner = pkgutil.resolve_name(owner_path)
            except Exception:
                continue
            raw = owner.__dict__.get(attr) if hasattr(owner, "__dict__") else None
            original = _unwrapped(raw) if raw is not None else None
            if original is not None:
                self.saved[target] = (owner, attr, raw, original)

    def apply(self, on: bool, only: set | None = None) -> int:
        """Switch the shim's wrapped seams (``only``: those of these dotted targets) on or off."""
        self.collect()
        for target, (owner, attr, wrapper, original) in self.saved.items():
            if only is None or target in only:
                setattr(owner, attr, wrapper if on else original)
        return len(self.saved)


COMMIT_SEAM = "commit.resolve"  # detach_plan.COMMIT_SEAM: runs in process_batch_result, not in run_batch
SCHEDULER = ("sglang.srt.managers.scheduler", "Scheduler")


class Interleave:
    """Per-round arms on the scheduler's own thread (``interleave N``: N rounds per arm in turn).

    ``totals``: per arm, the thread CPU ns of the rounds' ``run_batch`` and ``process_batch_result``
    calls, rounds, tokens added to the rounds' requests, and ``hook_ns``: what the shim's self-time
    cells gained inside the arm's calls (0 for ``off``, which the bench checks)."""

    def __init__(self, toggle: Toggle, every: int, first: str = "on", owner=None) -> None:
        self.toggle, self.every = toggle, max(1, int(every))
        self.owner = owner
        self.totals = {arm: {"cpu_ns": 0, "wall_ns": 0, "rounds": 0, "tokens": 0, "hook_ns": 0} for arm in ("on", "off")}
        self.restart(first)
        self.pending: dict[int, str] = {}  # id(result) -> its round's arm, until processed
        self.commit = {t for seam, t in _targets().items() if seam == COMMIT_SEAM}
        self.round_side = {t for seam, t in _targets().items() if seam != COMMIT_SEAM}

    def restart(self, first: str) -> None:
        """The next round of each kind goes to ``first``, the turns going on from there. The bench
        restarts the turns at the start and the middle of every block, the other arm first each
        time: a block's first request follows the bench's own pause (its caches cold, the
        scheduler's loop idle), and with turns that ran on from block to block its prefill and
        first decode round fell to the same arm in every block of a server (BENCHMARKS.md)."""
        self.arms = (first, "off" if first == "on" else "on")
        #: rounds begun since, per kind: prefill (extend) rounds cost more than decode rounds and
        #: would otherwise all fall to one arm when a request's round count is even
        self.rounds = {"extend": 0, "decode": 0}

    def install(self) -> None:
        """Wrap the scheduler's two per-round methods (their class attributes; the event loop looks
        them up per call)."""
        owner = self.owner or getattr(sys.modules.get(SCHEDULER[0]), SCHEDULER[1])
        run, process = owner.__dict__["run_batch"], owner.__dict__["process_batch_result"]
        this = self

        def run_batch(sched, batch, *args, **kwargs):
            kind = "extend" if batch.forward_mode.is_extend() else "decode"  # prefill rounds take turns apart
            arm = this.arms[(this.rounds[kind] // this.every) % 2]
            this.rounds[kind] += 1
            this.toggle.apply(arm == "on", this.round_side)
            hook0, w0, t0 = _cells(), time.perf_counter_ns(), time.thread_time_ns()
            _gc_arm(arm)
            result = run(sched, batch, *args, **kwargs)
            _gc_arm(None)
            spent, wall = time.thread_time_ns() - t0, time.perf_counter_ns() - w0
            this._add(arm, spent, wall, _cells() - hook0, rounds=1)
            this.pending[id(result)] = arm
            return result

        def process_batch_result(sched, batch, result, *args, **kwargs):
            arm = this.pending.pop(id(result), None)
            if arm is None:  # a result run before interleaving began
                return process(sched, batch, result, *args, **kwargs)
            this.toggle.apply(arm == "on", this.commit)
            before = sum(len(getattr(req, "output_ids", ()) or ()) for req in batch.reqs)
            hook0, w0, t0 = _cells(), time.perf_counter_ns(), time.thread_time_ns()
            _gc_arm(arm)
            out = process(sched, batch, result, *args, **kwargs)
            _gc_arm(None)
            spent, wall = time.thread_time_ns() - t0, time.perf_counter_ns() - w0
            hooks = _cells() - hook0
            added = sum(len(getattr(req, "output_ids", ()) or ()) for req in batch.reqs) - before
            this._add(arm, spent, wall, hooks, tokens=added)
            return out

        owner.run_batch, owner.process_batch_result = run_batch, process_batch_result

    def _add(self, arm: str, cpu_ns: int, wall_ns: int, hook_ns: int, rounds: int = 0, tokens: int = 0) -> None:
        cell = self.totals[arm]
        cell["cpu_ns"] += cpu_ns
        cell["wall_ns"] += wall_ns
        cell["hook_ns"] += hook_ns
        cell["rounds"] += rounds
        cell["tokens"] += tokens

    def snapshot(self) -> dict:
        return {arm: dict(cell) for arm, cell in self.totals.items()}


def _gc_arm(arm: str | None) -> None:
    if GC is not None:
        GC.arm, GC.arm_thread = arm, threading.get_ident()


class GcClock:
    """Garbage collections on the thread that ran them: CPU ns and count per generation, and per arm
    (``arm``: the interleaved arm whose call is running, else None): a shim that allocates could
    make SGLang's collections more frequent, and a collection runs wherever an allocation trips it."""

    def __init__(self) -> None:
        self.ns, self.n, self.by_arm, self._t0 = [0, 0, 0], [0, 0, 0], {"on": 0, "off": 0}, None
        self.arm, self.arm_thread = None, None  # set by the scheduler's thread around its arm's calls
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.thread_time_ns()
            return
        if self._t0 is None:
            return
        spent, generation = time.thread_time_ns() - self._t0, info.get("generation", 2)
        self._t0 = None
        self.ns[generation] += spent
        self.n[generation] += 1
        if self.arm is not None and threading.get_ident() == self.arm_thread:
            self.by_arm[self.arm] += spent

    def snapshot(self) -> dict:
        return {"ns": list(self.ns), "n": list(self.n), "by_arm": dict(self.by_arm)}


GC = None  # GcClock, made by start()


def _shim():
    """The shim's state in this process (its instrumentor's), None before (or without) the shim."""
    return getattr(getattr(sys.modules.get("eagle3scope_shim.instrumentor"), "INSTRUMENTOR", None), "shim", None)


def _cells() -> int:
    return sum(cell[0] for cell in getattr(_shim(), "self_ns", {}).values())


def _publisher_busy() -> int | None:
    """The publisher thread's CPU so far in its drains (turning events into frames), ns."""
    return getattr(getattr(_shim(), "publisher", None), "_busy_ns", None)


def _watch(path: str) -> None:
    toggle, seen, interleave = Toggle(), None, None
    while True:
        time.sleep(POLL_S)
        try:
            stamp = os.stat(path).st_mtime_ns
            if stamp == seen:
                continue
            seen = stamp
            with open(path) as f:
                wanted, _, serial = f.read().strip().partition(" ")
            wanted, _, every = wanted.partition(":")  # interleave:N:first-arm
            every, _, first = every.partition(":")
            if wanted not in ("on", "off", "interleave"):
                continue
            swapped = toggle.apply(wanted != "off") if interleave is None else len(toggle.saved)
            if not swapped:
                continue  # a process without the shim's seams (detokenizer, launcher before hooks)
            if wanted == "interleave" and interleave is None:
                interleave = Interleave(toggle, int(every or 1), first=first or "on")
                interleave.install()
            elif wanted == "interleave" and first:
                interleave.restart(first)
            answer = f"{path}.{os.getpid()}"
            with open(answer + ".tmp", "w") as f:
                json.dump({"state": wanted, "serial": serial, "targets": swapped, "shim_ns": _cells(),
                           "publisher_busy_ns": _publisher_busy(),
                           "arms": interleave.snapshot() if interleave is not None else None,
                           "gc": GC.snapshot() if GC is not None else None}, f)
            os.replace(answer + ".tmp", answer)
        except FileNotFoundError:
            continue
        except Exception as exc:  # bench support: say why once and stop, never take the server down
            print(f"shim_toggle: stopped: {type(exc).__name__}: {exc}", file=sys.stderr)
            return


def start() -> None:
    path = os.environ.get("E3S_TOGGLE")
    if path:
        global GC
        GC = GcClock()
        threading.Thread(target=_watch, args=(path,), name="e3s-bench-toggle", daemon=True).start()

