"""The seeds' model family through the real SGLang 0.5.23 CPU engine: a DeepseekV3 target (MLA + MoE)
trained on the demo language, served as DeepseekV3ForCausalLM and through the Kimi-K2.5 wrapper, with
its Llama-style EAGLE-3 draft (speculators' ids and names) and its MLA draft (SGLang's
Eagle3DeepseekV2ForCausalLM, Model-Optimizer's layout and ids).

Each scenario runs on one server per session (conftest ``scenario_result(name, "deepseek")``),
recorded by the real shim and judged with the ``check`` command. Greedy outputs are compared with
plain greedy decoding of the same checkpoint by transformers (engine_side/hf_greedy.py), which
SGLang's own plain decoding matches token for token on this family.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

import pytest
from support.cli import check_json, fired
from support.engine import SCENARIO_NEW_TOKENS, SCENARIO_PROMPTS_SEED, SCENARIO_STEPS, run_engine_python

from eagle3scope.demo import deepseek, deepseek_mla, families, recipe
from eagle3scope.demo.models import ModelPaths, demo_prompts
from eagle3scope.wire.aux_layers import captured_for, default_capture, family_rule

FAMILY = "deepseek"
PROMPTS = demo_prompts(4, seed=SCENARIO_PROMPTS_SEED)


# ---------------------------------------------------------------- without the engine


def fake_paths(tmp_path) -> deepseek.DeepseekPaths:
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps({"eagle_config": {
        "eagle_aux_hidden_state_layer_ids": list(deepseek.SPECULATORS_AUX_IDS), "use_aux_hidden_state": True}}))
    (draft / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    return deepseek.DeepseekPaths(root=tmp_path, target=tmp_path / "target", draft=draft, draft_midlayer=draft,
                                  draft_speculators=draft, aux_layer_ids=tuple(deepseek.SPECULATORS_AUX_IDS),
                                  num_target_layers=deepseek.TARGET["num_hidden_layers"],
                                  target_kimi=tmp_path / "target-kimi")


def test_family_is_offered_next_to_llama():
    assert families.FAMILIES == ("llama", "deepseek")
    assert set(families.scenarios_of(FAMILY)) == {"healthy", "healthy-kimi", "seeds", "aux-plus-one", "healthy-mla",
                                                  "healthy-mla-kimi"}
    assert "seeds" not in families.scenarios_of("llama")
    with pytest.raises(KeyError):
        families.scenarios_of("qwen")


def test_trained_layers_are_the_seeds_default_and_captured_as_given():
    n = deepseek.TARGET["num_hidden_layers"]
    # speculators' [2, n//2, n-3] (Kimi-K2.5: [2, 30, 58]) are distinct layers here, and SGLang's default.
    assert deepseek.SPECULATORS_AUX_IDS == default_capture(n) and len(set(default_capture(n))) == 3
    for cls in ("DeepseekV3ForCausalLM", "KimiK25ForConditionalGeneration"):
        rule = family_rule(cls, "0.5.23")
        assert captured_for(deepseek.SPECULATORS_AUX_IDS, rule, n) == deepseek.SPECULATORS_AUX_IDS
        # the conditional +1: the output-of-layer form of the same layers starts at 1 and is shifted back
        assert captured_for(list(recipe.AUX_LAYER_IDS), rule, n) == deepseek.SPECULATORS_AUX_IDS
    assert family_rule("DeepseekV3ForCausalLM", "0.5.12") == "+1"  # where [2, 4, 5] became [3, 5, 6]


def test_scenarios_serve_the_right_target_and_config(tmp_path):
    paths = fake_paths(tmp_path)
    offered = families.scenarios_of(FAMILY)
    assert offered["healthy"].prepare(paths, tmp_path / "s").target_dir == paths.target
    assert offered["healthy-kimi"].prepare(paths, tmp_path / "s").target_dir == paths.target_kimi
    seeds = offered["seeds"].prepare(paths, tmp_path / "s")
    assert seeds.target_dir == paths.target_kimi
    assert json.loads((seeds.draft_dir / "config.json").read_text())["eagle_config"]["use_aux_hidden_state"] is False
    plus_one = offered["aux-plus-one"].prepare(paths, tmp_path / "s")
    ids = json.loads((plus_one.draft_dir / "config.json").read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    n = paths.num_target_layers
    # used as given on this family: one layer past each trained one, which the aux rule recognises
    assert captured_for(ids, family_rule("DeepseekV3ForCausalLM", "0.5.23"), n) == [i + 1 for i in default_capture(n)]


def test_paths_keep_the_llama_layout():
    assert issubclass(deepseek.DeepseekPaths, ModelPaths)
    assert issubclass(deepseek_mla.DeepseekMLAPaths, deepseek.DeepseekPaths)


def test_mla_scenarios_serve_the_mla_draft(tmp_path):
    base = fake_paths(tmp_path)
    paths = deepseek_mla.DeepseekMLAPaths(**base.__dict__, draft_mla=tmp_path / "draft-mla")
    offered = families.scenarios_of(FAMILY)
    spec = offered["healthy-mla"].prepare(paths, tmp_path / "s")
    assert (spec.target_dir, spec.draft_dir) == (paths.target, paths.draft_mla)
    spec = offered["healthy-mla-kimi"].prepare(paths, tmp_path / "s")
    assert (spec.target_dir, spec.draft_dir) == (paths.target_kimi, paths.draft_mla)


def test_mla_draft_config_is_model_optimizers_and_reaches_the_trained_layers(tmp_path):
    """Model-Optimizer's Kimi-K2 MLA template (benchmarks/support/draft_checkpoints.py) at this size: its output-of-layer ids
    [1, n//2-1, n-4] are captured one deeper by the family's conditional +1, i.e. the trained [2, 4, 5]."""
    from benchmarks.support.draft_checkpoints import modelopt_mla_config

    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"rope_parameters": dict(deepseek.ROPE), "rope_interleave": True,
                                                    "bos_token_id": 1, "eos_token_id": 2}))
    config = deepseek_mla.draft_config(target)
    published = modelopt_mla_config(deepseek.TARGET["num_hidden_layers"])
    assert set(published) <= set(config)
    assert {k: config[k] for k in ("architectures", "model_type", "num_hidden_layers", "tie_word_embeddings")} == {
        k: published[k] for k in ("architectures", "model_type", "num_hidden_layers", "tie_word_embeddings")}
    assert set(config["eagle_config"]) == set(published["eagle_config"])
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == \
        published["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    # the draft's MLA shape is the target's (SGLang builds DeepseekV2AttentionMLA from these)
    assert {k: config[k] for k in deepseek_mla.MLA} == {k: deepseek.TARGET[k] for k in deepseek_mla.MLA}
    n = deepseek.TARGET["num_hidden_layers"]
    for cls in ("DeepseekV3ForCausalLM", "KimiK25ForConditionalGeneration"):
        captured = captured_for(config["eagle_config"]["eagle_aux_hidden_state_layer_ids"], family_rule(cls, "0.5.23"), n)
        assert captured == deepseek.SPECULATORS_AUX_IDS


def test_mla_cache_entry_is_its_own(tmp_path):
    """The MLA draft's entry hashes its own module and the target's version: a change to the MLA draft
    retrains the draft only, never the 13-minute target."""
    assert deepseek_mla.version() != deepseek.version()
    assert deepseek_mla.cached(tmp_path) is None


def test_deepseek_module_stays_free_of_torch():
    code = "import sys, eagle3scope.demo.deepseek, eagle3scope.demo.families; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


# ---------------------------------------------------------------- through the real engine


@pytest.fixture(scope="module")
def hf_greedy(deepseek_models, engine_python):
    """Plain greedy continuations of PROMPTS by transformers' DeepseekV3ForCausalLM, same checkpoint."""
    done = run_engine_python(engine_python, "tests/engine_side/hf_greedy.py", str(deepseek_models.target),
                             str(SCENARIO_NEW_TOKENS), *PROMPTS, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.engine
@pytest.mark.parametrize("scenario", ["healthy", "healthy-kimi", "healthy-mla", "healthy-mla-kimi"])
def test_healthy_serves_plain_greedy_drafts_well_and_fires_nothing(scenario_result, hf_greedy, scenario):
    run = scenario_result(scenario, FAMILY)
    assert [r["output_ids"] for r in run["outputs"]] == hf_greedy
    code, report = check_json(run["recording"])
    assert fired(report) == set() and fired(report, "warning") == set(), report["violations"]
    assert set(report["summary"]["publishers"]) and report["summary"]["complete"]
    assert code == 0
    assert report["summary"]["steps"] >= SCENARIO_STEPS // 2
    served = [r["meta_info"]["spec_accept_length"] for r in run["outputs"]]
    assert statistics.mean(served) >= 2.3, served
    assert report["summary"]["mean_accept_length"] >= 2.3


@pytest.mark.engine
@pytest.mark.parametrize("scenario", ["healthy-mla", "healthy-mla-kimi"])
def test_mla_draft_loads_every_weight_and_applies_fc(scenario_result, deepseek_models, scenario):
    """The shim's load report of SGLang's Eagle3DeepseekV2ForCausalLM: every checkpoint tensor consumed, every
    parameter written (the embedding shared from the target), fc applied to the 3 x 128 aux states captured
    from the trained layers, d2t consistent; and per step the draft-extend pass runs fc."""
    from eagle3scope.store import SessionReader

    run = scenario_result(scenario, FAMILY)
    with SessionReader(run["recording"]) as reader:
        frames = [f for _, f in reader.frames()]
    load = [f.body for f in frames if f.kind == "load"][-1]
    h = deepseek.TARGET["hidden_size"]
    assert load["draft_class"] == "Eagle3DeepseekV2ForCausalLM"
    assert load["weights"]["skipped"] == [] and load["weights"]["unwritten"] == [], load["weights"]
    assert load["fc"] == {"in": 3 * h, "out": h}
    assert load["aux"]["capture_on"] and load["aux"]["use_aux"]
    assert load["aux"]["configured"] == deepseek_mla.MODELOPT_AUX_IDS
    assert load["aux"]["captured"] == deepseek.SPECULATORS_AUX_IDS
    # no t2d in Model-Optimizer's export: nothing to compare d2t with (None), never inconsistent
    assert load["d2t"]["present"] and load["d2t"]["t2d_consistent"] is not False and not load["d2t"]["looks_absolute"]
    assert load["lm_head"]["source"] == "checkpoint"
    decode = [f.body for f in frames if f.kind == "step" and f.body["mode"] == "decode"]
    assert decode and all(any(p["fc"] and p["width"] == 3 * h for p in b["passes"]) for b in decode)


@pytest.mark.engine
def test_doctor_on_the_mla_draft_agrees_with_the_engine(deepseek_models, scenario_result):
    """The doctor passes the MLA draft for 0.5.23 (and refuses it for a release without the class); the engine
    then loads it cleanly and drafts well (the healthy-mla run)."""
    from eagle3scope.doctor.run_checks import diagnose

    for target in (deepseek_models.target, deepseek_models.target_kimi):
        now = diagnose(deepseek_models.draft_mla, sglang_version="0.5.23", target_dir=target).to_dict()
        assert now["verdict"] != "broken", now["findings"]
        assert not [f for f in now["findings"] if f["severity"] == "error"], now["findings"]
    old = diagnose(deepseek_models.draft_mla, sglang_version="0.5.10", target_dir=deepseek_models.target).to_dict()
    assert old["verdict"] == "broken"
    assert "architecture-unsupported" in {f["id"] for f in old["findings"]}
    run = scenario_result("healthy-mla", FAMILY)
    code, report = check_json(run["recording"])
    assert code == 0 and fired(report) == set()


@pytest.mark.engine
def test_story_names_the_seeds_cause_then_fixes_it(deepseek_models, engine_python, tmp_path):
    """``demo --story`` headless: the seeds' setup (aux capture off on the Kimi-K2.5 wrapper) is named by its
    rules with evidence, the doctor agrees before serving, its fix passes the doctor, and the fixed draft
    serves with no rule firing and a clearly higher acceptance."""
    from eagle3scope.commands.demo_story import run_story

    lines: list[str] = []
    out = run_story(deepseek_models, python=engine_python, steps=SCENARIO_STEPS // 2, say=lines.append,
                    workdir=tmp_path)
    broken = {v.id: v for v in out["broken"]["violations"] if v.severity == "error"}
    assert broken.keys() & {"aux-capture-off", "fc-bypassed"}, out["broken"]["violations"]
    if "fc-bypassed" in broken:  # the draft's 128-wide hidden size equals the target's: fc silently skipped
        assert broken["fc-bypassed"].evidence["fc_in"] == 3 * deepseek.TARGET["hidden_size"]
    assert out["doctor_before"]["verdict"] == "broken"
    assert "aux-capture-off" in {f["id"] for f in out["doctor_before"]["findings"]}
    assert any("use_aux_hidden_state false -> true" in c for c in out["fix_changes"]), out["fix_changes"]
    assert out["doctor_after"]["verdict"] != "broken", out["doctor_after"]["findings"]
    assert [v for v in out["fixed"]["violations"] if v.severity != "info"] == []
    assert out["fixed"]["accept"] > out["broken"]["accept"] + 0.5, (out["broken"]["accept"], out["fixed"]["accept"])
    assert any(line.startswith("act 4/4") for line in lines)


@pytest.fixture(scope="module")
def aux_plus_one(deepseek_models, engine_python, tmp_path_factory):
    """The aux-plus-one scenario with the control channel: its recording, then ``aux cycle`` (the CLI) on it."""
    from eagle3scope.demo.runner import ScenarioRun

    root = tmp_path_factory.mktemp("aux-plus-one")
    with ScenarioRun("aux-plus-one", deepseek_models, family=FAMILY, python=engine_python,
                     log_path=root / "server.log") as run:
        run.record(root / "run.e3s", SCENARIO_STEPS // 2)
        cycle = subprocess.run(
            [sys.executable, "-m", "eagle3scope", "aux", "cycle", "--control", run.control_endpoint, "--token-file",
             str(run.token_file), "-c", run.endpoint, "--presets", "configured,configured-1,configured+1",
             "--steps", "30", "--json"],
            capture_output=True, text=True, timeout=900, env={**os.environ, "XDG_CONFIG_HOME": str(root)})
        served = [r["meta_info"]["spec_accept_length"] for r in run.workload.results]
    assert cycle.returncode == 0, cycle.stderr[-3000:]
    return {"recording": root / "run.e3s", "cycle": json.loads(cycle.stdout), "served": served}


@pytest.mark.engine
def test_ids_one_off_are_named_and_aux_cycle_finds_the_trained_set(aux_plus_one, deepseek_models):
    code, report = check_json(aux_plus_one["recording"])
    mismatch = [v for v in report["violations"] if v["id"] == "aux-layers-mismatch"]
    assert mismatch and mismatch[0]["severity"] == "warning", report["violations"]
    assert mismatch[0]["evidence"]["kind"] == "input-of-layer-ids-shifted-by-one"
    assert mismatch[0]["evidence"]["captured"] == [i + 1 for i in deepseek.SPECULATORS_AUX_IDS]
    by = {m["preset"]: m for m in aux_plus_one["cycle"]["results"]}
    means = {k: round(m["mean_accept_length"], 2) for k, m in by.items()}
    # the family's rule: [2, 4, 5] are captured as given, so configured-1 is the trained set
    assert by["configured-1"]["captured"] == deepseek.SPECULATORS_AUX_IDS, by
    assert aux_plus_one["cycle"]["best"]["layers"] == deepseek.SPECULATORS_AUX_IDS, means
    assert by["configured-1"]["mean_accept_length"] > by["configured"]["mean_accept_length"] + 0.25, means


@pytest.mark.engine
def test_doctor_preflight_agrees_with_the_engine(deepseek_models):
    """speculators' layers.0.* draft: an old release (0.5.10, not runnable here for this family) would drop
    the decoder layer silently; 0.5.23 loads it as trained, which the healthy runs' load reports confirm."""
    from eagle3scope.doctor.run_checks import diagnose

    old = diagnose(deepseek_models.draft, sglang_version="0.5.10", target_dir=deepseek_models.target_kimi).to_dict()
    assert old["verdict"] == "broken"
    assert "weights-dropped" in {f["id"] for f in old["findings"] if f["severity"] == "error"}
    new = diagnose(deepseek_models.draft, sglang_version="0.5.23", target_dir=deepseek_models.target_kimi).to_dict()
    assert new["verdict"] != "broken", new["findings"]


@pytest.mark.parametrize("version, rule", [("0.5.23", "+1-if-first-1"), ("0.5.12", "+1")])
def test_aux_panel_names_the_family_rule(version, rule):
    """The aux panel says how this target's family maps ids (SGLang's DeepseekV2 rule changed at 0.5.13)."""
    from benchmarks.support.synthetic import encode_frame, hello_body, load_body

    from eagle3scope.analysis.facts import capture_rule
    from eagle3scope.analysis.state import SessionState
    from eagle3scope.analysis.views import aux_view
    from eagle3scope.wire import decode_frame
    from eagle3scope.wire.aux_layers import CaptureRule

    state = SessionState()
    state.ingest(decode_frame(encode_frame("hello", hello_body(sglang_version=version), src="dp0", n=0, t=1)))
    state.ingest(decode_frame(encode_frame("load", load_body(target_class="KimiK25ForConditionalGeneration"),
                                           src="dp0", n=1, t=2)))
    assert capture_rule(state.publishers["dp0"]) == rule
    ((_, facts),) = aux_view(state).publishers
    assert [f.text for f in facts if f.label == "family id rule"] == [f"{rule}: {CaptureRule(rule).summary}"]


@pytest.mark.parametrize("edit, errors, warnings", [
    (None, set(), set()),
    # the pair SGLang writes fused: without its partner the fused projection keeps its random init
    ("drop layers.0.self_attn.kv_a_proj_with_mqa.weight", {"weights-unwritten"}, set()),
    ("drop layers.0.mlp.down_proj.weight", {"weights-unwritten"}, set()),
    ("drop lm_head.weight", {"weights-unwritten"}, set()),
    # a name the MLA loader does not know: logged and skipped (and its parameter left random)
    ("rename layers.0.hidden_norm.weight layers.0._orig_mod.hidden_norm.weight", {"weights-unwritten"},
     {"weights-dropped"}),
    ("add layers.0.self_attn.rotary_emb.inv_freq", set(), {"weights-dropped"}),
])
def test_doctor_models_the_mla_loader_by_name(tmp_path, edit, errors, warnings):
    """kimi_k25_eagle3.py's load_weights by name: what it writes fused, stacks, shares from the target, skips."""
    from benchmarks.support import draft_checkpoints as dc
    from eagle3scope.doctor.run_checks import diagnose

    draft, target = dc.producer_layout("modelopt-mla", tmp_path)
    if edit:
        tensors = dc.modelopt_mla_tensors()
        verb, name, *new = edit.split()
        if verb == "add":
            tensors[name] = tensors["layers.0.hidden_norm.weight"]
        else:
            value = tensors.pop(name)
            if new:
                tensors[new[0]] = value
        dc.write(draft, tensors, dc.modelopt_mla_config())
    report = diagnose(draft, sglang_version="0.5.23", target_dir=target).to_dict()
    flag = {"producer-flag-ignored"}  # Model-Optimizer's use_input_layernorm_in_first_layer, on every export
    assert {f["id"] for f in report["findings"] if f["severity"] == "error"} == errors, report["findings"]
    assert {f["id"] for f in report["findings"] if f["severity"] == "warning"} == warnings | flag, report["findings"]
    assert report["verdict"] == ("broken" if errors else "warnings")
