"""The verdict where users already look, on the real engine: SGLang's own log and its own ``/metrics``.

No server of its own: it reads the log and the ``/metrics`` scrape of the shared FLEET_SCENARIOS
servers of ``scenario_result`` (tests/conftest.py; they run with ``--enable-metrics``), and compares
with ``check`` on their recordings: the shim in the server and the viewer judge alike.
"""

from __future__ import annotations

import re
from datetime import datetime

import pytest
from support.cli import check_json
from support.engine import FLEET_SCENARIOS

from eagle3scope.wire import contracts
from eagle3scope_shim.verdict import FIRST_STEPS

pytestmark = pytest.mark.engine

SHARED = {c.id for c in (contracts.AUX_CAPTURE_OFF, contracts.FC_BYPASSED, contracts.WEIGHTS_DROPPED,
                         contracts.D2T_ABSOLUTE, contracts.D2T_MISSING, contracts.LM_HEAD_MISMATCH,
                         contracts.AUX_LAYERS_MISMATCH)}
#: SGLang's log format (configure_logger): "[%(asctime)s{ms}{prefix}] %(message)s"
LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)[^\]]*\] (.*)$")
#: how long after the workload's first step the decode steps' verdict may come (seconds; 2-core VM)
FEW_SECONDS = 10


def server_log(run: dict) -> list[tuple[datetime, str]]:
    out = []
    for line in run["log"].read_text(errors="replace").splitlines():
        m = LINE.match(line)
        if m:
            out.append((datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S"), m.group(2)))
    return out


def verdicts(log) -> list[tuple[datetime, str]]:
    return [(t, msg) for t, msg in log if msg.startswith(("eagle3scope: CONTRACT BROKEN", "eagle3scope: no contract broken"))]


def rule_of(msg: str) -> tuple[str, str]:
    """(rule, "at load" or "after N decode steps") of a CONTRACT BROKEN line."""
    rule, rest = msg.removeprefix("eagle3scope: CONTRACT BROKEN ").split(" ", 1)
    return rule, rest.split(", ", 1)[1].split(")")[0]


def first_workload_step(log) -> datetime:
    """The first prefill after SGLang's own warm-up request: the workload's first step."""
    ready = next(i for i, (_, msg) in enumerate(log) if "fired up and ready to roll" in msg)
    return next(t for t, msg in log[ready:] if msg.startswith("Prefill batch"))


def test_healthy_server_log_says_no_contract_broken_once(scenario_result):
    log = server_log(scenario_result("healthy"))
    lines = verdicts(log)
    assert [msg.split(" (")[0] for _, msg in lines] == ["eagle3scope: no contract broken"], lines
    assert "at load" in lines[0][1] and "eagle3scope watch --connect ipc://" in lines[0][1]


def test_aux_off_server_log_names_the_broken_contracts_at_load_and_after_the_first_steps(scenario_result):
    run = scenario_result("aux-off")
    log = server_log(run)
    lines = verdicts(log)
    said = [rule_of(msg) for _, msg in lines]
    assert ("aux-capture-off", "at load") in said, lines
    after = {rule for rule, when in said if when == f"after {FIRST_STEPS} decode steps"}
    _, report = check_json(run["recording"])
    assert after == {v["id"] for v in report["violations"] if v["id"] in SHARED} == {"aux-capture-off", "fc-bypassed"}
    given = next(t for t, msg in lines if f"after {FIRST_STEPS} decode steps" in msg)
    assert 0 <= (given - first_workload_step(log)).total_seconds() <= FEW_SECONDS
    assert all("Fix: " in msg and "More: eagle3scope watch --connect" in msg for _, msg in lines)


@pytest.mark.parametrize("scenario", FLEET_SCENARIOS)
def test_the_servers_own_metrics_carry_the_verdict(scenario_result, scenario):
    text = scenario_result(scenario)["metrics"]
    assert "sglang:" in text  # SGLang's own endpoint, not the exporter's
    active = {line.rsplit(" ", 1)[0] for line in text.splitlines()
              if line.startswith("eagle3scope_server_violation_active{") and line.endswith(" 1.0")}
    if scenario == "healthy":
        assert active == set()
        assert "eagle3scope_server_aux_capture_on 1.0" in text
        return
    assert active == {'eagle3scope_server_violation_active{rule="aux-capture-off",severity="error"}',
                      'eagle3scope_server_violation_active{rule="fc-bypassed",severity="error"}'}, text
    assert "eagle3scope_server_aux_capture_on 0.0" in text
    skipped = re.search(r'^eagle3scope_server_fc_forwards\{fc="skipped"\} (\S+)$', text, re.M)
    assert skipped and float(skipped.group(1)) > 0
