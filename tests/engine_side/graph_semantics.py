"""The CPU graph stand-in's semantics, checked against eager execution without a server.

Runs inside the engine venv (torch, SGLang's capture flag), as ``python tests/engine_side/graph_semantics.py``;
prints one JSON object of facts that tests/shim/test_graphs_engine.py asserts. The properties are the ones
``torch.cuda.CUDAGraph`` has (torch.cuda.graphs docs): Python in the captured callable runs once, replay
recomputes on the captured (static) input memory and overwrites the captured outputs, and a host sync
inside capture fails it. For the strict mode: its graph backend (SGLang's runners' ``capture_one`` /
``replay`` / ``can_run``) against eager, a failed capture raised (not run eagerly), and global
capture mode: while a capture records, another thread's event or stream query/sync, device sync or
pinned allocation is refused and invalidates the capture.
"""

import json
import threading

import torch

from eagle3scope_cpu_engine import graphs
from sglang.srt.model_executor.runner_utils.capture_mode import get_is_capture_mode


class Backend:
    """Stands for an attention backend: its forward is a graph break."""

    calls = 0

    def forward(self, q, k, v, layer, forward_batch):
        Backend.calls += 1
        return torch.softmax(q @ k.T, dim=-1) @ v + forward_batch.bias


class Batch:
    def __init__(self, x, bias):
        self.x, self.bias = x, bias


Backend.forward = graphs.attention_break(Backend.forward)
torch.manual_seed(0)
w = torch.randn(8, 8)
python_runs, flags = [], []


def draft_forward(batch):
    python_runs.append(1)  # a hook inside the forward
    flags.append(get_is_capture_mode())
    h = torch.tanh(batch.x @ w)
    a = Backend().forward(h, h, h, None, batch)
    h2 = h.clone()
    h2.add_(a)
    return h2[:, :4], h2.sum(dim=-1)


def eager(batch):
    h = torch.tanh(batch.x @ w)
    a = torch.softmax(h @ h.T, dim=-1) @ h + batch.bias
    h2 = h + a
    return h2[:, :4], h2.sum(dim=-1)


live = Batch(torch.randn(3, 8), torch.randn(3, 8))
before = live.x.clone()
static, inputs = graphs.static_batch(live)
graph = graphs.OpGraph()
captured = graph.capture(lambda: draft_forward(static))
facts = {"capture_ran_python": len(python_runs), "flag_in_capture": list(flags), "flag_after": get_is_capture_mode(),
         "input_names": sorted(name for _, name, _ in inputs), "inputs_private": static.x is not live.x,
         "capture_matches_eager": all(torch.allclose(a, b) for a, b in zip(captured, eager(live)))}
replay_ok = []
for i in range(5):
    new = Batch(torch.randn(3, 8), torch.randn(3, 8))
    graphs._refill(inputs, new)
    graph.replay()
    replay_ok.append(all(torch.allclose(a, b, atol=1e-6) for a, b in zip(captured, eager(new))))
facts.update(replay_matches_eager=replay_ok, python_runs_after_replays=len(python_runs), replays=graph.replays,
             attention_calls=Backend.calls, live_inputs_untouched=bool(torch.equal(live.x, before)))
fits = graphs._fits(inputs, Batch(torch.randn(4, 8), torch.randn(4, 8)))


def syncs(batch):
    return torch.tensor([float(batch.x.sum().item())])


try:
    graphs.OpGraph().capture(lambda: syncs(static))
    facts["sync_capture"] = "captured"
except graphs.CaptureError as exc:
    facts["sync_capture"] = str(exc)
facts["other_shape_fits"] = fits

# -- the strict mode's graph backend (in place of SGLang's FullCudaGraphBackend) --------------------
backend = graphs.OpGraphBackend()
python_runs.clear()
strict_live = Batch(torch.randn(3, 8), torch.randn(3, 8))
strict_static, strict_inputs = graphs.static_batch(strict_live)
backend.capture_one("bs3", lambda: draft_forward(strict_static))
strict_ok = []
for i in range(3):
    new = Batch(torch.randn(3, 8), torch.randn(3, 8))
    graphs._refill(strict_inputs, new)
    strict_ok.append(all(torch.allclose(a, b, atol=1e-6) for a, b in zip(backend.replay("bs3", None), eager(new))))
facts.update(strict_python_runs=len(python_runs), strict_replay_matches_eager=strict_ok,
             strict_can_run=[backend.can_run(None, "bs3"), backend.can_run(None, "bs4")])
try:
    backend.capture_one("syncs", lambda: syncs(strict_static))
    facts["strict_sync_capture"] = "captured"
except RuntimeError as exc:  # SGLang's runners turn a RuntimeError out of capture into "Capture cuda graph failed"
    facts["strict_sync_capture"] = f"{type(exc).__name__}: {exc}"
facts["strict_failed_shape_kept"] = backend.can_run(None, "syncs")


class TwoShapes(graphs._CapturedOnCPU):
    """A runner with SGLang's capture-list fields, whose size-1 region syncs."""

    capture_bs, max_bs, seq_len_fill_value = [1, 2], 2, 1

    def __init__(self):
        self.buffers = type("Buffers", (), {"seq_lens": torch.zeros(2), "seq_lens_cpu": torch.zeros(2),
                                            "reset_index_buffers": staticmethod(lambda: None)})()
        self.tried = []

    def capture_one_shape(self, bs, forward):
        self.tried.append(bs)
        self.backend.capture_one(bs, lambda: syncs(strict_static) if bs == 1 else draft_forward(strict_static))


runner = TwoShapes()
try:
    runner.capture()
    facts["strict_runner_capture"] = "captured"
except RuntimeError as exc:  # out of the runner's __init__: SGLang raises "Capture cuda graph failed: ..." from it
    facts["strict_runner_capture"] = f"{type(exc).__name__}: {exc}"
facts.update(strict_runner_tried=runner.tried, strict_runner_fill=runner.buffers.seq_lens.tolist())


# -- global capture mode: another thread's event query, device sync or pinned allocation -------------
class Stand:
    """Stands for a torch.cuda Event or Stream (this CPU build cannot make one)."""


def from_another_thread(call):
    """What ``call`` raised on another thread: "refused" for the stand-in's CaptureError, else the type."""
    seen = []

    def run():
        try:
            call()
            seen.append("ran")
        except graphs.CaptureError:
            seen.append("refused")
        except Exception as exc:  # reached torch itself (a CPU build has no events, no pinned memory)
            seen.append(type(exc).__name__)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return seen[0]


graphs._global_capture_mode()
calls = {"event query": lambda: torch.cuda.Event.query(Stand()), "event sync": lambda: torch.cuda.Event.synchronize(Stand()),
         "stream sync": lambda: torch.cuda.Stream.synchronize(Stand()), "device sync": lambda: torch.cuda.synchronize(),
         "pinned empty": lambda: torch.empty(4, pin_memory=True), "pin_memory": lambda: torch.ones(4).pin_memory()}
during, captures = {}, {}
for name, call in calls.items():
    def region(call=call, name=name):
        during[name] = from_another_thread(call)
        return draft_forward(strict_static)

    try:
        graphs.OpGraph().capture(region)
        captures[name] = "captured"
    except graphs.CaptureError as exc:
        captures[name] = str(exc)
facts.update(global_during=during, global_captures=captures,
             global_outside={name: from_another_thread(call) for name, call in calls.items()},
             global_unpinned_empty=from_another_thread(lambda: torch.empty(4)))
print(json.dumps(facts))
