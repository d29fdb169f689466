"""Valid setups that are not EAGLE-3 must stay quiet: the EAGLE-3 rules may not fire on them.

``--speculative-algorithm EAGLE`` with an EAGLE-1 draft (SGLang's ``LlamaForCausalLMEagle``,
sglang/srt/models/llama_eagle.py: its ``fc`` takes ``cat(embeds, hidden)``, 2H wide) captures no
aux states by design, and a draft with no ``fc`` at all (MTP / NextN style) has nothing to bypass.
The load bodies are shaped like the shim's (instrumentation/eagle3scope_shim/loadreport.py):
no ``weights`` (the draft-load seam is EAGLE-3 only), no aux capture.
"""

from __future__ import annotations

from benchmarks.support.analysis_streams import DRAFT_VOCAB, H, LAYERS, TARGET_VOCAB, Stream, healthy_load, hello, session, step
from eagle3scope.analysis import analyse

EAGLE3_ONLY_RULES = {"aux-capture-off", "fc-bypassed", "hidden-width-mismatch", "aux-layers-mismatch"}


def eagle1_load(fc: dict | None) -> dict:
    return {
        "draft_class": "LlamaForCausalLMEagle", "target_class": "LlamaForCausalLM", "hidden_size": H,
        "target_hidden_size": H, "num_target_layers": LAYERS, "draft_vocab_size": None,
        "target_vocab_size": TARGET_VOCAB, "fc": fc,
        "aux": {"configured": None, "use_aux": False, "captured": [], "capture_on": False, "offset_rule": None},
        "weights": None, "d2t": {"present": False},
        "lm_head": {"source": "checkpoint", "shape": [TARGET_VOCAB, H]}, "embed_tokens": {"source": "checkpoint"},
    }


def fired_ids(frames) -> set[str]:
    return {v.id for v in analyse(frames).violations()}


def test_eagle1_draft_under_eagle_fires_no_eagle3_rule():
    """EAGLE-1's fc is 2H -> H: wider than H, yet not an EAGLE-3 fc; capture is off on purpose."""
    frames = session(200, accept_p=0.6, algorithm="EAGLE", load=eagle1_load({"in": 2 * H, "out": H}),
                     step_kw={"feature_width": H, "fc": False, "capture": {"on": False, "layers": []}})
    assert fired_ids(frames) & EAGLE3_ONLY_RULES == set()


def test_steps_before_the_load_report_fire_no_eagle3_rule():
    """A subscriber that joins late gets the first steps before the sticky hello and load (as the
    EAGLE-1 engine test's did): fc skipped means nothing until the load says the draft is EAGLE-3."""
    s, off = Stream(), {"on": False, "layers": []}
    frames = [s.frame("step", step(seq, s.t, [0], feature_width=H, fc=False, capture=off)) for seq in range(3)]
    frames += [s.frame("hello", hello("EAGLE")), s.frame("load", eagle1_load({"in": 2 * H, "out": H}))]
    frames += [s.frame("step", step(seq, s.t, [1], feature_width=H, fc=True, capture=off)) for seq in range(3, 20)]
    assert fired_ids(frames) & EAGLE3_ONLY_RULES == set()
    s = Stream()  # the same late load of an EAGLE-3 draft: the break fires once the load is in
    frames = [s.frame("step", step(seq, s.t, [0], feature_width=H, fc=False)) for seq in range(3)]
    frames += [s.frame("hello", hello()), s.frame("load", healthy_load())]
    frames += [s.frame("step", step(seq, s.t, [0], feature_width=H, fc=False)) for seq in range(3, 6)]
    assert "fc-bypassed" in fired_ids(frames)


def test_draft_without_fc_has_nothing_to_bypass():
    """H-wide feature passes with fc not applied are normal when the draft has no fc at all."""
    load = eagle1_load(None)
    load["draft_class"] = "DeepseekV3ForCausalLMNextN"
    frames = session(200, accept_p=0.6, algorithm="NEXTN", load=load,
                     step_kw={"feature_width": H, "fc": False, "capture": {"on": False, "layers": []}})
    assert fired_ids(frames) & EAGLE3_ONLY_RULES == set()
    load["draft_class"] = "LlamaForCausalLMEagle3"  # an fc the shim could not read (no .weight): no widths to judge
    frames = session(50, load=load, step_kw={"feature_width": H, "fc": False})
    assert "fc-bypassed" not in fired_ids(frames)


def test_the_same_break_with_an_eagle3_draft_still_fires():
    """Control for the two tests above: the EAGLE-3 draft under EAGLE is PR 21272's silent break."""
    frames = session(200, accept_p=0.6, algorithm="EAGLE",
                     step_kw={"feature_width": H, "fc": False, "capture": {"on": False, "layers": []}})
    assert {"aux-capture-off", "fc-bypassed"} <= fired_ids(frames)
    load = healthy_load()
    load["draft_class"] = None  # class unknown (an older shim): the fc width alone marks EAGLE-3
    load["fc"] = {"in": 3 * H, "out": H}
    frames = session(50, algorithm="EAGLE", load=load,
                     step_kw={"feature_width": H, "fc": False, "capture": {"on": False, "layers": []}})
    assert "aux-capture-off" in fired_ids(frames)
    assert DRAFT_VOCAB < TARGET_VOCAB  # the healthy load's d2t stays valid for these streams
