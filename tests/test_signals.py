"""Signals end commands cleanly: ``record`` commits and closes its file, ``gate`` prints its verdict,
``exporter`` exits 0 on SIGINT, SIGTERM, SIGHUP and SIGQUIT; the TUI (``watch``, ``replay``) leaves
the alternate screen and turns mouse reporting off on every signal that would end it. Real
processes, a real publisher, a real pseudo-terminal."""

from __future__ import annotations

import signal
import subprocess
import threading
import time

import pytest

from analysis_streams import session
from eagle3scope.signals import STOP_SIGNALS, ending_signals
from eagle3scope.store import SessionReader, SessionWriter
from eagle3scope.wire import encode_frame
from eagle3scope.wire.endpoints import fresh_ipc_endpoint
from eagle3scope_shim.publisher import Publisher
from neighbour_support import terminal_restored, tui_in_pty
from synthetic import hello_body, load_body, step_body
from support.cli import CLI

STOPS = [signal.Signals(s).name for s in STOP_SIGNALS]


class Stream:
    """The shim's publisher on a fresh private endpoint, 500 steps/s until closed."""

    def __init__(self) -> None:
        self.pub = Publisher(fresh_ipc_endpoint(), "sig:1:dp0", sticky_interval_s=0.2, flush_interval_s=0.02)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        seq = 0
        while not self.stop.is_set():
            self.pub.submit("step", step_body(seq, bs=2, t_ns=time.time_ns()))
            seq += 1
            time.sleep(0.002)

    def __enter__(self) -> Stream:
        self.pub.start()
        self.pub.set_sticky("hello", hello_body())
        self.pub.set_sticky("load", load_body())
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(5)
        self.pub.close()


def _wait_for(proc: subprocess.Popen, text: str, timeout: float = 60) -> str:
    seen, deadline = "", time.monotonic() + timeout
    while text not in seen and time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            break
        seen += line
    assert text in seen, seen
    return seen


def _wait_caught(pid: int, sig: int, timeout: float = 60) -> None:
    """Until process ``pid`` has a handler for ``sig`` (its /proc SigCgt mask says so)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/status") as fh:
            caught = int(next(line for line in fh if line.startswith("SigCgt:")).split()[1], 16)
        if caught >> (sig - 1) & 1:
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} never caught {sig}")


@pytest.fixture(scope="module")
def stream():
    with Stream() as s:
        yield s


@pytest.mark.parametrize("sig", STOPS)
def test_record_commits_and_closes_on(sig, stream, tmp_path):
    out = tmp_path / "r.e3s"
    proc = subprocess.Popen([*CLI, "record", "--connect", stream.pub.endpoint, "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(proc, "receiving from")
    time.sleep(0.4)  # some batches in, one pending
    proc.send_signal(getattr(signal, sig))
    assert proc.wait(30) == 0
    tail = proc.stderr.read()
    assert f"stopped ({sig})" in tail, tail
    reported = int(tail.split("recording: ")[-1].split(" steps")[0])
    reader = SessionReader(out)
    assert reader.complete and not reader.errors
    assert reported > 0 and reader.meta["steps"] == reported  # the pending batch was committed too


@pytest.mark.parametrize("sig", ["SIGHUP", "SIGQUIT"])
def test_gate_prints_its_verdict_on(sig, stream, tmp_path):
    proc = subprocess.Popen([*CLI, "gate", "--connect", stream.pub.endpoint, "--steps", "1000000", "--timeout", "120",
                             "--junit", str(tmp_path / "g.xml")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_caught(proc.pid, getattr(signal, sig))
    time.sleep(1.0)  # subscribed and judging
    proc.send_signal(getattr(signal, sig))
    code = proc.wait(30)
    out, err = proc.stdout.read(), proc.stderr.read()
    assert code == 3, out + err  # nothing failed, fewer steps than asked: inconclusive, not killed
    assert "decode steps arrived interrupted" in err and (tmp_path / "g.xml").exists(), out + err


@pytest.mark.parametrize("sig", ["SIGHUP", "SIGQUIT", "SIGTERM"])
def test_exporter_exits_cleanly_on(sig, stream):
    proc = subprocess.Popen([*CLI, "exporter", "--connect", stream.pub.endpoint, "--listen", "127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(proc, "exporting")
    proc.send_signal(getattr(signal, sig))
    assert proc.wait(30) == 0
    assert "Traceback" not in proc.stderr.read()


def test_every_ending_signal_is_caught_by_the_tui():
    caught = {signal.Signals(s).name for s in ending_signals() if s < signal.SIGRTMIN}
    assert {"SIGHUP", "SIGINT", "SIGQUIT", "SIGTERM", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGXCPU"} <= caught
    assert not caught & {"SIGKILL", "SIGSTOP", "SIGTSTP", "SIGCONT", "SIGWINCH", "SIGCHLD", "SIGSEGV"}
    assert signal.SIGRTMIN in ending_signals()


# -- the TUI in a real pseudo-terminal ------------------------------------------------------------
@pytest.fixture(scope="module")
def long_recording(tmp_path_factory):
    path = tmp_path_factory.mktemp("tui") / "long.e3s"
    with SessionWriter(path) as writer:
        for f in session(3000, bs=2):
            writer.add(encode_frame(f.kind, f.body, src=f.src, n=f.n, t=f.t), f)
    return path


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1"])
def test_replay_restores_the_terminal_on(sig, long_recording):
    code, out = tui_in_pty([*CLI, "replay", str(long_recording)], getattr(signal, sig))
    assert terminal_restored(out), out[-1000:]
    assert code == 128 + getattr(signal, sig), (code, out[-1000:])


def test_watch_restores_the_terminal_on_sigterm(stream):
    code, out = tui_in_pty([*CLI, "watch", "--connect", stream.pub.endpoint], signal.SIGTERM)
    assert terminal_restored(out), out[-1000:]
    assert code == 128 + signal.SIGTERM


def test_a_signal_ignored_at_start_stays_ignored(stream, tmp_path):
    """README "Bounds": signals ignored at start (`nohup`) stay ignored; the others still stop cleanly."""
    out = tmp_path / "r.e3s"
    proc = subprocess.Popen([*CLI, "record", "--connect", stream.pub.endpoint, "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    _wait_for(proc, "receiving from")
    proc.send_signal(signal.SIGHUP)
    time.sleep(1.0)
    assert proc.poll() is None  # still recording
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    assert "stopped (SIGTERM)" in proc.stderr.read()
