"""doctor and fix on checkpoints written the way SpecForge and speculators write them, and broken ones."""

from __future__ import annotations

import ast
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open

from benchmarks.support import draft_checkpoints as dc
from eagle3scope.doctor.loader_layouts import LEGACY_RENAMES, STACKED, expected_params, layout_for, map_name, parse_version
from support.cli import invoke


def doctor(path, *args) -> tuple[int, dict]:
    result = invoke("doctor", str(path), "--json", *args)
    return result.exit_code, json.loads(result.output)


def ids(report: dict) -> dict:
    return {f["id"]: f for f in report["findings"]}


def tree_digest(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        h.update(str(p.relative_to(path)).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


@pytest.fixture()
def target(tmp_path):
    return dc.target(tmp_path / "target")


# -- the loader model ------------------------------------------------------------------------


def test_versions_and_layouts():
    assert parse_version("0.4.4.post2") > parse_version("0.4.4.post1") > parse_version("0.4.4")
    assert parse_version("0.5.23") > parse_version("0.5.12") > parse_version("0.5.12rc1") > parse_version("0.5.11")
    assert not layout_for("0.4.4.post1").has_eagle3 and layout_for("0.4.4.post2").has_eagle3
    assert layout_for("0.5.11").layer_module == "midlayer" and layout_for("0.5.12").layer_module == "layers"
    assert layout_for("0.5.30").legacy_renames
    with pytest.raises(ValueError):
        parse_version("latest")


def test_0_5_23_name_mapping():
    layout = layout_for("0.5.23")
    params = expected_params(layout, dc.specforge_config(fc_norm=True))
    assert map_name(layout, "midlayer.self_attn.q_proj.weight", params).param == "model.layers.0.self_attn.qkv_proj.weight"
    assert map_name(layout, "aux_norm_mid.weight", params).param == "model.fc_norm.1.weight"
    assert map_name(layout, "model.norm.weight", params).param == "model.norm.weight"
    assert map_name(layout, "layers.0.self_attn.q_norm.weight", params).action == "skipped"  # qwen3-style qk-norm
    assert map_name(layout, "d2t", params).action == "d2t" and map_name(layout, "t2d", params).action == "ignored"
    old = layout_for("0.5.11")
    assert map_name(old, "layers.0.mlp.up_proj.weight", expected_params(old, dc.specforge_config())).action == "skipped"


@pytest.mark.engine
def test_loader_tables_match_the_installed_sglang_source(engine_python):
    """The renames and stacked mapping are copied from 0.5.23's llama_eagle3.load_weights: check them."""
    found_src = sorted(engine_python.parent.parent.glob("lib/python3*/site-packages/sglang/srt/models/llama_eagle3.py"))
    assert found_src, f"no sglang/srt/models/llama_eagle3.py in the engine venv of {engine_python}"
    src = found_src[0]
    tree = ast.parse(src.read_text())
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in ("legacy_name_map", "stacked_params_mapping"):
                found[node.targets[0].id] = ast.literal_eval(node.value)
    assert tuple(found["legacy_name_map"].items()) == LEGACY_RENAMES
    assert tuple(tuple(x) for x in found["stacked_params_mapping"]) == STACKED


# -- doctor ------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["0.5.23", "0.5.11", "0.4.10"])
def test_specforge_checkpoint_is_clean(tmp_path, target, version):
    code, report = doctor(dc.specforge(tmp_path / "d"), "--sglang-version", version, "--target", str(target))
    assert (code, report["findings"]) == (0, [])
    assert report["tensors"] == 16


def test_speculators_checkpoint(tmp_path, target):
    draft = dc.speculators(tmp_path / "d")
    code, report = doctor(draft, "--sglang-version", "0.5.23", "--target", str(target))
    assert code == 2 and set(ids(report)) == {"config-speculators-format"}
    assert report["fixable"]["config_edits"][0].startswith("speculators format")
    code, report = doctor(draft, "--sglang-version", "0.5.11")
    dropped = ids(report)["weights-dropped"]["evidence"]
    assert dropped["skipped"] == 10 and dropped["renamable"] == 10
    assert report["fixable"]["renames"]["layers.0.self_attn.q_proj.weight"] == "midlayer.self_attn.q_proj.weight"


def test_old_release_without_eagle3(tmp_path):
    code, report = doctor(dc.specforge(tmp_path / "d"), "--sglang-version", "0.4.4")
    assert code == 2 and list(ids(report)) == ["no-eagle3"]


def test_missing_lm_head_with_draft_vocab_is_a_random_head_and_fix_refuses(tmp_path):
    weights = dc.tensors()
    del weights["lm_head.weight"]
    draft = dc.write(tmp_path / "d", weights, dc.specforge_config())
    code, report = doctor(draft)
    assert code == 2 and ids(report)["lm-head-mismatch"]["evidence"] == {"draft_vocab_size": dc.DRAFT_VOCAB,
                                                                         "lm_head_present": False}
    result = invoke("fix", str(draft), "--out", str(tmp_path / "out"))
    assert result.exit_code == 2 and "lm_head is missing" in result.output
    assert not (tmp_path / "out").exists()


def test_no_lm_head_without_draft_vocab_uses_the_targets(tmp_path):
    weights = dc.tensors()
    del weights["lm_head.weight"], weights["d2t"], weights["t2d"]
    draft = dc.write(tmp_path / "d", weights, dc.specforge_config(draft_vocab_size=None))
    code, report = doctor(draft)
    assert code == 0 and ids(report)["lm-head-from-target"]["severity"] == "info"


def test_absolute_d2t_is_found_and_fixed(tmp_path, target):
    weights = dc.tensors()
    weights["d2t"] = dc.draft_ids()  # absolute target ids: the verl / EAGLE bug
    draft = dc.write(tmp_path / "d", weights, dc.specforge_config())
    before = tree_digest(draft)
    code, report = doctor(draft, "--target", str(target))
    d2t = ids(report)["d2t-absolute"]
    assert code == 2 and d2t["evidence"]["looks_absolute"] and d2t["evidence"]["t2d_consistent"] is False
    result = invoke("fix", str(draft), "--out", str(tmp_path / "fixed"), "--target", str(target))
    assert result.exit_code == 0, result.output
    assert tree_digest(draft) == before  # the source is untouched
    with safe_open(str(tmp_path / "fixed" / "model.safetensors"), "np") as f:
        np.testing.assert_array_equal(f.get_tensor("d2t"), dc.tensors()["d2t"])
        np.testing.assert_array_equal(f.get_tensor("fc.weight"), weights["fc.weight"])
    assert doctor(tmp_path / "fixed", "--target", str(target))[0] == 0
    assert not any(p.name.startswith(".fixed.tmp") for p in tmp_path.iterdir())


def test_d2t_absolute_without_t2d_is_fixed_only_when_out_of_range(tmp_path):
    weights = dc.tensors()
    del weights["t2d"]
    weights["d2t"] = np.arange(dc.DRAFT_VOCAB, dtype=np.int64) + 40  # absolute ids 40..71: 71 + 31 > 63
    weights["d2t"][-8:] = np.arange(56, 64)
    weights["d2t"][:24] = np.arange(24) + 8
    draft = dc.write(tmp_path / "d", weights, dc.specforge_config())
    code, report = doctor(draft)
    assert code == 2 and ids(report)["d2t-absolute"]["evidence"]["out_of_range"] > 0
    assert report["fixable"]["d2t_to_offsets"]
    weights["d2t"] = np.arange(dc.DRAFT_VOCAB, dtype=np.int64)  # arange: both readings stay in range
    code, report = doctor(dc.write(tmp_path / "e", weights, dc.specforge_config()))
    assert code == 1 and ids(report)["d2t-absolute"]["severity"] == "warning"
    weights["d2t"] = np.full(dc.DRAFT_VOCAB, 50, dtype=np.int64)  # neither reading is valid
    draft = dc.write(tmp_path / "f", weights, dc.specforge_config())
    code, report = doctor(draft)
    assert code == 2 and "d2t is inconsistent" in " ".join(report["refusals"])
    assert invoke("fix", str(draft), "--out", str(tmp_path / "out")).exit_code == 2


def test_truncated_safetensors(tmp_path):
    draft = dc.specforge(tmp_path / "d")
    blob = (draft / "model.safetensors").read_bytes()
    (draft / "model.safetensors").write_bytes(blob[: len(blob) // 2])
    code, report = doctor(draft)
    assert code == 2 and "truncated" in ids(report)["weights-unreadable"]["evidence"]["detail"]
    assert invoke("fix", str(draft), "--out", str(tmp_path / "out")).exit_code == 2


def test_fc_trained_on_two_aux_layers_but_three_configured(tmp_path):
    weights = dc.tensors()
    weights["fc.weight"] = weights["fc.weight"][:, : 2 * dc.H]
    code, report = doctor(dc.write(tmp_path / "d", weights, dc.specforge_config()))
    ev = ids(report)["fc-shape"]["evidence"]
    assert code == 2 and ev["fc_shape"] == [dc.H, 2 * dc.H] and ev["num_aux_configured"] == 3 and ev["num_aux_trained"] == 2


def test_wrong_layer_shape(tmp_path):
    weights = dc.tensors()
    weights["midlayer.mlp.down_proj.weight"] = weights["midlayer.mlp.down_proj.weight"][:, :16]
    code, report = doctor(dc.write(tmp_path / "d", weights, dc.specforge_config()))
    bad = ids(report)["shape-mismatch"]["evidence"]["tensors"]
    assert code == 2 and bad == {"midlayer.mlp.down_proj.weight": {"shape": [dc.H, 16], "expected": [dc.H, dc.INTER]}}


def test_missing_config_and_pickles(tmp_path):
    code, report = doctor(dc.write(tmp_path / "d", dc.tensors(), None))
    assert code == 2 and ids(report)["config-missing"]["evidence"]["detail"] == "config.json is missing"
    pickled = tmp_path / "p"
    pickled.mkdir()
    (pickled / "pytorch_model.bin").write_bytes(b"\x80\x04not opened")
    (pickled / "config.json").write_text(json.dumps(dc.specforge_config()))
    code, report = doctor(pickled)
    assert code == 2 and ids(report)["pickle-weights"]["evidence"]["files"] == ["pytorch_model.bin"]


def test_unknown_names_dropped_silently_on_0_5_23(tmp_path):
    weights = dc.tensors("layers.0.")
    weights["layers.0.self_attn.q_norm.weight"] = np.ones(dc.HEAD_DIM, np.float16)
    draft = dc.write(tmp_path / "d", weights, dc.specforge_config())
    code, report = doctor(draft, "--sglang-version", "0.5.23")
    assert code == 2 and ids(report)["weights-dropped"]["evidence"]["examples"] == ["layers.0.self_attn.q_norm.weight"]
    assert "tensors without a counterpart" in " ".join(report["refusals"])


def test_aux_layer_ids_against_the_target(tmp_path, target):
    draft = dc.specforge(tmp_path / "a", eagle_config={"eagle_aux_hidden_state_layer_ids": [2, 4, 5]})
    code, report = doctor(draft, "--target", str(target))
    f = ids(report)["aux-layers-mismatch"]
    assert code == 1 and f["evidence"]["output_of_layer_defaults"] == [1, 3, 4] and f["evidence"]["captured_by_sglang"] == [3, 5, 6]
    draft = dc.specforge(tmp_path / "b", eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 3, 7]})
    code, report = doctor(draft, "--target", str(target))
    assert code == 2 and ids(report)["aux-layers-out-of-range"]["evidence"]["out_of_range"] == [7]
    code, report = doctor(dc.specforge(tmp_path / "c", eagle_config=None))  # SGLang's default, as lmsys' drafts
    assert code == 0 and report["producer"]["name"] == "sglang"


# -- fix -----------------------------------------------------------------------------------------


def test_fix_speculators_checkpoint_for_old_sglang_sharded(tmp_path, target):
    draft = dc.write(tmp_path / "d", dc.tensors("layers.0."), dc.speculators_config(), shards=2)
    (draft / "tokenizer.json").write_text("{}")
    before = tree_digest(draft)
    result = invoke("fix", str(draft), "--out", str(tmp_path / "fixed"), "--for-sglang", "0.5.11",
                                       "--target", str(target))
    assert result.exit_code == 0, result.output
    assert "10 tensor(s): layers.0.* -> midlayer.*" in result.output
    assert tree_digest(draft) == before
    fixed = tmp_path / "fixed"
    config = json.loads((fixed / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == dc.AUX_IDS
    index = json.loads((fixed / "model.safetensors.index.json").read_text())["weight_map"]
    assert "midlayer.self_attn.q_proj.weight" in index and not any(k.startswith("layers.0.") for k in index)
    assert (fixed / "tokenizer.json").read_text() == "{}"
    original = dc.tensors("layers.0.")
    for file in sorted(fixed.glob("*.safetensors")):
        with safe_open(str(file), "np") as f:
            for name in f.keys():
                np.testing.assert_array_equal(f.get_tensor(name), original[name.replace("midlayer.", "layers.0.")])
    assert doctor(fixed, "--sglang-version", "0.5.11", "--target", str(target))[0] == 0


def test_fix_refuses_existing_out_and_out_inside_source(tmp_path):
    draft = dc.speculators(tmp_path / "d")
    (tmp_path / "exists").mkdir()
    r = invoke("fix", str(draft), "--out", str(tmp_path / "exists"))
    assert r.exit_code == 2 and "already exists" in r.output
    r = invoke("fix", str(draft), "--out", str(draft / "sub"))
    assert r.exit_code == 2 and not (draft / "sub").exists()


def test_top_level_layer_ids_are_ignored_by_sglang_and_fix_moves_them(tmp_path, target):
    config = dc.specforge_config(eagle_config=None, eagle_aux_hidden_state_layer_ids=[0, 2, 5])
    draft = dc.write(tmp_path / "d", dc.tensors(), config)
    code, report = doctor(draft, "--target", str(target))
    f = ids(report)["aux-layers-mismatch"]
    assert code == 2 and f["severity"] == "error" and f["evidence"]["default_captured"] == [2, 4, 5]
    assert invoke("fix", str(draft), "--out", str(tmp_path / "fixed")).exit_code == 0
    fixed = json.loads((tmp_path / "fixed" / "config.json").read_text())
    assert fixed["eagle_config"] == {"eagle_aux_hidden_state_layer_ids": [0, 2, 5]}
    assert "eagle_aux_hidden_state_layer_ids" not in fixed
    assert doctor(tmp_path / "fixed", "--target", str(target))[0] == 0


def test_norm_flags_ignored_by_old_releases(tmp_path):
    weights = dc.tensors()
    weights["input_norm.weight"] = np.ones(3 * dc.H, np.float16)
    draft = dc.write(tmp_path / "d", weights, dc.specforge_config(norm_before_fc=True))
    assert doctor(draft, "--sglang-version", "0.5.23")[0] == 0
    code, report = doctor(draft, "--sglang-version", "0.5.10")
    assert code == 2 and ids(report)["eagle-config-ignored"]["evidence"]["flags"] == ["norm_before_fc"]
    assert ids(report)["weights-dropped"]["evidence"]["examples"] == ["input_norm.weight"]


def test_fix_renames_a_dropped_layer_tensor_into_its_hole(tmp_path, target):
    """The shim test's broken draft: one layer tensor saved under a name 0.5.23 drops silently."""
    weights = dc.tensors("layers.0.")
    weights["decoder.mlp.down_proj.weight"] = weights.pop("layers.0.mlp.down_proj.weight")
    draft = dc.write(tmp_path / "d", weights, dc.specforge_config())
    code, report = doctor(draft)
    assert code == 2 and ids(report)["weights-dropped"]["evidence"]["examples"] == ["decoder.mlp.down_proj.weight"]
    assert report["fixable"]["renames"] == {"decoder.mlp.down_proj.weight": "layers.0.mlp.down_proj.weight"}
    assert invoke("fix", str(draft), "--out", str(tmp_path / "fixed")).exit_code == 0
    assert doctor(tmp_path / "fixed")[0] == 0


def test_fix_strips_a_wrapper_prefix(tmp_path):
    weights = {("module." + n if n not in ("d2t", "t2d") else n): w for n, w in dc.tensors().items()}
    draft = dc.write(tmp_path / "d", weights, dc.specforge_config())
    code, report = doctor(draft)
    assert code == 2 and len(report["fixable"]["renames"]) == 14
    assert report["fixable"]["renames"]["module.midlayer.self_attn.q_proj.weight"] == "layers.0.self_attn.q_proj.weight"
    assert invoke("fix", str(draft), "--out", str(tmp_path / "fixed")).exit_code == 0
    assert doctor(tmp_path / "fixed")[0] == 0


def test_two_keys_for_one_hole_is_a_guess(tmp_path):
    weights = dc.tensors()
    down = weights.pop("midlayer.mlp.down_proj.weight")
    weights["a.mlp.down_proj.weight"], weights["b.mlp.down_proj.weight"] = down, down.copy()
    draft = dc.write(tmp_path / "d", weights, dc.specforge_config())
    code, report = doctor(draft)
    assert code == 2 and report["fixable"]["renames"] == {}
    r = invoke("fix", str(draft), "--out", str(tmp_path / "out"))
    assert r.exit_code == 2 and "a.mlp.down_proj.weight" in r.output and not (tmp_path / "out").exists()


def test_bf16_checkpoint_is_fixed_byte_for_byte_without_torch(tmp_path):
    """numpy has no bfloat16: relabel the f16 tensors BF16 (same size) and check fix copies bytes."""
    from eagle3scope.doctor.checkpoint import open_checkpoint, write_safetensors

    src = dc.write(tmp_path / "f16", dc.tensors("layers.0."), dc.specforge_config())
    ckpt = open_checkpoint(src)
    draft = tmp_path / "bf16"
    draft.mkdir()
    (draft / "config.json").write_text((src / "config.json").read_text())
    write_safetensors(draft / "model.safetensors",
                      [(n, i, "BF16" if i.dtype == "F16" else i.dtype, i.shape) for n, i in ckpt.tensors.items()])
    code, report = doctor(draft, "--sglang-version", "0.5.10")
    assert code == 2 and ids(report)["weights-dropped"]["evidence"]["skipped"] == 10
    assert invoke("fix", str(draft), "--out", str(tmp_path / "fixed"), "--for-sglang", "0.5.10").exit_code == 0
    fixed = open_checkpoint(tmp_path / "fixed")
    assert fixed.tensors["midlayer.self_attn.q_proj.weight"].dtype == "BF16"
    blob = (draft / "model.safetensors").read_bytes()
    out = (tmp_path / "fixed" / "model.safetensors").read_bytes()
    info, new = ckpt.tensors["layers.0.self_attn.q_proj.weight"], fixed.tensors["midlayer.self_attn.q_proj.weight"]
    original = open_checkpoint(draft).tensors["layers.0.self_attn.q_proj.weight"]
    assert out[new.start:new.end] == blob[original.start:original.end] and new.end - new.start == info.end - info.start


def test_index_naming_a_missing_shard(tmp_path):
    draft = dc.write(tmp_path / "d", dc.tensors(), dc.specforge_config(), shards=2)
    (draft / "model-00002-of-00002.safetensors").unlink()
    code, report = doctor(draft)
    found = ids(report)
    assert code == 2 and "does not exist" in found["weights-unreadable"]["evidence"]["detail"]
    assert found["weights-unwritten"]["evidence"]["count"] > 0


def test_use_aux_false_with_a_trained_fc(tmp_path):
    eagle = {"eagle_aux_hidden_state_layer_ids": dc.AUX_IDS, "use_aux_hidden_state": False}
    code, report = doctor(dc.specforge(tmp_path / "d", eagle_config=eagle))
    assert code == 2 and ids(report)["aux-capture-off"]["evidence"] == {"use_aux_hidden_state": False,
                                                                        "fc_in_checkpoint": True}


def test_fix_turns_aux_capture_back_on_beside_a_trained_fc(tmp_path, target):
    """The seeds' break: fc was trained on 3H aux states, so the repair is certain; the copy is clean."""
    eagle = {"eagle_aux_hidden_state_layer_ids": dc.AUX_IDS, "use_aux_hidden_state": False}
    draft = dc.specforge(tmp_path / "d", eagle_config=eagle)
    done = invoke("fix", str(draft), "--out", str(tmp_path / "fixed"), "--target", str(target))
    assert done.exit_code == 0, done.output
    assert "use_aux_hidden_state false -> true" in done.output
    config = json.loads((tmp_path / "fixed" / "config.json").read_text())
    assert config["eagle_config"] == {**eagle, "use_aux_hidden_state": True}
    code, report = doctor(tmp_path / "fixed", "--target", str(target))
    assert code == 0 and "aux-capture-off" not in ids(report)
    assert json.loads((draft / "config.json").read_text())["eagle_config"] == eagle  # never in place


def test_torch_compiled_layer_names_are_renamed(tmp_path, target):
    """The demo's dropped-weights scenario: the layer saved from a torch.compile'd module."""
    weights = {n.replace("layers.0.", "layers.0._orig_mod.", 1): w for n, w in dc.tensors("layers.0.").items()}
    draft = dc.write(tmp_path / "d", weights, dc.specforge_config())
    code, report = doctor(draft)
    assert code == 2 and ids(report)["weights-dropped"]["evidence"]["skipped"] == 10
    assert report["fixable"]["renames"]["layers.0._orig_mod.mlp.up_proj.weight"] == "layers.0.mlp.up_proj.weight"
    assert invoke("fix", str(draft), "--out", str(tmp_path / "fixed")).exit_code == 0
    assert doctor(tmp_path / "fixed", "--target", str(target))[0] == 0


def test_a_speculators_config_whose_layer_config_is_not_an_object_is_an_invalid_field(tmp_path):
    config = {**dc.speculators_config(), "transformer_layer_config": 5}
    draft = dc.write(tmp_path / "d", dc.tensors("layers.0."), config)
    code, report = doctor(draft, "--sglang-version", "0.5.23")
    finding = ids(report)["config-field-invalid"]
    assert code == 2 and finding["severity"] == "error"
    assert finding["evidence"]["field"] == "transformer_layer_config" and finding["evidence"]["value"] == "5"


# -- the findings as `doctor --json` emits them: ids, severities and evidence keys are an interface ------


def findings(report: dict) -> list[tuple[str, str, dict]]:
    return [(f["id"], f["severity"], f["evidence"]) for f in report["findings"]]


def test_d2t_missing_findings_pinned(tmp_path):
    weights = dc.tensors()
    del weights["d2t"], weights["t2d"]
    code, report = doctor(dc.write(tmp_path / "d", weights, dc.specforge_config()))
    assert (code, findings(report)) == (2, [("d2t-missing", "error", {"draft_vocab_size": dc.DRAFT_VOCAB,
                                                                      "target_vocab_size": dc.TARGET_VOCAB})])
    assert report["refusals"] == ["d2t is missing"]
    code, report = doctor(dc.write(tmp_path / "e", weights, dc.specforge_config(draft_vocab_size=None)),
                          "--sglang-version", "0.4.8")  # before 0.4.9 the loader crashes without d2t
    assert code == 2 and ("d2t-missing", "error", {}) in findings(report)


def test_t2d_of_the_wrong_length_findings_pinned(tmp_path):
    weights = dc.tensors()
    weights["t2d"] = np.ones(5, bool)
    code, report = doctor(dc.write(tmp_path / "d", weights, dc.specforge_config()))
    evidence = {"size": dc.DRAFT_VOCAB, "draft_vocab_size": dc.DRAFT_VOCAB, "target_vocab_size": dc.TARGET_VOCAB,
                "min": 0, "max": dc.DRAFT_VOCAB - 1, "t2d_shape": [5], "t2d_true": 5, "out_of_range": 0,
                "injective": True, "t2d_consistent": None}
    assert (code, findings(report)) == (1, [("d2t-absolute", "warning", evidence), ("t2d-invalid", "warning", evidence)])


def test_old_release_crash_and_logged_drop_findings_pinned(tmp_path):
    code, report = doctor(dc.speculators(tmp_path / "d"), "--sglang-version", "0.4.8")
    got = {i: (s, e) for i, s, e in findings(report)}
    assert code == 2 and set(got) == {"weights-crash", "config-speculators-format", "weights-dropped"}
    assert got["weights-crash"] == ("error", {"names": [f"layers.0.{n}.weight" for n in (
        "mlp.gate_proj", "mlp.up_proj", "self_attn.k_proj", "self_attn.q_proj", "self_attn.v_proj")]})
    assert got["weights-dropped"] == ("warning", {"names": [f"layers.0.{n}.weight" for n in (
        "hidden_norm", "input_layernorm", "mlp.down_proj", "post_attention_layernorm", "self_attn.o_proj")], "count": 5})


def test_silently_dropped_and_fc_findings_pinned(tmp_path):
    weights = dc.tensors("layers.0.")
    weights["layers.0.self_attn.q_norm.weight"] = np.ones(dc.HEAD_DIM, np.float16)
    code, report = doctor(dc.write(tmp_path / "d", weights, dc.specforge_config()), "--sglang-version", "0.5.23")
    (fid, severity, evidence), = findings(report)
    assert (code, fid, severity, sorted(evidence)) == (2, "weights-dropped", "error", [
        "examples", "groups", "loader", "params_left_random", "renamable", "skipped"])
    assert (evidence["skipped"], evidence["renamable"], evidence["params_left_random"]) == (1, 0, [])
    weights = dc.tensors()
    weights["fc.weight"] = weights["fc.weight"][:, : 2 * dc.H]
    code, report = doctor(dc.write(tmp_path / "e", weights, dc.specforge_config()))
    assert (code, findings(report)) == (2, [("fc-shape", "error", {
        "fc_shape": [dc.H, 2 * dc.H], "expected": [dc.H, 3 * dc.H], "num_aux_configured": 3,
        "target_hidden_size": dc.H, "num_aux_trained": 2})])


def test_fc_hint_names_ids_when_the_target_width_is_the_drafts(tmp_path, target):
    """_fc_hint: the target's width is the fix only when it divides fc's width AND differs from the
    draft's; a target as wide as the draft leaves the aux-id count as the fix."""
    weights = dc.tensors()
    weights["fc.weight"] = weights["fc.weight"][:, : 2 * dc.H]
    code, report = doctor(dc.write(tmp_path / "d", weights, dc.specforge_config()), "--target", str(target))
    assert code == 2 and ids(report)["fc-shape"]["fix"].startswith(
        "Give eagle_config.eagle_aux_hidden_state_layer_ids 2 ids")
    wide = tmp_path / "wide"
    wide.mkdir()
    (wide / "config.json").write_text(json.dumps({**dc.llama_fields(), "architectures": ["LlamaForCausalLM"],
                                                  "num_hidden_layers": dc.TARGET_LAYERS, "hidden_size": 2 * dc.H}))
    weights["fc.weight"] = np.zeros((dc.H, 6 * dc.H), np.float16)  # 3 aux states of the wide target
    code, report = doctor(dc.write(tmp_path / "e", weights, dc.specforge_config()), "--target", str(wide))
    assert code == 2 and ids(report)["fc-shape"]["fix"].startswith(f"Set target_hidden_size to {2 * dc.H}")


def test_embed_random_needs_a_checkpoint_without_embed_tokens(tmp_path):
    config = dc.specforge_config(target_hidden_size=2 * dc.H)
    weights = dc.tensors()
    weights["fc.weight"] = np.zeros((dc.H, 6 * dc.H), np.float16)
    weights.pop("embed_tokens.weight", None)
    code, report = doctor(dc.write(tmp_path / "d", weights, config))
    assert (code, findings(report)) == (2, [("embed-random", "error", {
        "target_hidden_size": 2 * dc.H, "hidden_size": dc.H, "embed_tokens_in_checkpoint": False})])
    weights["embed_tokens.weight"] = np.zeros((dc.TARGET_VOCAB, dc.H), np.float16)
    code, report = doctor(dc.write(tmp_path / "e", weights, config))
    assert (code, findings(report)) == (0, [])
    del weights["embed_tokens.weight"]  # two wrapped copies: neither is loaded, but the draft has its own embedding
    weights["a.embed_tokens.weight"] = weights["b.embed_tokens.weight"] = np.zeros((dc.TARGET_VOCAB, dc.H), np.float16)
    code, report = doctor(dc.write(tmp_path / "f", weights, config))
    assert "embed-random" not in ids(report) and "weights-dropped" in ids(report)


def test_mla_draft_with_use_aux_norm_needs_its_fc_norms(tmp_path):
    config = dc.modelopt_mla_config()
    code, report = doctor(dc.write(tmp_path / "d", dc.modelopt_mla_tensors(), {**config, "use_aux_norm": True}))
    got = {i: (s, e) for i, s, e in findings(report)}
    assert code == 2 and got["weights-unwritten"] == ("error", {
        "params": [f"model.fc_norm.{i}.weight" for i in range(3)], "count": 3, "unpaired": []})
    weights = {**dc.modelopt_mla_tensors(), **{f"fc_norm.{i}.weight": np.ones(dc.H, np.float16) for i in range(3)}}
    code, report = doctor(dc.write(tmp_path / "e", weights, {**config, "use_aux_norm": True}))
    assert code == 1 and [f["id"] for f in report["findings"]] == ["producer-flag-ignored", "not-modelled"]


def test_config_check_findings_pinned(tmp_path):
    """config_checks' findings as doctor --json emits them: the MLA draft before 0.5.12 and after, a
    class SGLang cannot start (another layout, and Llama's layout), an EAGLE-3.x norm flag too new."""
    mla = dc.write(tmp_path / "mla", dc.modelopt_mla_tensors(), dc.modelopt_mla_config())
    code, report = doctor(mla, "--sglang-version", "0.5.10")
    flag = ("producer-flag-ignored", "warning", {
        "flag": "eagle_config.use_input_layernorm_in_first_layer", "value": True,
        "trained_by": "nvidia-modelopt 0.47.0 modelopt/torch/speculative/plugins/modeling_eagle.py "
                      "_eagle3_attention_forward_pre_hook; plugins/megatron_eagle.py",
        "served_by": "sglang srt/models/kimi_k25_eagle3.py: hidden_norm(h)"})
    assert (code, findings(report)) == (2, [("architecture-unsupported", "error", {
        "architectures": ["Eagle3DeepseekV2ForCausalLM"], "first_release": "0.5.12"}), flag])
    assert report["headline"] == "SGLang 0.5.10 has no Eagle3DeepseekV2ForCausalLM"
    code, report = doctor(mla, "--sglang-version", "0.5.23")
    assert (code, findings(report)) == (1, [flag, ("not-modelled", "info", {
        "loader": "models/kimi_k25_eagle3.py", "checked": ["tensor names", "d2t", "lm_head presence", "aux layer ids"]})])
    classes = ["Eagle3DeepseekV2ForCausalLM", "LlamaForCausalLMEagle3"]
    foo = {**dc.specforge_config(), "architectures": ["FooEagle"]}
    code, report = doctor(dc.write(tmp_path / "other", {"foo.weight": np.ones(4, np.float16)}, foo), "--sglang-version", "0.5.23")
    assert code == 2 and findings(report)[0] == ("architecture-unsupported", "error", {
        "architectures": ["FooEagle"], "sglang_version": "0.5.23", "draft_classes": classes})
    code, report = doctor(dc.write(tmp_path / "llama", dc.tensors(), foo), "--sglang-version", "0.5.23")
    assert (code, findings(report)) == (2, [("architecture", "error", {
        "architectures": ["FooEagle"], "sglang_version": "0.5.23", "draft_classes": classes})])
    normed = dc.write(tmp_path / "norm", dc.tensors(), dc.specforge_config(norm_before_fc=True))
    code, report = doctor(normed, "--sglang-version", "0.5.11")
    assert (code, findings(report)) == (2, [("eagle-config-ignored", "error", {
        "flags": ["norm_before_fc"], "first_release": {"norm_before_fc": "0.5.17"}, "loader": "0.5.3-0.5.11"})])


@pytest.mark.parametrize("rope_type, scaling", [("default", False), ("llama3", True)])
def test_fix_flattens_a_transformers_5_rope_theta_for_sglang(tmp_path, rope_type, scaling):
    """A speculators layer config written by transformers 5 keeps rope_theta under rope_parameters;
    SGLang 0.5.10 reads only the flat field, so fix writes rope_theta (and rope_scaling for a
    non-default rope type) into the SGLang config."""
    layer = {k: v for k, v in dc.speculators_config()["transformer_layer_config"].items() if k != "rope_theta"}
    rope = {"rope_theta": 500000.0, "rope_type": rope_type, "factor": 8.0}
    config = {**dc.speculators_config(), "transformer_layer_config": {**layer, "rope_parameters": rope}}
    draft = dc.write(tmp_path / "d", dc.tensors("layers.0."), config)
    assert invoke("fix", str(draft), "--out", str(tmp_path / "out")).exit_code == 0
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["rope_theta"] == 500000.0
    assert written.get("rope_scaling") == (rope if scaling else None)


def test_fix_keeps_a_flat_rope_theta_and_drops_the_attention_backend(tmp_path):
    """transformers 4 and 5 both written: the flat rope_theta wins; the layer's architectures and
    _attn_implementation (a transformers runtime choice) are not SGLang config."""
    layer = {**dc.speculators_config()["transformer_layer_config"], "rope_theta": 10000.0, "_attn_implementation": "sdpa",
             "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"}}
    draft = dc.write(tmp_path / "d", dc.tensors("layers.0."), {**dc.speculators_config(), "transformer_layer_config": layer})
    assert invoke("fix", str(draft), "--out", str(tmp_path / "out")).exit_code == 0
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["rope_theta"] == 10000.0 and "_attn_implementation" not in written
    assert written["architectures"] == ["LlamaForCausalLMEagle3"] and written["eagle_config"]["use_aux_hidden_state"] is True
