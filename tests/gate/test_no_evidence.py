"""No evidence is no pass: ``check`` and ``gate`` on a run without a decode step exit 3 whatever the
flags, say why (nothing was published: the shim's ``NOT PUBLISHING`` line), and the JUnit says the same."""

from __future__ import annotations

import json

import pytest

from benchmarks.support.analysis_streams import healthy_load, session
from support.cli import invoke
from support.recordings import record
from support.gating import failed, junit_cases

from eagle3scope.gate.decide import EXIT_INCOMPLETE
from eagle3scope.wire.endpoints import fresh_ipc_endpoint

FLAGS = [(), ("--fail-on", "warning"), ("--fail-on", "info"), ("--min-per-position", ",")]


@pytest.mark.parametrize("flags", FLAGS)
@pytest.mark.parametrize("frames", [[], session(0)], ids=["no frame", "hello and load only"])
def test_check_without_a_decode_step_is_not_a_pass(tmp_path, frames, flags):
    path = record(tmp_path / "empty.e3s", frames)
    junit = tmp_path / "j.xml"
    done = invoke("check", path, *flags, "--junit", str(junit))
    assert done.exit_code == EXIT_INCOMPLETE, done.output
    assert "no decode step" in done.output and "NOT PUBLISHING" in done.output
    cases = junit_cases(junit)
    assert failed(cases) == {"complete"}
    assert "NOT PUBLISHING" in cases["complete"].find("failure").get("message")
    as_json = invoke("check", path, *flags, "--json")
    assert as_json.exit_code == EXIT_INCOMPLETE
    verdict = json.loads(as_json.output)["gate"]
    assert not verdict["passed"] and verdict["failed"] == ["complete"]


def test_a_broken_load_without_steps_still_fails_on_its_rule(tmp_path):
    """What was seen is already wrong: exit 1, and the missing steps are said too."""
    load = healthy_load()
    load["weights"]["skipped"] = ["fc.weight"]
    frames = session(0, load=load)
    path = record(tmp_path / "bad.e3s", frames)
    done = invoke("check", path, "--json")
    out = json.loads(done.output)
    assert done.exit_code == 1 and {"weights-dropped", "complete"} <= set(out["gate"]["failed"]), out["gate"]


def test_gate_that_hears_nothing_names_the_not_publishing_line(tmp_path):
    junit = tmp_path / "g.xml"
    done = invoke("gate", "--connect", fresh_ipc_endpoint("silent"), "--no-discover", "--steps", "3", "--timeout",
                  "0.5", "--junit", str(junit))
    assert done.exit_code == EXIT_INCOMPLETE, done.output
    assert "nothing was published" in done.output and "NOT PUBLISHING" in done.output
    assert "NOT PUBLISHING" in junit_cases(junit)["complete"].find("failure").get("message")
