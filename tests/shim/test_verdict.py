"""The shim's verdict in the server's own log and /metrics (eagle3scope_shim/verdict.py), outside the
engine: the same judgement as the viewer's over the same bodies, hostile names escaped, given at load
and after the first decode steps and then only on change, switchable off, and its gauges read back
through prometheus_client's multiprocess collector the way SGLang's ``/metrics`` reads them."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from benchmarks.support.analysis_streams import H, healthy_load, hello, session

from eagle3scope.analysis import analyse
from eagle3scope.wire import contracts, env
from eagle3scope_shim import verdict as verdict_module
from eagle3scope_shim.verdict import FIRST_STEPS, Verdict

ROOT = Path(__file__).resolve().parents[2]
SHARED = {c.id for c in (contracts.AUX_CAPTURE_OFF, contracts.FC_BYPASSED, contracts.WEIGHTS_DROPPED,
                         contracts.D2T_ABSOLUTE, contracts.D2T_MISSING, contracts.LM_HEAD_MISMATCH,
                         contracts.AUX_LAYERS_MISMATCH)}


class Publisher:
    endpoint = "ipc:///run/e3s/events-0"
    dropped = 3


def _weights_dropped(load):
    load["weights"]["skipped"] = ["layers.0._orig_mod.mlp.down_proj.weight"]


def _d2t_absolute(load):
    if load["d2t"] is not None:  # not after _d2t_missing
        load["d2t"].update(looks_absolute=True, out_of_range=12)


def _d2t_missing(load):
    load["d2t"] = None


def _head_random(load):
    load["lm_head"]["source"] = "init"


def _aux_off(load):
    load["aux"].update(use_aux=False, capture_on=False, captured=[])


def _aux_shifted(load):
    load["aux"]["captured"] = [x + 1 for x in load["aux"]["captured"]]


LOAD_BREAKS = {f.__name__: f for f in (_weights_dropped, _d2t_absolute, _d2t_missing, _head_random, _aux_off, _aux_shifted)}
STEP_BREAKS = {"none": {}, "fc-skipped": {"feature_width": H, "fc": False},
               "capture-off": {"feature_width": H, "fc": False, "capture": {"on": False, "layers": []}}}


def judged_by_the_shim(frames, caplog) -> tuple[Verdict, list[logging.LogRecord]]:
    """The shim's verdict over a session's bodies, as the server would give it."""
    bodies = {f.kind: f.body for f in frames if f.kind in ("hello", "load")}
    caplog.clear()
    v = Verdict()
    with caplog.at_level(logging.INFO, logger="eagle3scope"):
        v.at_load(bodies["hello"], bodies["load"], None, publisher=Publisher(), metrics=False)
        for f in frames:
            if f.kind == "step":
                v.observe(f.body)
    return v, [r for r in caplog.records if r.name == "eagle3scope"]


def broken_in(record: logging.LogRecord) -> tuple[str, str]:
    """(rule, severity) of a CONTRACT BROKEN line."""
    words = record.getMessage().split("CONTRACT BROKEN ", 1)[1].split(" ", 2)
    return words[0], words[1].strip("(,")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(breaks=st.sets(st.sampled_from(sorted(LOAD_BREAKS))), steps=st.sampled_from(sorted(STEP_BREAKS)),
       algorithm=st.sampled_from(["EAGLE3", "EAGLE"]))
def test_the_server_log_says_what_the_viewer_says(caplog, breaks, steps, algorithm):
    load = healthy_load()
    for name in sorted(breaks):
        LOAD_BREAKS[name](load)
    frames = session(FIRST_STEPS + 4, load=load, algorithm=algorithm, step_kw=STEP_BREAKS[steps])
    viewer = {v.id: v.severity for v in analyse(frames).violations() if v.active and v.id in SHARED and v.severity != "info"}
    shim, records = judged_by_the_shim(frames, caplog)
    assert shim.said == viewer
    after_steps = [broken_in(r) for r in records
                   if f"after {FIRST_STEPS} decode steps" in r.getMessage() and "CONTRACT BROKEN" in r.getMessage()]
    assert dict(after_steps) == viewer and len(after_steps) == len(viewer)
    levels = {"error": logging.ERROR, "warning": logging.WARNING}
    assert all(r.levelno == levels[broken_in(r)[1]] for r in records if "CONTRACT BROKEN" in r.getMessage())


def test_each_line_names_the_rule_its_evidence_the_fix_and_the_viewer_command(caplog):
    load = healthy_load()
    _aux_off(load)
    _, records = judged_by_the_shim(session(2, load=load), caplog)
    (line,) = [r.getMessage() for r in records]
    assert line.startswith("eagle3scope: CONTRACT BROKEN aux-capture-off (error, at load): ")
    assert "capture_on=false" in line and "fc_from_checkpoint=true" in line
    assert contracts.AUX_CAPTURE_OFF.fix in line and line.endswith(f"More: eagle3scope watch --connect {Publisher.endpoint}")


def test_a_hostile_checkpoint_name_reaches_the_log_escaped(caplog):
    load = healthy_load()
    load["weights"]["skipped"] = ["w\nINFO eagle3scope: no contract broken\x1b[2J\u202eevil"]
    _, records = judged_by_the_shim(session(0, load=load), caplog)
    (line,) = [r.getMessage() for r in records]
    assert "\n" not in line and "\x1b" not in line and "\u202e" not in line
    assert "w\\nINFO eagle3scope: no contract broken\\u001b[2J\\u202eevil" in line  # JSON's escapes, then the log's


def test_healthy_says_no_contract_broken_once(caplog):
    _, records = judged_by_the_shim(session(3 * FIRST_STEPS), caplog)
    assert [r.getMessage().split(" (")[0] for r in records] == ["eagle3scope: no contract broken"]
    assert records[0].levelno == logging.INFO and "aux-capture-off" in records[0].getMessage()


def test_given_at_load_again_after_the_first_steps_then_only_what_changed(caplog, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(verdict_module.time, "monotonic", lambda: clock[0])
    load = healthy_load()
    _weights_dropped(load)
    frames = session(3 * FIRST_STEPS, load=load)
    v, records = judged_by_the_shim(frames, caplog)
    when = [r.getMessage().split(", ", 1)[1].split(")")[0] for r in records]
    assert when == ["at load", f"after {FIRST_STEPS} decode steps"]  # nothing more within REJUDGE_S
    steps = [f.body for f in session(FIRST_STEPS, step_kw=STEP_BREAKS["capture-off"]) if f.kind == "step"]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="eagle3scope"):
        v.observe(steps[0])  # aux capture went off, but the next judgement is not due
        clock[0] += verdict_module.REJUDGE_S
        for body in steps[1:]:
            v.observe(body)
    assert sorted(broken_in(r)[0] for r in caplog.records) == ["aux-capture-off", "fc-bypassed"]  # the new ones, once


def test_switched_off_writes_nothing(caplog, monkeypatch):
    monkeypatch.setenv(env.VERDICT_LOG, "0")
    load = healthy_load()
    _aux_off(load)
    v, records = judged_by_the_shim(session(2 * FIRST_STEPS, load=load, step_kw=STEP_BREAKS["capture-off"]), caplog)
    assert records == [] and v.said  # judged all the same (the gauges still carry it)


def test_a_failing_judgement_is_one_warning_and_the_step_still_passes(caplog):
    v = Verdict()
    with caplog.at_level(logging.INFO, logger="eagle3scope"):
        v.at_load(hello(), {"aux": {"configured": ["x"]}}, None, publisher=None, metrics=False)
        v.observe({"passes": "nonsense", "mode": "decode"})
    assert [r.levelno for r in caplog.records] == [logging.WARNING]


GAUGES = r"""
import os, sys
from benchmarks.support.analysis_streams import session
from eagle3scope_shim.verdict import FIRST_STEPS, Verdict
class Publisher:
    endpoint, dropped = "ipc:///x", 5
frames = session(FIRST_STEPS, algorithm="EAGLE", step_kw={"feature_width": 64, "fc": False,
                 "capture": {"on": False, "layers": []}})
bodies = {f.kind: f.body for f in frames if f.kind in ("hello", "load")}
v = Verdict()
v.at_load(bodies["hello"], bodies["load"], None, publisher=Publisher(), metrics=sys.argv[1] == "on")
for f in frames:
    if f.kind == "step":
        v.observe(f.body)
"""
SCRAPE = r"""
from prometheus_client import CollectorRegistry, generate_latest, multiprocess
registry = CollectorRegistry()
multiprocess.MultiProcessCollector(registry)
print(generate_latest(registry).decode())
"""


@pytest.mark.parametrize("metrics", ["on", "off"])
def test_gauges_reach_sglangs_multiprocess_registry(tmp_path, metrics):
    """The scheduler process writes, another process collects (SGLang's add_prometheus_middleware)."""
    environ = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path),
               "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "instrumentation"), str(ROOT / "tests")])}
    wrote = subprocess.run([sys.executable, "-c", GAUGES, metrics], env=environ, capture_output=True, text=True,
                           timeout=60)
    assert wrote.returncode == 0, wrote.stderr
    text = subprocess.run([sys.executable, "-c", SCRAPE], env=environ, capture_output=True, text=True,
                          timeout=60).stdout
    lines = {line for line in text.splitlines() if line.startswith("eagle3scope_server_")}
    if metrics == "off":
        assert lines == set()
        return
    assert lines >= {'eagle3scope_server_violation_active{rule="aux-capture-off",severity="error"} 1.0',
                     'eagle3scope_server_violation_active{rule="fc-bypassed",severity="error"} 1.0',
                     "eagle3scope_server_aux_capture_on 0.0", "eagle3scope_server_frames_dropped 5.0",
                     'eagle3scope_server_fc_forwards{fc="skipped"} 8.0'}, text
    assert {line.split("{")[0].split(" ")[0] for line in lines} == {
        "eagle3scope_server_violation_active", "eagle3scope_server_aux_capture_on",
        "eagle3scope_server_fc_forwards", "eagle3scope_server_frames_dropped"}


def test_the_load_rules_are_shared_not_copied():
    """The viewer's rule for each shared id carries the shared words (one definition)."""
    from eagle3scope.analysis.rules import CONTRACT_RULES

    words = {r.id: (r.title, r.fix, r.explanation, r.severity) for r in CONTRACT_RULES}
    for contract in (contracts.AUX_CAPTURE_OFF, contracts.FC_BYPASSED, contracts.WEIGHTS_DROPPED, contracts.D2T_ABSOLUTE,
                     contracts.D2T_MISSING, contracts.LM_HEAD_MISMATCH, contracts.AUX_LAYERS_MISMATCH):
        assert words[contract.id] == (contract.title, contract.fix, contract.explanation, contract.severity)
