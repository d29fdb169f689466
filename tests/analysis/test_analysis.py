"""Statistics and contract rules over synthetic event streams (benchmarks/support/analysis_streams.py)."""

from __future__ import annotations

import random

import pytest

from benchmarks.support.analysis_streams import DRAFT_VOCAB, H, K, LAYERS, TARGET_VOCAB, Stream, healthy_load, hello, session, step
from eagle3scope.analysis import RULE_IDS, AcceptanceStats, SessionState, analyse
from eagle3scope.wire.bodies import Capture


def fired(state: SessionState) -> dict:
    """The violations as of the state's last frame (a rule pass now, as ``analyse`` ends with)."""
    state.evaluate_rules()
    return {v.id: v for v in state.violations()}


# -- statistics ------------------------------------------------------------------------------


def test_mean_accept_length_counts_bonus_and_per_position_is_conditional():
    stats = AcceptanceStats(window=1000)
    stats.k_configured = 3
    # accepted drafts per request-step: 0, 1, 2, 3, 3 -> lengths 1, 2, 3, 4, 4
    stats.add_step(0, 0, [0, 1], [1, 1])
    stats.add_step(1, 10, [2, 3, 3], [1, 1, 1])
    assert stats.mean_accept_length == pytest.approx(14 / 5)
    assert stats.histogram == [1, 1, 1, 2]
    # position 1 reached 5x accepted 4x; position 2 reached 4x accepted 3x; position 3 reached 3x accepted 2x
    assert stats.per_position == pytest.approx([4 / 5, 3 / 4, 2 / 3])
    assert stats.n_steps == 2


def test_window_evicts_old_steps_but_cumulative_keeps_them():
    stats = AcceptanceStats(window=4)
    for seq in range(10):
        stats.add_step(seq, seq * 1_000_000, [0, 0], [1, 1])
    for seq in range(10, 12):
        stats.add_step(seq, seq * 1_000_000, [3, 3], [1, 1])
    assert stats.window.n == 4
    assert stats.mean_accept_length == pytest.approx(4.0)
    assert stats.cumulative_mean_accept_length == pytest.approx((20 * 1 + 4 * 4) / 24)
    assert stats.steps_per_s == pytest.approx(1000.0)  # 1 ms apart
    assert stats.accepted_tokens_per_s == pytest.approx(8 / 0.001)  # step 11's 8 tokens over 1 ms
    assert [round(m, 3) for _, _, m in list(stats.history)[-2:]] == [2.5, 4.0]


def test_session_statistics_match_the_stream():
    frames = session(1500, bs=3, accept_p=0.6, seed=3)
    state = analyse(frames)
    steps = [f.body for f in frames if f.kind == "step"]
    lengths = [a + b for s in steps for a, b in zip(s["accepted"], s["bonus"])]
    assert state.acceptance.n_steps == 1500
    assert state.acceptance.cumulative_mean_accept_length == pytest.approx(sum(lengths) / len(lengths))
    assert state.passes["decode"].calls == 1500 * 2 and state.passes["decode"].fc_skipped == 1500 * 2
    assert state.passes["draft_extend_v2"].widths == {3 * H: 1500}
    assert state.capture == Capture(on=True, layers=[2, 4, 5])
    assert len(state.recent) == 256 and state.recent[-1][1].seq == 1499
    assert len(state.segments) == 1 and state.segments[0].steps == 1500


def test_long_healthy_run_fires_nothing():
    """20k steps with acceptance swinging between poor and good stretches, H-wide draft decode
    passes on every step: not a single rule may fire."""
    frames = []
    for part, p in enumerate((0.8, 0.35, 0.9, 0.5)):
        frames += session(5000, bs=4, accept_p=p, seed=part)[2 if part else 0:]
    s = Stream()
    frames = [s.frame(f.kind, f.body) for f in frames]  # one publisher, one consecutive counter
    state = analyse(frames)
    assert state.acceptance.n_steps == 20000
    assert state.violations() == []


# -- rules -----------------------------------------------------------------------------------


def test_every_documented_rule_exists():
    for rule_id in ("aux-capture-off", "fc-bypassed", "hidden-width-mismatch", "weights-dropped", "d2t-absolute",
                    "lm-head-mismatch", "aux-layers-mismatch", "zero-acceptance", "draft-token-out-of-vocab",
                    "hook-failed"):
        assert rule_id in RULE_IDS


def test_eagle_algorithm_with_eagle3_draft():
    """PR 21272: --speculative-algorithm EAGLE: capture off, features H-wide, fc skipped, accept 1.00."""
    frames = session(300, accept_p=0.0, algorithm="EAGLE",
                     step_kw={"feature_width": H, "fc": False, "capture": {"on": False, "layers": None}})
    v = fired(analyse(frames))
    assert v["aux-capture-off"].severity == "error"
    assert v["aux-capture-off"].evidence["algorithm"] == "EAGLE"
    assert v["aux-capture-off"].evidence["steps_with_capture_off"] == 300
    assert v["aux-capture-off"].first_seq is None  # known from hello + load, before the first step
    bypass = v["fc-bypassed"].evidence
    assert bypass["skipped_calls"] == 300 and bypass["skipped_by_mode"] == {"draft_extend_v2": 300}
    assert bypass["width_seen"] == [H] and bypass["fc_in"] == 3 * H
    assert v["zero-acceptance"].evidence["rolling_mean_accept_length"] == 1.0
    assert "hidden-width-mismatch" not in v and "aux-layers-mismatch" not in v


def test_fc_bypassed_fires_on_first_bad_feature_pass_only():
    s = Stream()
    frames = [s.frame("hello", hello()), s.frame("load", healthy_load())]
    for seq in range(200):
        bad = seq >= 120
        frames.append(s.frame("step", step(seq, s.t, [2], feature_width=H if bad else 3 * H, fc=not bad)))
    state = SessionState()
    for f in frames[:100]:
        state.ingest(f)
    assert "fc-bypassed" not in fired(state)  # H-wide draft decode passes alone never fire it
    for f in frames[100:]:
        state.ingest(f)
    v = fired(state)["fc-bypassed"]
    assert v.first_seq == 120 and v.evidence["skipped_calls"] == 80


def test_hidden_width_mismatch():
    frames = session(50, step_kw={"feature_width": 2 * H})
    v = fired(analyse(frames))["hidden-width-mismatch"]
    assert v.evidence["widths_by_mode"] == {"draft_extend_v2": {2 * H: 50}}
    assert v.evidence["expected"] == [H, 3 * H] and v.first_seq == 0


def test_weights_dropped():
    load = healthy_load()
    load["weights"]["skipped"] = [f"layers.0.mlp.{n}.weight" for n in ("gate_proj", "up_proj", "down_proj")]
    load["weights"]["unwritten"] = ["model.layers.0.mlp.gate_up_proj.weight", "model.layers.0.mlp.down_proj.weight"]
    v = fired(analyse(session(10, load=load)))["weights-dropped"]
    assert (v.evidence["skipped"], v.evidence["unwritten"]) == (3, 2)
    assert v.evidence["skipped_examples"][0] == "layers.0.mlp.gate_proj.weight"


def test_d2t_absolute_and_missing():
    load = healthy_load()
    load["d2t"].update(max=TARGET_VOCAB - 1, target_max=DRAFT_VOCAB - 1 + TARGET_VOCAB - 1, out_of_range=250,
                       injective=True, t2d_consistent=False, looks_absolute=True)
    v = fired(analyse(session(10, load=load)))
    assert v["d2t-absolute"].evidence["out_of_range"] == 250 and v["d2t-absolute"].evidence["looks_absolute"]
    assert "d2t-missing" not in v
    load = healthy_load()
    load["d2t"] = {"present": False}
    v = fired(analyse(session(10, load=load)))
    assert v["d2t-missing"].evidence == {"draft_vocab_size": DRAFT_VOCAB, "target_vocab_size": TARGET_VOCAB,
                                         "d2t_present": False}
    assert "d2t-absolute" not in v


@pytest.mark.parametrize(
    "head, problem",
    [
        ({"source": "init", "shape": [DRAFT_VOCAB, H]}, "random (never loaded)"),
        ({"source": "target", "shape": [TARGET_VOCAB, H]}, "checkpoint head overwritten by the target's"),
        ({"source": "checkpoint", "shape": [TARGET_VOCAB, H]}, "rows differ from draft_vocab_size"),
    ],
)
def test_lm_head_mismatch(head, problem):
    load = healthy_load()
    load["lm_head"] = head
    v = fired(analyse(session(10, load=load)))["lm-head-mismatch"]
    assert problem in v.evidence["problems"] and v.evidence["source"] == head["source"]


def test_aux_layers_captured_differ_from_configured_is_an_error():
    frames = session(20, step_kw={"capture": {"on": True, "layers": [2, 4, 6]}})
    v = fired(analyse(frames))["aux-layers-mismatch"]
    assert v.severity == "error" and v.evidence["kind"] == "captured-differs-from-configured"
    assert v.evidence["expected_captured"] == [2, 4, 5] and v.evidence["captured"] == [2, 4, 6]


def test_aux_layers_input_of_layer_ids_shifted_is_a_warning():
    """PR 25454: speculators' input-of-layer ids [2, n//2, n-3] read as output-of-layer (+1)."""
    load = healthy_load()
    load["aux"].update(configured=[2, LAYERS // 2, LAYERS - 3], captured=[3, LAYERS // 2 + 1, LAYERS - 2])
    frames = session(20, load=load, step_kw={"capture": {"on": True, "layers": [3, LAYERS // 2 + 1, LAYERS - 2]}})
    v = fired(analyse(frames))["aux-layers-mismatch"]
    assert v.severity == "warning" and v.evidence["kind"] == "input-of-layer-ids-shifted-by-one"
    assert v.evidence["input_of_layer_defaults"] == [2, 4, 5] and v.evidence["output_of_layer_defaults"] == [1, 3, 4]


def test_live_aux_change_is_not_a_mismatch_and_starts_a_segment():
    s = Stream()
    frames = [s.frame("hello", hello()), s.frame("load", healthy_load())]
    rng = random.Random(1)
    for seq in range(100):
        frames.append(s.frame("step", step(seq, s.t, [3, 3], rng=rng)))
    frames.append(s.frame("config", {"layers": [2, 4, 5], "captured": [3, 5, 6], "applied": True, "reason": None,
                                     "origin": "control", "request_id": "a"}))
    for seq in range(100, 150):
        frames.append(s.frame("step", step(seq, s.t, [0, 1], capture={"on": True, "layers": [3, 5, 6]}, rng=rng)))
    state = analyse(frames)
    assert "aux-layers-mismatch" not in fired(state)
    first, second = state.segments
    assert (first.layers, first.captured, first.origin, first.steps) == ([1, 3, 4], [2, 4, 5], "startup", 100)
    assert first.mean_accept_length == 4.0
    assert (second.layers, second.captured, second.origin, second.start_seq, second.steps) == (
        [2, 4, 5], [3, 5, 6], "control", 100, 50)
    assert second.mean_accept_length == 1.5 and second.per_position[0] == 0.5


def test_zero_acceptance_fires_then_stays_listed_inactive_after_recovery():
    s = Stream()
    frames = [s.frame("hello", hello()), s.frame("load", healthy_load())]
    for seq in range(100):
        frames.append(s.frame("step", step(seq, s.t, [0, 0])))
    state = analyse(frames)
    v = fired(state)["zero-acceptance"]
    assert v.active and v.evidence["window_request_steps"] == 200 and v.evidence["per_position"][0] == 0.0
    for seq in range(100, 500):
        state.ingest(s.frame("step", step(seq, s.t, [2, 3])))
    v = fired(state)["zero-acceptance"]
    assert not v.active and v.first_seq is not None and v.evidence["rolling_mean_accept_length"] == 1.0
    assert v.active is False and v.to_dict()["active"] is False  # check --json: false, not null


def test_zero_acceptance_needs_enough_request_steps():
    frames = session(20, accept_p=0.0)
    assert "zero-acceptance" not in fired(analyse(frames))


def test_draft_token_out_of_vocab_reports_first_step():
    s = Stream()
    frames = [s.frame("hello", hello()), s.frame("load", healthy_load())]
    for seq in range(50):
        ids = [[5, 6, TARGET_VOCAB + 17 if seq == 30 else 7]]
        frames.append(s.frame("step", step(seq, s.t, [1], draft_ids=ids)))
    v = fired(analyse(frames))["draft-token-out-of-vocab"]
    assert v.first_seq == 30 and v.evidence["max_draft_id"] == TARGET_VOCAB + 17
    assert v.evidence["target_vocab_size"] == TARGET_VOCAB


def test_hook_failed_and_frames_lost_are_warnings():
    s = Stream()
    frames = [s.frame("hello", hello()), s.frame("load", healthy_load()),
              s.frame("hook", {"seam": "draft_forward", "status": "failed", "detail": "TypeError: x"})]
    s.n += 5  # five frames lost in transit
    frames.append(s.frame("heartbeat", {"steps": 0, "dropped": 2, "hook_failures": 1, "queued": 0}))
    state = analyse(frames)
    v = fired(state)
    assert v["hook-failed"].severity == "warning"
    assert v["hook-failed"].evidence["seams"] == {"draft_forward": "failed"}
    assert v["frames-lost"].evidence["lost_in_transit"] == 5 and v["frames-lost"].evidence["dropped_by_shim"] == 2
    assert any("5 frame(s) lost" in e.text for e in state.events)
    assert [e.level for e in state.events if e.text.startswith("hook-failed:")] == ["warning"]  # logged once
    state.violations()
    assert len([e for e in state.events if e.text.startswith("hook-failed:")]) == 1


def test_violations_are_per_publisher():
    a, b = Stream("a"), Stream("b")
    state = SessionState()
    state.ingest(a.frame("hello", hello("EAGLE")))
    state.ingest(a.frame("load", healthy_load()))
    state.ingest(b.frame("hello", hello()))
    state.ingest(b.frame("load", healthy_load()))
    assert [(v.id, v.src) for v in state.violations()] == [("aux-capture-off", "a")]


def test_session_totals_fork_when_a_second_publisher_sends_steps():
    a, b = Stream("a"), Stream("b")
    state = SessionState()
    for f in (a.frame("hello", hello()), a.frame("load", healthy_load())):
        state.ingest(f)
    for seq in range(10):
        state.ingest(a.frame("step", step(seq, a.t, [3])))
    assert state.acceptance is state.publishers["a"].acceptance  # one publisher: no double bookkeeping
    for f in (b.frame("hello", hello()), b.frame("load", healthy_load())):
        state.ingest(f)
    for seq in range(30):
        state.ingest(b.frame("step", step(seq, b.t, [0])))
    state.ingest(a.frame("step", step(10, a.t, [3])))
    assert state.publishers["a"].acceptance.total.n == 11 and state.publishers["b"].acceptance.total.n == 30
    assert state.acceptance.total.n == 41
    assert state.acceptance.cumulative_mean_accept_length == pytest.approx((11 * 4 + 30 * 1) / 41)
    assert state.passes["decode"].calls == 41 * 2 and state.publishers["a"].passes["decode"].calls == 11 * 2


def test_hook_failure_known_from_hello_alone():
    """A viewer that connected late never saw the hook frame; the re-sent hello still tells."""
    s = Stream()
    body = hello()
    body["seams"] = {"step": "attached", "draft_forward": "failed", "verify_v1": "disabled"}
    v = fired(analyse([s.frame("hello", body), s.frame("load", healthy_load())]))
    assert v["hook-failed"].evidence["seams"] == {"draft_forward": "failed"}


def test_use_aux_false_is_an_error_only_when_the_checkpoint_has_a_trained_fc():
    """use_aux_hidden_state false with a trained fc (the demo's aux-off scenario) is a break; without
    one the draft may have been trained without aux states: a warning, CI not failed."""
    off = {"feature_width": H, "fc": False, "capture": {"on": False, "layers": []}}
    load = healthy_load()
    load["aux"].update(use_aux=False, captured=[], capture_on=False, offset_rule=None)
    v = fired(analyse(session(50, load=load, step_kw=off)))
    assert v["aux-capture-off"].severity == "error" and v["fc-bypassed"].evidence["fc_from_checkpoint"] is True
    load["weights"]["consumed"].remove("fc.weight")
    load["weights"]["unwritten"] = ["model.fc.weight"]
    v = fired(analyse(session(50, load=load, step_kw=off)))
    assert v["aux-capture-off"].severity == "warning" and v["fc-bypassed"].severity == "warning"
    v = fired(analyse(session(50, algorithm="EAGLE", load=load, step_kw=off)))
    assert v["aux-capture-off"].severity == "error" and v["fc-bypassed"].severity == "error"


def test_zero_acceptance_is_detected_on_the_step_that_fills_the_window():
    s = Stream()
    state = SessionState()
    state.ingest(s.frame("hello", hello()))
    state.ingest(s.frame("load", healthy_load()))
    for seq in range(40):
        state.ingest(s.frame("step", step(seq, s.t, [0, 0])))
        state.evaluate_rules()
    assert fired(state)["zero-acceptance"].first_seq == 31  # 32 steps x 2 requests = 64 request-steps


def test_a_slow_server_gets_a_rule_pass_every_quarter_second_of_stream_time():
    """RULES_EVERY_NS: a step 250 ms (frame time) after the last pass runs the rules, whatever the step count."""
    s = Stream()
    state = SessionState()
    for frame in (s.frame("hello", hello()), s.frame("load", healthy_load()),
                  s.frame("step", step(0, 0, [0] * 64), dt_ns=250_000_000)):
        state.ingest(frame)
    (v,) = state.violations()
    assert (v.id, v.first_seq) == ("zero-acceptance", 0)
    state.ingest(s.frame("step", step(1, 0, [3] * 64), dt_ns=249_999_999))  # healed, but no pass yet
    assert state.violations()[0].active


def test_rules_fire_on_ingest_with_the_same_first_seq_as_analyse():
    """Nobody asks for violations: ingest alone finds the break, logs it once, and at the seq
    ``check`` (analyse) reports, because both run the rules on ingest's schedule."""
    off = {"feature_width": H, "fc": False, "capture": {"on": False, "layers": []}}
    frames = list(session(200, algorithm="EAGLE", accept_p=0.0, step_kw=off))
    state = SessionState()
    for frame in frames:
        state.ingest(frame)
    found = {(v.id, v.src, v.first_seq) for v in state.violations()}
    assert {"aux-capture-off", "fc-bypassed", "zero-acceptance"} <= {v[0] for v in found}
    assert found == {(v.id, v.src, v.first_seq) for v in analyse(frames).violations()}
    logged = sorted(e.text.split(":")[0] for e in state.events if e.level in ("error", "warning"))
    assert logged == sorted(v[0] for v in found)  # each violation logged once, when it first fired
    assert fired(state)["zero-acceptance"].first_seq == state.rules_every - 1  # the first pass after 64 steps


# -- worker variants: adaptive budgets, trees, unobserved workers -----------------------------------


def test_positions_past_a_rounds_budget_are_unobserved_not_rejected():
    stats = AcceptanceStats(window=1000)
    stats.k_configured = 3
    stats.add_step(0, 0, [1, 0], [1, 1], budget=1)  # budget 1: one took it (position 2 unobserved), one rejected it
    stats.add_step(1, 10, [3, 2], [1, 1], budget=3)
    # position 1: reached 4x, accepted 3x; position 2: reached 2x (the budget-1 round that accepted is not
    # counted), accepted 2x; position 3: reached 2x, accepted 1x
    assert stats.total.positions(3) == ([4, 2, 2], [3, 2, 1])
    assert stats.cumulative_per_position == pytest.approx([3 / 4, 1.0, 1 / 2])
    assert stats.mean_accept_length == pytest.approx((1 + 0 + 3 + 2 + 4) / 4)
    for seq in range(2, 10):  # the window forgets the budget-1 round exactly as it counted it
        stats.add_step(seq, seq * 10, [3], [1], budget=3)
    stats.window_size = 4
    stats.add_step(10, 100, [3], [1], budget=3)
    assert stats.window.capped[:2] == [0, 0] and stats.per_position == [1.0, 1.0, 1.0]
    # the same counts without budgets: position 2 would read 2 of 3, a rejection that never happened
    legacy = AcceptanceStats(window=1000)
    legacy.k_configured = 3
    legacy.add_step(0, 0, [1, 0], [1, 1])
    legacy.add_step(1, 10, [3, 2], [1, 1])
    assert legacy.cumulative_per_position == pytest.approx([3 / 4, 2 / 3, 1 / 2])


def test_adaptive_budgets_above_the_configured_steps_widen_the_positions():
    s = Stream()
    frames = [s.frame("hello", hello(num_steps=3))]
    for seq, (budget, accepted) in enumerate([(3, [3]), (5, [5]), (5, [4]), (1, [1])]):
        body = step(seq, seq, accepted, k=max(budget, 2))
        body["num_steps"], body["draft_ids"] = budget, [ids[:budget] for ids in body["draft_ids"]]
        frames.append(s.frame("step", body))
    acc = analyse(frames).acceptance
    assert acc.k == 5 and acc.cumulative_per_position == pytest.approx([1.0, 1.0, 1.0, 2 / 2, 1 / 2])


def test_tree_rows_colour_the_accepted_path_not_the_first_nodes():
    from eagle3scope.analysis.views import draft_rows

    s = Stream()
    body = step(0, 0, [2], k=5)
    body["accepted_path"], body["num_steps"] = [[3, 1]], 3
    body["accepted_ids"] = [[body["draft_ids"][0][3], body["draft_ids"][0][1], 7]]
    state = analyse([s.frame("hello", hello()), s.frame("step", body)])
    (row,) = draft_rows(state, None)
    assert [row.fate(j) for j in range(5)] == ["off-path", "accepted", "off-path", "accepted", "off-path"]
    chain = draft_rows(analyse([s.frame("step", step(1, 1, [1]))]), None)[0]
    assert [chain.fate(j) for j in range(3)] == ["accepted", "rejected", "unreached"]
    assert state.acceptance.cumulative_per_position == [1.0, 1.0, 0.0]  # depth 2 of 3, whatever the nodes


@pytest.mark.parametrize("seams, severity", [({"worker": "unhooked"}, "error"), ({"draft_model": "unhooked"}, "warning")])
def test_an_unobserved_worker_or_draft_is_a_finding(seams, severity):
    s = Stream()
    h = hello()
    h["seams"], h["worker_class"] = {"v2.step": "attached", **seams}, "MultiLayerEagleWorkerV2"
    state = analyse([s.frame("hello", h), s.frame("hook", {"seam": next(iter(seams)), "status": "unhooked",
                                                            "detail": "SGLang runs MultiLayerEagleWorkerV2"})])
    v = fired(state)["worker-unobserved"]
    assert v.severity == severity and v.evidence["unobserved"] == list(seams) and v.evidence["worker_class"] == "MultiLayerEagleWorkerV2"
    assert "hook-failed" not in fired(state)
    from eagle3scope.analysis.views import publisher_rows
    from eagle3scope.tui.panels.header import PublisherBar

    (row,) = publisher_rows(state)
    assert row.unobserved == tuple(seams) and row.worker_class == "MultiLayerEagleWorkerV2"
    line = PublisherBar._line(row, True, None, None, None, None).plain  # the TUI's line, narrow too
    assert ("MultiLayerEagleWorkerV2 NOT OBSERVED" if severity == "error" else "draft passes not observed") in line
    assert any("unhooked: SGLang runs MultiLayerEagleWorkerV2" in e.text for e in state.events)
    assert "worker-unobserved" not in fired(analyse([s.frame("hello", hello())]))


def test_a_step_that_names_no_mode_is_a_decode_row_and_load_reports_show_what_was_sent():
    from eagle3scope.analysis.views import draft_rows, load_reports

    s = Stream()
    body = step(0, 0, [1])
    body.pop("mode", None)
    state = analyse([s.frame("hello", hello()), s.frame("load", healthy_load()), s.frame("step", body)])
    (row,) = draft_rows(state, None)
    assert row.mode == "decode" and row.label == "dp0"
    (report,) = load_reports(state)
    assert report.src == "r0" and report.hello is not None and report.load is not None
    assert dict(report.hello)["host"] == "box"
    (silent,) = load_reports(analyse([s.frame("step", step(1, 1, [1]))]))
    assert (silent.hello, silent.load) == (None, None)


# -- the load summary's rows, exactly (the TUI's load panel draws them as they are) ------------------
def test_load_summary_rows_exactly():
    from eagle3scope.analysis.views import Fact, load_summary
    from eagle3scope.wire.bodies import Capture, read
    from eagle3scope.wire.aux_layers import family_rule

    body = {"draft_class": "LlamaForCausalLMEagle3", "target_class": "LlamaForCausalLM", "fc": {"in": 384, "out": 128},
            "aux": {"configured": [1, 3, 5], "captured": [2, 4, 6], "use_aux": True, "offset_rule": "+1"},
            "d2t": {"present": True, "size": 32, "target_min": 0, "target_max": 63, "out_of_range": 0, "injective": True},
            "lm_head": {"source": "checkpoint", "shape": [32, 128]}, "embed_tokens": {"source": "target"},
            "weights": {"consumed": ["fc.weight", "d2t"], "skipped": ["a.w", "b.w", "c.w"], "unwritten": ["model.x", "model.y"]}}
    head = [Fact("draft / target", "LlamaForCausalLMEagle3 / LlamaForCausalLM"), Fact("fc", "384 → 128"),
            Fact("configured aux ids", "[1, 3, 5]"), Fact("captured (load)", "[2, 4, 6]", "ok")]
    tail = [Fact("lm_head", "checkpoint [32, 128]"), Fact("embed_tokens", "target"),
            Fact("weights", "2 consumed, 3 skipped, 2 never written: a.w, b.w, c.w, model.x", "bad")]
    assert load_summary(read("load", body), Capture(on=True, layers=[2, 4, 6]), family_rule("LlamaForCausalLM")) == [
        *head, Fact("captured (live)", "[2, 4, 6] capture on"), Fact("use_aux / rule", "True / +1"),
        Fact("family id rule", "+1: captures id + 1"), Fact("d2t", "size 32 → target [0, 63] ok", "ok"), *tail]
    bad = {**body, "d2t": {**body["d2t"], "injective": False, "out_of_range": 2, "looks_absolute": True,
                           "t2d_consistent": False}}
    del bad["fc"]
    assert load_summary(read("load", bad), Capture(on=False, layers=[2]), None) == [
        head[0], Fact("fc", "none", "bad"), *head[2:], Fact("captured (live)", "[2] capture off", "bad"),
        Fact("use_aux / rule", "True / +1"), Fact("family id rule", "unknown family", "muted"),
        Fact("d2t", "size 32 → target [0, 63] 2 out of range; not injective; looks absolute; t2d inconsistent", "bad"),
        *tail]
    bare = {"draft_class": "D", "target_class": "T", "fc": {"in": 1, "out": 1}, "aux": {"use_aux": False, "captured": [3]},
            "lm_head": {"source": "init", "shape": [4, 1]}, "weights": {"consumed": ["fc.weight"]}}
    assert load_summary(read("load", bare), None) == [
        Fact("draft / target", "D / T"), Fact("fc", "1 → 1"), Fact("configured aux ids", "None"),
        Fact("captured (load)", "[3]"), Fact("captured (live)", "–"), Fact("use_aux / rule", "False / None"),
        Fact("family id rule", "unknown family", "muted"), Fact("d2t", "absent (draft vocab = target vocab?)", "muted"),
        Fact("lm_head", "init [4, 1]", "bad"), Fact("embed_tokens", "None"), Fact("weights", "1 consumed, 0 skipped, 0 never written", "ok")]
    assert load_summary(None, None) == [Fact("load report", "not received yet", "muted")]
    for skipped, unwritten, text in ((["s.w"], [], "1 consumed, 1 skipped, 0 never written: s.w"),
                                     ([], ["u.w"], "1 consumed, 0 skipped, 1 never written: u.w")):
        alone = {**bare, "weights": {"consumed": ["fc.weight"], "skipped": skipped, "unwritten": unwritten}}
        assert load_summary(read("load", alone), None)[-1] == Fact("weights", text, "bad")  # either alone is bad


# -- the panels' views, exactly (the TUI draws them as they are) -------------------------------------
def test_publisher_row_says_what_the_hello_heartbeat_and_hooks_said():
    from eagle3scope.analysis.views import PublisherRow, publisher_rows

    s = Stream("h:7:dp1")
    h = {**hello(), "publisher_index": 1, "tp_rank": 2, "worker_class": "EAGLEWorkerV2",
         "seams": {"v2.step": "attached", "commit": "attached", "draft_forward": "attached", "load": "attached",
                   "draft_model": "unhooked"}}
    frames = [s.frame("hello", h), s.frame("hook", {"seam": "commit", "status": "failed", "detail": "x"})]
    frames += [s.frame("step", step(seq, s.t, [1, 3]), dt_ns=250_000_000) for seq in range(5)]
    s.n += 2
    frames.append(s.frame("heartbeat", {"steps": 5, "dropped": 3, "hook_failures": 1, "queued": 0,
                                        "shim_us": {"v2.step": 30.0, "commit": 10.0}, "step_us": 400.0,
                                        "round_shim_us": 20.0}))
    (row,) = publisher_rows(analyse(frames))
    assert row == PublisherRow(
        src="h:7:dp1", version="0.5.23", algorithm="EAGLE3", worker="v2", steps=K, topk=1, draft_tokens=K + 1,
        cuda_graph=False, tp_rank=2, dp_rank=1, steps_per_s=4.0, dropped=3, gaps=2, hook_failures=1, hooks_ok=3,
        hooks_total=5, has_hello=True, model_path="t", run=1, state="live", shim_share=0.05,
        worker_class="EAGLEWorkerV2", unobserved=("draft_model",))
    (silent,) = publisher_rows(analyse([Stream().frame("step", step(0, 0, [1]))]))
    assert (silent.has_hello, silent.version, silent.worker, silent.tp_rank, silent.dp_rank, silent.worker_class,
            silent.algorithm, silent.steps, silent.steps_per_s, silent.hooks_total, silent.shim_share) == (
        False, None, None, None, None, None, None, None, None, 0, None)


def test_acceptance_view_of_a_session_with_a_live_aux_change():
    from eagle3scope.analysis.views import SegmentRow, acceptance_view

    s = Stream()
    frames = [s.frame("hello", hello()), s.frame("load", healthy_load())]
    frames += [s.frame("step", step(seq, 500_000_000 * (seq + 1), [3, 1])) for seq in range(4)]
    frames.append(s.frame("config", {"layers": [2, 4, 5], "captured": [3, 5, 6], "applied": True, "origin": "control"}))
    frames += [s.frame("step", step(seq, 500_000_000 * (seq + 1), [0, 0], capture={"on": True, "layers": [3, 5, 6]}))
               for seq in range(4, 6)]
    view = acceptance_view(analyse(frames))
    # 4 rounds of 6 tokens (3 + 1 accepted, 2 bonus), then 2 of 2, over 12 request-steps, 0.5 s apart
    assert (view.mean, view.cumulative, view.k, view.draft_tokens, view.steps, view.request_steps) == (
        28 / 12, 28 / 12, K, K + 1, 6, 12)
    assert (view.steps_per_s, view.tokens_per_s) == (5 / 2.5, 22 / 2.5)  # the first step's tokens precede the span
    assert view.per_position == [8 / 12, 0.5, 1.0] and view.histogram == [4, 4, 0, 4]
    assert view.history == [3.0, 3.0, 3.0, 3.0, 2.6, 28 / 12] and view.marks == [4]
    assert view.segments == [SegmentRow([1, 3, 4], [2, 4, 5], "startup", 4, 3.0, 0),
                             SegmentRow([2, 4, 5], [3, 5, 6], "control", 2, 1.0, 4)]
    assert (view.ranks, view.skew) == ([], None)


def test_accept_length_and_each_rank_are_the_rolling_window_beside_the_cumulative():
    """Past 512 request-steps the panel's "accept length" and each rank's figure are the last 512
    request-steps', "cumulative" the whole run's. Two ranks of one request, 600 steps each: dp0
    accepts all 3 drafts for 300 steps then none, dp1 always 2. The session window holds the last
    256 steps of each (256 x 1 + 256 x 3 tokens); dp0's own, 212 healthy steps and 300 empty ones."""
    from eagle3scope.analysis.views import RankRow, RankSkew, acceptance_view

    state = SessionState()
    streams = [Stream(f"h:1:dp{dp}") for dp in (0, 1)]
    for dp, s in enumerate(streams):
        state.ingest(s.frame("hello", {**hello(), "publisher_index": dp}))
    for seq in range(600):
        for dp, s in enumerate(streams):
            state.ingest(s.frame("step", step(seq, s.t, [(K if seq < 300 else 0) if dp == 0 else 2])))
    view = acceptance_view(state)
    assert (view.mean, view.cumulative, view.request_steps) == (2.0, 3300 / 1200, 1200)
    assert view.ranks == [RankRow("dp0", 1148 / 512, 600), RankRow("dp1", 3.0, 600)]
    assert view.skew == RankSkew("dp0", 1148 / 512, "dp1", 3.0)


def test_aux_view_lists_modes_in_order_their_widths_and_the_passes_it_could_not_watch():
    from eagle3scope.analysis.state import MAX_WIDTHS
    from eagle3scope.analysis.views import Fact, PassRow, SegmentRow, aux_view

    s = Stream()
    observable = {"passes_prefill": False, "passes_draft_decode": True, "graph_draft_decode": True,
                  "passes_draft_extend": True, "graph_draft_extend": True}
    graphs = {"captured": [{"mode": "decode", "bs": 4}, {"mode": "decode", "bs": 1}, {"mode": "decode"},
                           {"mode": "extend", "bs": 8}]}
    frames = [s.frame("hello", {**hello(), "observable": observable, "graphs": graphs})]
    body = step(0, 0, [1], feature_width=H, fc=False)
    body["passes"] = [*body["passes"], *({"mode": "x", "width": w, "fc": True, "n": 2} for w in range(MAX_WIDTHS + 3)),
                      {"width": 5, "fc": True, "replayed": True}]
    frames.append(s.frame("step", body))
    view = aux_view(analyse(frames))
    widths = tuple(sorted(((w, 2) for w in range(MAX_WIDTHS)), key=lambda kv: str(kv[0])))
    assert view.passes == [PassRow(None, 1, ((5, 1),), 1, 0, 1),  # a pass without a mode sorts as "None"
                           PassRow("decode", K - 1, ((H, K - 1),), 0, K - 1),
                           PassRow("draft_extend_v2", 1, ((H, 1),), 0, 1),
                           PassRow("x", 2 * (MAX_WIDTHS + 3), (*widths, ("other", 6)), 2 * (MAX_WIDTHS + 3), 0)]
    assert view.seen == [
        ("r0", "prefill: not seen on this server (replays a graph, and its caller is not hooked): fc and widths cannot "
               "be judged for it", "bad"),
        ("r0", "draft decode: replayed from graphs (captured for batch sizes 1, 4); width and fc read where SGLang "
               "hands the draft its hidden states", "muted"),
        ("r0", "draft extend: replayed from graphs (capture not seen); width and fc read where SGLang hands the draft "
               "its hidden states", "muted")]
    assert view.publishers == [("r0", [Fact("load report", "not received yet", "muted")])]
    assert view.segments == [SegmentRow(None, [2, 4, 5], "startup", 1, 2.0, 0)]  # the startup configuration, as captured


def test_draft_rows_newest_first_filtered_and_limited():
    from eagle3scope.analysis.views import DraftRow, draft_rows

    s = Stream()
    frames = [s.frame("step", step(seq, 0, [seq % 3, 1], draft_ids=[[seq, 1, 2], [3, 4, 5]])) for seq in range(4)]
    state = analyse(frames)
    rows = draft_rows(state, None, limit=3)
    assert [(r.seq, r.rid) for r in rows] == [(3, "r0"), (3, "r1"), (2, "r0")]
    assert rows[0] == DraftRow(3, "r0", "r0", [3, 1, 2], 0, 1, [7], "decode", None, "r0")
    assert [(r.seq, r.rid) for r in draft_rows(state, "1")] == [(seq, "r1") for seq in (3, 2, 1, 0)]
    assert len(draft_rows(state, None)) == 8 and draft_rows(state, "zz") == []


def test_advisor_logs_and_violation_copies():
    from eagle3scope.analysis.views import advice_rows, advisor_logs, events, violations

    a, b, c = Stream("a:1:dp0"), Stream("b:2:dp0"), Stream("c:3:dp0")
    state = SessionState()
    for f in (a.frame("hello", hello("EAGLE")), a.frame("load", healthy_load()), b.frame("step", step(0, 0, [1])),
              c.frame("load", healthy_load())):
        state.ingest(f)
    logs = advisor_logs(state)
    assert [(label, log.num_steps, log.seen) for label, log in logs] == [("1:dp0", K, 0), ("2:dp0", None, 1)]
    assert logs[1][1] is not state.publishers["b:2:dp0"].rounds
    assert [row.label for row in advice_rows(logs, bootstrap=5)] == ["1:dp0", "2:dp0"]
    (v,) = violations(state)
    v.active = False
    assert state.violations()[0].active and events(state) == list(state.events) and events(state) is not state.events


def test_the_event_log_says_what_happened_in_order_and_in_these_words():
    s = Stream()
    skipped = healthy_load()
    skipped["weights"]["skipped"] = ["x.weight"]
    frames = [s.frame("hello", hello()), s.frame("load", healthy_load()), s.frame("load", skipped),
              s.frame("config", {"layers": [2, 4, 5], "captured": [3, 5, 6], "applied": True, "origin": "control",
                                 "pause_ms": 12.4}),
              s.frame("config", {"layers": [99], "applied": False, "reason": "out of range"}),
              s.frame("hook", {"seam": "commit", "status": "failed", "detail": "boom"}),
              s.frame("hook", {"seam": "commit", "status": "attached", "detail": None})]
    s.n += 2
    frames.append(s.frame("step", step(0, s.t, [1], capture={"on": True, "layers": [3, 5, 6]})))
    frames.append(frames[-1])  # the same frame again
    frames.append(s.frame("config", {"layers": [1, 3, 4], "captured": [2, 4, 5], "applied": True, "origin": "startup"}))
    frames.append(s.frame("hello", {**hello(), "pid": 4243}))  # another process under the same src
    s.n = 0
    frames.append(s.frame("heartbeat", {"steps": 0, "dropped": 0, "hook_failures": 0, "queued": 0}))
    state = SessionState()
    for frame in frames:
        state.ingest(frame)
    t = [f.t for f in frames]
    started = "publisher r0: SGLang 0.5.23, EAGLE3 steps=3 topk=1 draft_tokens=4"
    assert [(e.t_ns, e.src, e.level, e.text) for e in state.events] == [
        (t[0], "r0", "info", started),
        (t[1], "r0", "info", "load report: LlamaForCausalLMEagle3 on LlamaForCausalLM"),
        (t[2], "r0", "error", "weights-dropped: Draft weights were silently dropped at load"),
        (t[3], "r0", "info", "aux layers now [2, 4, 5] (captured [3, 5, 6], control); graphs recaptured, serving paused 12 ms"),
        (t[4], "r0", "warning", "aux layer change to [99] refused: out of range"),
        (t[5], "r0", "warning", "hook commit failed: boom"),
        (t[5], "r0", "warning", "hook-failed: An instrumentation hook failed: visibility degraded"),
        (t[7], "r0", "warning", "2 frame(s) lost in transit (frame 6 -> 9)"),
        (t[7], "r0", "warning", "frame 9 arrived again (after 9): duplicates are dropped and counted, reported once"),
        (t[9], "r0", "info", "aux layers now [1, 3, 4] (captured [2, 4, 5], startup)"),
        (t[9], "r0", "warning", "frames-lost: Frames were lost between the server and the viewer"),  # the step's
        # frames run no rule pass of their own before RULES_EVERY steps or RULES_EVERY_NS: the next frame's does
        (t[10], "r0", "warning", "publisher restarted under the same src: run 2 starts, kept apart from run 1 (its 1 "
                                 "decode steps and violations stay as they ended)"),
        (t[10], "r0", "info", started),
        (t[11], "r0", "warning", "frame counter went back (11 -> 0) with time going on: publisher restarted"),
        (t[11], "r0", "warning", "publisher restarted under the same src: run 3 starts, kept apart from run 2 (its 0 "
                                 "decode steps and violations stay as they ended)")]
    assert [(p.run, p.began) for p in state.runs()] == [(1, (0, t[0])), (2, (11, t[10])), (3, (0, t[11]))]
    from eagle3scope.analysis.views import publisher_rows

    assert [row.run for row in publisher_rows(state)] == [3]  # the header names the current run
    assert [s.origin for s in state.segments] == ["control", "startup"]


def test_session_totals_after_the_fork_keep_widths_budgets_and_every_run_its_bounded_history():
    from eagle3scope.analysis.views import PassRow, aux_view

    a, b = Stream("a"), Stream("b")
    state = SessionState(history=3)
    for s in (a, b):
        state.ingest(s.frame("hello", hello()))
    for seq in range(2):
        for s in (a, b):
            body = step(seq, s.t, [2])
            body["num_steps"], body["draft_ids"] = 2, [body["draft_ids"][0][:2]]
            state.ingest(s.frame("step", body))
    assert state.acceptance is not state.publishers["a"].acceptance  # forked at b's first step
    assert aux_view(state).passes == [PassRow("decode", 4 * (K - 1), ((H, 4 * (K - 1)),), 0, 4 * (K - 1)),
                                      PassRow("draft_extend_v2", 4, ((3 * H, 4),), 4, 0)]
    # every round accepted its whole budget of 2: position 3 was not proposed, so never reached
    assert state.acceptance.cumulative_per_position == [1.0, 1.0, None]
    for seq in range(2, 5):
        state.ingest(b.frame("step", step(seq, b.t, [1])))
    assert len(state.publishers["b"].acceptance.history) == 3  # every view's history is the state's length
    state.ingest(a.frame("hello", {**hello(), "pid": 1}))  # a restarted: its new run is bounded as the first was
    for seq in range(5):
        state.ingest(a.frame("step", step(seq, a.t, [1])))
    assert len(state.publishers["a"].acceptance.history) == 3 and state.publishers["a"].run == 2


def test_steps_with_capture_off_are_counted_from_the_first_and_draft_ids_of_partly_empty_steps_are_read():
    s = Stream()
    frames = [s.frame("hello", hello("EAGLE")), s.frame("load", healthy_load())]
    for seq, on in enumerate([True, True, False, True, False]):
        frames.append(s.frame("step", step(seq, s.t, [1], capture={"on": on, "layers": [2, 4, 5]},
                                           draft_ids=[[10 + seq, 11, 12]])))
    prefill = step(5, s.t, [0, 0], draft_ids=[[], []])
    prefill.update(mode="prefill", accepted_ids=[[], []], bonus=[0, 0])
    mixed = step(6, s.t, [0, 1], draft_ids=[[], [TARGET_VOCAB - 1, 3]])
    mixed["accepted_ids"] = [[7], [TARGET_VOCAB - 1, 7]]
    frames += [s.frame("step", prefill), s.frame("step", mixed)]
    state = analyse(frames)
    pub = state.publishers["r0"]
    assert (pub.capture_off_steps, pub.capture_off_first_seq) == (2, 2)
    assert fired(state)["aux-capture-off"].evidence["steps_with_capture_off"] == 2
    assert (pub.draft_id_max, pub.draft_max_seq, pub.draft_id_min, pub.draft_min_seq) == (TARGET_VOCAB - 1, 6, 3, 6)
    assert pub.draft_max_rises == [(0, 12), (3, 13), (4, 14), (6, TARGET_VOCAB - 1)]  # the prefill's empty lists: none
    assert pub.draft_ids == 5 * K + 2 and pub.decode_steps == 6


def test_violations_list_active_first_then_by_severity_then_where_they_began():
    frames = session(80, algorithm="EAGLE", accept_p=0.0,
                     step_kw={"feature_width": H, "fc": False, "capture": {"on": False, "layers": None}})
    state = analyse(frames)
    assert [(v.id, v.first_seq) for v in state.violations()] == [
        ("aux-capture-off", None), ("fc-bypassed", 0), ("zero-acceptance", 63)]  # None: known before any step
    load = healthy_load()
    load["weights"]["skipped"] = ["x.weight"]
    s = Stream()
    frames = [s.frame("hello", hello()), s.frame("load", load)]
    frames += [s.frame("step", step(seq, s.t, [1], capture={"on": seq == 0, "layers": [2, 4, 5]})) for seq in range(2)]
    assert [(v.id, v.first_seq) for v in analyse(frames).violations()] == [("weights-dropped", None),
                                                                           ("aux-capture-off", 1)]


def test_a_config_without_an_origin_is_a_control_change_and_rates_need_time_going_forward():
    from eagle3scope.analysis.views import acceptance_view

    s = Stream()
    frames = [s.frame("hello", hello()), s.frame("step", step(0, 3_000, [1])), s.frame("step", step(1, 1_000, [1])),
              s.frame("config", {"layers": [1], "captured": [2], "applied": True})]
    state = analyse(frames)
    assert [(seg.origin, seg.src) for seg in state.segments] == [("startup", "r0"), ("control", "r0")]
    view = acceptance_view(state)  # the second step stamped before the first: no rate rather than a negative one
    assert (view.steps_per_s, view.tokens_per_s, view.steps) == (None, None, 2)


def test_rank_skew_names_the_worst_and_the_best_of_three():
    from eagle3scope.analysis.views import RankRow, RankSkew, rank_rows

    state = SessionState()
    for dp, accepted in ((0, 2), (1, 0), (2, 3)):
        s = Stream(f"h:1:dp{dp}")
        state.ingest(s.frame("hello", {**hello(), "publisher_index": dp}))
        state.ingest(s.frame("step", step(0, s.t, [accepted])))
    rows, skew = rank_rows(state)
    assert rows == [RankRow("dp0", 3.0, 1), RankRow("dp1", 1.0, 1), RankRow("dp2", 4.0, 1)]
    assert skew == RankSkew("dp1", 1.0, "dp2", 4.0) and skew.spread == 3.0


def test_the_header_names_the_engine_a_hello_says_and_an_old_hello_is_sglang():
    from eagle3scope.analysis.views import publisher_rows

    vllm = {k: v for k, v in hello().items() if k != "sglang_version"} | {"engine": "vllm", "engine_version": "0.32.0"}
    for body, engine, version in ((vllm, "vllm", "0.32.0"), (hello(), "sglang", "0.5.23")):
        (row,) = publisher_rows(analyse([Stream().frame("hello", body)]))
        assert (row.engine, row.version) == (engine, version)
