"""The doctor and ``fix`` on drafts laid out as 2026's producers write them, per SGLang release.

Each case is built from the producer's own code or published config (cited per test) with
safetensors' own writer, at tiny sizes; the verdict is the one the release's loader implies (its
rules are read back from the wheels by tests/shim/test_compat_static.py). Releases: 0.5.10 and 0.5.23,
and the ones between where a rule changes.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from benchmarks.support import draft_checkpoints as dc
from eagle3scope.cli import main
from eagle3scope.commands.doctor import WIDTH
from eagle3scope.doctor.run_checks import diagnose
from eagle3scope.doctor.repair import FixRefused, fix_checkpoint

VERSIONS = ("0.5.10", "0.5.23")


def errors(report: dict) -> set[str]:
    return {f["id"] for f in report["findings"] if f["severity"] == "error"}


def finding(report: dict, id: str) -> dict:
    return next(f for f in report["findings"] if f["id"] == id)


def cli(*args: str, cwd=None):
    runner = CliRunner()
    if cwd is None:
        return runner.invoke(main, list(args))
    with runner.isolated_filesystem(temp_dir=cwd):
        return runner.invoke(main, list(args))


def target_dir(path, cls="LlamaForCausalLM", layers=dc.TARGET_LAYERS, wrapped=False, hidden=dc.H):
    """A target's config.json; ``wrapped``: the text fields under text_config, as multimodal wrappers have."""
    path.mkdir(parents=True, exist_ok=True)
    text = {**dc.llama_fields(), "num_hidden_layers": layers, "hidden_size": hidden}
    cfg = {"architectures": [cls], "text_config": text} if wrapped else {**text, "architectures": [cls]}
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def fc(k: int, width: int = dc.H) -> np.ndarray:
    return np.random.default_rng(3).standard_normal((dc.H, k * width)).astype(np.float16)


def assert_clean(draft, version, target=None):
    report = diagnose(draft, sglang_version=version, target_dir=target).to_dict()
    assert [f for f in report["findings"] if f["severity"] != "info"] == [], (version, report["findings"])
    return report


# -- class names SGLang does not register --------------------------------------------------------


def angelslim(path):
    """Tencent/AngelSlim angelslim/compressor/speculative/train/configs/qwen3-8b-eagle3.json (architectures
    [Eagle3LlamaForCausalLM], draft_vocab_size, no eagle_config) and models/draft/llama_eagle3.py (midlayer,
    fc 3H, embed_tokens, lm_head [draft vocab], d2t/t2d buffers)."""
    cfg = {**dc.llama_fields(), "architectures": ["Eagle3LlamaForCausalLM"], "num_hidden_layers": 1,
           "draft_vocab_size": dc.DRAFT_VOCAB, "head_dim": dc.HEAD_DIM, "attention_bias": False}
    return dc.write(path, dc.tensors("midlayer."), cfg)


@pytest.mark.parametrize("version", VERSIONS)
def test_angelslim_vllm_class_name_is_an_error_and_fix_renames_it(tmp_path, version):
    report = diagnose(angelslim(tmp_path / "d"), sglang_version=version).to_dict()
    assert errors(report) == {"architecture"}
    assert "Cannot find model module" in report["headline"] and version in report["headline"]
    assert finding(report, "architecture")["evidence"]["draft_classes"]  # what the release can start
    assert report["fixable"]["config_edits"] and not report["refusals"]


def test_fix_of_a_vllm_class_name_serves_both_releases(tmp_path):
    draft = angelslim(tmp_path / "d")
    result = cli("fix", str(draft), "--out", str(tmp_path / "fixed"))
    assert result.exit_code == 0, result.output
    assert "no changes were needed" not in result.output and "LlamaForCausalLMEagle3" in result.output
    config = json.loads((tmp_path / "fixed" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert config["eagle3scope_fix"]["for_sglang"] == list(VERSIONS)
    for version in VERSIONS:
        assert_clean(tmp_path / "fixed", version)


def test_vllm_export_with_layers_0_names_needs_the_rename_and_the_keys_on_0_5_10(tmp_path):
    """vLLM's registry (vllm/model_executor/models/registry.py, _SPECULATIVE_DECODING_MODELS) maps
    Eagle3LlamaForCausalLM to llama_eagle3, whose module is model.layers: exports name it layers.0.*."""
    cfg = {**dc.specforge_config(), "architectures": ["Eagle3LlamaForCausalLM"]}
    draft = dc.write(tmp_path / "d", dc.tensors("layers.0."), cfg)
    assert errors(diagnose(draft, sglang_version="0.5.10").to_dict()) == {"architecture", "weights-dropped"}
    assert errors(diagnose(draft, sglang_version="0.5.23").to_dict()) == {"architecture"}
    fix_checkpoint(draft, tmp_path / "fixed")
    for version in VERSIONS:
        assert_clean(tmp_path / "fixed", version)


def test_an_unregistered_class_of_another_layout_is_refused_not_copied(tmp_path):
    """A class SGLang cannot start whose tensors are not LlamaForCausalLMEagle3's: a rename would be a guess."""
    weights = {"heads.0.weight": np.ones((4, dc.H), np.float16)}
    draft = dc.write(tmp_path / "d", weights, {**dc.llama_fields(), "architectures": ["MedusaModel"]})
    for version in VERSIONS:
        report = diagnose(draft, sglang_version=version).to_dict()
        assert "architecture-unsupported" in errors(report) and "Cannot find model module" in report["headline"]
    with pytest.raises(FixRefused, match="no SGLang release can serve"):
        fix_checkpoint(draft, tmp_path / "fixed")
    assert not (tmp_path / "fixed").exists()


# -- heads and embeddings ------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_tied_embeddings_beside_a_trained_head(tmp_path, version):
    """llama_eagle3.py (0.5.10 and 0.5.23): tie_word_embeddings -> self.lm_head = self.model.embed_tokens,
    so the checkpoint's lm_head.weight has no parameter and is dropped without a word."""
    draft = dc.specforge(tmp_path / "d", tie_word_embeddings=True)
    report = diagnose(draft, sglang_version=version).to_dict()
    assert errors(report) == {"lm-head-tied"} and "drops the trained lm_head.weight" in report["headline"]
    assert "tie_word_embeddings true -> false" in " ".join(report["fixable"]["config_edits"])
    fix_checkpoint(draft, tmp_path / "fixed", sglang_version=version)
    assert json.loads((tmp_path / "fixed" / "config.json").read_text())["tie_word_embeddings"] is False
    assert_clean(tmp_path / "fixed", version)


def test_tied_embeddings_beside_a_draft_vocab_without_a_head_is_refused(tmp_path):
    weights = dc.tensors()
    del weights["lm_head.weight"]
    draft = dc.write(tmp_path / "d", weights, dc.specforge_config(tie_word_embeddings=True))
    report = diagnose(draft, sglang_version="0.5.23").to_dict()
    assert "lm-head-tied" in errors(report) and "retrain" in finding(report, "lm-head-tied")["fix"]
    with pytest.raises(FixRefused, match="no trained lm_head"):
        fix_checkpoint(draft, tmp_path / "fixed")


def specforge_without_embeddings(path, **overrides):
    """sgl-project/SpecForge scripts/train_eagle3.py save_checkpoints: the saved draft state dict leaves out
    every key with "embed" (the draft shares the target's embedding)."""
    weights = {k: v for k, v in dc.tensors().items() if "embed" not in k.lower()}
    cfg = dc.specforge_config(**overrides)
    if cfg.get("target_hidden_size"):
        weights["fc.weight"] = fc(3, cfg["target_hidden_size"])
    return dc.write(path, weights, cfg)


@pytest.mark.parametrize("version", VERSIONS)
def test_target_hidden_size_other_than_hidden_size_without_embeddings(tmp_path, version):
    """llama.py set_embed (0.5.10, 0.5.23): returns without sharing when target_hidden_size != hidden_size;
    SpecForge's export has no embed_tokens, so the embedding stays random."""
    draft = specforge_without_embeddings(tmp_path / "d", target_hidden_size=2 * dc.H)
    report = diagnose(draft, sglang_version=version).to_dict()
    assert errors(report) == {"embed-random"} and "random init" in report["headline"]
    with pytest.raises(FixRefused, match="embedding"):
        fix_checkpoint(draft, tmp_path / "fixed", sglang_version=version)
    shared = specforge_without_embeddings(tmp_path / "same", target_hidden_size=dc.H)  # widths equal: shared
    assert_clean(shared, version)


def test_the_target_width_hint_names_the_embedding_it_costs(tmp_path):
    """fc trained on a 2H target, config without target_hidden_size: the hint sets it and says the
    embedding must then come with the checkpoint (the old hint alone would leave it random)."""
    weights = {k: v for k, v in dc.tensors().items() if "embed" not in k}
    weights["fc.weight"] = fc(3, 2 * dc.H)
    draft = dc.write(tmp_path / "d", weights, dc.specforge_config())
    target = target_dir(tmp_path / "t", hidden=2 * dc.H)
    report = diagnose(draft, sglang_version="0.5.23", target_dir=target).to_dict()
    hint = finding(report, "fc-shape")["fix"]
    assert f"Set target_hidden_size to {2 * dc.H}" in hint and "embed_tokens.weight" in hint


def test_target_hidden_size_null_cannot_start_and_fix_removes_it(tmp_path):
    """llama_eagle3.py: hasattr(config, "target_hidden_size") -> hidden_size_in = None -> Linear(None * 3)."""
    draft = dc.specforge(tmp_path / "d", target_hidden_size=None)
    for version in VERSIONS:
        assert errors(diagnose(draft, sglang_version=version).to_dict()) == {"target-hidden-null"}
    fix_checkpoint(draft, tmp_path / "fixed")
    assert "target_hidden_size" not in json.loads((tmp_path / "fixed" / "config.json").read_text())
    for version in VERSIONS:
        assert_clean(tmp_path / "fixed", version)


# -- wrapper families ----------------------------------------------------------------------------


def test_llama4_wrapper_target_delegates_to_its_language_model(tmp_path):
    """nm-testing/Llama4-Maverick-Eagle3-Speculators model card (from nvidia/Llama-4-Maverick-17B-128E-Eagle3):
    verifier Llama4ForConditionalGeneration, aux layers [1, 23, 44] of 48; SGLang's mllama4.py forwards
    set_eagle3_layers_to_capture to its Llama4ForCausalLM (a LlamaForCausalLM: +1)."""
    draft = dc.specforge(tmp_path / "d", eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 23, 44],
                                                       "use_aux_hidden_state": True})
    target = target_dir(tmp_path / "t", "Llama4ForConditionalGeneration", layers=48, wrapped=True)
    for version in VERSIONS:
        report = assert_clean(draft, version, target)
        assert report["headline"].endswith("will load and feed this draft as it was trained")
        assert "aux-family-unknown" not in {f["id"] for f in report["findings"]}


def test_gemma3_wrapper_target_needs_0_5_12(tmp_path):
    """sgl-project/SpecForge configs/gemma3-27b-eagle3.json trains against Gemma3ForConditionalGeneration;
    gemma3_mm.py gains set_eagle3_layers_to_capture in 0.5.12 (absent in 0.5.11's wheel)."""
    draft = dc.specforge(tmp_path / "d")
    target = target_dir(tmp_path / "t", "Gemma3ForConditionalGeneration", wrapped=True)
    for version, verdict in (("0.5.10", "broken"), ("0.5.11", "broken"), ("0.5.12", "clean"), ("0.5.23", "clean")):
        report = diagnose(draft, sglang_version=version, target_dir=target).to_dict()
        assert report["verdict"] == verdict, (version, report["findings"])
    report = diagnose(draft, sglang_version="0.5.10", target_dir=target).to_dict()
    assert report["headline"] == ("SGLang 0.5.10 cannot capture aux states from Gemma3ForConditionalGeneration: "
                                  "needs SGLang >= 0.5.12")
    result = fix_checkpoint(draft, tmp_path / "fixed", target_dir=target)
    assert result.versions == ["0.5.23"] and any("not for SGLang 0.5.10" in n for n in result.notes)


def test_unknown_family_headline_does_not_promise_the_capture(tmp_path):
    target = target_dir(tmp_path / "t", "SomethingNewForCausalLM")
    report = diagnose(dc.specforge(tmp_path / "d"), sglang_version="0.5.23", target_dir=target).to_dict()
    assert report["verdict"] == "clean" and "not checked" in report["headline"]
    assert "as it was trained" not in report["headline"]


# -- fc width per release ------------------------------------------------------------------------


def four_aux(path):
    """SpecForge with --aux-layers of four ids (eagle_config lists them; fc takes 4 x hidden)."""
    weights = dc.tensors()
    weights["fc.weight"] = fc(4)
    ids = {"eagle_aux_hidden_state_layer_ids": [1, 2, 3, 4], "use_aux_hidden_state": True}
    return dc.write(path, weights, dc.specforge_config(eagle_config=ids))


def test_fc_for_four_aux_states_needs_0_5_12(tmp_path):
    """llama_eagle3.py up to 0.5.11: Linear(self.hidden_size_in * 3, ...); 0.5.12: num_aux_hidden_states."""
    draft = four_aux(tmp_path / "d")
    for version in ("0.5.10", "0.5.11"):
        report = diagnose(draft, sglang_version=version).to_dict()
        assert errors(report) == {"fc-width-unsupported"}
        assert report["headline"] == f"SGLang {version} builds fc for exactly 3 aux states; this draft's fc takes 4"
    for version in ("0.5.12", "0.5.23"):
        assert_clean(draft, version)
    result = cli("fix", str(draft), "--out", str(tmp_path / "fixed"))
    assert result.exit_code == 0 and "not for SGLang 0.5.10" in result.output
    assert "checked against SGLang 0.5.23)" in " ".join(result.output.split())
    refused = cli("fix", str(draft), "--out", str(tmp_path / "old"), "--for-sglang", "0.5.10")
    assert refused.exit_code == 2 and "0.5.12 or newer" in " ".join(refused.output.split())
    assert not (tmp_path / "old").exists()


# -- ids at the target's layer count -------------------------------------------------------------


def gpt_oss_modelopt(path, ids):
    """nvidia/gpt-oss-120b-Eagle3 (Model-Optimizer, model card): Model-Optimizer's eagle_config fields
    (modelopt/torch/export/plugins/hf_spec_configs.py) with ids ending at the target's layer count, the
    final hidden state that 0.5.23 gpt_oss.py keeps as given ("Preserve IDs that already include the final
    hidden-state boundary")."""
    cfg = dc.modelopt_config()
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = ids
    return dc.write(path, dc.modelopt_tensors(), cfg)


def test_gpt_oss_ids_at_the_final_state_are_kept_on_0_5_23(tmp_path):
    n = 36
    draft = gpt_oss_modelopt(tmp_path / "d", [1, 18, n])
    target = target_dir(tmp_path / "t", "GptOssForCausalLM", layers=n)
    report = diagnose(draft, sglang_version="0.5.23", target_dir=target).to_dict()
    assert errors(report) == set() and not report["refusals"], report["findings"]
    assert any("number captured states" in a for a in report["assumptions"])
    old = diagnose(draft, sglang_version="0.5.10", target_dir=target).to_dict()
    assert "aux-final-state-unsupported" in errors(old) and "0.5.17" in finding(old, "aux-final-state-unsupported")["fix"]
    result = fix_checkpoint(draft, tmp_path / "fixed", target_dir=target)
    assert result.versions == ["0.5.23"]
    fixed = json.loads((tmp_path / "fixed" / "config.json").read_text())
    assert fixed["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 18, n]  # kept as given
    after = diagnose(tmp_path / "fixed", sglang_version="0.5.23", target_dir=target).to_dict()
    assert [f["id"] for f in after["findings"] if f["severity"] != "info"] == ["producer-flag-ignored"]


def test_an_id_at_the_layer_count_on_a_llama_target_is_past_the_last_layer(tmp_path):
    draft = dc.specforge(tmp_path / "d", eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 3, dc.TARGET_LAYERS],
                                                       "use_aux_hidden_state": True})
    report = diagnose(draft, sglang_version="0.5.23", target_dir=target_dir(tmp_path / "t")).to_dict()
    assert "aux-layers-out-of-range" in errors(report)


def test_specforge_gpt_oss_draft_is_clean_on_both(tmp_path):
    """sgl-project/SpecForge configs/gpt-oss-20B-eagle3-dense.json: LlamaForCausalLMEagle3, ids [1, 11, 21] of 24."""
    draft = dc.specforge(tmp_path / "d", eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 11, 21]},
                         model_type="gpt_oss")
    target = target_dir(tmp_path / "t", "GptOssForCausalLM", layers=24)
    for version in VERSIONS:
        assert_clean(draft, version, target)


# -- EAGLE-3.x norms -----------------------------------------------------------------------------


def eagle31(path):
    """sgl-project/SpecForge configs/qwen3-30B-A3B-eagle3.1.json: fc_norm and norm_output true; the per-aux
    norms are model.fc_norm.{i} (0.5.12+ llama_eagle3.py)."""
    weights = dc.tensors()
    for i in range(3):
        weights[f"fc_norm.{i}.weight"] = np.ones(dc.H, np.float16)
    return dc.write(path, weights, dc.specforge_config(fc_norm=True, norm_output=True))


def test_eagle_3_1_norms_need_0_5_12_and_the_first_step_says_so(tmp_path):
    draft = eagle31(tmp_path / "d")
    for version in ("0.5.10", "0.5.11"):
        report = diagnose(draft, sglang_version=version).to_dict()
        assert report["headline"] == f"SGLang {version} ignores fc_norm, norm_output: needs SGLang >= 0.5.12"
        dropped = finding(report, "weights-dropped")["fix"]
        assert "SGLang >= 0.5.12 loads them" in dropped and "no counterpart" not in dropped
        text = cli("doctor", str(draft), "--sglang-version", version).output
        assert "1. Serve with SGLang 0.5.12 or newer" in text
    for version in ("0.5.12", "0.5.23"):
        assert_clean(draft, version)


def test_norm_before_fc_needs_0_5_17(tmp_path):
    """Dogacel/specdrift-gpt-oss-120b-eagle3 model card (SpecForge-trained): "additional norm injected before
    FC" (norm_before_fc, model.input_norm: first in the 0.5.17 wheel, absent in 0.5.16's)."""
    weights = dc.tensors()
    weights["input_norm.weight"] = np.ones(3 * dc.H, np.float16)
    draft = dc.write(tmp_path / "d", weights, dc.specforge_config(norm_before_fc=True, norm_output=True))
    for version in ("0.5.12", "0.5.16"):
        report = diagnose(draft, sglang_version=version).to_dict()
        assert report["headline"] == f"SGLang {version} ignores norm_before_fc: needs SGLang >= 0.5.17"
    for version in ("0.5.17", "0.5.23"):
        assert_clean(draft, version)
    result = fix_checkpoint(draft, tmp_path / "fixed")
    assert result.versions == ["0.5.23"] and any("not for SGLang 0.5.10" in n for n in result.notes)


def test_a_norm_tensor_without_its_flag_names_the_flag(tmp_path):
    weights = dc.tensors()
    weights["input_norm.weight"] = np.ones(3 * dc.H, np.float16)
    report = diagnose(dc.write(tmp_path / "d", weights, dc.specforge_config()), sglang_version="0.5.23").to_dict()
    assert "only with norm_before_fc: true" in finding(report, "weights-dropped")["fix"]


# -- output --------------------------------------------------------------------------------------


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("case", ["four-aux", "eagle31", "angelslim", "tied-no-head"])
def test_text_output_says_each_refusal_once_within_80_columns_with_the_path_given(tmp_path, case, monkeypatch):
    build = {"four-aux": four_aux, "eagle31": eagle31, "angelslim": angelslim,
             "tied-no-head": lambda p: dc.write(p, {k: v for k, v in dc.tensors().items() if k != "lm_head.weight"},
                                                dc.specforge_config(tie_word_embeddings=True))}[case]
    build(tmp_path / "draft")
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    for version in VERSIONS:
        report = json.loads(runner.invoke(main, ["doctor", "draft", "--json", "--sglang-version", version]).output)
        assert report["draft"] == "draft"
        text = runner.invoke(main, ["doctor", "draft", "--sglang-version", version]).output
        fixed = runner.invoke(main, ["fix", "draft", "--out", f"out-{version}", "--for-sglang", version]).output
        assert flat(text).startswith(report["headline"])
        assert "tensors in draft" in flat(text)
        summary = text.split("\nproducer:")[0].split("\n\n")[0]  # headline, verdict, steps, refusals
        for out in (text, fixed):
            assert max(map(len, out.splitlines())) <= WIDTH, out
            assert str(tmp_path) not in out, out
            assert "clean: clean:" not in out
        for why in report["refusals"]:
            assert flat(summary).count(why) <= 1 and flat(fixed).count(why) <= 1, (why, summary, fixed)
        assert flat(fixed).startswith("refused, nothing written:") == bool(report["refusals"] or errors(report) - {
            "architecture", "lm-head-tied"}), fixed


# -- hypothesis over configs ---------------------------------------------------------------------

FLAGS = st.fixed_dictionaries({}, optional={
    "tie_word_embeddings": st.booleans(), "target_hidden_size": st.sampled_from([None, dc.H, 2 * dc.H]),
    "draft_vocab_size": st.sampled_from([None, dc.DRAFT_VOCAB, dc.TARGET_VOCAB]),
    "fc_norm": st.booleans(), "norm_before_fc": st.booleans(), "norm_output": st.booleans(),
    "architectures": st.sampled_from([["LlamaForCausalLMEagle3"], ["Eagle3LlamaForCausalLM"], ["LlamaForCausalLM"],
                                      ["Eagle3Qwen3vlForCausalLM"], ["NotAClass"]]),
    "eagle_config": st.fixed_dictionaries({"eagle_aux_hidden_state_layer_ids": st.lists(
        st.integers(-1, dc.TARGET_LAYERS + 1), min_size=0, max_size=5)}),
})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flags=FLAGS, k=st.sampled_from([3, 4]), family=st.sampled_from(
    ["LlamaForCausalLM", "GptOssForCausalLM", "Gemma3ForConditionalGeneration", "DeepseekV3ForCausalLM"]),
       prefix=st.sampled_from(["midlayer.", "layers.0."]),
       dropped=st.sets(st.sampled_from(["embed_tokens.weight", "lm_head.weight", "t2d", "d2t"])),
       extra=st.sets(st.sampled_from(["input_norm.weight", "fc_norm.0.weight", "aux_norm_low.weight"])))
def test_any_config_gets_a_verdict_and_fix_never_signs_off_a_broken_copy(tmp_path_factory, flags, k, family,
                                                                           prefix, dropped, extra):
    root = tmp_path_factory.mktemp("h")
    weights = {n: w for n, w in dc.tensors(prefix).items() if n not in dropped}
    weights["fc.weight"] = fc(k, flags.get("target_hidden_size") or dc.H)
    for name in extra:
        weights[name] = np.ones(k * dc.H if name.startswith("input_norm") else dc.H, np.float16)
    draft = dc.write(root / "d", weights, dc.specforge_config(**flags))
    target = target_dir(root / "t", family, wrapped=family.endswith("ConditionalGeneration"))
    for version in VERSIONS:
        report = diagnose(draft, sglang_version=version, target_dir=target).to_dict()
        assert report["verdict"] in ("clean", "warnings", "broken")
        assert all(f["fix"] for f in report["findings"] if f["severity"] == "error"), report["findings"]
        assert len(report["refusals"]) == len(set(report["refusals"]))
    try:
        result = fix_checkpoint(draft, root / "fixed", target_dir=target)
    except FixRefused as exc:
        assert str(exc) and not (root / "fixed").exists()
        event("fix refused")
        return
    event(f"fix wrote a copy for {len(result.versions)} release(s)")
    for version in result.versions:  # every release the copy names loads it without an error
        report = diagnose(root / "fixed", sglang_version=version, target_dir=target).to_dict()
        assert errors(report) == set(), (version, flags, report["findings"])


@pytest.mark.parametrize("config,target_class,layers,ids", [
    # sgl-project/SpecForge configs/deepseek-v3-671b-eagle3.json: ids [1, 29, 57] of 61; 0.5.10 adds 1,
    # 0.5.23 deepseek_v2.py adds 1 because the first id is 1: both capture [2, 30, 58]
    ("deepseek-v3-671b-eagle3.json", "DeepseekV3ForCausalLM", 61, [1, 29, 57]),
    # sgl-project/SpecForge configs/qwen3-30B-A3B-eagle3.1.json trains Qwen3-MoE without ids (the default)
    ("qwen3-30B-A3B-eagle3.1.json", "Qwen3MoeForCausalLM", 48, None),
])
def test_specforge_published_configs_are_clean_on_both(tmp_path, config, target_class, layers, ids):
    eagle = {"use_aux_hidden_state": True, **({"eagle_aux_hidden_state_layer_ids": ids} if ids else {})}
    draft = dc.specforge(tmp_path / "d", eagle_config=eagle)
    target = target_dir(tmp_path / "t", target_class, layers=layers)
    for version in VERSIONS:
        assert_clean(draft, version, target)


def test_specforge_gpt_oss_ids_at_the_final_state(tmp_path):
    """A SpecForge draft trained through 0.5.23's own GPT-OSS capture with ids ending at the layer count
    (gpt_oss.py keeps them as given): clean there; 0.5.10 (plain +1) would look past the last layer."""
    n = 24
    draft = dc.specforge(tmp_path / "d", eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 11, n]})
    target = target_dir(tmp_path / "t", "GptOssForCausalLM", layers=n)
    assert_clean(draft, "0.5.23", target)
    for version in ("0.5.10", "0.5.16"):
        report = diagnose(draft, sglang_version=version, target_dir=target).to_dict()
        assert errors(report) == {"aux-final-state-unsupported"}, report["findings"]
    result = fix_checkpoint(draft, tmp_path / "fixed", target_dir=target)
    assert result.versions == ["0.5.23"]
    assert json.loads((tmp_path / "fixed" / "config.json").read_text())["eagle_config"][
        "eagle_aux_hidden_state_layer_ids"] == [1, 11, n]


def test_a_trained_head_beside_a_null_draft_vocab_is_replaced_by_the_target_s(tmp_path):
    """llama_eagle3.py (0.5.2+): draft_vocab_size None -> load_lm_head_from_target, and the worker's
    set_embed_and_head puts the target's head over the loaded one (eagle_worker_v2.py init_lm_head)."""
    weights = {n: w for n, w in dc.tensors().items() if n not in ("d2t", "t2d")}  # a full-vocabulary head
    weights["lm_head.weight"] = np.ones((dc.TARGET_VOCAB, dc.H), np.float16)
    draft = dc.write(tmp_path / "d", weights, dc.specforge_config(draft_vocab_size=None))
    report = diagnose(draft, sglang_version="0.5.23").to_dict()
    warned = finding(report, "lm-head-from-target")
    assert warned["severity"] == "warning" and f"set draft_vocab_size to {dc.TARGET_VOCAB}" in warned["fix"]
    tied = dc.write(tmp_path / "tied", weights, dc.specforge_config(draft_vocab_size=None, tie_word_embeddings=True))
    fix_checkpoint(tied, tmp_path / "fixed")
    config = json.loads((tmp_path / "fixed" / "config.json").read_text())
    assert config["tie_word_embeddings"] is False and config["draft_vocab_size"] == dc.TARGET_VOCAB


def test_the_story_says_a_clean_verdict_once_and_names_the_others(tmp_path):
    """``demo --story``'s "doctor on the fixed copy" line (commands/demo_story.py): a clean headline
    already starts with ``clean:``, which the verdict before it once repeated ("clean: clean: ...")."""
    from eagle3scope.commands.demo_story import verdict_line

    clean = assert_clean(dc.specforge(tmp_path / "clean"), "0.5.23")
    assert verdict_line(clean) == clean["headline"] and verdict_line(clean).startswith("clean: SGLang 0.5.23")
    broken = diagnose(angelslim(tmp_path / "broken"), sglang_version="0.5.23").to_dict()
    assert broken["verdict"] == "broken"
    assert verdict_line(broken) == f"broken: {broken['headline']}"
    for report in (clean, broken):
        assert not verdict_line(report).startswith(f"{report['verdict']}: {report['verdict']}:")
