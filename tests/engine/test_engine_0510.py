"""SGLang 0.5.10 (v1 EAGLEWorker, `midlayer` draft naming): its own draft loader and forward, in-process on CPU.

0.5.10 has no CPU EAGLE attention backend, so the full engine does not run here;
eagle3scope/demo/draft_probe.py builds 0.5.10's LlamaForCausalLMEagle3, loads a
checkpoint with its load_weights and runs one extend pass.
"""

import json
import os

import pytest

from support.engine import run_engine_python

from eagle3scope.demo.server import checkout_pythonpath

pytestmark = pytest.mark.engine


def probe(python, draft_dir):
    done = run_engine_python(python, "-m", "eagle3scope.demo.draft_probe", str(draft_dir),
                             env={**checkout_pythonpath(os.environ), "TORCHDYNAMO_DISABLE": "1"}, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_0510_loads_midlayer_checkpoint_and_runs_forward(engine_python_0510, tiny_models):
    target, _ = tiny_models
    report = probe(engine_python_0510, target.parent / "draft-random-midlayer")
    assert report["sglang"] == "0.5.10"
    assert report["decoder_module"] == "midlayer"
    assert report["params_not_loaded"] == [] and report["params_partly_loaded"] == []
    assert report["fc_input_widths"] == [3 * 128]  # the target's three aux states, concatenated
    assert report["logits_shape"] == [6, 256] and report["finite"]
    assert all(0 <= t < 1024 for t in report["draft_top1_target_ids"])


def test_0510_silently_drops_speculators_layer_names(engine_python_0510, tiny_models):
    _, draft = tiny_models  # layers.0.* names: only >= 0.5.12 maps them
    report = probe(engine_python_0510, draft)
    layer_params = {
        "model.midlayer.hidden_norm.weight", "model.midlayer.input_layernorm.weight",
        "model.midlayer.mlp.down_proj.weight", "model.midlayer.mlp.gate_up_proj.weight",
        "model.midlayer.post_attention_layernorm.weight", "model.midlayer.self_attn.o_proj.weight",
        "model.midlayer.self_attn.qkv_proj.weight",
    }
    assert set(report["params_not_loaded"]) == layer_params
    assert any(n.startswith("layers.0.") for n in report["checkpoint_names"])
    assert report["finite"]  # nothing fails: the draft just runs with an untrained layer
