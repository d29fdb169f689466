"""JUnit XML for any CI: one test case per check, failures carrying the evidence and the fix.

The layout is the common denominator Jenkins, GitLab and GitHub test reporters read:
``<testsuites><testsuite name tests failures><testcase classname name><failure message type>``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from eagle3scope.gate import Check


def write_junit(path: str | Path, checks: list[Check], *, suite: str, elapsed_s: float = 0.0,
                properties: dict | None = None) -> None:
    failures = sum(not c.passed for c in checks)
    root = ET.Element("testsuites", name="eagle3scope", tests=str(len(checks)), failures=str(failures))
    ts = ET.SubElement(root, "testsuite", name=suite, tests=str(len(checks)), failures=str(failures),
                       errors="0", skipped="0", time=f"{elapsed_s:.3f}")
    if properties:
        props = ET.SubElement(ts, "properties")
        for key, value in properties.items():
            ET.SubElement(props, "property", name=str(key), value=str(value))
    for check in checks:
        case = ET.SubElement(ts, "testcase", classname=f"eagle3scope.{check.group}", name=check.name, time="0")
        if not check.passed:
            failure = ET.SubElement(case, "failure", message=check.message, type=check.group)
            failure.text = check.details or check.message
        elif check.details:
            ET.SubElement(case, "system-out").text = f"{check.message}\n{check.details}"
    ET.indent(root)
    Path(path).write_bytes(ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n")
