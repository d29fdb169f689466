"""The shim's cost as an outside sampler sees it: py-spy on the scheduler process, counting the main
thread's samples that are the shim's own work.

The shim's self-report (``heartbeat.shim_us``) times each hook between its first and last clock
read, so it cannot see what a hook costs outside that window: the call into it through SGLang's
``HookRegistry`` wrapper, its argument packing, the return. A sampler sees all of it, and sees it
without the shim's help, so the two can be held against each other (BENCHMARKS.md, "Shim": Method).

A sample is the shim's when the deepest shim frame (``eagle3scope_shim/``, ``eagle3scope/wire/``)
is the leaf, or only library frames the hooks call lie below it (torch's ``Module.__getattr__``,
weakref, threading, msgpack, zmq), and when the leaf is SGLang's ``HookRegistry`` wrapper, which
only calls the hook. A sample below a shim frame in SGLang's code is SGLang's (the hook called the
wrapped function). py-spy is optional (``pip install py-spy``); without it nothing is
sampled and the bench says so.
"""

from __future__ import annotations

import collections
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

REGISTRY_WRAPPER = "plugins/hook_registry.py"
SHIM_PATHS = ("eagle3scope_shim/", "eagle3scope/wire/")
LIBRARY_PATHS = ("torch/nn/modules/module.py", "torch/_tensor.py", "weakref.py", "threading.py", "msgpack/", "zmq/",
                 "collections/")


def py_spy() -> str | None:
    """py-spy next to this interpreter, else on PATH."""
    local = Path(sys.executable).with_name("py-spy")
    return str(local) if local.exists() else shutil.which("py-spy")


def _path(frame: str) -> str:
    """``func (path:line)`` -> ``path``."""
    return frame.rpartition(" (")[2].rpartition(":")[0]


def _shim_frame(frame: str) -> bool:
    return any(p in _path(frame) for p in SHIM_PATHS)


def attribute(raw: str, thread: str = "MainThread") -> dict:
    """Shim-own samples of ``thread`` in py-spy's raw (collapsed-stack) output, by the hook part
    they fell in (the function under the wrapper, or ``wrapper``: the guard's own lines)."""
    total = shim = 0
    parts: collections.Counter = collections.Counter()
    for line in raw.splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        if thread not in frames[0]:
            continue
        n = int(count)
        total += n
        if REGISTRY_WRAPPER in _path(frames[-1]):  # SGLang's frame that only calls the shim's hook
            shim += n
            parts["HookRegistry wrapper"] += n
            continue
        deepest = max((i for i, f in enumerate(frames) if _shim_frame(f)), default=None)
        if deepest is None:
            continue
        if any(not any(p in _path(f) for p in LIBRARY_PATHS) for f in frames[deepest + 1:]):
            continue  # below the shim lies SGLang's work (the hook called the original)
        shim += n
        outer = next((f for f in frames[1:] if _shim_frame(f) and "guard.py" not in _path(f)), None)
        parts[outer.partition(" (")[0] if outer else "wrapper"] += n
    return {"main_thread_samples": total, "shim_samples": shim,
            "shim_share_of_main_thread": round(shim / total, 5) if total else None,
            "by_part": dict(parts.most_common(12))}


class Sampler:
    """py-spy recording one process until :meth:`stop` (SIGINT makes it write what it has)."""

    def __init__(self, pid: int, rate: int = 250) -> None:
        self.out = Path(tempfile.mkdtemp(prefix="e3s-sampled-")) / "raw.txt"
        exe = py_spy()
        self.proc = None if exe is None else subprocess.Popen(
            [exe, "record", "--pid", str(pid), "--threads", "--nonblocking", "--rate", str(rate), "-f", "raw",
             "-o", str(self.out), "-d", "36000"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> dict | None:
        if self.proc is None:
            return None
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return None
        try:
            return attribute(self.out.read_text())
        except OSError:
            return None
        finally:
            shutil.rmtree(self.out.parent, ignore_errors=True)


def scheduler_pid(pgid: int) -> int | None:
    """The ``sglang::scheduler`` process of a server started in its own process group."""
    from benchmarks.support import procstat

    return next((pid for pid in procstat.group_pids(pgid) if procstat.name(pid).startswith("sglang::scheduler")), None)


if __name__ == "__main__":  # attribute a saved raw file: python benchmarks/support/sampled.py FILE
    import json

    print(json.dumps(attribute(Path(sys.argv[1]).read_text()), indent=1))
