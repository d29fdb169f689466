"""Aux ids translated between SGLang's numbering (per family rule and release) and vLLM's (as given):
the same target layers are captured both ways, round trips keep them, and ids either engine cannot
capture are refused instead of translated."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eagle3scope.doctor.engine_facts import sglang_to_vllm_ids, vllm_to_sglang_ids
from eagle3scope.wire.aux_layers import CAPTURE_SINCE, WRAPPED, LayerError, captured_for, family_rule, vllm_captured

FAMILIES = sorted(set(CAPTURE_SINCE) | set(WRAPPED) | {
    "LlamaForCausalLM", "MistralForCausalLM", "Phi3ForCausalLM", "GptOssForCausalLM", "DeepseekV2ForCausalLM",
    "MiniMaxM3SparseForConditionalGeneration", "NotAKnownFamilyForCausalLM"})
RELEASES = ("0.5.10", "0.5.13", "0.5.17", "0.5.23")


@st.composite
def case(draw):
    n = draw(st.integers(4, 96))
    ids = sorted(draw(st.sets(st.integers(-2, n + 2), min_size=1, max_size=4)))
    return draw(st.sampled_from(FAMILIES)), draw(st.sampled_from(RELEASES)), n, ids


@given(case())
def test_sglang_ids_become_vllm_ids_that_capture_the_same_layers(c):
    family, release, n, ids = c
    rule = family_rule(family, release)
    sglang_captures = None if rule is None else captured_for(ids, rule, n)
    capturable = sglang_captures is not None and min(ids) >= 0 and all(0 <= x < n for x in sglang_captures)
    if not capturable:
        with pytest.raises(LayerError):
            sglang_to_vllm_ids(ids, family, release, n)
        return
    v = sglang_to_vllm_ids(ids, family, release, n)
    assert vllm_captured(v, n) == sglang_captures
    back = vllm_to_sglang_ids(v, family, release, n)
    assert captured_for(back, rule, n) == sglang_captures
    if rule == "+1":
        assert back == ids and v == [i + 1 for i in ids]


@given(case())
def test_vllm_ids_become_sglang_ids_or_are_refused(c):
    family, release, n, ids = c
    rule = family_rule(family, release)
    try:
        out = vllm_to_sglang_ids(ids, family, release, n)
    except LayerError:
        # refused: vLLM never captures it (outside 0..n), or SGLang's rule cannot reach it
        reachable = rule is not None and all(0 <= x <= n for x in ids)
        if reachable and rule == "+1":
            assert 0 in ids or n in ids  # the embeddings and the last layer's output: no SGLang +1 id captures them
        return
    assert all(0 <= x < n for x in ids) and rule is not None
    assert captured_for(out, rule, n) == vllm_captured(ids, n)
    assert sglang_to_vllm_ids(out, family, release, n) == ids


def test_duplicates_and_ids_past_the_capture_points_are_refused():
    with pytest.raises(LayerError, match="deduplicates"):
        vllm_to_sglang_ids([1, 1, 2], "LlamaForCausalLM", "0.5.23", 8)
    with pytest.raises(LayerError, match="never captured"):
        vllm_to_sglang_ids([0, 1, 9], "LlamaForCausalLM", "0.5.23", 4)
    with pytest.raises(LayerError):
        sglang_to_vllm_ids([1, 3, 8], "LlamaForCausalLM", "0.5.23", 8)  # captures 9: past the 8 layers
    assert sglang_to_vllm_ids([1, 3, 4], "LlamaForCausalLM", "0.5.23", 8) == [2, 4, 5]
    assert vllm_to_sglang_ids([2, 4, 5], "LlamaForCausalLM", "0.5.23", 8) == [1, 3, 4]
