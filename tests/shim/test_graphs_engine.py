"""Draft passes replayed from graphs, in the real SGLang 0.5.23 CPU engine with the CPU graph stand-in
in its strict mode (cpu_engine/.../graphs.py, ``EAGLE3SCOPE_CPU_GRAPHS=strict``): SGLang's own draft
graph runners capture a capture list (here 2 and 4, so a single request pads to 2) while the server
starts, before the shim's publisher exists, and pad every batch; the draft's Python forward, and the
shim's hook inside it, run only at capture; the width and fc of every replayed pass come from the
eager callers (``EagleDraftWorker.draft`` / ``_draft_extend_for_decode``, eagle_worker_v2.py of
0.5.23), its ``graph_bs`` from the runner's choice, and the rules read them as they read eager passes.

Three servers of the trained demo models (about 25 s each, each started while the one before it runs:
ServerPool): eager and graphed serving the same greedy prompts one at a time (so batching cannot change them: same tokens and the same draft proposals per
step), the graphed one also sampled and under the sync guard; and the aux-off scenario's draft graphed.
"""

from __future__ import annotations

import json
import os

import pytest
from support.engine import run_engine_python
from support.servers import GUARDED, PROMPTS, ServerPool, bodies, check_agreement, failed_hooks, last_body, pooled

from eagle3scope.analysis import analyse
from eagle3scope.demo.families import scenarios_of
from eagle3scope.demo.server import checkout_pythonpath

pytestmark = pytest.mark.engine

#: The capture list the strict stand-in narrows SGLang's to: every single-request round pads up to 2.
CAPTURED = (2, 4)
STRICT_GRAPHS_ENV = {"EAGLE3SCOPE_CPU_GRAPHS": "strict", "EAGLE3SCOPE_CPU_GRAPHS_BS": ",".join(map(str, CAPTURED))}


def test_stand_in_has_cuda_graph_semantics(engine_python):
    """Without a server: Python runs once (at capture, under SGLang's capture flag), replays recompute on
    the static inputs and overwrite the captured outputs, attention breaks out, a host sync fails capture."""
    facts = _semantics(engine_python)
    assert facts["capture_ran_python"] == 1 and facts["flag_in_capture"] == [True] and not facts["flag_after"]
    assert facts["input_names"] == ["bias", "x"] and facts["inputs_private"] and facts["live_inputs_untouched"]
    assert facts["capture_matches_eager"] and facts["replay_matches_eager"] == [True] * 5
    assert facts["python_runs_after_replays"] == 1 and facts["replays"] == 5
    assert facts["attention_calls"] == 6  # the break: once at capture, once per replay
    assert "synchronises with the host" in facts["sync_capture"]
    assert facts["other_shape_fits"] is False  # another batch size is another graph


def test_strict_graph_backend_replays_as_eager_and_a_failed_capture_raises(engine_python):
    """The strict mode's backend (in place of SGLang's FullCudaGraphBackend): two warm-ups and the
    capture run the Python, replays match eager; a host sync in capture raises (SGLang's runners then
    abort start-up with "Capture cuda graph failed"), and the shape is not kept to run eagerly."""
    facts = _semantics(engine_python)
    assert facts["strict_python_runs"] == 3 and facts["strict_replay_matches_eager"] == [True] * 3
    assert facts["strict_can_run"] == [True, False]
    assert facts["strict_sync_capture"].startswith("CaptureError") and not facts["strict_failed_shape_kept"]
    # the runner's capture loop: largest size first, the shared buffers refilled first, and no shape
    # left to run eagerly: the failure leaves the loop (and SGLang's __init__, which aborts start-up)
    assert facts["strict_runner_tried"] == [2, 1] and facts["strict_runner_fill"] == [1.0, 1.0]
    assert facts["strict_runner_capture"].startswith("CaptureError")


def test_global_capture_mode_refuses_other_threads_and_invalidates_the_capture(engine_python):
    """While a capture records, another thread's event query/sync, stream or device sync or pinned
    allocation is refused and the capture fails (cudaStreamCaptureModeGlobal); outside a capture the
    calls reach torch (which, on a CPU build, has no event or pinned memory to give)."""
    facts = _semantics(engine_python)
    assert set(facts["global_during"].values()) == {"refused"} and len(facts["global_during"]) == 6
    assert all(why.startswith("the capture was invalidated") for why in facts["global_captures"].values())
    assert "refused" not in facts["global_outside"].values() and facts["global_unpinned_empty"] == "ran"


_FACTS: dict = {}


def _semantics(engine_python) -> dict:
    """The facts tests/engine_side/graph_semantics.py prints, run once per module."""
    if not _FACTS:
        done = run_engine_python(engine_python, "tests/engine_side/graph_semantics.py", timeout=300,
                                 env={"SGLANG_USE_CPU_ENGINE": "1", **checkout_pythonpath(os.environ)})
        assert done.returncode == 0, done.stderr[-3000:]
        _FACTS.update(json.loads(done.stdout.strip().splitlines()[-1]))
    return _FACTS


@pytest.fixture(scope="module")
def pool(request, demo_models, tmp_path_factory):
    """The module's three servers, each started while the one before it runs (ServerPool)."""
    target, draft = demo_models.target, demo_models.draft
    aux_off = scenarios_of("llama")["aux-off"].prepare(demo_models, tmp_path_factory.mktemp("aux-off"))
    return ServerPool(request, {
        "eager": (((target, draft, {}), {}), {}),
        "graphed": (((target, draft, {**STRICT_GRAPHS_ENV, **GUARDED}), {}), {"temperatures": (0.0, 0.8)}),
        "aux_off": (((aux_off.target_dir, aux_off.draft_dir, {**STRICT_GRAPHS_ENV, **GUARDED}), {}), {}),
    })


eager, graphed, aux_off = (pooled(name) for name in ("eager", "graphed", "aux_off"))


@pytest.fixture(scope="module")
def served(eager, graphed):
    """(eager frames, eager responses, graphed frames, graphed responses)."""
    return (*eager, *graphed)


def _drafts(frames) -> list:
    return [b["draft_ids"] for b in sorted(bodies(frames, "step"), key=lambda b: b["seq"]) if b["mode"] == "decode"]


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
    load, hello = last_body(frames, "load"), last_body(frames, "hello")
    h, wide = load["hidden_size"], load["fc"]["in"]
    observable = hello["observable"]
    assert observable["graph_draft_decode"] and observable["graph_draft_extend"] and not observable["graph_prefill"]
    assert observable["passes_prefill"] and observable["passes_draft_decode"] and observable["passes_draft_extend"]
    assert not last_body(eager_frames, "hello")["observable"]["graph_draft_decode"]
    captured = {(g["mode"], g["bs"]): (g["width"], g["fc"]) for g in hello["graphs"]["captured"]}
    # every size of the capture list, captured before the first step (the hello already lists them)
    assert captured == {**{("decode", bs): (h, False) for bs in CAPTURED}, **{("draft_extend_v2", bs): (wide, True) for bs in CAPTURED}}
    decode = [b for b in bodies(frames, "step") if b["mode"] == "decode"]
    assert decode and max(b["bs"] for b in decode) <= max(CAPTURED)
    for body in decode:
        padded = min(bs for bs in CAPTURED if bs >= body["bs"])  # the key SGLang's runner pads to
        passes = {(p["mode"], p["width"], p["fc"], p.get("replayed"), p.get("graph_bs")): p["n"] for p in body["passes"]}
        assert passes == {("decode", h, False, True, padded): 2, ("draft_extend_v2", wide, True, True, padded): 1}
    for body in bodies(frames, "step"):
        if body["mode"] == "prefill":  # prefill stays eager: the draft forward's own hook reports it
            assert {(p["mode"], p["width"], p["fc"], p.get("replayed")) for p in body["passes"]} == {("extend", wide, True, None)}
    eager_decode = [b for b in bodies(eager_frames, "step") if b["mode"] == "decode"]
    assert all(not p.get("replayed") for b in eager_decode for p in b["passes"])


def test_graphed_healthy_run_is_clean_and_agrees_with_meta_info(served):
    _, _, frames, responses = served
    assert failed_hooks(frames) == []  # sync guard on: no sync added
    check_agreement(frames, responses)
    state = analyse(frames)
    assert [(v.id, v.severity) for v in state.violations() if v.severity in ("error", "warning")] == []
    assert "passes-unobserved" not in {v.id for v in state.violations()}


def test_aux_off_under_graphs_fires_fc_bypassed_with_width_evidence(aux_off):
    frames, responses = aux_off
    state = analyse(frames)
    fired = {v.id: v for v in state.violations()}
    assert "fc-bypassed" in fired, sorted(fired)
    evidence = fired["fc-bypassed"].evidence
    h = last_body(frames, "load")["hidden_size"]
    assert evidence["width_seen"] == [h] and evidence["fc_in"] == 3 * h
    assert evidence["skipped_by_mode"]["draft_extend_v2"] == evidence["replayed_by_mode"]["draft_extend_v2"] > 0
    check_agreement(frames, responses)
    assert failed_hooks(frames) == []
