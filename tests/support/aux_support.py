"""Shared by the aux-control tests: stand-ins (a target with SGLang's set_eagle3_layers_to_capture
semantics, 0.5.23 ``LlamaForCausalLM``: ``layers_to_capture = [i + 1 for i in ids]``, default
``[2, n // 2, n - 3]``; a publisher that records what the shim submits; a target model runner with
captured graphs), a scheduler-like loop, and the ``aux-offset`` scenario for the engine tests."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from types import SimpleNamespace


class StandInTarget:
    """SGLang 0.5.23 ``LlamaForCausalLM.set_eagle3_layers_to_capture`` semantics."""

    def __init__(self, n: int) -> None:
        self.config = SimpleNamespace(num_hidden_layers=n)
        self.model = SimpleNamespace(layers_to_capture=[])
        self.capture_aux_hidden_states = False
        self.calls = []
        self.thread = None

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.calls.append(layer_ids)
        self.thread = threading.current_thread()
        n = self.config.num_hidden_layers
        self.capture_aux_hidden_states = True
        self.model.layers_to_capture = [2, n // 2, n - 3] if layer_ids is None else [v + 1 for v in layer_ids]


class Recorder:
    def __init__(self) -> None:
        self.events = []

    def submit(self, kind, body, finalize=None):
        self.events.append((kind, body))

    def flush(self, timeout_s):  # what a recapture asks of the publisher first: nothing is queued here
        return True


class EagerRunner:
    pass


class DecodeCudaGraphRunner:
    pass


class TargetRunner:
    """Stands in for SGLang's target ModelRunner with a captured verify graph: a capture freezes the
    layers the target captures at that moment, and replay (serving) uses the frozen set, as a CUDA
    graph does. ``fail`` makes the next captures raise (e.g. out of memory)."""

    def __init__(self, target, fail: int = 0) -> None:
        self.target, self.fail, self.captures = target, fail, 0
        self.prefill_cuda_graph_runner = EagerRunner()
        self.recapture_decode_cuda_graph()

    def recapture_decode_cuda_graph(self):
        if self.fail:
            self.fail -= 1
            raise RuntimeError("CUDA out of memory during capture")
        self.decode_cuda_graph_runner = DecodeCudaGraphRunner()
        self.decode_cuda_graph_runner.replays = list(self.target.model.layers_to_capture)
        self.captures += 1


@contextlib.contextmanager
def looping(step, every: float = 0.01):
    """Call ``step`` over and over on a thread named "scheduler" (as SGLang's loop calls the shim)
    while the block runs."""
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            step()
            stop.wait(every)

    thread = threading.Thread(target=loop, name="scheduler")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def aux_offset_scenario(tmp_dir):
    """The trained demo pair as the ``aux-offset`` scenario serves it: (model paths, scenario spec,
    the draft config's ids). Skips unless the demo models are built (or EAGLE3SCOPE_BUILD_MODELS=1
    builds them; EAGLE3SCOPE_REQUIRE_ENGINE=1 demands them)."""
    import pytest

    from eagle3scope.demo import models
    from eagle3scope.demo.scenarios import SCENARIOS

    if models.cached() is None and os.environ.get("EAGLE3SCOPE_REQUIRE_ENGINE") != "1" \
            and os.environ.get("EAGLE3SCOPE_BUILD_MODELS") != "1":
        pytest.skip("demo models not built (python -m eagle3scope.demo.models, or EAGLE3SCOPE_BUILD_MODELS=1)")
    paths = models.ensure_demo_models()
    spec = SCENARIOS["aux-offset"].prepare(paths, tmp_dir)
    offset = json.loads((spec.draft_dir / "config.json").read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    return paths, spec, offset


def aux_cli(*args, env=None) -> subprocess.CompletedProcess:
    """``eagle3scope aux ARGS`` as a user runs it."""
    return subprocess.run([sys.executable, "-m", "eagle3scope.cli", "aux", *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **(env or {})})


@contextlib.contextmanager
def started_channel(shim, tmp_path):
    """A started AuxChannel of ``shim`` over a stand-in 8-layer target configured with [2, 4, 5], the
    shim's publisher replaced by a Recorder: (channel, target, a ControlClient holding the token, recorder)."""
    from eagle3scope.control.client import ControlClient
    from eagle3scope.wire.endpoints import free_port
    from eagle3scope.wire.token import create_token_file, read_token
    from eagle3scope_shim import aux_channel, control_facts

    target = StandInTarget(8)
    target.set_eagle3_layers_to_capture([2, 4, 5])
    target.calls.clear()
    facts = control_facts.ControlFacts()
    facts.target = facts.inner = target
    facts.family, facts.rule, facts.num_layers, facts.expected, facts.configured = "LlamaForCausalLM", "+1", 8, 3, [2, 4, 5]
    token_file = create_token_file(tmp_path)
    ctl = aux_channel.AuxChannel(shim, f"tcp://127.0.0.1:{free_port()}", read_token(token_file), facts)
    ctl.current = [2, 4, 5]
    recorder = Recorder()
    old = shim.publisher
    shim.publisher = recorder
    ctl.start()
    try:
        yield ctl, target, ControlClient(ctl.endpoint, read_token(token_file), timeout_s=5), recorder
    finally:
        ctl.close()
        shim.publisher = old
