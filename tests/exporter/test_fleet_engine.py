"""The fleet path end to end on the real engine: shim -> exporter -> a real Prometheus -> the dashboard's
PromQL, against ``check`` on a recording of the same run; and the live ``gate`` and ``check``'s
floors on real servers and recordings.

No server of its own: the exporter, the whole-run recorder and the gate ride along the shared
per-scenario servers of ``scenario_result`` (tests/conftest.py, FLEET_SCENARIOS). Prometheus is
Debian's package (``make prometheus``); with EAGLE3SCOPE_REQUIRE_ENGINE=1 its absence fails.
"""

from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ET

import pytest
from support.cli import check_json
from support.engine import FLEET_SCENARIOS, SCENARIO_RULES, engine_missing
from support.fleet_support import DASHBOARD, GATE_MIN_ACCEPT_LENGTH, GATE_STEPS, assert_dashboard_matches_check, bind, \
    dashboard_queries, panel_expr, values

pytestmark = pytest.mark.engine



def junit_failures(path) -> set[str]:
    return {c.get("name") for c in ET.parse(path).getroot().iter("testcase") if c.find("failure") is not None}


def fleet_run(scenario_result, name: str) -> dict:
    fleet = scenario_result(name)["fleet"]
    if fleet["prometheus"] is None:
        engine_missing(fleet["prometheus_missing"])
    return fleet


@pytest.mark.parametrize("scenario", FLEET_SCENARIOS)
def test_prometheus_sees_what_check_says(scenario_result, scenario):
    fleet = fleet_run(scenario_result, scenario)
    code, report = check_json(fleet["recording"])
    summary = report["summary"]
    assert summary["steps"] > 0 and len(summary["per_position"]) == 3
    want = assert_dashboard_matches_check(fleet, report)
    prom, t0, t1 = fleet["prometheus"], fleet["t_start"], fleet["t_end"]
    q = lambda title: prom.query(bind(panel_expr(title), summary["publishers"][0], math.ceil(t1 - t0) + 2), t1)  # noqa: E731
    if scenario == "healthy":
        assert code == 0 and want == {}
        assert summary["mean_accept_length"] >= 2.6  # the demo draft's range (tests/rules/test_real_scenarios.py)
    else:
        assert code == 1 and {"aux-capture-off", "fc-bypassed"} & {rule for rule, _ in want}
        forwards = {(r["metric"]["mode"], r["metric"]["fc"]) for r in q("Draft forwards: fc applied vs skipped")}
        assert ("draft_extend", "skipped") in forwards or ("extend", "skipped") in forwards, forwards
        capture = values(q("Aux capture on"))
        assert capture and all(v == 0.0 for v in capture.values())


def test_every_dashboard_query_evaluates_on_the_real_runs(scenario_result):
    """Each PromQL expression of the dashboard parses, runs as an instant and as a range query, and
    returns data for at least one of the runs (the violation panels only for the broken one)."""
    runs = [(fleet, check_json(fleet["recording"])[1]["summary"]["publishers"][0])
            for fleet in (fleet_run(scenario_result, name) for name in FLEET_SCENARIOS)]
    queries = dashboard_queries()
    assert len(queries) >= 15
    for title, expr in queries:
        answered = False
        for fleet, publisher in runs:
            prom, t0, t1 = fleet["prometheus"], fleet["t_start"], fleet["t_end"]
            instant = prom.query(bind(expr, publisher, math.ceil(t1 - t0) + 2), t1)
            series = prom.query_range(bind(expr, publisher, 10), t0, t1)
            answered |= bool(instant) and bool(series)
        assert answered, f"{title}: {expr} returned no data on {FLEET_SCENARIOS}"


def test_dashboard_variables_list_the_runs_model_and_publishers(scenario_result):
    runs = {name: fleet_run(scenario_result, name) for name in FLEET_SCENARIOS}
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    for name, fleet in runs.items():
        prom, t1 = fleet["prometheus"], fleet["t_end"]
        _, report = check_json(fleet["recording"])
        match = re.fullmatch(r"label_values\((.*), (\w+)\)", variables["publisher"]["definition"])
        selector = match[1].replace("$model", ".*")
        found = {r["metric"][match[2]] for r in prom.query(selector, t1)}
        assert set(report["summary"]["publishers"]) <= found


def test_live_gate_passes_healthy_and_names_the_break_on_aux_off(scenario_result):
    healthy = scenario_result("healthy")["fleet"]
    gate = healthy["gate"]
    assert gate["code"] == 0, gate["stdout"][-2000:] + gate["stderr"][-2000:]
    out = json.loads(gate["stdout"])
    assert out["gate"]["passed"] and out["summary"]["steps"] >= GATE_STEPS
    assert out["summary"]["mean_accept_length"] >= GATE_MIN_ACCEPT_LENGTH
    assert junit_failures(healthy["junit"]) == set()

    broken = scenario_result("aux-off")["fleet"]
    gate = broken["gate"]
    assert gate["code"] == 1, gate["stdout"][-2000:] + gate["stderr"][-2000:]
    failures = junit_failures(broken["junit"])
    assert failures & {"aux-capture-off", "fc-bypassed"}, failures
    assert "min-accept-length" in failures


@pytest.mark.parametrize("scenario", ["healthy", *sorted(SCENARIO_RULES)])
def test_check_floors_and_junit_on_real_recordings(scenario_result, scenario, tmp_path):
    """Healthy passes the floors a deployment of this draft would set (measured 0.94 / 0.71 / 0.51 per position,
    BENCHMARKS.md); each fault fails with its own rule named."""
    rules, severity = SCENARIO_RULES.get(scenario, (set(), "error"))
    junit = tmp_path / "check.xml"
    code, report = check_json(scenario_result(scenario)["recording"], "--min-accept-length", "2.5",
                              "--min-per-position", "0.8,0.55,0.35", "--fail-on", severity, "--junit", str(junit))
    failures = junit_failures(junit)
    if scenario == "healthy":
        assert code == 0 and failures == set() and report["gate"]["passed"], report["gate"]
    else:
        assert code == 1 and not report["gate"]["passed"]
        assert failures & rules, (failures, rules)
