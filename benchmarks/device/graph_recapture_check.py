"""An aux-layer change under a captured CUDA graph, through the shim's own control path (no SGLang).

Usage (a lent GPU; benchmarks/device/device_check.sh runs it): PYTHONPATH=instrumentation:. python3
benchmarks/device/graph_recapture_check.py [--device cuda] [--layers 32] [--hidden 4096] [--bs 64]

The device machine has no SGLang, so a stand-in target with SGLang 0.5.23's Llama aux semantics
(``layers_to_capture = [id + 1 ...]``; the forward copies the hidden states entering those layers
into a static aux buffer) is captured with ``torch.cuda.CUDAGraph`` by a stand-in ModelRunner
whose ``recapture_decode_cuda_graph`` warms up on a side stream and captures again, as SGLang's
does. Checked, against the eager forward: (1) the captured graph replays the aux set it was
captured with, also after ``set_eagle3_layers_to_capture`` (why the shim refuses a change without
``--recapture``); (2) ``AuxChannel._apply`` with recapture replays the new set, and reports the pause.
On a machine without CUDA, ``--device cpu`` runs the same flow with an emulated capture (the
layer set frozen at capture), to check the script itself.
"""

from __future__ import annotations

import argparse
import json
from types import SimpleNamespace

import torch

from eagle3scope_shim import aux_channel, control_facts, graph_capture
from eagle3scope_shim.shim_state import Shim


class Target:
    """N linear layers; the forward writes the states entering ``model.layers_to_capture``."""

    def __init__(self, layers: int, hidden: int, bs: int, device: str) -> None:
        torch.manual_seed(0)
        self.layers = [torch.nn.Linear(hidden, hidden, device=device) for _ in range(layers)]
        self.config = SimpleNamespace(num_hidden_layers=layers)
        self.model = SimpleNamespace(layers_to_capture=[])
        self.capture_aux_hidden_states = False
        self.x = torch.randn(bs, hidden, device=device)
        self.aux = torch.zeros(3, bs, hidden, device=device)

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        n = self.config.num_hidden_layers
        self.capture_aux_hidden_states = True
        self.model.layers_to_capture = [2, n // 2, n - 3] if layer_ids is None else [v + 1 for v in layer_ids]

    @torch.no_grad()
    def forward(self, capture=None):
        capture = self.model.layers_to_capture if capture is None else capture
        h, k = self.x, 0
        for i, layer in enumerate(self.layers):
            if i in capture:
                self.aux[k].copy_(h)
                k += 1
            h = torch.relu(layer(h))
        return h


class CudaGraphReplay:
    """What SGLang's decode graph runner holds (its class name says "graph")."""

    def __init__(self, target: Target, device: str) -> None:
        self.target = target
        if device == "cuda":
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    target.forward()
            torch.cuda.current_stream().wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                target.forward()
            torch.cuda.synchronize()
        else:  # emulated: the layer set is frozen at capture
            self.frozen = list(target.model.layers_to_capture)

    def replay(self) -> torch.Tensor:
        if hasattr(self, "graph"):
            self.graph.replay()
            torch.cuda.synchronize()
        else:
            self.target.forward(self.frozen)
        return self.target.aux.clone()


class Runner:
    def __init__(self, target: Target, device: str) -> None:
        self.target, self.device = target, device
        self.prefill_cuda_graph_runner = None
        self.recapture_decode_cuda_graph()

    def recapture_decode_cuda_graph(self):
        self.decode_cuda_graph_runner = CudaGraphReplay(self.target, self.device)


def expected_aux(target: Target, layer_ids: list[int]) -> torch.Tensor:
    target.forward([v + 1 for v in layer_ids])
    return target.aux.clone()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--bs", type=int, default=64)
    args = parser.parse_args()
    target = Target(args.layers, args.hidden, args.bs, args.device)
    old, new = [1, args.layers // 2 - 1, args.layers - 4], [2, args.layers // 2, args.layers - 3]
    target.set_eagle3_layers_to_capture(old)
    runner = Runner(target, args.device)
    worker = SimpleNamespace(target_worker=SimpleNamespace(model_runner=runner), adaptive_controller=None)
    facts = control_facts.ControlFacts()
    facts.target = facts.inner = target
    facts.graphs = graph_capture.plan(worker, SimpleNamespace(device="cuda"), "0.5.23")
    ctl = aux_channel.AuxChannel(Shim(), "inproc://unused", "x" * 32, facts)
    ctl.current = old
    want_old, want_new = expected_aux(target, old), expected_aux(target, new)
    replays_old = torch.equal(runner.decode_cuda_graph_runner.replay(), want_old)
    target.set_eagle3_layers_to_capture(new)  # a change without recapture ...
    stale = torch.equal(runner.decode_cuda_graph_runner.replay(), want_old)  # ... the graph still replays the old set
    target.set_eagle3_layers_to_capture(old)
    refusal = facts.graphs.refusal(recapture=False)
    outcome = ctl._apply({"id": "check", "layers": new, "captured": [v + 1 for v in new], "recapture": True})
    replays_new = torch.equal(runner.decode_cuda_graph_runner.replay(), want_new)
    print(json.dumps({
        "device": torch.cuda.get_device_name() if args.device == "cuda" else args.device,
        "target": {"layers": args.layers, "hidden": args.hidden, "bs": args.bs},
        "graph_replays_captured_set": replays_old,
        "graph_ignores_a_change_without_recapture": stale,
        "refused_without_recapture": "pass --recapture" in refusal,
        "applied": outcome.get("status") == "applied",
        "graph_replays_new_set_after_recapture": replays_new,
        "pause_ms": outcome.get("pause_ms"),
    }))


if __name__ == "__main__":
    main()
