"""The doctor's d2t reading at its edges: the last target id, and absolute tables that t2d alone exposes.

SGLang maps a draft id i to target id ``i + d2t[i]`` (llama_eagle3.py: ``hot_token_id = d2t + arange``),
so with a target vocabulary of V the valid target ids are 0..V-1: V itself is out by one.
Checkpoints come from benchmarks/support/draft_checkpoints.py (TARGET_VOCAB 64, DRAFT_VOCAB 32).
"""

from __future__ import annotations

import json

import numpy as np
from safetensors import safe_open

from benchmarks.support import draft_checkpoints as dc
from support.cli import invoke

V, N = dc.TARGET_VOCAB, dc.DRAFT_VOCAB


def doctor(path) -> tuple[int, dict]:
    result = invoke("doctor", str(path), "--json")
    return result.exit_code, json.loads(result.output)


def findings(report: dict) -> dict:
    return {f["id"]: f for f in report["findings"]}


def write(path, d2t: np.ndarray, *, t2d_ids: np.ndarray | None = None):
    weights = dc.tensors()
    weights["d2t"] = d2t.astype(np.int64)
    if t2d_ids is None:
        del weights["t2d"]
    else:
        mask = np.zeros(V, dtype=bool)
        mask[t2d_ids] = True
        weights["t2d"] = mask
    return dc.write(path, weights, dc.specforge_config())


def offsets_to(target_ids: np.ndarray) -> np.ndarray:
    return target_ids - np.arange(N)


def test_offsets_reaching_the_last_target_id_are_valid(tmp_path):
    ids = np.arange(V - N, V)  # the draft covers the top of the vocabulary: the last id is V - 1
    code, report = doctor(write(tmp_path / "d", offsets_to(ids), t2d_ids=ids))
    assert (code, report["findings"]) == (0, [])
    code, report = doctor(write(tmp_path / "e", offsets_to(ids)))  # the same without t2d
    assert (code, report["findings"]) == (0, [])


def test_offsets_one_past_the_last_target_id_are_out_of_range(tmp_path):
    ids = np.arange(V - N, V)
    ids[-1] = V  # one id past the end, and only one
    code, report = doctor(write(tmp_path / "d", offsets_to(ids)))
    evidence = findings(report)["d2t-absolute"]["evidence"]
    assert code == 2 and evidence["out_of_range"] == 1
    assert "d2t is inconsistent and cannot be converted unambiguously" in report["refusals"]


def test_absolute_ids_ending_at_the_last_target_id_are_converted(tmp_path):
    absolute = np.arange(V - N, V)  # as offsets: i + d2t[i] overflows for every i > 0
    code, report = doctor(write(tmp_path / "d", absolute))
    found = findings(report)["d2t-absolute"]
    assert code == 2 and found["severity"] == "error" and found["evidence"]["looks_absolute"]
    assert report["fixable"]["d2t_to_offsets"] and report["refusals"] == []


def test_absolute_ids_reaching_the_vocabulary_size_are_refused(tmp_path):
    absolute = np.arange(V - N + 1, V + 1)  # the last "absolute id" is V: neither reading is valid
    code, report = doctor(write(tmp_path / "d", absolute))
    assert code == 2 and not report["fixable"]["d2t_to_offsets"]
    assert "d2t is inconsistent and cannot be converted unambiguously" in report["refusals"]
    assert not findings(report)["d2t-absolute"]["evidence"].get("looks_absolute")


def test_absolute_ids_that_stay_in_range_are_told_apart_by_t2d(tmp_path):
    """Absolute ids 0..31 read as offsets give 0, 2, .., 62: in range and injective, so only t2d
    (the mask of ids 0..31) shows the table is absolute; fix then writes the offsets t2d implies."""
    absolute = np.arange(N)
    draft = write(tmp_path / "d", absolute, t2d_ids=absolute)
    code, report = doctor(draft)
    found = findings(report)["d2t-absolute"]
    assert code == 2 and found["severity"] == "error"
    assert found["evidence"]["out_of_range"] == 0 and found["evidence"]["t2d_consistent"] is False
    assert "t2d confirms" in found["fix"]
    result = invoke("fix", str(draft), "--out", str(tmp_path / "fixed"))
    assert result.exit_code == 0, result.output
    with safe_open(str(tmp_path / "fixed" / "model.safetensors"), "np") as f:
        np.testing.assert_array_equal(f.get_tensor("d2t") + np.arange(N), absolute)
    assert doctor(tmp_path / "fixed")[0] == 0


def test_offsets_that_t2d_confirms_are_not_absolute(tmp_path):
    """The same table read the other way: offsets d2t = arange (targets 0, 2, .., 62), t2d says so."""
    code, report = doctor(write(tmp_path / "d", np.arange(N), t2d_ids=2 * np.arange(N)))
    assert (code, report["findings"]) == (0, [])
