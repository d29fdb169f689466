"""The ``gate`` command in a child, a publisher that replays a session once the gate subscribed, and
the JUnit report the gate writes, read as CI reporters read it."""

from __future__ import annotations

import subprocess
import threading
import time
import xml.etree.ElementTree as ET

from support.cli import run
from support.publisher import SyntheticPublisher


def junit_cases(path) -> dict[str, ET.Element]:
    """JUnit test cases by name, checked against the layout CI reporters read."""
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    cases = suite.findall("testcase")
    assert int(suite.get("tests")) == len(cases)
    assert int(suite.get("failures")) == sum(c.find("failure") is not None for c in cases)
    return {c.get("name"): c for c in cases}


def failed(cases: dict[str, ET.Element]) -> set[str]:
    return {name for name, c in cases.items() if c.find("failure") is not None}


class Publisher(SyntheticPublisher):
    """A synthetic publisher replaying a session in a thread once the gate has subscribed."""

    def __init__(self, frames, *, delay_s: float = 0.0005) -> None:
        super().__init__()
        self.frames, self.delay = frames, delay_s
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        self.wait_subscribed(60)  # the stream's hello and load are sent once
        for f in self.frames:
            if self.stop.is_set():
                return
            self.send_frames([f])
            time.sleep(self.delay)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(10)
        self.close()


def gate(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``eagle3scope gate ARGS`` in a child, to its end."""
    return run("gate", *args, timeout=timeout)
