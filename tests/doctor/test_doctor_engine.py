"""The doctor's loader model against the real LlamaForCausalLMEagle3 of SGLang 0.5.23 and 0.5.10.

The probe (tests/engine_side/eagle3_loader_probe.py) builds the real class from each draft's
config.json and loads the checkpoint with its own load_weights; the doctor must predict the same
parameters, shapes, and written / silently skipped tensors.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from support.engine import run_engine_python
from safetensors import safe_open

from benchmarks.support import draft_checkpoints as dc
from eagle3scope.doctor.run_checks import diagnose
from eagle3scope.doctor.weight_checks import UNUSED_PARAM
from eagle3scope.doctor.loader_layouts import expected_params, layout_for, map_name
from eagle3scope.doctor.repair import fix_checkpoint

pytestmark = pytest.mark.engine
LAYOUT = layout_for("0.5.23")


def drafts(root):
    """Checkpoints that exercise every branch of load_weights."""
    odd = dc.tensors("layers.0.")
    odd["layers.0.self_attn.q_norm.weight"] = np.ones(dc.HEAD_DIM, np.float16)  # unknown: skipped
    odd["decoder.mlp.down_proj.weight"] = odd.pop("layers.0.mlp.down_proj.weight")  # unknown: skipped
    odd["model.norm.weight"] = odd.pop("norm.weight")  # 'model.' prefix: found
    normed = dc.tensors("midlayer.")
    for i, legacy in enumerate(("aux_norm_low", "aux_norm_mid", "aux_norm_high")):
        normed[f"{legacy}.weight"] = np.full(dc.H, i + 1, np.float16)
    gpt_oss = dc.tensors("layers.0.")
    gpt_oss["input_norm.weight"] = np.ones(3 * dc.H, np.float16)
    return {
        "specforge": dc.specforge(root / "specforge"),
        "odd-names": dc.write(root / "odd", odd, dc.specforge_config()),
        "fc-norm": dc.write(root / "fcnorm", normed, dc.specforge_config(fc_norm=True)),
        "norm-before-fc": dc.write(root / "nbf", gpt_oss, dc.specforge_config(eagle_config={
            "eagle_aux_hidden_state_layer_ids": dc.AUX_IDS, "norm_before_fc": True})),
        "two-layers": dc.specforge(root / "two", num_hidden_layers=2),
    }


def fused_shape(shape):
    """The shape SGLang allocates for a parameter the doctor describes by its checkpoint shards."""
    if isinstance(shape, dict):
        shards = list(shape.values())
        return [sum(s[0] for s in shards), shards[0][1]]
    return list(shape)


def broken_then_fixed(root):
    """A draft with a key 0.5.23 drops, a wrapper prefix and absolute d2t, repaired by ``fix``."""
    weights = {("module." + n if n.startswith("midlayer.self_attn") else n): w for n, w in dc.tensors().items()}
    weights["decoder.mlp.down_proj.weight"] = weights.pop("midlayer.mlp.down_proj.weight")
    weights["d2t"] = dc.draft_ids()
    broken = dc.write(root / "broken", weights, dc.specforge_config())
    fix_checkpoint(broken, root / "fixed", sglang_version="0.5.23")
    return broken, root / "fixed"


def test_loader_model_matches_the_real_class(tmp_path, engine_python):
    cases = drafts(tmp_path)
    broken, fixed = broken_then_fixed(tmp_path)
    done = run_engine_python(engine_python, "tests/engine_side/eagle3_loader_probe.py",
                             *[str(p) for p in [*cases.values(), broken, fixed]], timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    probes = {json.loads(line)["draft"]: json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")}
    # the real loader drops 5 tensors of the broken draft silently and loads the fixed copy fully
    assert set(probes[str(broken)]["params"]) - set(probes[str(broken)]["written"]) == {
        "model.layers.0.self_attn.qkv_proj.weight", "model.layers.0.self_attn.o_proj.weight",
        "model.layers.0.mlp.down_proj.weight"}
    assert probes[str(fixed)]["written"] == sorted(probes[str(fixed)]["params"])
    d2t = dc.tensors()["d2t"]
    assert probes[str(fixed)]["hot_token_id"] == dc.draft_ids().tolist() == (d2t + np.arange(dc.DRAFT_VOCAB)).tolist()
    for label, path in cases.items():
        probe = probes[str(path)]
        config = json.loads((path / "config.json").read_text())
        params = expected_params(LAYOUT, config)
        assert set(params) == set(probe["params"]), label
        for name, shape in params.items():
            real = probe["params"][name]
            if name in ("lm_head.weight", "model.embed_tokens.weight"):  # vocab rows padded to 64
                assert real[1] == shape[1] and real[0] >= shape[0], (label, name)
            else:
                assert real == fused_shape(shape), (label, name)
        with safe_open(str(path / "model.safetensors"), "np") as f:
            names = list(f.keys())
        predicted = {m.param for m in (map_name(LAYOUT, n, params) for n in names) if m.action == "param"}
        touched = set(probe["written"]) | set(probe["partly"])
        assert predicted == touched, (label, predicted ^ touched)
        # fused parameters half written would mean a shard the model thinks lands nowhere
        assert set(probe["partly"]) <= {"lm_head.weight", "model.embed_tokens.weight"}, (label, probe["partly"])
        assert probe["hot_token_id"] == (d2t + np.arange(dc.DRAFT_VOCAB)).tolist()  # d2t is an offset


def _probe_0510(python, draft):
    done = run_engine_python(python, "-m", "eagle3scope.demo.draft_probe", str(draft), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_0_5_10_drops_layers_0_names_as_predicted_and_loads_the_fixed_copy(tmp_path, engine_python_0510):
    """SGLang 0.5.10's own loader (midlayer module): the doctor's prediction and fix's repair."""
    draft = dc.write(tmp_path / "speculators-naming", dc.tensors("layers.0."), dc.specforge_config())
    report = diagnose(draft, sglang_version="0.5.10").to_dict()
    dropped = {f["id"]: f for f in report["findings"]}["weights-dropped"]["evidence"]
    probe = _probe_0510(engine_python_0510, draft)
    assert probe["sglang"] == "0.5.10" and probe["decoder_module"] == "midlayer"
    assert probe["params_not_loaded"] == sorted(dropped["params_left_random"])
    fix_checkpoint(draft, tmp_path / "fixed", sglang_version="0.5.10")
    probe = _probe_0510(engine_python_0510, tmp_path / "fixed")
    assert probe["params_not_loaded"] == [] and probe["params_partly_loaded"] == [] and probe["finite"]


def test_real_speculators_drafts_are_diagnosed_fixed_and_load_fully(tmp_path, engine_python, engine_python_0510):
    """Drafts written by the real speculators 0.9.0 (a trained Eagle3DraftModel and an Eagle3Converter
    output): the doctor's verdict per release, then fix's one copy loads with 0 skipped tensors on
    SGLang 0.5.23 and 0.5.10 (their own load_weights), with the aux ids SGLang needs."""
    from eagle3scope.demo.server import cache_dir

    python = cache_dir() / "venv-speculators-0.9.0" / "bin" / "python"
    if not python.exists():
        if os.environ.get("EAGLE3SCOPE_REQUIRE_ENGINE") == "1":
            pytest.fail(f"{python} is missing (scripts/build-speculators-env.sh)")
        pytest.skip("speculators venv not built (scripts/build-speculators-env.sh)")
    target = dc.target(tmp_path / "target")
    jobs = [{"out": str(tmp_path / "trained"), "verifier": str(target), "options": {"hidden": dc.H}},
            {"out": str(tmp_path / "converted"), "verifier": str(target),
             "options": {"convert_from": str(dc.specforge(tmp_path / "specforge"))}}]
    done = run_engine_python(python, "tests/engine_side/speculators_writer.py", json.dumps(jobs), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    fixed = {}
    for name, producer in (("trained", "speculators"), ("converted", "speculators-converted")):
        draft = tmp_path / name
        old = diagnose(draft, sglang_version="0.5.10").to_dict()
        assert old["producer"]["name"] == producer
        assert old["headline"] == "`layers.0.*` will be silently skipped by SGLang 0.5.10"
        assert {f["id"] for f in old["findings"] if f["severity"] == "error"} == {"weights-dropped", "config-speculators-format"}
        new = diagnose(draft, sglang_version="0.5.23", target_dir=target).to_dict()
        assert {f["id"] for f in new["findings"] if f["severity"] != "info"} == {"config-speculators-format"}
        fixed[name] = fix_checkpoint(draft, tmp_path / f"{name}-fixed", target_dir=target).out
        for version in ("0.5.10", "0.5.23"):
            assert diagnose(fixed[name], sglang_version=version, target_dir=target).exit_code == 0, (name, version)
    for name in fixed:  # trained: speculators [2, 4, 5] - 1; converted: no ids = the default [2, 4, 5] - 1
        config = json.loads((fixed[name] / "config.json").read_text())
        assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4], name
    done = run_engine_python(engine_python, "tests/engine_side/eagle3_loader_probe.py", *map(str, fixed.values()), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for line in (ln for ln in done.stdout.splitlines() if ln.startswith("{")):
        probe = json.loads(line)
        assert probe["written"] == sorted(probe["params"]) and probe["partly"] == [], probe["draft"]
    probe = _probe_0510(engine_python_0510, fixed["trained"])
    assert probe["decoder_module"] == "midlayer" and probe["params_not_loaded"] == [] and probe["finite"]


LLAMA_LAYOUTS = ("specforge", "sglang", "specforge-kimi", "modelopt", "modelopt-2-layers", "midlayer-N", "eagle")


def test_producer_layouts_load_as_the_doctor_says_on_0_5_23(tmp_path, engine_python):
    """Every Llama-class producer layout through 0.5.23's own loader: as written, the parameters the
    doctor calls unwritten are the ones the loader leaves alone; fix's copy writes every parameter."""
    drafts, predicted = [], {}
    for name in LLAMA_LAYOUTS:
        draft, target = dc.producer_layout(name, tmp_path / name)
        dx = diagnose(draft, sglang_version="0.5.23", target_dir=target)
        unwritten = {f.evidence["left_random"] for f in dx.findings if f.id == "weights-unused"}
        unwritten |= {p for f in dx.findings if f.id == "weights-dropped" for p in f.evidence["params_left_random"]}
        predicted[str(draft)] = unwritten
        drafts.append(draft)
        if dx.exit_code:
            out = tmp_path / name / "fixed"
            fix_checkpoint(draft, out, sglang_version="0.5.23", target_dir=target)
            predicted[str(out)] = set()
            drafts.append(out)
    done = run_engine_python(engine_python, "tests/engine_side/eagle3_loader_probe.py", *map(str, drafts), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    probes = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(probes) == len(drafts)
    for probe in probes:
        left = set(probe["params"]) - set(probe["written"]) - {"model.embed_tokens.weight"}  # the target's
        left -= {p for p in left if UNUSED_PARAM.search(p)}  # allocated, never applied
        assert left == predicted[probe["draft"]], probe["draft"]


def test_2026_findings_against_the_real_0_5_23_loader(tmp_path, engine_python):
    """Three of tests/doctor/test_doctor_2026.py's findings through 0.5.23's own LlamaForCausalLMEagle3: a tied
    config drops the trained lm_head (no such parameter) and fix's copy loads it; target_hidden_size
    null fails construction; fc for four aux states loads whole (0.5.12+ builds fc as configured)."""
    tied = dc.specforge(tmp_path / "tied", tie_word_embeddings=True)
    fix_checkpoint(tied, tmp_path / "tied-fixed", sglang_version="0.5.23")
    null = dc.specforge(tmp_path / "null", target_hidden_size=None)
    weights = dc.tensors()
    weights["fc.weight"] = np.ones((dc.H, 4 * dc.H), np.float16)
    four = dc.write(tmp_path / "four", weights, dc.specforge_config(
        eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 2, 3, 4], "use_aux_hidden_state": True}))
    predicted = {str(p): diagnose(p, sglang_version="0.5.23").to_dict() for p in (tied, null, four)}
    assert {f["id"] for f in predicted[str(tied)]["findings"]} >= {"lm-head-tied"}
    assert {f["id"] for f in predicted[str(null)]["findings"]} >= {"target-hidden-null"}
    assert predicted[str(four)]["verdict"] == "clean"
    done = run_engine_python(engine_python, "tests/engine_side/eagle3_loader_probe.py",
                             *map(str, (tied, tmp_path / "tied-fixed", null, four)), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    probes = {json.loads(line)["draft"]: json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")}
    assert "lm_head.weight" not in probes[str(tied)]["params"]  # the head is the embedding: nothing loads the trained one
    fixed = probes[str(tmp_path / "tied-fixed")]
    assert "lm_head.weight" in fixed["written"] and fixed["params"]["lm_head.weight"][1] == dc.H
    assert probes[str(null)]["error"].startswith("TypeError")
    assert probes[str(four)]["params"]["model.fc.weight"] == [dc.H, 4 * dc.H]
    assert probes[str(four)]["written"] == sorted(probes[str(four)]["params"])


def test_fc_for_four_aux_states_fails_0_5_10_s_own_loader(tmp_path, engine_python_0510):
    """The doctor's fc-width-unsupported on 0.5.10 (llama_eagle3.py builds fc for exactly 3 aux states):
    0.5.10's own load_weights refuses the 4-state fc; 0.5.23 loads it (test above)."""
    weights = dc.tensors()
    weights["fc.weight"] = np.ones((dc.H, 4 * dc.H), np.float16)
    draft = dc.write(tmp_path / "four", weights, dc.specforge_config(
        eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 2, 3, 4], "use_aux_hidden_state": True}))
    assert diagnose(draft, sglang_version="0.5.10").to_dict()["headline"] == (
        "SGLang 0.5.10 builds fc for exactly 3 aux states; this draft's fc takes 4")
    done = run_engine_python(engine_python_0510, "-m", "eagle3scope.demo.draft_probe", str(draft), timeout=300)
    said = f"Attempted to load weight (torch.Size([{dc.H}, {4 * dc.H}])) into parameter (torch.Size([{dc.H}, {3 * dc.H}]))"
    assert done.returncode != 0 and said in done.stderr, done.stderr[-3000:]
