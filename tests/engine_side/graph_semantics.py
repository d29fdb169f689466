"""The CPU graph stand-in's semantics, checked against eager execution without a server.

Runs inside the engine venv (torch, SGLang's capture flag), as ``python tests/engine_side/graph_semantics.py``;
prints one JSON object of facts that tests/test_graphs_engine.py asserts. The properties are the ones
``torch.cuda.CUDAGraph`` has (torch.cuda.graphs docs): Python in the captured callable runs once, replay
recomputes on the captured (static) input memory and overwrites the captured outputs, and a host sync
inside capture fails it.
"""

import json

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
facts = {"capture_ran_python": len(python_runs), "flag_in_capture": flags, "flag_after": get_is_capture_mode(),
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
print(json.dumps(facts))
