"""``check --baseline`` on real-engine recordings (the suite's shared scenario runs, SCENARIO_STEPS
decode steps each, recorded once per test session): the aux-offset draft regresses against a healthy
run and names the positions that dropped; a second healthy server's run does not; and the real
shim's steps carry the per-request context lengths and greedy flags the slices read."""

from __future__ import annotations

import pytest
from support.cli import check_json, run

pytestmark = pytest.mark.engine


def test_aux_offset_regresses_against_healthy_naming_the_positions(scenario_result):
    healthy = scenario_result("healthy")["recording"]
    offset = scenario_result("aux-offset")["recording"]
    code, out = check_json(offset, "--baseline", healthy)
    assert code == 1, out["baseline"]
    text = run("check", offset, "--baseline", healthy, timeout=300).stdout
    comparison = out["baseline"]
    dropped = [d for d in comparison["overall"] if d["name"].startswith("position ") and d["regressed"]]
    assert dropped, comparison["overall"]
    assert "mean accept length" in comparison["regressed"]
    for d in dropped:
        assert d["change"] < 0 and d["interval"][1] < -d["tolerance"], d
        assert f"FAIL    {d['name']}: " in text and "REGRESSED" in text
    assert {f"baseline[{d['name']}]" for d in dropped} <= set(out["gate"]["failed"])


def test_a_second_healthy_run_passes_against_the_first(scenario_result):
    first = scenario_result("healthy")["recording"]
    second = scenario_result("healthy", repeat=2)["recording"]
    code, out = check_json(second, "--baseline", first)
    comparison = out["baseline"]
    assert code == 0 and comparison["regressed"] == [], comparison
    assert comparison["overall"][0]["judged"], comparison["overall"][0]  # the mean was compared, not skipped


def test_real_steps_carry_context_lengths_and_greedy_flags(scenario_result):
    """The healthy workload alternates greedy and temperature 0.8: both sampling slices are filled,
    and every request-step has a context length."""
    _, out = check_json(scenario_result("healthy")["recording"])
    slices, n = out["summary"]["slices"], out["summary"]["request_steps"]
    sampling = {e["label"]: e["request_steps"] for e in slices["sampling"]}
    assert set(sampling) == {"greedy", "sampled"} and sum(sampling.values()) == n, sampling
    assert "unknown" not in {e["label"] for e in slices["context_length"]}
    assert sum(e["request_steps"] for e in slices["context_length"]) == n
