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
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import FLEET_SCENARIOS, engine_missing
from fleet_support import GATE_MIN_ACCEPT_LENGTH, GATE_STEPS
from test_real_scenarios import EXPECTED

pytestmark = pytest.mark.engine

DASHBOARD = Path(__file__).resolve().parents[1] / "examples/monitoring/grafana/dashboards/json/eagle3scope.json"


def check_json(path, *args: str) -> tuple[int, dict]:
    done = subprocess.run([sys.executable, "-m", "eagle3scope", "check", str(path), "--json", *args],
                          capture_output=True, text=True, timeout=120)
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def junit_failures(path) -> set[str]:
    return {c.get("name") for c in ET.parse(path).getroot().iter("testcase") if c.find("failure") is not None}


def fleet_run(scenario_result, name: str) -> dict:
    fleet = scenario_result(name)["fleet"]
    if fleet["prometheus"] is None:
        engine_missing(fleet["prometheus_missing"])
    return fleet


def dashboard_queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p["targets"]]


def panel_expr(title: str) -> str:
    (expr,) = [e for t, e in dashboard_queries() if t == title]
    return expr


def bind(expr: str, publisher: str, window_s: int) -> str:
    """What Grafana sends for one publisher and a time range covering the run."""
    out = expr.replace("$model", ".*").replace("$publisher", re.escape(publisher).replace("\\", "\\\\"))
    out = out.replace("$__rate_interval", f"{window_s}s").replace("$__range", f"{window_s}s")
    assert "$" not in out, out
    return out


def values(result: list[dict], key: str | None = None) -> dict:
    return {(r["metric"].get(key) if key else None): float(r["value"][1]) for r in result}


@pytest.mark.parametrize("scenario", FLEET_SCENARIOS)
def test_prometheus_sees_what_check_says(scenario_result, scenario):
    fleet = fleet_run(scenario_result, scenario)
    prom, t0, t1 = fleet["prometheus"], fleet["t_start"], fleet["t_end"]
    code, report = check_json(fleet["recording"])
    summary = report["summary"]
    (publisher,) = summary["publishers"]
    k = len(summary["per_position"])
    assert summary["steps"] > 0 and k == 3
    window = math.ceil(t1 - t0) + 2
    q = lambda title: prom.query(bind(panel_expr(title), publisher, window), t1)  # noqa: E731

    # raw counters at the end of the run: exactly the recording's
    sel = f'{{scenario="{scenario}"}}'
    assert values(prom.query(f"sum(eagle3scope_steps_total{sel})", t1))[None] == summary["steps"]
    assert values(prom.query(f"sum(eagle3scope_request_steps_total{sel})", t1))[None] == summary["request_steps"]

    # the dashboard's per-position acceptance over the run is check's per-position acceptance
    per_position = values(q("Per-position acceptance over the range"), "position")
    for i, rate in enumerate(summary["per_position"], start=1):
        if rate is None:
            assert str(i) not in per_position or math.isnan(per_position[str(i)])
        else:
            assert per_position[str(i)] == pytest.approx(rate, rel=1e-9), (i, per_position)
    mean = values(q("Mean acceptance length"))[None]
    assert mean == pytest.approx(summary["mean_accept_length"], rel=1e-9)

    # the histogram and the unconditional (vLLM-style) rates follow from check's histogram
    hist, n = summary["histogram"], summary["request_steps"]
    at_least = [sum(hist[j:]) for j in range(k + 1)]
    vllm = values(q("Acceptance by draft position (vLLM-style)"), "position")
    for i in range(1, k + 1):
        assert vllm[str(i)] == pytest.approx(at_least[i] / n, rel=1e-9)
    buckets = values(q("Accept-length distribution"), "le")
    for length in range(1, k + 2):
        assert buckets[str(length)] / buckets["+Inf"] == pytest.approx(1 - at_least[length] / n if length <= k else 1.0)

    # the violation gauges are check's violations, active or healed
    got = {(r["metric"]["rule"], r["metric"]["severity"]): float(r["value"][1])
           for r in prom.query(f"eagle3scope_violation_active{sel}", t1)}
    want = {(v["id"], v["severity"]): 1.0 if v["active"] else 0.0 for v in report["violations"]}
    assert got == want
    table = {(r["metric"]["rule"], r["metric"]["severity"]): float(r["value"][1]) for r in q("Violations")}
    assert table == want
    errors = values(q("Active violations"), "severity")
    assert errors.get("error", 0.0) == sum(1 for v in report["violations"] if v["active"] and v["severity"] == "error")

    if scenario == "healthy":
        assert code == 0 and want == {}
        assert summary["mean_accept_length"] > 3.0
    else:
        assert code == 1 and {"aux-capture-off", "fc-bypassed"} & {rule for rule, _ in want}
        forwards = {(r["metric"]["mode"], r["metric"]["fc"]) for r in q("Draft forwards: fc applied vs skipped")}
        assert ("draft_extend", "skipped") in forwards or ("extend", "skipped") in forwards, forwards
        capture = values(q("Aux capture on"))
        assert capture and all(v == 0.0 for v in capture.values())


def test_every_dashboard_query_evaluates_on_the_real_runs(scenario_result):
    """Each PromQL expression of the dashboard parses, runs as an instant and as a range query, and
    returns data for at least one of the runs (the violation panels only for the broken one)."""
    runs = [fleet_run(scenario_result, name) for name in FLEET_SCENARIOS]
    queries = dashboard_queries()
    assert len(queries) >= 15
    for title, expr in queries:
        answered = False
        for fleet in runs:
            prom, t0, t1 = fleet["prometheus"], fleet["t_start"], fleet["t_end"]
            _, report = check_json(fleet["recording"])
            bound = bind(expr, report["summary"]["publishers"][0], math.ceil(t1 - t0) + 2)
            instant = prom.query(bound, t1)
            series = prom.query_range(bind(expr, report["summary"]["publishers"][0], 10), t0, t1)
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


@pytest.mark.parametrize("scenario", ["healthy", *sorted(EXPECTED)])
def test_check_floors_and_junit_on_real_recordings(scenario_result, scenario, tmp_path):
    """Healthy passes the floors a deployment would set; each fault fails with its own rule named."""
    rules, severity = EXPECTED.get(scenario, (set(), "error"))
    junit = tmp_path / "check.xml"
    code, report = check_json(scenario_result(scenario)["recording"], "--min-accept-length", "2.5",
                              "--min-per-position", "0.5,0.5,0.5", "--fail-on", severity, "--junit", str(junit))
    failures = junit_failures(junit)
    if scenario == "healthy":
        assert code == 0 and failures == set() and report["gate"]["passed"], report["gate"]
    else:
        assert code == 1 and not report["gate"]["passed"]
        assert failures & rules, (failures, rules)
