"""The sync guard's table of cases, run inside the engine venv (torch) without a server.

``python tests/engine_side/sync_guard_cases.py`` prints one JSON object: for each case, whether the
guard (eagle3scope_shim.syncguard) flagged it; tests/shim/test_sync_guard.py asserts the table.
Every "sync" case is an operation that waits for the device on a GPU (or sizes its output from
device data); every "fine" case is one the shim's hot hook bodies legitimately do.
"""

import json
import threading

import torch

from eagle3scope_shim import ring
from eagle3scope_shim.shim_state import Step
from eagle3scope_shim.syncguard import SyncGuard, SyncViolation

t = torch.arange(8)
mask = t > 3
host = torch.empty(8, dtype=t.dtype)
counts = torch.tensor([1, 2, 1, 0, 1, 2, 1, 1])


class Stand:
    """A stand-in for a torch.cuda Stream or Event: the guard refuses before calling through."""


SYNC = {
    "item": lambda: t[0].item(),
    "format": lambda: f"{t[0]}",
    "in": lambda: 5 in t,
    "bool": lambda: bool(t[0]),
    "int": lambda: int(t[1]),
    "tolist": lambda: t.tolist(),
    "numpy": lambda: t.numpy(),
    "np.asarray": lambda: __import__("numpy").asarray(t),
    "repr": lambda: repr(t),
    "cpu": lambda: t.cpu(),
    "to cpu": lambda: t.to("cpu"),
    "to a host tensor": lambda: t.to(host),
    "to cpu with a dtype": lambda: t.to("cpu", torch.float32),
    "copy_ into host": lambda: host.copy_(t),
    "to another device, blocking": lambda: t.to("meta"),
    "nonzero": lambda: t.nonzero(),
    "argwhere": lambda: torch.argwhere(t),
    "one-argument where": lambda: torch.where(mask),
    "masked_select": lambda: t.masked_select(mask),
    "unique": lambda: torch.unique(t),
    "unique_consecutive": lambda: torch.unique_consecutive(t),
    "repeat_interleave without output_size": lambda: t.repeat_interleave(counts),
    "bincount": lambda: torch.bincount(t),
    "equal": lambda: torch.equal(t, t),
    "allclose": lambda: torch.allclose(t.float(), t.float()),
    "is_nonzero": lambda: t[0].is_nonzero(),
    "bool-mask index": lambda: t[mask],
    "bool-mask index_put_": lambda: t.clone().__setitem__(mask, 0),
    "pinned empty": lambda: torch.empty(8, pin_memory=True),
    "pin_memory": lambda: t.pin_memory(),
    "torch.cuda.synchronize": lambda: torch.cuda.synchronize(),
    "Stream.synchronize": lambda: torch.cuda.Stream.synchronize(Stand()),
    "Event.synchronize": lambda: torch.cuda.Event.synchronize(Stand()),
}


def _snap():
    """The shim's own device path: a non-blocking copy into a ring slot's buffer (RING_ON_CPU
    stands for a device ring); the ring's buffers are allocated before, as the ring is at start-up."""
    snapshots = ring.Snapshots()
    snapshots.on_cpu, snapshots.capacity = True, 64
    step = Step()
    ring.snap(snapshots, step, "draft", t)  # allocates (outside the guard)
    step = Step()
    return lambda: ring.snap(snapshots, step, "draft", t)


FINE = {
    "shape read": lambda: int(t.shape[-1]),
    "len": lambda: len(t),
    "clone": lambda: t.clone(),
    "dtype change on its device": lambda: t.to(torch.float32),
    "reshape": lambda: t.reshape(2, 4),
    "copy_ non_blocking": lambda: host.copy_(t, non_blocking=True),
    "to cpu non_blocking": lambda: t.to("cpu", non_blocking=True),
    "repeat_interleave with output_size": lambda: t.repeat_interleave(counts, output_size=9),
    "integer index": lambda: t[torch.tensor([1, 2])],
    "the shim's ring snap": _snap(),
}


def flagged(fn):
    """True when the guard refused the call, False when it ran, else what else it raised (a case the
    guard let through to torch, e.g. a pinned allocation on a build without an accelerator)."""
    try:
        with SyncGuard("test"):
            fn()
    except SyncViolation:
        return True
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"[:200]
    return False


def flagged_outside(fn) -> bool:
    try:
        fn()
    except SyncViolation:
        return True
    return False


table = {"sync": {name: flagged(fn) for name, fn in SYNC.items()},
         "fine": {name: flagged(fn) for name, fn in FINE.items()}}
# The CPU engine swaps torch.cuda.synchronize for a no-op at start-up: still refused inside a body,
# and only on the thread that runs it (the publisher's thread is not in a hook body).
torch.cuda.synchronize = lambda device=None: None
table["replaced synchronize"] = flagged(lambda: torch.cuda.synchronize())
other = []
with SyncGuard("test"):
    thread = threading.Thread(target=lambda: other.append(flagged_outside(torch.cuda.synchronize)))
    thread.start()
    thread.join()
table["another thread's synchronize"] = other[0]
table["after the body"] = flagged_outside(torch.cuda.synchronize)
print(json.dumps(table))
