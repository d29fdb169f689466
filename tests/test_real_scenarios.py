"""Every demo scenario through the real SGLang 0.5.23 CPU engine, recorded by the real shim, judged
by the real rules: each break is named by its own rule and the healthy runs raise no error.

One server per scenario (about 25 s to start, shared with the other scenario tests through the
``scenario_result`` fixture), SCENARIO_STEPS recorded steps each. The recordings are then
checked with the ``eagle3scope check`` command, as a user would in CI.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import SCENARIO_STEPS

pytestmark = pytest.mark.engine


#: scenario -> (rule ids of which at least one must fire, the severity it must have). aux-offset is a
#: warning: captured == configured + 1 is self-consistent, only the numbering convention is suspect.
EXPECTED = {
    "aux-off": ({"aux-capture-off", "fc-bypassed"}, "error"),
    "wrong-algorithm": ({"aux-capture-off", "fc-bypassed"}, "error"),
    "dropped-weights": ({"weights-dropped"}, "error"),
    "d2t-absolute": ({"d2t-absolute"}, "error"),
    "lm-head-missing": ({"lm-head-mismatch"}, "error"),
    "aux-offset": ({"aux-layers-mismatch"}, "warning"),
}


def check_json(path) -> tuple[int, dict]:
    done = subprocess.run([sys.executable, "-m", "eagle3scope", "check", str(path), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def fired(report: dict, severity: str = "error") -> set[str]:
    return {v["id"] for v in report["violations"] if v["severity"] == severity}


def test_healthy_run_is_clean_and_drafts_well(scenario_result):
    run = scenario_result("healthy")
    path, results = run["recording"], run["results"]
    code, report = check_json(path)
    assert fired(report) == set(), report["violations"]
    assert code == 0
    assert report["summary"]["steps"] == SCENARIO_STEPS  # run.record counts decode steps, as check does
    # The shim's mean (bonus counted) and SGLang's own meta_info agree on a working draft.
    assert report["summary"]["mean_accept_length"] >= 2.3
    served = [r["meta_info"]["spec_accept_length"] for r in results if "spec_accept_length" in r["meta_info"]]
    assert served and sum(served) / len(served) >= 2.3
    per_position = report["summary"]["per_position"]
    assert len(per_position) == 3 and all(0.0 < p <= 1.0 for p in per_position)


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_fault_scenario_is_named_by_its_rule(scenario_result, scenario):
    path = scenario_result(scenario)["recording"]
    rules, severity = EXPECTED[scenario]
    code, report = check_json(path)
    assert fired(report, severity) & rules, f"{scenario}: expected one of {rules}, got {report['violations']}"
    assert code == (1 if severity == "error" else 0)
    for violation in report["violations"]:
        if violation["id"] in rules:
            assert violation["evidence"], violation
