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


#: scenario -> the rule ids of which at least one must fire at error severity
EXPECTED = {
    "aux-off": {"aux-capture-off", "fc-bypassed"},
    "wrong-algorithm": {"aux-capture-off", "fc-bypassed"},
    "dropped-weights": {"weights-dropped"},
    "d2t-absolute": {"d2t-absolute"},
    "lm-head-missing": {"lm-head-mismatch"},
    "aux-offset": {"aux-layers-mismatch"},
}


def check_json(path) -> tuple[int, dict]:
    done = subprocess.run([sys.executable, "-m", "eagle3scope", "check", str(path), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def errors(report: dict) -> set[str]:
    return {v["id"] for v in report["violations"] if v["severity"] == "error"}


def test_healthy_run_is_clean_and_drafts_well(scenario_result):
    run = scenario_result("healthy")
    path, results = run["recording"], run["results"]
    code, report = check_json(path)
    assert errors(report) == set(), report["violations"]
    assert code == 0
    assert report["summary"]["steps"] >= SCENARIO_STEPS
    # The shim's mean (bonus counted) and SGLang's own meta_info agree on a working draft.
    assert report["summary"]["mean_accept_length"] >= 2.3
    served = [r["meta_info"]["spec_accept_length"] for r in results if "spec_accept_length" in r["meta_info"]]
    assert served and sum(served) / len(served) >= 2.3
    per_position = report["summary"]["per_position"]
    assert len(per_position) == 3 and all(0.0 < p <= 1.0 for p in per_position)


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_fault_scenario_is_named_by_its_rule(scenario_result, scenario):
    path = scenario_result(scenario)["recording"]
    code, report = check_json(path)
    fired = errors(report)
    assert fired & EXPECTED[scenario], f"{scenario}: expected one of {EXPECTED[scenario]}, got {report['violations']}"
    assert code != 0
    for violation in report["violations"]:
        if violation["id"] in EXPECTED[scenario]:
            assert violation["evidence"], violation
