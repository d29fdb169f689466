"""The doctor on every producer's checkpoint layout, for SGLang 0.5.10 and 0.5.23, with and without the
target's config: no false alarm on a correct checkpoint, the finding and a working ``fix`` on a broken one.

Layouts are copied from the producers' own files (cited in draft_checkpoints.py); the real speculators
package writes its checkpoints in tests/doctor/test_doctor_engine.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks.support import draft_checkpoints as dc
from eagle3scope.commands.doctor import WIDTH
from eagle3scope.doctor.run_checks import diagnose
from eagle3scope.doctor.repair import fix_checkpoint
from support.cli import invoke

VERSIONS = ("0.5.10", "0.5.23")


#: producer -> (recognised as, {release: finding ids that are errors}); no warnings but the one for
#: Model-Optimizer's use_input_layernorm_in_first_layer, which SGLang does not apply.
EXPECTED = {
    "speculators": ("speculators", {"0.5.10": {"weights-dropped", "config-speculators-format"},
                                    "0.5.23": {"config-speculators-format"}}),
    "speculators-converted": ("speculators-converted", {"0.5.10": {"weights-dropped", "config-speculators-format"},
                                                        "0.5.23": {"config-speculators-format"}}),
    "specforge": ("specforge", {"0.5.10": set(), "0.5.23": set()}),
    "sglang": ("sglang", {"0.5.10": set(), "0.5.23": set()}),
    "specforge-kimi": ("specforge", {"0.5.10": set(), "0.5.23": set()}),
    "modelopt": ("modelopt", {"0.5.10": {"weights-dropped"}, "0.5.23": set()}),
    "modelopt-kimi": ("modelopt", {"0.5.10": {"weights-dropped"}, "0.5.23": set()}),
    "modelopt-2-layers": ("modelopt", {"0.5.10": {"weights-dropped", "weights-unwritten", "multi-layer-draft"},
                                       "0.5.23": {"weights-unused"}}),
    "midlayer-N": ("modelopt", {"0.5.10": {"weights-dropped", "weights-unwritten", "multi-layer-draft"},
                                "0.5.23": {"weights-dropped", "weights-unused"}}),
    "modelopt-mla": ("modelopt-mla", {"0.5.10": {"architecture-unsupported"}, "0.5.23": set()}),
    "eagle": ("eagle", {"0.5.10": {"architecture"}, "0.5.23": {"architecture"}}),
    "angelslim": ("angelslim", {"0.5.10": {"architecture"}, "0.5.23": {"architecture"}}),
}


@pytest.mark.parametrize("with_target", [False, True], ids=["no-target", "target"])
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("producer", sorted(EXPECTED))
def test_verdicts(tmp_path, producer, version, with_target):
    draft, target = dc.producer_layout(producer, tmp_path)
    report = diagnose(draft, sglang_version=version, target_dir=target if with_target else None).to_dict()
    name, errors = EXPECTED[producer]
    assert report["producer"]["name"] == name
    assert {f["id"] for f in report["findings"] if f["severity"] == "error"} == errors[version]
    warnings = {f["id"] for f in report["findings"] if f["severity"] == "warning"}
    assert warnings == ({"producer-flag-ignored"} if name.startswith("modelopt") else set()), report["findings"]
    assert report["assumptions"]  # every convention is said
    if errors[version]:
        assert report["headline"] == report["findings"][0]["title"]


FIXABLE = ("speculators", "speculators-converted", "modelopt", "modelopt-kimi", "modelopt-2-layers", "midlayer-N", "eagle",
           "angelslim")


@pytest.mark.parametrize("with_target", [False, True], ids=["no-target", "target"])
@pytest.mark.parametrize("producer", FIXABLE)
def test_fix_then_clean_on_every_release_it_serves(tmp_path, producer, with_target):
    draft, target = dc.producer_layout(producer, tmp_path)
    args = ["--target", str(target)] if with_target else []
    result = invoke("fix", str(draft), "--out", str(tmp_path / "fixed"), *args)
    assert result.exit_code == 0, result.output
    assert max(map(len, result.output.splitlines())) <= WIDTH
    record = json.loads((tmp_path / "fixed" / "config.json").read_text())["eagle3scope_fix"]
    served = record["for_sglang"]
    assert served == (["0.5.23"] if producer in ("modelopt-2-layers", "midlayer-N") else ["0.5.10", "0.5.23"])
    for version in served:
        report = diagnose(tmp_path / "fixed", sglang_version=version, target_dir=target if with_target else None).to_dict()
        flagged = ["producer-flag-ignored"] if producer.startswith(("modelopt", "midlayer")) else []
        assert [f["id"] for f in report["findings"] if f["severity"] != "info"] == flagged, (version, report["findings"])
        assert report["producer"]["name"] == "eagle3scope-fix"


def test_seeds_case_first_line_and_a_copy_clean_on_both_releases(tmp_path):
    """speculators' layers.0.* draft for an old release: the first line names the silent skip."""
    draft, target = dc.producer_layout("speculators", tmp_path)
    out = invoke("doctor", str(draft), "--sglang-version", "0.5.10").output
    assert out.splitlines()[0] == "`layers.0.*` will be silently skipped by SGLang 0.5.10"
    assert max(map(len, out.splitlines())) <= WIDTH
    assert invoke("fix", str(draft), "--out", str(tmp_path / "fixed")).exit_code == 0
    for version in VERSIONS:
        code = invoke("doctor", str(tmp_path / "fixed"), "--sglang-version", version).exit_code
        assert code == 0, version


def test_speculators_ids_translated_by_the_target_family(tmp_path):
    """speculators' input-of-layer [2, 30, 58] on a DeepseekV3 target: 0.5.10 needs [1, 29, 57] (+1);
    0.5.23 adds 1 only when the first id is 1, so the same [1, 29, 57] works there: one copy serves both."""
    cfg = dc.speculators_config()
    cfg["eagle_aux_hidden_state_layer_ids"] = [2, 30, 58]
    cfg["speculators_config"]["verifier"]["architectures"] = ["DeepseekV3ForCausalLM"]
    draft = dc.write(tmp_path / "d", dc.tensors("layers.0."), cfg)
    assert invoke("fix", str(draft), "--out", str(tmp_path / "fixed")).exit_code == 0
    fixed = json.loads((tmp_path / "fixed" / "config.json").read_text())
    assert fixed["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 29, 57]
    assert fixed["eagle3scope_fix"]["trained_capture"] == [2, 30, 58]
    target = dc.deepseek_target(tmp_path / "t")
    for version in VERSIONS:
        assert diagnose(tmp_path / "fixed", sglang_version=version, target_dir=target).exit_code == 0


def test_trained_layers_no_release_pair_can_share_refuse_with_per_release_step(tmp_path):
    """speculators ids [3, 31, 59] on DeepseekV3: 0.5.10 needs [2, 30, 58], which 0.5.23 captures as given."""
    cfg = dc.speculators_config()
    cfg["eagle_aux_hidden_state_layer_ids"] = [3, 31, 59]
    cfg["speculators_config"]["verifier"]["architectures"] = ["DeepseekV3ForCausalLM"]
    draft = dc.write(tmp_path / "d", dc.tensors("layers.0."), cfg)
    result = invoke("fix", str(draft), "--out", str(tmp_path / "both"))
    assert result.exit_code == 2 and "--for-sglang 0.5.10" in result.output and "--for-sglang 0.5.23" in result.output
    for version, ids in (("0.5.10", [2, 30, 58]), ("0.5.23", [3, 31, 59])):
        out = tmp_path / version
        assert invoke("fix", str(draft), "--out", str(out), "--for-sglang", version).exit_code == 0
        assert json.loads((out / "config.json").read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == ids


def test_embeddings_id_needs_the_newer_release(tmp_path):
    """speculators' id 0 is the input of layer 0: 0.5.22+ capture it (configured -1), 0.5.10 cannot."""
    cfg = dc.speculators_config()
    cfg["eagle_aux_hidden_state_layer_ids"] = [0, 4, 5]
    draft = dc.write(tmp_path / "d", dc.tensors("layers.0."), cfg)
    result = invoke("fix", str(draft), "--out", str(tmp_path / "old"), "--for-sglang", "0.5.10")
    said = " ".join(result.output.split())
    assert result.exit_code == 2 and "use SGLang 0.5.22+" in said and "retrain with ids >= 1" in said
    result = invoke("fix", str(draft), "--out", str(tmp_path / "new"), "--for-sglang", "0.5.23")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "new" / "config.json").read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [-1, 3, 4]


def test_norm_before_residual_is_noted_by_doctor_and_fix(tmp_path):
    cfg = dc.speculators_config()
    cfg["norm_before_residual"] = True
    draft = dc.write(tmp_path / "d", dc.tensors("layers.0."), cfg)
    report = diagnose(draft, sglang_version="0.5.23").to_dict()
    flag = [f for f in report["findings"] if f["id"] == "producer-flag-ignored"]
    assert flag and flag[0]["severity"] == "warning" and "norm_before_residual" in flag[0]["title"]
    result = invoke("fix", str(draft), "--out", str(tmp_path / "fixed"))
    assert result.exit_code == 0 and "does not implement speculators' norm_before_residual" in result.output
    fixed = diagnose(tmp_path / "fixed", sglang_version="0.5.23").to_dict()
    assert any("norm_before_residual" in n for n in fixed["notes"])  # the copy is not called clean silently
    assert [f["id"] for f in fixed["findings"] if f["severity"] != "info"] == ["producer-flag-ignored"]


@pytest.mark.parametrize("version", VERSIONS)
def test_angelslim_ids_are_said_unread_and_fix_moves_them_into_eagle_config(tmp_path, version):
    """AngelSlim's own key for custom layers: SGLang would capture its default instead of [0, 2, 5]."""
    draft = dc.write(tmp_path / "d", dc.tensors(), dc.angelslim_config([0, 2, 5]))
    target = dc.target(tmp_path / "t")
    report = diagnose(draft, sglang_version=version, target_dir=target).to_dict()
    assert report["producer"]["name"] == "angelslim"
    unread = [f for f in report["findings"] if f["id"] == "aux-layers-mismatch"]
    assert unread and unread[0]["severity"] == "error" and "read by nobody" in unread[0]["title"]
    assert {f["id"] for f in report["findings"] if f["severity"] == "error"} == {"architecture", "aux-layers-mismatch"}
    result = invoke("fix", str(draft), "--out", str(tmp_path / "fixed"), "--target", str(target),
                    "--for-sglang", version)
    assert result.exit_code == 0, result.output
    written = json.loads((tmp_path / "fixed" / "config.json").read_text())
    assert written["architectures"] == ["LlamaForCausalLMEagle3"] and "aux_hidden_states_layer_ids" not in written
    assert written["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 2, 5]
    assert written["eagle3scope_fix"]["trained_capture"] == [1, 3, 6]  # hidden_states[id + 1]: inputs of 1, 3, 6
    after = diagnose(tmp_path / "fixed", sglang_version=version, target_dir=target).to_dict()
    assert [f for f in after["findings"] if f["severity"] != "info"] == [], after["findings"]


def test_angelslim_ids_equal_to_the_default_are_an_info_not_an_error(tmp_path):
    draft = dc.write(tmp_path / "d", dc.tensors(), dc.angelslim_config([1, 3, 4]))
    report = diagnose(draft, sglang_version="0.5.23", target_dir=dc.target(tmp_path / "t")).to_dict()
    assert {f["id"]: f["severity"] for f in report["findings"] if f["id"] == "aux-layers-mismatch"} == \
        {"aux-layers-mismatch": "info"}


def test_angelslim_ids_converted_where_the_family_rule_differs(tmp_path):
    """A DeepSeek-family target on 0.5.23 takes ids as given unless the first is 1: fix writes each id + 1."""
    draft = dc.write(tmp_path / "d", dc.tensors(), dc.angelslim_config([3, 20, 50]))
    target = dc.deepseek_target(tmp_path / "t")
    report = diagnose(draft, sglang_version="0.5.23", target_dir=target).to_dict()
    assert "aux-layers-mismatch" in {f["id"] for f in report["findings"] if f["severity"] == "error"}
    result = fix_checkpoint(draft, tmp_path / "fixed", sglang_version="0.5.23", target_dir=target)
    written = json.loads((tmp_path / "fixed" / "config.json").read_text())
    assert written["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [4, 21, 51]
    assert written["eagle3scope_fix"]["trained_capture"] == [4, 21, 51]
    assert any("DeepseekV3ForCausalLM: +1-if-first-1" in c for c in result.changes), result.changes


def test_modelopt_export_rope_scaling_is_flagged_and_fix_removes_it_with_the_reason(tmp_path):
    """EagleExporter writes its eagle_export_rope_scaling default when training used rope_type default."""
    cfg = {**dc.modelopt_config(), "rope_scaling": {"rope_type": "yarn", "factor": 32.0,
                                                    "original_max_position_embeddings": 2048}}
    draft, target = dc.producer_layout("modelopt", tmp_path)
    (draft / "config.json").write_text(json.dumps(cfg))
    report = diagnose(draft, sglang_version="0.5.23", target_dir=target).to_dict()
    assert report["headline"] == report["findings"][0]["title"] and "rope scaling" in report["headline"]
    assert report["findings"][0]["id"] == "rope-scaling-injected" and report["verdict"] == "broken"
    result = invoke("fix", str(draft), "--out", str(tmp_path / "fixed"), "--target", str(target))
    assert result.exit_code == 0, result.output
    assert "rope_scaling" in result.output and "eagle_export_rope_scaling" in result.output
    assert "rope_scaling" not in json.loads((tmp_path / "fixed" / "config.json").read_text())
    fixed = diagnose(tmp_path / "fixed", sglang_version="0.5.23", target_dir=target).to_dict()
    assert [f["id"] for f in fixed["findings"] if f["severity"] != "info"] == ["producer-flag-ignored"]


def test_modelopt_other_rope_scaling_cannot_be_known_fix_asks(tmp_path):
    rope = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}
    draft, target = dc.producer_layout("modelopt", tmp_path)
    (draft / "config.json").write_text(json.dumps({**dc.modelopt_config(), "rope_scaling": rope}))
    report = diagnose(draft, sglang_version="0.5.23", target_dir=target).to_dict()
    assert "rope-scaling-unknown" in {f["id"] for f in report["findings"] if f["severity"] == "warning"}
    result = invoke("fix", str(draft), "--out", str(tmp_path / "fixed"), "--target", str(target))
    assert result.exit_code != 0 and not (tmp_path / "fixed").exists()
    assert "was this draft trained with rope_scaling" in " ".join(result.output.split())


def test_rope_scaling_of_other_producers_is_theirs(tmp_path):
    rope = {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 2048}
    draft, target = dc.producer_layout("specforge", tmp_path)
    cfg = json.loads((draft / "config.json").read_text())
    (draft / "config.json").write_text(json.dumps({**cfg, "rope_scaling": rope}))
    report = diagnose(draft, sglang_version="0.5.23", target_dir=target).to_dict()
    assert report["verdict"] == "clean", report["findings"]


def test_modelopt_first_layer_input_norm_is_a_warning_with_its_source(tmp_path):
    draft, target = dc.producer_layout("modelopt", tmp_path)
    report = diagnose(draft, sglang_version="0.5.23", target_dir=target).to_dict()
    flag = [f for f in report["findings"] if f["id"] == "producer-flag-ignored"]
    assert flag and flag[0]["severity"] == "warning" and "use_input_layernorm_in_first_layer" in flag[0]["title"]
    assert "modeling_eagle.py" in flag[0]["evidence"]["trained_by"]
    cfg = dc.modelopt_config()
    cfg["eagle_config"]["use_input_layernorm_in_first_layer"] = False
    (draft / "config.json").write_text(json.dumps(cfg))
    assert diagnose(draft, sglang_version="0.5.23", target_dir=target).to_dict()["verdict"] == "clean"


def test_qwen3_draft_layer_is_refused_with_a_next_step(tmp_path):
    cfg = dc.speculators_config()
    cfg["transformer_layer_config"]["model_type"] = "qwen3"
    weights = dc.tensors("layers.0.")
    weights["layers.0.self_attn.q_norm.weight"] = np.ones(dc.HEAD_DIM, np.float16)
    draft = dc.write(tmp_path / "d", weights, cfg)
    report = diagnose(draft, sglang_version="0.5.23").to_dict()
    found = {f["id"] for f in report["findings"]}
    assert {"layer-type-unsupported", "weights-dropped", "config-speculators-format"} <= found  # it went on checking
    result = invoke("fix", str(draft), "--out", str(tmp_path / "out"))
    assert result.exit_code == 2 and "vLLM" in result.output


def test_d2t_arange_with_a_valid_t2d_is_a_disagreement(tmp_path):
    weights = dc.tensors()
    weights["d2t"] = np.arange(dc.DRAFT_VOCAB, dtype=np.int64)  # tokens 0, 2, 4, ... as offsets, 0..31 as absolute ids
    t2d = np.zeros(dc.TARGET_VOCAB, bool)
    t2d[1::2] = True  # but t2d covers 1, 3, 5, ...: neither reading
    weights["t2d"] = t2d
    report = diagnose(dc.write(tmp_path / "d", weights, dc.specforge_config()), sglang_version="0.5.23").to_dict()
    f = {f["id"]: f for f in report["findings"]}["d2t-mismatch"]
    assert f["evidence"]["out_of_range"] == 0 and f["evidence"]["injective"] and "disagree" in f["title"]


def test_empty_aux_ids_are_an_error(tmp_path):
    draft = dc.specforge(tmp_path / "d", eagle_config={"eagle_aux_hidden_state_layer_ids": [], "use_aux_hidden_state": True})
    report = diagnose(draft, sglang_version="0.5.23").to_dict()
    assert "aux-layers-empty" in {f["id"] for f in report["findings"] if f["severity"] == "error"}


def test_missing_directory_is_a_usage_error():
    result = invoke("doctor", "/nonexistent/draft")
    assert result.exit_code == 2 and "does not exist" in result.output and "Traceback" not in result.output
    result = invoke("doctor", "/", "--sglang-version", "latest")
    assert result.exit_code == 2 and "not an SGLang version" in result.output


def test_every_text_line_fits_80_columns(tmp_path):
    weights = {("module." + n): w for n, w in dc.tensors("layers.0.").items()}
    weights["d2t"] = dc.draft_ids()
    cfg = dc.speculators_config()
    cfg["eagle_aux_hidden_state_layer_ids"] = list(range(40))
    draft = dc.write(tmp_path / "d", weights, cfg)
    for version in VERSIONS:
        out = invoke("doctor", str(draft), "--sglang-version", version).output
        assert max(map(len, out.splitlines())) <= WIDTH, out


# -- the capture rules (wire/aux_layers), against the engines' own set_eagle3_layers_to_capture ------

RULE_CASES = [[1, 29, 57], [2, 30, 58], [0, 4, 5], [1, 3, 60], [3, 31, 61], [-1, 3, 4]]
RULE_CLASSES = (("llama.py", "LlamaForCausalLM"), ("qwen3.py", "Qwen3ForCausalLM"),
                ("deepseek_v2.py", "DeepseekV2ForCausalLM"), ("gpt_oss.py", "GptOssForCausalLM"))


def _engine_method(version: str, file: str, cls: str):
    """``cls.set_eagle3_layers_to_capture`` compiled from the engine venv's source, alone (no torch)."""
    import ast
    import os
    from pathlib import Path
    from typing import List, Optional

    src = Path.home() / f".cache/eagle3scope/venv-sglang-{version}/lib/python3.11/site-packages/sglang/srt/models/{file}"
    if not src.is_file():
        if os.environ.get("EAGLE3SCOPE_REQUIRE_ENGINE") == "1":
            pytest.fail(f"{src} is missing")
        pytest.skip(f"SGLang {version} engine env not built")
    tree = ast.parse(src.read_text())
    node = next(f for c in tree.body if isinstance(c, ast.ClassDef) and c.name == cls for f in c.body
                if isinstance(f, ast.FunctionDef) and f.name == "set_eagle3_layers_to_capture")
    namespace = {"Optional": Optional, "List": List}
    exec(compile(ast.Module([node], []), str(src), "exec"), namespace)
    return namespace["set_eagle3_layers_to_capture"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("file,cls", RULE_CLASSES)
def test_family_rules_match_the_engine_source(version, file, cls):
    from types import SimpleNamespace

    from eagle3scope.wire.aux_layers import captured_for, family_rule

    method = _engine_method(version, file, cls)
    n = 61
    for ids in [None, *RULE_CASES]:
        fake = SimpleNamespace(pp_group=SimpleNamespace(is_last_rank=True), config=SimpleNamespace(num_hidden_layers=n),
                               model=SimpleNamespace(), capture_aux_hidden_states=False)
        method(fake, ids)
        assert fake.model.layers_to_capture == captured_for(ids, family_rule(cls, version), n), (cls, version, ids)


def test_capture_problems_by_release():
    from eagle3scope.wire.aux_layers import capture_problem, ids_for

    assert capture_problem([0, 4, 5], 8, "LlamaForCausalLM", "0.5.10").startswith("SGLang 0.5.10 cannot capture")
    assert capture_problem([0, 4, 5], 8, "LlamaForCausalLM", "0.5.22") is None
    assert "not checked" in capture_problem([0, 4, 5], 8, "DeepseekV3ForCausalLM", "0.5.23")
    assert capture_problem([2, 4, 8], 8, "GptOssForCausalLM", "0.5.23") is None  # the final state
    assert "past the target" in capture_problem([2, 4, 8], 8, "GptOssForCausalLM", "0.5.16")
    assert "past the target" in capture_problem([2, 4, 8], 8, "LlamaForCausalLM", "0.5.23")
    assert ids_for([2, 4, 8], "+1-unless-final", 8) == [2, 4, 8] and ids_for([2, 4, 7], "+1-unless-final", 8) == [1, 3, 6]
