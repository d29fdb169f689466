"""The live aux-numbering rule names the engine the hello names (``engine``; absent = SGLang): the same
capture reads as SGLang-numbered ids served by vLLM on a vLLM stream, and as before on an SGLang one."""

from __future__ import annotations

from benchmarks.support.analysis_streams import LAYERS, Stream, healthy_load, hello, step
from eagle3scope.analysis import analyse

#: SGLang-numbered ids (output of layer i) on the 8-layer target, and what vLLM captures for them: the same.
SGLANG_IDS = [1, LAYERS // 2 - 1, LAYERS - 4]


def _fired(engine: str | None, offset_rule: str) -> dict:
    s = Stream()
    body = hello()
    if engine is not None:
        body = {**body, "engine": engine, "engine_version": "0.32.0"}
    load = healthy_load()
    load["aux"].update(configured=SGLANG_IDS, captured=SGLANG_IDS, offset_rule=offset_rule)
    frames = [s.frame("hello", body), s.frame("load", load)]
    frames += [s.frame("step", step(i, s.t, [1, 1], capture={"on": True, "layers": SGLANG_IDS})) for i in range(4)]
    return {v.id: v for v in analyse(frames).violations()}


def test_sglang_numbered_ids_served_on_vllm_name_vllms_rule():
    v = _fired("vllm", "none")["aux-layers-mismatch"]
    assert v.title == "Draft trained with SGLang numbering served on vLLM: captures layers one lower"
    assert v.evidence["engine"] == "vllm" and v.evidence["kind"] == "output-of-layer-ids-used-as-input-of-layer"
    assert "--for-vllm" in v.fix and "as given" in v.explanation


def test_without_an_engine_the_stream_is_sglangs_and_its_words_are_unchanged():
    for engine in (None, "sglang", "\x1b[31mother"):
        v = _fired(engine, "+1")["aux-layers-mismatch"]
        assert "vLLM" not in v.title and "engine" not in v.evidence
