"""Pass or fail for CI and canaries: the contract rules plus acceptance floors, as named checks.

``judge`` turns ``check``'s result object (:mod:`eagle3scope.gate.result`) into a list of
:class:`Check`: one per contract rule (fails when the rule fired at or above ``fail_on``), one for
the mean acceptance length floor and one per draft position floor, when asked, and one per value a
baseline comparison judged (``result["baseline"]``, :mod:`eagle3scope.analysis.baseline`).
``check FILE`` and ``gate --connect E`` share it, and :mod:`eagle3scope.gate.junit` writes it as JUnit XML.
"""

from __future__ import annotations

from dataclasses import dataclass

from eagle3scope.analysis.rules import RULE_IDS
from eagle3scope.wire.severity import SEVERITY_ORDER
from eagle3scope.wire.untrusted import json_line, lines

#: Exit statuses of ``check`` and ``gate`` (README, "CI gate").
EXIT_PASS, EXIT_FAIL, EXIT_UNREADABLE, EXIT_INCOMPLETE = 0, 1, 2, 3


@dataclass(frozen=True)
class Thresholds:
    min_accept_length: float | None = None
    min_per_position: tuple[float, ...] = ()
    fail_on: str = "error"


@dataclass(frozen=True)
class Check:
    """One named verdict. ``group`` is the JUnit classname: "rules", "acceptance" or "run"."""

    group: str
    name: str
    passed: bool
    message: str
    details: str = ""

    def to_dict(self) -> dict:
        return {"group": self.group, "name": self.name, "passed": self.passed, "message": self.message}


def parse_floors(text: str | None) -> tuple[float, ...]:
    """``"0.8,0.6,0.4"`` -> floors for draft positions 1, 2, 3 (empty entries are not checked: ``",0.5"``)."""
    if not text:
        return ()
    floors = []
    for part in text.split(","):
        part = part.strip()
        value = float(part) if part else float("nan")
        if part and not 0.0 <= value <= 1.0:
            raise ValueError(f"per-position floor {part} is not a rate between 0 and 1")
        floors.append(value)
    return tuple(floors)


def _evidence(v: dict) -> str:
    """Three lines, each field kept on its own line (a newline in ``src`` cannot add one)."""
    where = "before the first step" if v["first_seq"] is None else f"from step {v['first_seq']}"
    state = "" if v["active"] else " (no longer active at the end)"
    return lines([f"{v['severity']} {v['id']} on {v['src']} {where}{state}: {v['title']}",
                  f"evidence: {json_line(v['evidence'], sort_keys=True)}", f"fix: {v['fix']}"])


def judge(result: dict, thresholds: Thresholds) -> list[Check]:
    checks = []
    limit = SEVERITY_ORDER[thresholds.fail_on]
    by_rule: dict[str, list[dict]] = {}
    for v in result["violations"]:
        by_rule.setdefault(v["id"], []).append(v)
    for rule_id in RULE_IDS:
        fired = by_rule.get(rule_id, [])
        failing = [v for v in fired if SEVERITY_ORDER[v["severity"]] <= limit]
        if failing:
            first = failing[0]
            checks.append(Check("rules", rule_id, False, f"{first['severity']}: {first['title']}",
                                "\n\n".join(map(_evidence, failing))))
        elif fired:
            checks.append(Check("rules", rule_id, True, f"fired below --fail-on {thresholds.fail_on}",
                                "\n\n".join(map(_evidence, fired))))
        else:
            checks.append(Check("rules", rule_id, True, "did not fire"))
    summary = result["summary"]
    if thresholds.min_accept_length is not None:
        mean, floor = summary["mean_accept_length"], thresholds.min_accept_length
        if mean is None:
            checks.append(Check("acceptance", "min-accept-length", False, f"no decode step to measure (floor {floor})"))
        else:
            ok = mean >= floor
            checks.append(Check("acceptance", "min-accept-length", ok,
                                f"mean acceptance length {mean:.3f} {'>=' if ok else '<'} {floor}"))
    rates = summary["per_position"]
    for i, floor in enumerate(thresholds.min_per_position, start=1):
        if floor != floor:  # NaN: position left unchecked
            continue
        name = f"min-per-position[{i}]"
        rate = rates[i - 1] if i <= len(rates) else None
        if rate is None:
            checks.append(Check("acceptance", name, False, f"no draft judged at position {i} (floor {floor})"))
        else:
            ok = rate >= floor
            checks.append(Check("acceptance", name, ok,
                                f"acceptance at position {i}: {rate:.3f} {'>=' if ok else '<'} {floor}"))
    comparison = result.get("baseline") or {}
    for delta in [*comparison.get("overall", ()), *comparison.get("slices", ())]:
        if delta["judged"]:
            checks.append(Check("baseline", f"baseline[{delta['name']}]", not delta["regressed"], describe(delta)))
    return checks


def delta_verdict(delta: dict) -> str:
    """What a baseline delta (``Delta.to_dict``) came to, in words."""
    if not delta["judged"]:
        return f"not judged ({delta['reason']})"
    lo, hi = delta["interval"]
    return ("REGRESSED" if delta["regressed"] else "within the noise" if lo <= 0 <= hi
            else "improved" if lo > 0 else "dropped less than the tolerance")


def describe(delta: dict) -> str:
    """One line for a baseline delta: both values, the change, its interval, how sure, the verdict."""
    if not delta["judged"]:
        return f"{delta['name']}: {delta_verdict(delta)}"
    lo, hi = delta["interval"]
    return (f"{delta['name']}: {delta['baseline']:.3f} -> {delta['current']:.3f} ({delta['change']:+.3f}, 95% "
            f"interval {lo:+.3f}..{hi:+.3f}; lower in {delta['confidence']:.0%} of resamples): {delta_verdict(delta)}")


def verdict(checks: list[Check]) -> dict:
    """The ``gate`` object added to ``check --json`` (a new field; the old ones are unchanged)."""
    return {"passed": all(c.passed for c in checks), "failed": [c.name for c in checks if not c.passed],
            "checks": [c.to_dict() for c in checks]}
