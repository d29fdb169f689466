"""The real ``eagle3scope watch`` in a real terminal (tmux), fed by a live Publisher over ZeroMQ.

The screen is read back with ``tmux capture-pane``; the numbers asserted come from the stream:
the hello's version string, the step count, and the mean acceptance length of a pattern whose
value is known (accepted drafts alternate 1 and 2, bonus always 1: mean length 2.50).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.support.synthetic import hello_body, load_body, step_body

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (make tmux)")

STEPS = 400


def _eagle3scope() -> str:
    script = Path(sys.executable).parent / "eagle3scope"
    return str(script) if script.exists() else shutil.which("eagle3scope")


class Tmux:
    """A private tmux server (its own socket), so the test never touches the user's sessions."""

    def __init__(self, name: str) -> None:
        self.socket = f"e3s-test-{os.getpid()}-{name}"
        self.target = name

    def run(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], check=True, capture_output=True, text=True, timeout=10).stdout

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", self.target)

    def wait_for(self, *needles: str, timeout: float = 20.0) -> str:
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.screen()
            if all(n in text for n in needles):
                return text
            time.sleep(0.2)
        raise AssertionError(f"{needles} not on screen after {timeout}s:\n{text}")

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=10)


def test_watch_in_tmux_shows_the_stream(tmp_path):
    from eagle3scope_shim.publisher import Publisher

    pub = Publisher("tcp://127.0.0.1:0", "tmux0", sticky_interval_s=0.3)
    pub.start()
    pub.set_sticky("hello", hello_body(sglang_version="7.7.7-tmux"))
    pub.set_sticky("load", load_body())
    tmux = Tmux("watch")
    command = f"env XDG_CONFIG_HOME={tmp_path} TERM=xterm-256color {_eagle3scope()} watch --connect {pub.endpoint} --theme dark"
    try:
        tmux.run("new-session", "-d", "-s", tmux.target, "-x", "120", "-y", "40", command)
        tmux.wait_for("7.7.7-tmux")
        t0 = time.time_ns()
        for seq in range(STEPS):
            body = step_body(seq, t_ns=t0 + seq * 1_000_000)
            body["accepted"] = [1 + seq % 2]
            body["accepted_ids"] = [body["draft_ids"][0][: 1 + seq % 2] + [7]]
            pub.submit("step", body)
            if seq % 50 == 49:
                time.sleep(0.01)
        text = tmux.wait_for(f"{STEPS} steps", "cumulative 2.50")
        assert "accept length 2.50" in text
        tmux.run("send-keys", "-t", tmux.target, "q")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and tmux.target in subprocess.run(
            ["tmux", "-L", tmux.socket, "list-sessions"], capture_output=True, text=True
        ).stdout:
            time.sleep(0.2)
        assert tmux.target not in subprocess.run(["tmux", "-L", tmux.socket, "list-sessions"], capture_output=True, text=True).stdout
    finally:
        tmux.kill()
        pub.close(0)


def test_replay_in_tmux_seeks_where_asked(tmp_path):
    from benchmarks.support.tui_support import write_recording

    from benchmarks.support.synthetic import session_frames

    recording = write_recording(tmp_path / "r.e3s", session_frames(2000, src="rec0", seed=4))
    tmux = Tmux("replay")
    command = f"env XDG_CONFIG_HOME={tmp_path} TERM=xterm-256color {_eagle3scope()} replay {recording} --from-step 300 --speed 0.25"
    try:
        tmux.run("new-session", "-d", "-s", tmux.target, "-x", "100", "-y", "30", command)
        text = tmux.wait_for("REPLAY 0.25×", "rec0")
        seq = int(re.search(r"step (\d+) ", text).group(1))
        assert 300 <= seq < 2000
        tmux.run("send-keys", "-t", tmux.target, "space")
        tmux.wait_for("PAUSED")
        tmux.run("send-keys", "-t", tmux.target, "g")
        tmux.wait_for("Seek to step")
        tmux.run("send-keys", "-t", tmux.target, "1234", "Enter")
        tmux.wait_for("step 1234 ")
    finally:
        tmux.kill()
