"""`check`/`gate` verdicts (README "CI gate", `--fail-on`, `--min-accept-length`, `--min-per-position`)
as properties of `eagle3scope.gate.decide.judge` over any result object, and the JUnit file they become:
a rule fails exactly when it fired at or above `--fail-on`, a floor holds exactly when the measured
value is at or above it (equal passes), an unmeasurable floor fails, an empty floor is not checked."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given, settings, strategies as st

from benchmarks.support.analysis_streams import session
from eagle3scope.analysis import analyse
from eagle3scope.analysis.rules import RULE_IDS
from eagle3scope.gate.decide import Thresholds, judge, parse_floors, verdict
from eagle3scope.gate.result import check_result
from eagle3scope.wire import Frame
from eagle3scope.gate.junit import write_junit

RANK = {"error": 0, "warning": 1, "info": 2}
rates = st.one_of(st.none(), st.floats(0, 1))


def violation(rule: str, severity: str, active: bool = True) -> dict:
    return {"id": rule, "severity": severity, "src": "dp0", "first_seq": 7, "active": active, "title": f"{rule} t",
            "fix": "do x", "evidence": {"n": 1}, "run": 1}


@settings(max_examples=150, deadline=None)
@given(fired=st.lists(st.tuples(st.sampled_from(RULE_IDS), st.sampled_from(list(RANK))), max_size=8),
       fail_on=st.sampled_from(list(RANK)),
       mean=st.one_of(st.none(), st.floats(1, 5)), floor=st.one_of(st.none(), st.floats(1, 5)),
       per_position=st.lists(rates, max_size=4),
       floors=st.lists(st.one_of(st.just(math.nan), st.floats(0, 1)), max_size=5))
def test_each_check_passes_exactly_when_the_readme_says(fired, fail_on, mean, floor, per_position, floors):
    result = {"summary": {"mean_accept_length": mean, "per_position": per_position},
              "violations": [violation(rule, sev) for rule, sev in fired]}
    checks = judge(result, Thresholds(min_accept_length=floor, min_per_position=tuple(floors), fail_on=fail_on))
    by_name = {c.name: c for c in checks}
    for rule in RULE_IDS:
        severities = [sev for r, sev in fired if r == rule]
        c = by_name[rule]
        assert c.group == "rules"
        assert c.passed == all(RANK[s] > RANK[fail_on] for s in severities), (rule, severities, fail_on)
        if severities and c.passed:
            assert c.message == f"fired below --fail-on {fail_on}" and c.details
        if not severities:
            assert c.message == "did not fire" and not c.details
        if not c.passed:
            worst = next(s for r, s in fired if r == rule and RANK[s] <= RANK[fail_on])
            assert c.message == f"{worst}: {rule} t"
            assert c.details.count("fix: do x") == sum(1 for s in severities if RANK[s] <= RANK[fail_on])
    if floor is None:
        assert "min-accept-length" not in by_name
    else:
        c = by_name["min-accept-length"]
        assert c.group == "acceptance" and c.passed == (mean is not None and mean >= floor)
    for i, f in enumerate(floors, start=1):
        name = f"min-per-position[{i}]"
        if f != f:
            assert name not in by_name
            continue
        rate = per_position[i - 1] if i <= len(per_position) else None
        assert by_name[name].passed == (rate is not None and rate >= f), (rate, f)
    assert len(checks) == len(RULE_IDS) + (floor is not None) + sum(1 for f in floors if f == f)
    v = verdict(checks)
    assert v["passed"] == all(c.passed for c in checks)
    assert v["failed"] == [c.name for c in checks if not c.passed]


def test_floor_messages_name_both_numbers_and_the_comparison():
    result = {"summary": {"mean_accept_length": 2.5, "per_position": [0.5, None]}, "violations": []}
    checks = {c.name: c for c in judge(result, Thresholds(2.5, (0.6, 0.1, 0.2)))}
    assert checks["min-accept-length"].passed and checks["min-accept-length"].message == \
        "mean acceptance length 2.500 >= 2.5"
    assert checks["min-per-position[1]"].message == "acceptance at position 1: 0.500 < 0.6"
    assert checks["min-per-position[2]"].message == "no draft judged at position 2 (floor 0.1)"
    assert {c.group for c in checks.values() if c.name != "min-accept-length" and c.name.startswith("min-")} == {
        "acceptance"}  # JUnit's classname eagle3scope.acceptance, whether measured or not
    assert not checks["min-per-position[3]"].passed
    none = {c.name: c for c in judge({"summary": {"mean_accept_length": None, "per_position": []}, "violations": []},
                                     Thresholds(1.0))}
    assert not none["min-accept-length"].passed and "no decode step" in none["min-accept-length"].message


def test_the_evidence_names_where_and_whether_it_still_holds():
    result = {"summary": {"mean_accept_length": 2.0, "per_position": []},
              "violations": [violation("zero-acceptance", "error", active=False),
                             {**violation("zero-acceptance", "error"), "first_seq": None}]}
    (c,) = [c for c in judge(result, Thresholds()) if c.name == "zero-acceptance"]
    first, second = c.details.split("\n\n")
    assert first.splitlines()[0] == "error zero-acceptance on dp0 from step 7 (no longer active at the end): " \
                                    "zero-acceptance t"
    assert first.splitlines()[1:] == ['evidence: {"n": 1}', "fix: do x"]
    unordered = {**violation("zero-acceptance", "error"), "evidence": {"b": 1, "a": [2]}}
    (c,) = [c for c in judge({**result, "violations": [unordered]}, Thresholds()) if c.name == "zero-acceptance"]
    assert c.details.splitlines()[1] == 'evidence: {"a": [2], "b": 1}'  # keys sorted: the same text every run
    assert second.splitlines()[0] == "error zero-acceptance on dp0 before the first step: zero-acceptance t"


@pytest.mark.parametrize("text, floors", [("", ()), (None, ()), ("0,1", (0.0, 1.0)), (" 0.25 , ,0.5", (0.25, None, 0.5))])
def test_parse_floors_accepts_rates_from_0_to_1(text, floors):
    got = parse_floors(text)
    assert len(got) == len(floors)
    for g, f in zip(got, floors):
        assert (g != g) if f is None else g == f


@pytest.mark.parametrize("text", ["1.0001", "-0.0001", "x"])
def test_parse_floors_refuses_anything_else(text):
    with pytest.raises(ValueError):
        parse_floors(text)


def test_junit_has_one_case_per_check_with_failures_evidence_and_properties(tmp_path):
    result = {"summary": {"mean_accept_length": 1.0, "per_position": []},
              "violations": [violation("fc-bypassed", "error"), violation("hook-failed", "warning")]}
    checks = judge(result, Thresholds(min_accept_length=2.0))
    path = tmp_path / "j.xml"
    write_junit(path, checks, suite="check r.e3s", elapsed_s=1.23456, properties={"draft": "d\x1b"})
    root = ET.parse(path).getroot()
    (suite,) = root.findall("testsuite")
    failing = [c for c in checks if not c.passed]
    assert root.get("name") == "eagle3scope" and root.get("tests") == suite.get("tests") == str(len(checks))
    assert root.get("failures") == suite.get("failures") == str(len(failing)) == "2"
    assert suite.get("name") == "check r.e3s" and suite.get("time") == "1.235"
    assert [(p.get("name"), p.get("value")) for p in suite.findall("properties/property")] == [("draft", "d\\x1b")]
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert list(cases) == [c.name for c in checks] and {c.get("time") for c in cases.values()} == {"0"}
    bypassed = cases["fc-bypassed"]
    assert bypassed.get("classname") == "eagle3scope.rules"
    failure = bypassed.find("failure")
    assert failure.get("type") == "rules" and failure.get("message") == "error: fc-bypassed t"
    assert "fix: do x" in failure.text
    assert cases["min-accept-length"].find("failure").get("type") == "acceptance"
    hook = cases["hook-failed"]
    assert hook.find("failure") is None and "fired below --fail-on error" in hook.find("system-out").text
    assert cases["zero-acceptance"].find("failure") is None and cases["zero-acceptance"].find("system-out") is None


def test_the_json_summary_counts_duplicates_resets_and_restarts_under_their_keys():
    frames = session(60, bs=1)
    jumped = frames[:30] + [frames[29], frames[29]] + [Frame(f.kind, f.src, f.n + (1 << 62), f.t, f.body)
                                                       for f in frames[30:]]
    state = analyse(jumped)
    summary = check_result(state, state.violations(), [], complete=False)["summary"]
    assert (summary["duplicate_frames"], summary["counter_resets"], summary["restarts"]) == (2, 1, 0)
    assert summary["complete"] is False and summary["publishers"] == ["r0"] and summary["frames"] == len(jumped)
