"""``check`` thresholds, JUnit output and the live ``gate`` on synthetic streams over real sockets.

The same commands over real-engine recordings and a live real server are in test_fleet_engine.py.
"""

from __future__ import annotations

import json
import time

import pytest

from benchmarks.support.analysis_streams import H, session
from eagle3scope.analysis import RULE_IDS
from eagle3scope.gate.decide import parse_floors
from eagle3scope.wire.endpoints import fresh_ipc_endpoint
from support.recordings import record
from support.cli import invoke
from support.gating import Publisher, failed, gate, junit_cases


def measured(path) -> dict:
    return json.loads(invoke("check", str(path), "--json").output)["summary"]


def test_floors_pass_below_and_fail_above_the_measured_values(tmp_path):
    path = record(tmp_path / "ok.e3s", session(600, bs=2, accept_p=0.7))
    summary = measured(path)
    mean, rates = summary["mean_accept_length"], summary["per_position"]
    below = ",".join(f"{r - 0.05:.3f}" for r in rates)
    ok = invoke("check", path, "--min-accept-length", f"{mean - 0.05:.3f}", "--min-per-position",
                                   below, "--junit", str(tmp_path / "ok.xml"), "--json")
    assert ok.exit_code == 0, ok.output
    out = json.loads(ok.output)
    assert out["gate"]["passed"] and out["gate"]["failed"] == []
    assert {"summary", "violations", "read_errors"} <= set(out)  # check's fields are unchanged
    cases = junit_cases(tmp_path / "ok.xml")
    assert set(cases) == set(RULE_IDS) | {"min-accept-length"} | {f"min-per-position[{i}]" for i in (1, 2, 3)}
    assert failed(cases) == set()

    # position 2 just above what was measured: only that floor fails (position 1 left unchecked)
    above = f",{rates[1] + 0.01:.3f}"
    bad = invoke("check", path, "--min-accept-length", f"{mean + 0.05:.3f}",
                                    "--min-per-position", above, "--junit", str(tmp_path / "bad.xml"))
    assert bad.exit_code == 1
    assert "FAIL    min-accept-length" in bad.output and "FAIL    min-per-position[2]" in bad.output
    cases = junit_cases(tmp_path / "bad.xml")
    assert failed(cases) == {"min-accept-length", "min-per-position[2]"}
    assert f"{rates[1]:.3f} < " in cases["min-per-position[2]"].find("failure").get("message")


def test_broken_recording_fails_with_its_rules_named_and_fixes_in_junit(tmp_path):
    frames = session(300, accept_p=0.0, algorithm="EAGLE",
                     step_kw={"feature_width": H, "fc": False, "capture": {"on": False, "layers": None}})
    path = record(tmp_path / "bad.e3s", frames)
    done = invoke("check", path, "--junit", str(tmp_path / "j.xml"))
    assert done.exit_code == 1
    cases = junit_cases(tmp_path / "j.xml")
    assert {"aux-capture-off", "fc-bypassed", "zero-acceptance"} <= failed(cases)
    text = cases["fc-bypassed"].find("failure").text
    assert "evidence:" in text and "fix:" in text and '"skipped_calls"' in text


def test_fail_on_warning_turns_a_warning_into_a_failure(tmp_path):
    frames = session(100)
    frames.insert(5, frames[4].__class__("hook", "r0", 10**6, frames[4].t,
                                         {"seam": "verify", "status": "failed", "detail": "boom"}))
    path = record(tmp_path / "warn.e3s", frames)
    junit = tmp_path / "w.xml"
    assert invoke("check", path, "--junit", str(junit)).exit_code == 0
    assert failed(junit_cases(junit)) == set()
    assert "fired below --fail-on error" in junit.read_text()
    assert invoke("check", path, "--fail-on", "warning", "--junit", str(junit)).exit_code == 1
    assert "hook-failed" in failed(junit_cases(junit))


@pytest.mark.parametrize("text", ["0.8,x", "1.5", "-0.1"])
def test_bad_floors_are_refused(tmp_path, text):
    path = record(tmp_path / "ok.e3s", session(20))
    done = invoke("check", path, "--min-per-position", text)
    assert done.exit_code == 2


def test_parse_floors_skips_empty_positions():
    floors = parse_floors(" ,0.5,")
    assert len(floors) == 3 and floors[1] == 0.5 and floors[0] != floors[0] and floors[2] != floors[2]


def test_gate_passes_a_healthy_stream_and_records_what_it_judged(tmp_path):
    with Publisher(session(400, bs=2, accept_p=0.7)) as pub:
        done = gate("--connect", pub.endpoint, "--steps", "200", "--timeout", "30", "--min-accept-length", "1.5",
                    "--junit", str(tmp_path / "g.xml"), "--record", str(tmp_path / "g.e3s"), "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["gate"]["passed"] and out["summary"]["steps"] >= 200
    assert failed(junit_cases(tmp_path / "g.xml")) == set()
    # the recording holds what the gate judged: check on it says the same
    again = measured(tmp_path / "g.e3s")
    assert again["steps"] == out["summary"]["steps"]
    assert again["mean_accept_length"] == pytest.approx(out["summary"]["mean_accept_length"])


def test_gate_fails_a_broken_stream_naming_the_rule(tmp_path):
    frames = session(400, accept_p=0.0, algorithm="EAGLE",
                     step_kw={"feature_width": H, "fc": False, "capture": {"on": False, "layers": None}})
    with Publisher(frames) as pub:
        done = gate("--connect", pub.endpoint, "--steps", "150", "--timeout", "30", "--junit", str(tmp_path / "g.xml"))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "ERROR   aux-capture-off" in done.stdout
    assert {"aux-capture-off", "fc-bypassed"} <= failed(junit_cases(tmp_path / "g.xml"))


def test_gate_times_out_inconclusive_with_exit_3(tmp_path):
    endpoint = fresh_ipc_endpoint()  # nobody publishes here
    started = time.monotonic()
    done = gate("--connect", endpoint, "--steps", "10", "--timeout", "1.5", "--junit", str(tmp_path / "g.xml"))
    assert done.returncode == 3
    assert time.monotonic() - started < 20
    assert "only 0 of 10 decode steps" in done.stderr
    cases = junit_cases(tmp_path / "g.xml")
    assert "complete" in failed(cases)
