"""The doctor's prediction on drafts the producers' own writers produced (tests/doctor/data/producers/,
written by scripts/write-producer-drafts.py: Model-Optimizer 0.47.0's real exporter; AngelSlim and
SpecForge as stand-ins in the shape their source writes, said there)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.support.draft_checkpoints import PRODUCER_WRITTEN
from eagle3scope.doctor.run_checks import diagnose
from eagle3scope.doctor.repair import fix_checkpoint

DATA = PRODUCER_WRITTEN
TARGET = DATA / "target"


def _report(name: str, version: str = "0.5.23", root: Path = DATA) -> dict:
    return diagnose(root / name, sglang_version=version, target_dir=TARGET).to_dict()


def _by_severity(report: dict, severity: str) -> set[str]:
    return {f["id"] for f in report["findings"] if f["severity"] == severity}


@pytest.mark.parametrize("name, producer, errors, warnings", [
    ("modelopt-default", "modelopt", {"rope-scaling-injected"}, {"producer-flag-ignored"}),
    ("modelopt-no-rope-override", "modelopt", set(), {"producer-flag-ignored"}),
    ("angelslim-custom-layers", "angelslim", {"architecture", "aux-layers-mismatch"}, set()),
    ("specforge-default", "sglang", set(), set()),
])
def test_prediction_on_what_each_producer_wrote(name, producer, errors, warnings):
    report = _report(name)
    assert report["producer"]["name"] == producer
    assert (_by_severity(report, "error"), _by_severity(report, "warning")) == (errors, warnings), report["findings"]


def test_modelopt_default_export_fix_removes_the_injected_rope_only(tmp_path):
    written = json.loads((DATA / "modelopt-default" / "config.json").read_text())
    assert written["rope_scaling"] == {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 2048}
    result = fix_checkpoint(DATA / "modelopt-default", tmp_path / "fixed", sglang_version="0.5.23", target_dir=TARGET)
    assert any("rope_scaling" in c and "eagle_export_rope_scaling" in c for c in result.changes), result.changes
    fixed = json.loads((tmp_path / "fixed" / "config.json").read_text())
    assert "rope_scaling" not in fixed
    assert {k: v for k, v in fixed.items() if k != "eagle3scope_fix"} == \
        {k: v for k, v in written.items() if k != "rope_scaling"}
    assert _by_severity(_report("fixed", root=tmp_path), "error") == set()


def test_angelslim_ids_reach_eagle_config_through_fix(tmp_path):
    fix_checkpoint(DATA / "angelslim-custom-layers", tmp_path / "fixed", target_dir=TARGET)
    fixed = json.loads((tmp_path / "fixed" / "config.json").read_text())
    assert fixed["architectures"] == ["LlamaForCausalLMEagle3"]
    assert fixed["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 2, 5]
    assert fixed["eagle3scope_fix"]["trained_capture"] == [1, 3, 6]
    for version in fixed["eagle3scope_fix"]["for_sglang"]:
        report = _report("fixed", version, tmp_path)
        assert _by_severity(report, "error") | _by_severity(report, "warning") == set(), report["findings"]


def test_specforge_export_without_ids_is_a_fact_not_a_warning():
    report = _report("specforge-default")
    assert report["verdict"] == "clean" and "aux-layers-unstated" in _by_severity(report, "info")
