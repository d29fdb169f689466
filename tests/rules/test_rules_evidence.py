"""Rule edges and evidence fields that mutation testing found unpinned (TESTING.md).

Evidence field names are an interface (``eagle3scope check --json``), so each is asserted by name.
"""

from __future__ import annotations

from support.analysis_streams import DRAFT_VOCAB, H, TARGET_VOCAB, healthy_load, session
from eagle3scope.analysis import analyse


def fired(frames) -> dict:
    return {v.id: v for v in analyse(frames).violations()}


def test_draft_id_equal_to_the_vocabulary_size_is_out_of_vocab():
    """Valid target ids are 0..V-1: a draft id of exactly V is one past the end."""
    ids = [[0, 1, TARGET_VOCAB - 1]]
    assert "draft-token-out-of-vocab" not in fired(session(5, bs=1, step_kw={"draft_ids": ids}))
    v = fired(session(5, bs=1, step_kw={"draft_ids": [[0, 1, TARGET_VOCAB]]}))["draft-token-out-of-vocab"]
    assert v.evidence["max_draft_id"] == TARGET_VOCAB and v.evidence["target_vocab_size"] == TARGET_VOCAB


def test_target_head_with_a_smaller_draft_vocabulary():
    load = healthy_load()
    load["lm_head"] = {"source": "target", "shape": [TARGET_VOCAB, H]}
    load["weights"]["consumed"] = [n for n in load["weights"]["consumed"] if "lm_head" not in n]
    v = fired(session(5, load=load))["lm-head-mismatch"]
    assert "target head used with a smaller draft vocabulary" in v.evidence["problems"]
    assert (v.evidence["draft_vocab_size"], v.evidence["target_vocab_size"], v.evidence["hidden_size"]) == (
        DRAFT_VOCAB, TARGET_VOCAB, H)
    load["draft_vocab_size"] = TARGET_VOCAB  # the same vocabulary: the target's head is the right one
    assert "lm-head-mismatch" not in fired(session(5, load=load))


def test_evidence_fields_by_name():
    load = healthy_load()
    load["weights"]["skipped"] = [f"layers.0.extra_{i}.weight" for i in range(8)]
    load["d2t"].update(out_of_range=250, t2d_consistent=False, looks_absolute=True)
    v = fired(session(5, load=load, step_kw={"feature_width": 2 * H}))
    assert v["weights-dropped"].evidence["skipped_examples"] == load["weights"]["skipped"][:5]
    assert {"size", "min", "max", "target_min", "target_max", "out_of_range", "injective", "t2d_consistent",
            "looks_absolute"} <= set(v["d2t-absolute"].evidence)
    assert v["d2t-absolute"].evidence["min"] == load["d2t"]["min"]
    assert v["hidden-width-mismatch"].evidence["hidden_size"] == H
    as_json = v["weights-dropped"].to_dict()
    assert as_json["title"] == v["weights-dropped"].title and as_json["fix"] == v["weights-dropped"].fix
