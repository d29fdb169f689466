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
"""

from __future__ import annotations

import json
import os
import pkgutil
import sys
import threading
import time

POLL_S = 0.005


def _targets() -> dict:
    registry = sys.modules.get("eagle3scope_shim.registry")
    return dict(getattr(registry, "targets", {}) or {})


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

    def apply(self, on: bool) -> int:
        self.collect()
        for owner, attr, wrapper, original in self.saved.values():
            setattr(owner, attr, wrapper if on else original)
        return len(self.saved)


def _cells() -> int:
    state = sys.modules.get("eagle3scope_shim.state")
    shim = getattr(state, "STATE", None)
    return sum(cell[0] for cell in getattr(shim, "self_ns", {}).values()) if shim is not None else 0


def _watch(path: str) -> None:
    toggle, seen = Toggle(), None
    while True:
        time.sleep(POLL_S)
        try:
            stamp = os.stat(path).st_mtime_ns
            if stamp == seen:
                continue
            seen = stamp
            with open(path) as f:
                wanted, _, serial = f.read().strip().partition(" ")
            if wanted not in ("on", "off"):
                continue
            swapped = toggle.apply(wanted == "on")
            if not swapped:
                continue  # a process without the shim's seams (detokenizer, launcher before hooks)
            answer = f"{path}.{os.getpid()}"
            with open(answer + ".tmp", "w") as f:
                json.dump({"state": wanted, "serial": serial, "targets": swapped, "shim_ns": _cells()}, f)
            os.replace(answer + ".tmp", answer)
        except FileNotFoundError:
            continue
        except Exception as exc:  # bench support: say why once and stop, never take the server down
            print(f"shim_toggle: stopped: {type(exc).__name__}: {exc}", file=sys.stderr)
            return


def start() -> None:
    path = os.environ.get("E3S_TOGGLE")
    if path:
        threading.Thread(target=_watch, args=(path,), name="e3s-bench-toggle", daemon=True).start()

