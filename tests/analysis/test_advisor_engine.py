"""The advisor against the real engine (SGLang 0.5.23 on CPU, the trained demo draft): a recording at
--speculative-num-steps 5 predicts what SGLang itself reports when it serves at 2 steps.

Measured side: SGLang's own ``meta_info`` (completion tokens over verify passes, its accept length)
for greedy requests on the demo prompts; predicted side: ``eagle3scope advise`` on the shim's
recording of the same prompts at 5 steps. benchmarks/analysis/bench_advisor.py runs every setting 1..4 and
the throughput side (BENCHMARKS.md)."""

from __future__ import annotations

import json

import pytest

from support.cli import invoke

pytestmark = pytest.mark.engine

RECORDED_STEPS, SERVED_STEPS, DECODE_STEPS = 5, 2, 400


def served(models, python, num_steps: int, log, record=None) -> float:
    """SGLang's accept length over the greedy workload's finished requests at ``num_steps``: tokens
    committed by verify passes (every completion token but the prefill's) per verify pass."""
    from eagle3scope.demo.runner import ScenarioRun

    run = ScenarioRun("healthy", models, control=False, python=python, num_steps=num_steps, temperatures=(0.0,),
                      log_path=log)
    with run:
        if record is not None:
            run.record(record, DECODE_STEPS)
        else:
            run.finished_requests(at_least=48, timeout_s=300)
        run.workload.stop()
        results = list(run.workload.results)
    tokens = sum(r["meta_info"]["completion_tokens"] - 1 for r in results)
    verifies = sum(r["meta_info"]["spec_verify_ct"] for r in results)
    assert verifies > 0
    return tokens / verifies


def test_a_recording_at_5_steps_predicts_sglangs_accept_length_at_2(demo_models, engine_python, tmp_path):
    recording = tmp_path / "deep.e3s"
    at_5 = served(demo_models, engine_python, RECORDED_STEPS, tmp_path / "s5.log", record=recording)
    at_2 = served(demo_models, engine_python, SERVED_STEPS, tmp_path / "s2.log")
    out = invoke("advise", str(recording), "--json")
    assert out.exit_code in (0, 3), out.output
    (advice,) = json.loads(out.output)["publishers"].values()
    assert advice["recorded_num_steps"] == RECORDED_STEPS
    predicted = {s["num_steps"]: s["accept_length"] for s in advice["settings"]}
    assert abs(predicted[RECORDED_STEPS] - at_5) < 0.1  # the shim's count is SGLang's
    assert abs(predicted[SERVED_STEPS] - at_2) < 0.1, (predicted, at_2)
    assert predicted[SERVED_STEPS] < predicted[RECORDED_STEPS]
    assert advice["time_model"]["missing"] in ([], ["extend"])
