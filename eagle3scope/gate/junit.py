"""JUnit XML for any CI: one test case per check, failures carrying the evidence and the fix.

The layout is the common denominator Jenkins, GitLab and GitHub test reporters read:
``<testsuites><testsuite name tests failures><testcase classname name><failure message type>``.
Every text and attribute goes through :func:`~eagle3scope.wire.untrusted.xml`: a control character
from a server's string would make the file invalid XML 1.0, which CI parsers drop whole.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from eagle3scope.gate.decide import Check
from eagle3scope.wire.untrusted import xml


def write_junit(path: str | Path, checks: list[Check], *, suite: str, elapsed_s: float = 0.0,
                properties: dict | None = None) -> None:
    failures = sum(not c.passed for c in checks)
    root = ET.Element("testsuites", name="eagle3scope", tests=str(len(checks)), failures=str(failures))
    ts = ET.SubElement(root, "testsuite", name=xml(suite), tests=str(len(checks)), failures=str(failures),
                       errors="0", skipped="0", time=f"{elapsed_s:.3f}")
    if properties:
        props = ET.SubElement(ts, "properties")
        for key, value in properties.items():
            ET.SubElement(props, "property", name=xml(key), value=xml(value))
    for check in checks:
        case = ET.SubElement(ts, "testcase", classname=xml(f"eagle3scope.{check.group}"), name=xml(check.name), time="0")
        if not check.passed:
            failure = ET.SubElement(case, "failure", message=xml(check.message), type=xml(check.group))
            failure.text = xml(check.details or check.message)
        elif check.details:
            ET.SubElement(case, "system-out").text = xml(f"{check.message}\n{check.details}")
    ET.indent(root)
    Path(path).write_bytes(ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n")
