"""Rule edges and evidence fields that mutation testing found unpinned (TESTING.md).

Evidence field names are an interface (``eagle3scope check --json``), so each is asserted by name.
"""

from __future__ import annotations

import pytest

from benchmarks.support.analysis_streams import DRAFT_VOCAB, H, K, LAYERS, TARGET_VOCAB, Stream, healthy_load, hello, session, step
from eagle3scope.analysis import SessionState, analyse
from eagle3scope.wire.aux_layers import UNSTATED_MIN_REQUEST_STEPS, UNSTATED_SUSPECT_TITLE, UNSTATED_TITLE


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


# -- every rule's evidence, whole (check --json's "evidence" object) -------------------------------

def test_aux_capture_off_evidence_and_its_severity_by_opt_out():
    frames = session(6, algorithm="EAGLE", step_kw={"feature_width": H, "fc": False, "capture": {"on": False, "layers": None}})
    v = fired(frames)["aux-capture-off"]
    assert (v.severity, v.first_seq, v.last_seq) == ("error", None, 5)  # known from hello and load, before any step
    assert v.evidence == {"algorithm": "EAGLE", "capture_on": False, "use_aux_hidden_state": True, "fc_in": 3 * H,
                          "fc_from_checkpoint": True, "steps_with_capture_off": 6}
    opted_out = healthy_load()
    opted_out["aux"]["use_aux"] = False
    opted_out["weights"]["consumed"] = ["layers.0.self_attn.qkv_proj.weight"]  # no trained fc
    late = session(4, load=opted_out, step_kw={"capture": {"on": False, "layers": None}})
    v = fired(late)["aux-capture-off"]
    assert (v.severity, v.first_seq) == ("warning", 0)  # EAGLE3 asked for: the first step showed capture off
    assert v.evidence == {"algorithm": "EAGLE3", "capture_on": False, "use_aux_hidden_state": False, "fc_in": 3 * H,
                          "fc_from_checkpoint": False, "steps_with_capture_off": 4}
    assert fired(session(4, load=opted_out, algorithm="EAGLE"))["aux-capture-off"].severity == "error"
    opted_out["weights"]["skipped"] = ["fc.weight"]  # a trained fc the loader left unread (vLLM with aux off)
    assert fired(session(4, load=opted_out, step_kw={"capture": {"on": False, "layers": None}}))["aux-capture-off"].severity == "error"


def test_fc_bypassed_evidence_names_the_replayed_passes():
    s = Stream()
    frames = [s.frame("hello", hello()), s.frame("load", healthy_load())]
    for seq in range(4):
        body = step(seq, s.t, [1], feature_width=H, fc=False)
        body["passes"].append({"mode": "draft_extend_v2", "width": H, "fc": False, "n": 2, "replayed": True})
        body["passes"].append({"mode": "extend", "width": 3 * H, "fc": True, "n": 1})
        frames.append(s.frame("step", body))
    v = fired(frames)["fc-bypassed"]
    assert (v.severity, v.first_seq) == ("error", 0)
    assert v.evidence == {"skipped_calls": 12, "skipped_by_mode": {"draft_extend_v2": 12},
                          "replayed_by_mode": {"draft_extend_v2": 8}, "width_seen": [H], "fc_in": 3 * H,
                          "use_aux_hidden_state": True, "fc_from_checkpoint": True, "algorithm": "EAGLE3",
                          "hidden_size": H}
    eager = fired(session(3, step_kw={"feature_width": H, "fc": False}))["fc-bypassed"].evidence
    assert "replayed_by_mode" not in eager and eager["skipped_calls"] == 3


def test_hidden_width_mismatch_evidence_and_where_it_was_first_seen():
    s = Stream()
    frames = [s.frame("hello", hello()), s.frame("load", healthy_load())]
    frames += [s.frame("step", step(seq, s.t, [1, 2], feature_width=3 * H if seq < 3 else 2 * H)) for seq in range(7)]
    v = fired(frames)["hidden-width-mismatch"]
    assert v.first_seq == 3
    assert v.evidence == {"widths_by_mode": {"draft_extend_v2": {2 * H: 4}}, "expected": [H, 3 * H], "fc_in": 3 * H,
                          "hidden_size": H}


def test_graph_aux_reset_evidence():
    s = Stream()
    graphs = {"captured": [], "target_aux": {"on": True, "layers": [1, 3, 4]}}
    frames = [s.frame("hello", {**hello(), "graphs": graphs}), s.frame("load", healthy_load())]
    frames += [s.frame("step", step(seq, s.t, [1])) for seq in range(2)]
    v = fired(frames)["graph-aux-reset"]
    assert v.severity == "error"
    assert v.evidence == {"graph_layers": [1, 3, 4], "graph_capture_on": True, "shown_layers": [2, 4, 5],
                          "shown_capture_on": True, "configured": [1, 3, 4], "sglang_version": "0.5.23"}
    same = {"captured": [], "target_aux": {"on": True, "layers": [5, 4, 2]}}  # the same set, in another order
    s = Stream()
    frames = [s.frame("hello", {**hello(), "graphs": same}), s.frame("load", healthy_load()),
              s.frame("step", step(0, s.t, [1]))]
    assert "graph-aux-reset" not in fired(frames)
    off = {"captured": [], "target_aux": {"on": False, "layers": [2, 4, 5]}}
    s = Stream()
    frames = [s.frame("hello", {**hello(), "graphs": off}), s.frame("load", healthy_load()),
              s.frame("step", step(0, s.t, [1]))]
    assert fired(frames)["graph-aux-reset"].evidence["graph_capture_on"] is False


def test_passes_unobserved_evidence():
    s = Stream()
    observable = {"passes_prefill": True, "passes_draft_decode": False, "graph_draft_decode": True,
                  "passes_draft_extend": True, "graph_draft_extend": True}
    frames = [s.frame("hello", {**hello(), "observable": observable, "seams": {"draft_forward": "attached"}})]
    v = fired(frames)["passes-unobserved"]
    assert v.severity == "info"
    assert v.evidence == {"unobserved": ["draft decode"], "replay_graphs": ["draft decode", "draft extend"],
                          "seams": {"draft_forward": "attached"}}


def test_weights_dropped_evidence_leaves_the_head_to_lm_head_mismatch():
    load = healthy_load()
    load["weights"]["skipped"] = [f"s{i}" for i in range(7)]
    load["weights"]["unwritten"] = ["lm_head.weight"] + [f"u{i}" for i in range(6)]
    assert fired(session(2, load=load))["weights-dropped"].evidence == {
        "skipped": 7, "unwritten": 6, "consumed": 4, "skipped_examples": [f"s{i}" for i in range(5)],
        "unwritten_examples": [f"u{i}" for i in range(5)]}
    load["weights"]["skipped"], load["weights"]["unwritten"] = [], ["lm_head.weight"]
    assert "weights-dropped" not in fired(session(2, load=load))
    load["weights"]["unwritten"] = ["u"]
    assert fired(session(2, load=load))["weights-dropped"].evidence["unwritten_examples"] == ["u"]


@pytest.mark.parametrize("change", [{"looks_absolute": True}, {"out_of_range": 1}, {"injective": False},
                                    {"t2d_consistent": False}])
def test_d2t_absolute_evidence_is_the_whole_report_and_each_sign_alone_fires_it(change):
    load = healthy_load()
    load["d2t"].update(change)
    v = fired(session(2, load=load))["d2t-absolute"]
    expected = {k: val for k, val in load["d2t"].items() if k != "present"}
    assert v.evidence == {**expected, "target_vocab_size": TARGET_VOCAB}
    assert list(v.evidence)[:3] == ["size", "min", "max"]
    load["d2t"].update(present=False)
    assert "d2t-absolute" not in fired(session(2, load=load))


def test_d2t_missing_waits_for_a_report_on_d2t():
    load = healthy_load()
    del load["d2t"]  # a shim that did not report on d2t at all
    assert "d2t-missing" not in fired(session(2, load=load))
    load["d2t"] = None  # reported: absent
    assert fired(session(2, load=load))["d2t-missing"].evidence == {
        "draft_vocab_size": DRAFT_VOCAB, "target_vocab_size": TARGET_VOCAB, "d2t_present": False}
    load["draft_vocab_size"] = TARGET_VOCAB  # the target's vocabulary: nothing to map
    assert "d2t-missing" not in fired(session(2, load=load))


def test_lm_head_mismatch_evidence_on_a_tp_server():
    load = healthy_load()
    load["lm_head"] = {"source": "checkpoint", "shape": [DRAFT_VOCAB + 12, 2 * H], "org_vocab_size": DRAFT_VOCAB,
                       "shard_shape": [(DRAFT_VOCAB + 12) // 2, 2 * H], "parallel_size": 2, "parallel_dim": 0}
    v = fired(session(2, load=load))["lm-head-mismatch"]
    assert v.evidence == {"source": "checkpoint", "shape": [DRAFT_VOCAB + 12, 2 * H], "draft_vocab_size": DRAFT_VOCAB,
                          "target_vocab_size": TARGET_VOCAB, "hidden_size": H,
                          "problems": ["columns differ from hidden_size"], "org_vocab_size": DRAFT_VOCAB,
                          "shard_shape": [(DRAFT_VOCAB + 12) // 2, 2 * H], "parallel_size": 2}
    load["lm_head"] = {"source": "checkpoint", "shape": [DRAFT_VOCAB + 12, H], "org_vocab_size": DRAFT_VOCAB}
    assert "lm-head-mismatch" not in fired(session(2, load=load))  # padded rows, the asked-for vocabulary
    load["lm_head"] = {"source": "init"}
    assert fired(session(2, load=load))["lm-head-mismatch"].evidence["shape"] == [None, None]


def test_aux_layers_mismatch_evidence_for_each_kind_and_severity_only_rises():
    load = healthy_load()
    load["aux"].update(configured=[1, 3, 4], captured=[1, 3, 4])  # speculators' input-of-layer ids taken as captured
    frames = session(2, load=load, step_kw={"capture": {"on": True, "layers": [1, 3, 4]}})
    v = fired(frames)["aux-layers-mismatch"]
    assert v.severity == "error" and v.evidence == {
        "configured": [1, 3, 4], "expected_captured": [2, 4, 5], "captured": [1, 3, 4], "num_target_layers": LAYERS,
        "offset_rule": "+1", "kind": "captured-differs-from-configured"}
    load["aux"].update(configured=None, captured=[1, 3, 4])
    frames = session(2, load=load, step_kw={"capture": {"on": True, "layers": [1, 3, 4]}})
    v = fired(frames)["aux-layers-mismatch"]
    assert v.severity == "warning" and v.evidence == {
        "configured": None, "expected_captured": None, "captured": [1, 3, 4], "num_target_layers": LAYERS,
        "offset_rule": "+1", "kind": "output-of-layer-ids-used-as-input-of-layer", "input_of_layer_defaults": [2, 4, 5],
        "output_of_layer_defaults": [1, 3, 4]}
    load["aux"].update(configured=None, captured=[2, 4, 5])
    frames = session(2, load=load, accept_p=0.0)
    v = fired(frames)["aux-layers-mismatch"]  # unstated layers: a fact, and 2 steps are no evidence
    assert v.severity == "info" and v.title == UNSTATED_TITLE and v.evidence == {
        "configured": None, "expected_captured": None, "captured": [2, 4, 5], "num_target_layers": LAYERS,
        "offset_rule": "+1", "kind": "no-configured-ids-default-used", "default": [2, 4, 5],
        "position_1_acceptance": 0.0, "window_request_steps": 4}
    # a warning that turns into an error is an error from then on, also once it is a warning again
    s = Stream()
    state = SessionState()
    for f in (s.frame("hello", hello()), s.frame("load", load)):
        state.ingest(f)
    assert fired_now(state)["aux-layers-mismatch"].severity == "info"
    state.ingest(s.frame("load", {**load, "aux": {**load["aux"], "configured": [1, 3, 4]}}))
    state.ingest(s.frame("step", step(0, s.t, [1], capture={"on": True, "layers": [2, 4, 6]})))
    assert fired_now(state)["aux-layers-mismatch"].severity == "error"
    state.ingest(s.frame("load", load))
    state.ingest(s.frame("step", step(1, s.t, [1], capture={"on": True, "layers": [1, 3, 4]})))
    v = fired_now(state)["aux-layers-mismatch"]
    assert v.evidence["kind"] == "output-of-layer-ids-used-as-input-of-layer" and v.severity == "error"
    assert (v.first_seq, v.last_seq, v.active) == (None, 1, True)


@pytest.mark.parametrize("accept_p, n_steps, severity", [(0.5, 200, "warning"), (0.9, 200, "info"),
                                                        (0.5, UNSTATED_MIN_REQUEST_STEPS // 2 - 1, "info")])
def test_unstated_aux_layers_warn_only_with_low_position_1_acceptance(accept_p, n_steps, severity):
    """No ids in the draft: SGLang's default is right for most drafts; only a full window of low
    first-position acceptance makes it a warning, which names `aux cycle` (the doctor's words)."""
    load = healthy_load()
    load["aux"].update(configured=None, captured=[2, 4, 5])
    v = fired(session(n_steps, load=load, accept_p=accept_p))["aux-layers-mismatch"]
    assert v.severity == severity and v.evidence["kind"] == "no-configured-ids-default-used"
    assert v.title == (UNSTATED_SUSPECT_TITLE if severity == "warning" else UNSTATED_TITLE)
    assert "`eagle3scope aux cycle`" in v.fix and "differ" not in v.title


def test_unstated_aux_layers_rise_to_a_warning_once_acceptance_shows_it():
    load = healthy_load()
    load["aux"].update(configured=None, captured=[2, 4, 5])
    s, state = Stream(), SessionState()
    for f in (s.frame("hello", hello()), s.frame("load", load)):
        state.ingest(f)
    assert fired_now(state)["aux-layers-mismatch"].severity == "info"
    for seq in range(UNSTATED_MIN_REQUEST_STEPS):
        state.ingest(s.frame("step", step(seq, s.t, [0, 1])))
    v = fired_now(state)["aux-layers-mismatch"]
    assert (v.severity, v.title) == ("warning", UNSTATED_SUSPECT_TITLE)


def fired_now(state: SessionState) -> dict:
    state.evaluate_rules()
    return {v.id: v for v in state.violations()}


def _rounds(accepted: list[list[int]]) -> list:
    s = Stream()
    frames = [s.frame("hello", hello()), s.frame("load", healthy_load())]
    return frames + [s.frame("step", step(seq, s.t, acc)) for seq, acc in enumerate(accepted)]


def test_zero_acceptance_evidence_and_its_edges():
    """64 request-steps in the window, a rolling mean (bonus included) at most 1.05."""
    frames = _rounds([[1, 0, 0, 0]] * 3 + [[0, 0, 0, 0]] * 13)
    v = fired(frames)["zero-acceptance"]
    assert v.evidence == {"rolling_mean_accept_length": 1.0469, "window_request_steps": 64,
                          "per_position": [0.0469, 0.0, None], "cumulative_mean_accept_length": 1.0469,
                          "max_accept_length": K + 1}
    assert "zero-acceptance" not in fired(frames[:-1])  # 60 request-steps: not enough to judge
    at_margin = fired(_rounds([[1, 1, 1, 1]] + [[0, 0, 0, 0]] * 19))  # 84 tokens over 80 request-steps: 1.05
    assert at_margin["zero-acceptance"].evidence["rolling_mean_accept_length"] == 1.05
    assert "zero-acceptance" not in fired(_rounds([[1, 1, 1, 1], [1, 0, 0, 0]] + [[0, 0, 0, 0]] * 18))


def test_zero_acceptance_reads_the_last_512_request_steps_not_the_whole_run():
    """A draft that stops being accepted after a healthy stretch is flagged once its rolling window
    (the last 512 request-steps) is within the margin of 1.0, while the run's mean is still 2.6: 300
    steps of two requests accepting all 3 drafts, then rejections. The window holds 256 such steps;
    after j rejecting ones its mean is (2048 - 6j) / 512, at most 1.05 from j = 252 (seq 551) on."""
    s = Stream()
    state = SessionState()
    state.ingest(s.frame("hello", hello()))
    state.ingest(s.frame("load", healthy_load()))
    for seq in range(552):
        state.ingest(s.frame("step", step(seq, s.t, [K, K] if seq < 300 else [0, 0])))
        assert "zero-acceptance" not in fired_now(state) or seq == 551, seq
    v = fired_now(state)["zero-acceptance"]
    assert (v.first_seq, v.active) == (551, True)
    assert v.evidence == {"rolling_mean_accept_length": 1.0469, "window_request_steps": 512,
                          "per_position": [0.0156, 1.0, 1.0], "cumulative_mean_accept_length": 2.6304,
                          "max_accept_length": K + 1}


def test_draft_token_out_of_vocab_evidence_dates_the_first_rise_past_the_vocabulary():
    s = Stream()
    frames = [s.frame("hello", hello()), s.frame("load", healthy_load())]
    for seq, ids in enumerate([[1, 2, 3], [TARGET_VOCAB, 2, 3], [TARGET_VOCAB + 5, 0, 1], [4, 5, 6]]):
        frames.append(s.frame("step", step(seq, s.t, [1], draft_ids=[ids])))
    v = fired(frames)["draft-token-out-of-vocab"]
    assert v.first_seq == 1
    assert v.evidence == {"max_draft_id": TARGET_VOCAB + 5, "min_draft_id": 0, "target_vocab_size": TARGET_VOCAB,
                          "draft_ids_seen": 12}


def test_hook_failed_worker_unobserved_and_frames_lost_evidence():
    s = Stream()
    frames = [s.frame("hello", {**hello(), "worker_class": "MultiLayerEagleWorkerV2",
                                "seams": {"worker": "unhooked", "draft_model": "unhooked", "commit": "missing"},
                                "unobserved": {"worker": "another worker class"}}),
              s.frame("hook", {"seam": "draft_forward", "status": "failed", "detail": "TypeError: x"}),
              s.frame("hook", {"seam": "draft_model", "status": "unhooked", "detail": "LlamaForCausalLMEagle"})]
    s.n += 3
    frames.append(s.frame("heartbeat", {"steps": 0, "dropped": 4, "hook_failures": 2, "queued": 0}))
    v = fired(frames)
    assert v["hook-failed"].evidence == {"seams": {"commit": "missing", "draft_forward": "failed"}, "hook_failures": 2,
                                         "details": {"commit": None, "draft_forward": "TypeError: x"}}
    assert v["worker-unobserved"].severity == "error"
    assert v["worker-unobserved"].evidence == {
        "unobserved": ["worker", "draft_model"], "worker_class": "MultiLayerEagleWorkerV2", "algorithm": "EAGLE3",
        "details": {"worker": "another worker class", "draft_model": "LlamaForCausalLMEagle"}}
    assert v["frames-lost"].evidence == {"lost_in_transit": 3, "dropped_by_shim": 4, "frames_received": 4}
    s = Stream()
    only_draft = fired([s.frame("hello", {**hello(), "seams": {"draft_model": "unhooked"}})])["worker-unobserved"]
    assert only_draft.severity == "warning" and only_draft.evidence["unobserved"] == ["draft_model"]


def test_a_rule_without_a_first_seq_of_its_own_dates_its_break_at_the_last_step_seen():
    load = healthy_load()
    load["weights"]["skipped"] = ["x.weight"]
    s = Stream()
    frames = [s.frame("hello", hello())] + [s.frame("step", step(seq, s.t, [1])) for seq in range(3)]
    frames.append(s.frame("load", load))
    state = SessionState()
    for frame in frames:
        state.ingest(frame)
    (v,) = state.violations()  # fired on the load report, after step 2
    assert (v.id, v.first_seq, v.last_seq) == ("weights-dropped", 2, 2)
    frames += [s.frame("step", step(seq, s.t, [1])) for seq in range(3, 5)]
    v = fired(frames)["weights-dropped"]
    assert (v.first_seq, v.last_seq, v.active, v.run, v.src) == (2, 4, True, 1, "r0")
    assert v.to_dict() == {"id": "weights-dropped", "severity": "error", "title": v.title, "evidence": v.evidence,
                           "explanation": v.explanation, "fix": v.fix, "src": "r0", "first_seq": 2, "active": True,
                           "run": 1}
    assert v.title and v.explanation and v.fix
