"""Every demo scenario through the real SGLang 0.5.23 CPU engine, recorded by the real shim, judged
by the real rules: each break is named by its own rule and the healthy runs raise no error.

One server per scenario (about 25 s to start, shared with the other scenario tests through the
``scenario_result`` fixture), SCENARIO_STEPS recorded steps each. The recordings are then
checked with the ``eagle3scope check`` command, as a user would in CI.
"""

from __future__ import annotations


import pytest
from support.cli import check_json, fired
from support.engine import SCENARIO_RULES, SCENARIO_STEPS

pytestmark = pytest.mark.engine


#: Steps of the demo's acceptance check (`demo --headless --steps 300`), for the run at temperature 0.8 alone.
ISSUE_STEPS = 300


def assert_healthy_run(path, results, temperatures, steps: int = SCENARIO_STEPS) -> dict:
    """No error, exactly the steps recorded, a working draft; the shim's mean and SGLang's own
    meta_info describe the same run. Returns check's summary."""
    code, report = check_json(path)
    assert fired(report) == set(), report["violations"]
    assert code == 0
    summary = report["summary"]
    assert summary["steps"] == steps  # run.record counts decode steps, as check does
    assert len(summary["per_position"]) == 3 and all(0.0 < p < 1.0 for p in summary["per_position"])
    served = [r["meta_info"]["spec_accept_length"] for r in results]
    assert {r["temperature"] for r in results} == set(temperatures)
    assert abs(sum(served) / len(served) - summary["mean_accept_length"]) < 0.35, (served, summary)
    return summary


def test_healthy_run_is_clean_and_drafts_well(scenario_result):
    run = scenario_result("healthy")  # the demo's workload: greedy and temperature 0.8 alternating
    summary = assert_healthy_run(run["recording"], run["results"], {0.0, 0.8})
    # A real draft's range (public EAGLE-3 figures at steps 3 / topk 1 / 4 draft tokens: about 2.9),
    # not 4 of 4; each position given the one before: later drafts, fed the draft's own states, are worse.
    assert 2.6 <= summary["mean_accept_length"] <= 3.4, summary
    # 0.939 / 0.707 / 0.509 over the check's 300 steps (BENCHMARKS.md, "Demo models and scenarios")
    p1, p2, p3 = summary["per_position"]
    assert p1 > p2 > p3, summary["per_position"]


@pytest.fixture(scope="module")
def sampled_healthy(demo_models, engine_python, tmp_path_factory):
    """The healthy draft with every request at temperature 0.8: SGLang's sampling verify on CPU."""
    from eagle3scope.demo.runner import ScenarioRun

    root = tmp_path_factory.mktemp("sampled")
    path = root / "healthy-t0.8.e3s"
    with ScenarioRun("healthy", demo_models, control=False, python=engine_python, temperatures=(0.8,),
                     log_path=root / "healthy-t0.8.log") as run:
        run.record(path, ISSUE_STEPS)
        run.workload.stop()
        return path, list(run.workload.results)


def test_healthy_run_at_temperature_0_8_through_the_sampling_verify(sampled_healthy):
    path, results = sampled_healthy
    summary = assert_healthy_run(path, results, {0.8}, ISSUE_STEPS)
    # The acceptance check at temperature 0.8: measured 2.662, 0.872 / 0.618 / 0.466 over 300 steps
    # (BENCHMARKS.md); the floor leaves 0.05 below the goal's 2.6 for a build on other hardware,
    # whose float sums (and so its trained draft) differ slightly.
    assert 2.55 <= summary["mean_accept_length"] <= 3.4, summary
    p1, p2, p3 = summary["per_position"]
    assert p1 > p2 > p3, summary["per_position"]


@pytest.mark.parametrize("scenario", sorted(SCENARIO_RULES))
def test_fault_scenario_is_named_by_its_rule(scenario_result, scenario):
    path = scenario_result(scenario)["recording"]
    rules, severity = SCENARIO_RULES[scenario]
    code, report = check_json(path)
    assert fired(report, severity) & rules, f"{scenario}: expected one of {rules}, got {report['violations']}"
    assert code == (1 if severity == "error" else 0)
    for violation in report["violations"]:
        if violation["id"] in rules:
            assert violation["evidence"], violation
