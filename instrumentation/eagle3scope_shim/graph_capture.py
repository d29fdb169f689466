"""Captured graphs: what each draft graph captured and which passes replay one; the target's
captured graphs and an aux-layer change. The adapter of the graph seam family.

Python inside a replayed graph does not run, so the draft-forward hook sees a graphed pass only
at capture (SGLang's ``get_is_capture_mode()`` is true then, warm-ups included): it records the
pass's width and fc per (mode, batch size) once, here. Each step the callers that hand the draft
its hidden states (``seams.DRAFT_INPUTS``, eager code) read the width; a call in which the
draft's forward did not run was a replay, attributed to the captured graph it pads to.

A captured CUDA graph replays the aux layers it was captured with (sglang-compat D3/D4): after
``set_eagle3_layers_to_capture`` only eager passes see the new set. So a live change on a server
with graphs either recaptures the target's graphs between two steps, through SGLang's own entry
(``ModelRunner.recapture_decode_cuda_graph``, which SGLang's weight update calls between steps,
and whose capture resets its index buffers so it never writes through a live batch), or is
refused with the reason. Recapturing pauses serving for the capture time, so it happens only when
the request asks for it (``aux set --recapture``); the pause is measured and reported.

Per release, from the sources (sglang-compat.md; 0.5.10 and 0.5.23 read for this module):

- up to 0.5.10 the graph runner itself resets the aux layers to the model default before every
  capture (0.5.10 cuda_graph_runner.py:643-653), so a recapture would replay the default set;
- 0.5.11 on captures the set in effect; 0.5.23 offers ``recapture_decode_cuda_graph`` (target
  verify graphs); the entry is looked up, not assumed, so a release without it is refused;
- CPU graphs (``--enable-torch-compile`` on CPU) cannot exist with speculative decoding: 0.5.23's
  ``CPUGraphRunner`` asserts ``spec_algorithm.is_none()`` (cpu_graph_runner.py), so a CPU server
  never needs a recapture;
- refused where one recapture is not enough: prefill graphs (piecewise) captured too, or
  adaptive speculative steps (one target graph runner per step count, only one of them active).
"""

from __future__ import annotations

import logging
import sys
import time

from eagle3scope.wire.releases import before
from eagle3scope_shim import seams
from eagle3scope_shim.ring import CAPTURE_GATE

log = logging.getLogger("eagle3scope")

#: Draft graphs recorded per process ((mode, batch size) pairs; SGLang captures a few dozen sizes).
MAX_GRAPHS = 256

#: Model-runner attributes that hold captured graphs in some release.
GRAPH_ATTRS = ("graph_runner", "cuda_graph_runner", "decode_cuda_graph_runner", "prefill_cuda_graph_runner",
               "piecewise_cuda_graph_runner")
#: First release whose graph capture keeps the aux layers in effect (sglang-compat D4, table C).
KEEPS_AUX_SET = "0.5.11"
RECAPTURE_ENTRY = "recapture_decode_cuda_graph"
DEVICES = ("cuda", "musa")  # where SGLang's own weight update recaptures
#: the longest a recapture waits for the publisher to finalise the steps queued before it
DRAIN_S = 2.0
HINT = "write the ids with `eagle3scope aux write` and restart, or serve with --disable-cuda-graph to compare live"


def _is_graph(runner) -> bool:
    return runner is not None and "graph" in type(runner).__name__.lower()


class GraphPlan:
    """Whether the target replays captured graphs, and how (or why not) they can be recaptured."""

    def __init__(self, captured: bool, runner=None, why_not: str = "") -> None:
        self.captured = captured
        self.runner = runner  # the target's ModelRunner, when a recapture is possible
        self.why_not = why_not  # non-empty: a recapture is not possible, and why
        self.last_pause_ms: float | None = None

    def describe(self) -> dict:
        return {"captured": self.captured, "recapture": self.captured and not self.why_not,
                "why_not": self.why_not if self.captured else "", "last_pause_ms": self.last_pause_ms}

    def refusal(self, recapture: bool) -> str:
        """Why a change must be refused now ("" when it may go ahead)."""
        if not self.captured:
            return ""
        if not recapture:
            return ("CUDA graphs were captured with the current aux set and replay ignores a new one; "
                    + ("pass --recapture to recapture them with the new set (serving pauses for the capture), or "
                       if not self.why_not else "") + HINT)
        return f"cannot recapture the target's graphs: {self.why_not}; {HINT}" if self.why_not else ""

    def recapture(self, publisher) -> float:
        """Recapture the target's graphs with the aux set now in effect; the pause in ms. Runs on
        the scheduler thread between two steps; raises what SGLang raises. The publisher finalises
        the steps queued so far first (at most :data:`DRAIN_S`), and makes no device call while
        the capture runs (``ring.CAPTURE_GATE``): SGLang captures in global mode, where another
        thread's event call breaks the capture, on this rank only, and the TP ranks then hang."""
        t0 = time.perf_counter()
        if publisher is not None and not publisher.flush(DRAIN_S):
            log.warning("eagle3scope: the publisher had not finalised its queued steps after %.1f s; recapturing "
                        "anyway (it waits for the capture to end)", DRAIN_S)
        with CAPTURE_GATE:
            getattr(self.runner, RECAPTURE_ENTRY)()
        self.last_pause_ms = round((time.perf_counter() - t0) * 1000, 1)
        log.info("eagle3scope: target graphs recaptured in %.1f ms", self.last_pause_ms)
        return self.last_pause_ms


def plan(worker, server_args, version: str | None) -> GraphPlan:
    """The graph facts of this process's target (``worker`` = the EAGLE worker, ``version`` =
    SGLang's, e.g. "0.5.23")."""
    runner = getattr(getattr(worker, "target_worker", None), "model_runner", None)
    held = [getattr(runner, a) for a in GRAPH_ATTRS if hasattr(runner, a)]
    device = str(getattr(server_args, "device", "") or "")
    if held:  # 0.5.23 points its runners at an EagerRunner when graphs are off, older releases leave None
        captured = any(_is_graph(r) for r in held)
    else:
        captured = device not in ("", "cpu") and not getattr(server_args, "disable_cuda_graph", False)
    if not captured:
        return GraphPlan(False)
    return GraphPlan(True, runner, _why_not(runner, worker, device, version))


def _why_not(runner, worker, device: str, version: str | None) -> str:
    release = version or "this release"
    if before(version, KEEPS_AUX_SET):
        return (f"SGLang {release} resets the aux layers to the model default before every graph capture "
                "(sglang-compat D4), so a recapture would replay the default set, not the requested one")
    if not callable(getattr(runner, RECAPTURE_ENTRY, None)):
        return f"SGLang {release} has no ModelRunner.{RECAPTURE_ENTRY} to recapture the target's graphs with"
    if device not in DEVICES:
        return f"SGLang {release} recaptures graphs only on {'/'.join(DEVICES)}, not on {device or 'this device'}"
    if _is_graph(getattr(runner, "prefill_cuda_graph_runner", None)) or _is_graph(
            getattr(runner, "piecewise_cuda_graph_runner", None)):
        return (f"the target also holds prefill (piecewise) graphs captured with the old set, and SGLang {release} "
                "recaptures only its decode/verify graphs between steps")
    if getattr(worker, "adaptive_controller", None) is not None:
        return ("adaptive speculative steps keep one target graph runner per step count; recapturing the active "
                "one would leave the others on the old set")
    return ""


# -- draft graphs: capture and replay ---------------------------------------------------------
def capture_flag():
    """SGLang's capture flag of this release (``seams.CAPTURE_FLAG``), or None while the module
    that holds it is not imported (then no graph can be being captured). Looked up in
    ``sys.modules`` only: the hook that asks must never import SGLang."""
    for module, name in seams.CAPTURE_FLAG:
        flag = getattr(sys.modules.get(module), name, None)
        if callable(flag):
            return flag
    return None


def record_capture(load, mode: str, bs: int, width: int, fc: bool) -> bool:
    """A draft forward ran inside a graph capture; True when that graph is new."""
    key = (mode, bs)
    if key in load.graphs or len(load.graphs) >= MAX_GRAPHS:
        return False
    load.graphs[key] = [width, fc]
    load.graph_for.clear()
    return True


def graph_bs(load, mode: str, raw_bs: int) -> int:
    """Batch size of the captured graph a replay of ``raw_bs`` requests runs (SGLang pads up to
    the next captured size); 0 when no capture of that mode was seen."""
    key = (mode, raw_bs)
    found = load.graph_for.get(key)
    if found is None:
        sizes = [bs for m, bs in load.graphs if m == mode and bs >= raw_bs]
        found = load.graph_for[key] = min(sizes) if sizes else 0
    return found


def captured(load) -> list[dict]:
    return [dict(mode=m, bs=bs, width=w, fc=bool(fc)) for (m, bs), (w, fc) in sorted(load.graphs.items())]


def _slot(worker, path: tuple[str, ...]):
    for attr in path:
        worker = getattr(worker, attr, None)
    return worker


def replayed_passes(kind: str | None, worker) -> dict[str, bool]:
    """Which draft passes replay a captured graph on this server (``seams.DRAFT_GRAPH_SLOTS``)."""
    slots = seams.DRAFT_GRAPH_SLOTS.get(kind or "", {})
    return {name: _is_graph(_slot(worker, path)) for name, path in slots.items()}
