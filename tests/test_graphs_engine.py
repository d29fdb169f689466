"""Draft passes replayed from graphs, in the real SGLang 0.5.23 CPU engine with the CPU graph stand-in
(cpu_engine/.../graphs.py, ``EAGLE3SCOPE_CPU_GRAPHS=1``): the draft's Python forward, and the shim's
hook inside it, run only when a graph is captured; the width and fc of every replayed pass come from
the eager callers (``EagleDraftWorker.draft`` / ``_draft_extend_for_decode``, eagle_worker_v2.py of
0.5.23), and the rules read them as they read eager passes.

Three servers of the trained demo models (about 25 s each, each started while the one before it runs:
ServerPool): eager and graphed serving the same greedy prompts one at a time (so batching cannot change them: same tokens and the same draft proposals per
step), the graphed one also sampled and under the sync guard; and the aux-off scenario's draft graphed.
"""

from __future__ import annotations

import json

import pytest
from support.engine import run_engine_python
from test_shim_engine import PROMPTS, ServerPool, _check_agreement, _kind, _last, pooled

from eagle3scope.analysis import analyse
from eagle3scope.demo.families import scenarios_of
from eagle3scope.demo.server import CPU_GRAPHS_ENV, checkout_pythonpath

pytestmark = pytest.mark.engine


def test_stand_in_has_cuda_graph_semantics(engine_python):
    """Without a server: Python runs once (at capture, under SGLang's capture flag), replays recompute on
    the static inputs and overwrite the captured outputs, attention breaks out, a host sync fails capture."""
    import os

    done = run_engine_python(engine_python, "tests/engine_side/graph_semantics.py", timeout=300,
                             env={"SGLANG_USE_CPU_ENGINE": "1", **checkout_pythonpath(os.environ)})
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts["capture_ran_python"] == 1 and facts["flag_in_capture"] == [True] and not facts["flag_after"]
    assert facts["input_names"] == ["bias", "x"] and facts["inputs_private"] and facts["live_inputs_untouched"]
    assert facts["capture_matches_eager"] and facts["replay_matches_eager"] == [True] * 5
    assert facts["python_runs_after_replays"] == 1 and facts["replays"] == 5
    assert facts["attention_calls"] == 6  # the break: once at capture, once per replay
    assert "synchronises with the host" in facts["sync_capture"]
    assert facts["other_shape_fits"] is False  # another batch size is another graph


@pytest.fixture(scope="module")
def pool(request, demo_models, tmp_path_factory):
    """The module's three servers, each started while the one before it runs (ServerPool)."""
    target, draft = demo_models.target, demo_models.draft
    aux_off = scenarios_of("llama")["aux-off"].prepare(demo_models, tmp_path_factory.mktemp("aux-off"))
    return ServerPool(request, {
        "eager": (((target, draft, {}), {}), {}),
        "graphed": (((target, draft, {**CPU_GRAPHS_ENV, "EAGLE3SCOPE_SYNC_GUARD": "1"}), {}), {"temperatures": (0.0, 0.8)}),
        "aux_off": (((aux_off.target_dir, aux_off.draft_dir, CPU_GRAPHS_ENV), {}), {}),
    })


eager, graphed, aux_off = (pooled(name) for name in ("eager", "graphed", "aux_off"))


@pytest.fixture(scope="module")
def served(eager, graphed):
    """(eager frames, eager responses, graphed frames, graphed responses)."""
    return (*eager, *graphed)


def _drafts(frames) -> list:
    return [b["draft_ids"] for b in sorted(_kind(frames, "step"), key=lambda b: b["seq"]) if b["mode"] == "decode"]


def test_graphs_give_the_eager_tokens_and_drafts(served):
    eager_frames, eager_responses, graph_frames, graph_responses = served
    greedy = graph_responses[: len(PROMPTS)]
    assert [r["output_ids"] for r in greedy] == [r["output_ids"] for r in eager_responses]
    assert [r["meta_info"]["spec_verify_ct"] for r in greedy] == [r["meta_info"]["spec_verify_ct"] for r in eager_responses]
    assert sum(r["meta_info"]["spec_num_correct_drafts"] for r in eager_responses) > 0  # the drafts are worth comparing
    n = len(_drafts(eager_frames))
    assert _drafts(graph_frames)[:n] == _drafts(eager_frames)  # every proposal of every step replayed the same


def test_replayed_passes_carry_width_and_fc_from_the_callers(served, demo_models):
    eager_frames, _, frames, _ = served
    load, hello = _last(frames, "load"), _last(frames, "hello")
    h, wide = load["hidden_size"], load["fc"]["in"]
    observable = hello["observable"]
    assert observable["graph_draft_decode"] and observable["graph_draft_extend"] and not observable["graph_prefill"]
    assert observable["passes_prefill"] and observable["passes_draft_decode"] and observable["passes_draft_extend"]
    assert not _last(eager_frames, "hello")["observable"]["graph_draft_decode"]
    captured = {(g["mode"], g["bs"]): (g["width"], g["fc"]) for g in hello["graphs"]["captured"]}
    assert captured[("decode", 1)] == (h, False) and captured[("draft_extend_v2", 1)] == (wide, True)
    decode = [b for b in _kind(frames, "step") if b["mode"] == "decode"]
    for body in decode:
        passes = {(p["mode"], p["width"], p["fc"], p.get("replayed"), p.get("graph_bs")): p["n"] for p in body["passes"]}
        assert passes == {("decode", h, False, True, body["bs"]): 2, ("draft_extend_v2", wide, True, True, body["bs"]): 1}
    for body in _kind(frames, "step"):
        if body["mode"] == "prefill":  # prefill stays eager: the draft forward's own hook reports it
            assert {(p["mode"], p["width"], p["fc"], p.get("replayed")) for p in body["passes"]} == {("extend", wide, True, None)}
    eager_decode = [b for b in _kind(eager_frames, "step") if b["mode"] == "decode"]
    assert all(not p.get("replayed") for b in eager_decode for p in b["passes"])


def test_graphed_healthy_run_is_clean_and_agrees_with_meta_info(served):
    _, _, frames, responses = served
    assert [b for b in _kind(frames, "hook") if b["status"] == "failed"] == []  # sync guard on: no sync added
    _check_agreement(frames, responses)
    state = analyse(frames)
    assert [(v.id, v.severity) for v in state.violations() if v.severity in ("error", "warning")] == []
    assert "passes-unobserved" not in {v.id for v in state.violations()}


def test_aux_off_under_graphs_fires_fc_bypassed_with_width_evidence(aux_off):
    frames, responses = aux_off
    state = analyse(frames)
    fired = {v.id: v for v in state.violations()}
    assert "fc-bypassed" in fired, sorted(fired)
    evidence = fired["fc-bypassed"].evidence
    h = _last(frames, "load")["hidden_size"]
    assert evidence["width_seen"] == [h] and evidence["fc_in"] == 3 * h
    assert evidence["skipped_by_mode"]["draft_extend_v2"] == evidence["replayed_by_mode"]["draft_extend_v2"] > 0
    _check_agreement(frames, responses)
