"""Cost of the aux control channel: what the scheduler's hot path pays, and request latency.

The step hook calls ``Control.apply_pending()`` before every step; with nothing queued that must
cost next to nothing. Measured here on a stand-in target with SGLang's Llama semantics over a
real loopback REP socket (the engine figures are in BENCHMARKS.md).

    python benchmarks/shim/bench_aux_control.py
"""

from __future__ import annotations

import shutil
import statistics
import threading
import time
import timeit
from types import SimpleNamespace

from eagle3scope.control.client import ControlClient
from eagle3scope.wire.token import create_token_file, read_token
from eagle3scope.wire.endpoints import free_port
from eagle3scope_shim import aux_channel, control_facts
from eagle3scope_shim.shim_state import Shim


class Target:
    def __init__(self) -> None:
        self.config = SimpleNamespace(num_hidden_layers=8)
        self.model = SimpleNamespace(layers_to_capture=[3, 5, 6])
        self.capture_aux_hidden_states = True

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.model.layers_to_capture = [2, 4, 5] if layer_ids is None else [v + 1 for v in layer_ids]


def main() -> None:
    facts = control_facts.ControlFacts()
    facts.target = facts.inner = Target()
    facts.family, facts.rule, facts.num_layers, facts.expected, facts.configured = "LlamaForCausalLM", "+1", 8, 3, [2, 4, 5]
    token = create_token_file()
    ctl = aux_channel.AuxChannel(Shim(), f"tcp://127.0.0.1:{free_port()}", read_token(token), facts)
    ctl.start()
    client = ControlClient(ctl.endpoint, read_token(token))
    n = 1_000_000
    idle_ns = timeit.timeit(ctl.apply_pending, number=n) / n * 1e9
    base_ns = timeit.timeit(lambda: None, number=n) / n * 1e9
    print(f"apply_pending with nothing queued: {idle_ns:.0f} ns per step "
          f"(an empty Python call here and now: {base_ns:.0f} ns)")

    lat = []
    for _ in range(200):
        t0 = time.perf_counter()
        client.list()
        lat.append((time.perf_counter() - t0) * 1e3)
    print(f"list round trip: median {statistics.median(lat):.2f} ms, p95 {sorted(lat)[189]:.2f} ms")

    stop = threading.Event()

    def scheduler():  # a step every 10 ms
        while not stop.is_set():
            ctl.apply_pending()
            time.sleep(0.01)

    thread = threading.Thread(target=scheduler)
    thread.start()
    lat = []
    for i in range(50):
        t0 = time.perf_counter()
        reply = client.set([1, 3, 4] if i % 2 else [2, 4, 5], wait_s=2.0)
        assert reply["status"] == "applied"
        lat.append((time.perf_counter() - t0) * 1e3)
    stop.set()
    thread.join()
    print(f"set -> applied at the next step (steps every 10 ms): median {statistics.median(lat):.2f} ms, "
          f"max {max(lat):.2f} ms")
    ctl.close()
    shutil.rmtree(token.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
