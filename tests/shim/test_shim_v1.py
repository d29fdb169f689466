"""The shim in SGLang 0.5.10, the older-release environment (no plugin mechanism, v1 worker era,
``model.midlayer`` naming), activated by the ``.pth`` bootstrap.

0.5.10 cannot serve EAGLE on a CPU (no CPU EAGLE attention backend, and its worker module needs
CUDA kernels), so what runs for real here is what runs on CPU: SGLang's own
``LlamaForCausalLMEagle3`` built in-process by ``eagle3scope.demo.draft_probe``, its own
``load_weights`` and one extend forward. The shim's loader watch must name the weights 0.5.10
silently drops (a ``layers.0.*`` checkpoint), agreeing with the probe's independent NaN-fill
method, and its forward hook must see the 3H-wide pass with ``fc`` applied. The v1 worker seams
are checked statically over this release (and every other) in test_compat_static.py.
"""

from __future__ import annotations

import json
import os

import pytest
from support.engine import run_engine_python

from eagle3scope.demo.server import checkout_pythonpath

pytestmark = pytest.mark.engine

H, AUX = 128, 3

SCRIPT = r"""
import json, sys
from eagle3scope_shim import seams
from eagle3scope_shim.instrumentor import INSTRUMENTOR
from eagle3scope_shim.shim_state import Step
from eagle3scope.demo import draft_probe

shim = INSTRUMENTOR.shim  # built by the .pth bootstrap as the interpreter started

shim.step = Step()  # collect draft passes as a speculative round would
report = draft_probe.probe(sys.argv[1])
(watch,) = shim.load.draft_loads.values()
chosen = seams.choose(seams.source_lookup(seams.installed_root()))
print("RESULT " + json.dumps({
    "probe_not_loaded": report["params_not_loaded"],
    "decoder_module": report["decoder_module"],
    "fc_input_widths": report["fc_input_widths"],
    "unwritten": sorted(n for n in watch.params if n not in watch.written),
    "skipped": watch.skipped,
    "consumed": watch.consumed,
    "ignored": watch.ignored,
    "passes": shim.step.passes,
    "seams": shim.seams.status,
    "adapters": sorted(a.name for a, _ in chosen),
}))
"""


def _probe(python, draft_dir) -> dict:
    # this checkout's shim first: the shared venv's editable install maps it to whichever checkout built it
    done = run_engine_python(python, "-c", SCRIPT, str(draft_dir),
                             env={**checkout_pythonpath(os.environ), "EAGLE3SCOPE_ENDPOINT": "tcp://127.0.0.1:5999",
                                  "SGLANG_USE_CPU_ENGINE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.split("RESULT ", 1)[1])


@pytest.fixture(scope="module")
def bootstrapped(engine_python_0510):
    installed = run_engine_python(engine_python_0510, "-m", "eagle3scope_shim.bootstrap", "install")  # idempotent
    assert installed.returncode == 0, installed.stderr[-2000:]
    return engine_python_0510


def test_silent_drop_of_layers_0_names_is_reported(bootstrapped, tiny_models):
    _, draft = tiny_models  # speculators naming: layers.0.*
    result = _probe(bootstrapped, draft)
    assert result["decoder_module"] == "midlayer"
    assert result["adapters"] == ["commit", "deepseek_set_eagle3", "finish", "llama_eagle", "llama_eagle3", "llama_set_eagle3",
                                  "mistral_large_3_eagle", "qwen2_eagle", "scheduler",
                                  "target_graph_capture", "v1", "v2"]
    assert result["seams"]["llama_eagle3.load"] == "attached" and result["seams"]["llama_eagle3.forward"] == "attached"
    assert result["skipped"] and all(name.startswith("layers.0.") for name in result["skipped"])
    assert "layers.0.self_attn.q_proj.weight" in result["skipped"]
    dropped = {n for n in result["unwritten"] if n.startswith("model.midlayer.")}
    assert dropped and "model.midlayer.self_attn.qkv_proj.weight" in dropped
    # the embedding comes from the target at serving time; the probe leaves it out
    assert set(result["unwritten"]) - {"model.embed_tokens.weight"} == set(result["probe_not_loaded"])
    assert {"fc.weight", "d2t", "lm_head.weight"} <= set(result["consumed"]) and result["ignored"] == ["t2d"]
    # [mode, width, fc, n, graph]: None = the forward ran eagerly, not a replay
    assert result["passes"] == [["extend", AUX * H, True, 1, None]] and result["fc_input_widths"] == [AUX * H]


def test_midlayer_names_load_fully(bootstrapped, tiny_models):
    _, draft = tiny_models
    result = _probe(bootstrapped, draft.parent / "draft-random-midlayer")
    assert result["skipped"] == [] and result["probe_not_loaded"] == []
    assert result["unwritten"] == ["model.embed_tokens.weight"]
    assert any(n.startswith("midlayer.") for n in result["consumed"])
