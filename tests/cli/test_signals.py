"""Signals end commands cleanly: ``record`` commits and closes its file, ``gate`` prints its verdict,
``exporter`` exits 0 on SIGINT, SIGTERM, SIGHUP and SIGQUIT; the TUI (``watch``, ``replay``) leaves
the alternate screen and turns mouse reporting off on every signal that would end it. Real
processes, a real publisher, a real pseudo-terminal."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
import time

import pytest

from benchmarks.support.analysis_streams import session
from eagle3scope.signals import STOP_SIGNALS, ending_signals
from eagle3scope.store import SessionReader, SessionWriter
from eagle3scope.wire import encode_frame
from eagle3scope.wire.endpoints import fresh_ipc_endpoint
from eagle3scope_shim.publisher import Publisher
from benchmarks.support.neighbour_support import ALT_ON, terminal_restored, tui_in_pty
from benchmarks.support.synthetic import hello_body, load_body, step_body
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


@pytest.fixture(autouse=True, scope="module")
def stop_signals_not_ignored():
    """A shell without job control starts a background job with SIGINT and SIGQUIT ignored, and an
    ignored signal stays ignored across exec (the commands rightly keep it so, as under nohup): the
    commands these tests start get the defaults whatever started pytest."""
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGQUIT)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)
    yield
    for sig, handler in previous.items():
        signal.signal(sig, handler)


@pytest.fixture(scope="module")
def stream():
    with Stream() as s:
        yield s


@pytest.fixture
def cli():
    """Starts ``eagle3scope ARGS`` with pipes; a process a failed test left running is killed after it."""
    started = []

    def start(*args: str) -> subprocess.Popen:
        started.append(subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        return started[-1]

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@pytest.mark.parametrize("sig", STOPS)
def test_record_commits_and_closes_on(sig, stream, tmp_path, cli):
    out = tmp_path / "r.e3s"
    proc = cli("record", "--connect", stream.pub.endpoint, "--out", str(out))
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
def test_gate_prints_its_verdict_on(sig, stream, tmp_path, cli):
    proc = cli("gate", "--connect", stream.pub.endpoint, "--steps", "1000000", "--timeout", "120",
               "--junit", str(tmp_path / "g.xml"))
    _wait_caught(proc.pid, getattr(signal, sig))
    time.sleep(1.0)  # subscribed and judging
    proc.send_signal(getattr(signal, sig))
    code = proc.wait(30)
    out, err = proc.stdout.read(), proc.stderr.read()
    assert code == 3, out + err  # nothing failed, fewer steps than asked: inconclusive, not killed
    assert "decode steps arrived interrupted" in err and (tmp_path / "g.xml").exists(), out + err


@pytest.mark.parametrize("sig", ["SIGHUP", "SIGQUIT", "SIGTERM"])
def test_exporter_exits_cleanly_on(sig, stream, cli):
    proc = cli("exporter", "--connect", stream.pub.endpoint, "--listen", "127.0.0.1:0")
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


# -- the terminal going away under the TUI (SSH dropped, window closed, `| head` ended) ---------
def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _end_of(proc: subprocess.Popen, timeout: float) -> tuple[int | None, float]:
    """(exit status, or None if it still ran ``timeout`` s on; CPU seconds it used in that time)."""
    before = _cpu_s(proc.pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return proc.returncode, 0.0
        time.sleep(0.2)
    spun = _cpu_s(proc.pid) - before
    proc.kill()
    proc.wait(30)
    return None, spun


def _drawn(fd: int, timeout: float = 90) -> bytes:
    out, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline and not (ALT_ON in out and len(out) > 2000):
        if select.select([fd], [], [], 0.2)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            out += chunk
    assert ALT_ON in out, out[-500:]
    return out


def _pty() -> tuple[int, int]:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    return master, slave


TUI_ENV = {**os.environ, "TERM": "xterm-256color"}
GONE = 128 + signal.SIGHUP


def _watch_losing_its_pty(stream, **popen) -> tuple[int | None, float]:
    """``watch`` on a pty whose other side closes once it drew: :func:`_end_of` its next 15 s."""
    master, slave = _pty()
    proc = subprocess.Popen([*CLI, "watch", "--connect", stream.pub.endpoint], stdin=slave, stdout=slave,
                            stderr=slave, env=TUI_ENV, start_new_session=True, **popen)
    os.close(slave)
    try:
        _drawn(master)
    finally:
        os.close(master)
    return _end_of(proc, 15)


def test_watch_ends_when_its_terminal_vanishes_without_a_sighup(stream):
    """The pty's other side closes and no SIGHUP comes (the pty is not its controlling terminal, as
    under some SSH and tmux setups): writes fail with EIO and stdin reads end-of-file. It used to
    spin at ~95 % CPU, blocked on its full output queue, deaf to SIGTERM."""
    code, spun = _watch_losing_its_pty(stream)
    assert code == GONE, f"still running 15 s after its terminal closed, {spun:.1f} s of CPU in them"


def test_watch_ends_when_its_output_pipe_is_closed(stream):
    """``watch 2>&1 | head -c 2000``: the reader ends, every write is EPIPE; the keyboard (a live
    terminal) stays."""
    master, slave = _pty()
    proc = subprocess.Popen([*CLI, "watch", "--connect", stream.pub.endpoint], stdin=slave, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=TUI_ENV, start_new_session=True)
    os.close(slave)
    try:
        _drawn(proc.stdout.fileno())
        proc.stdout.close()
        code, spun = _end_of(proc, 15)
    finally:
        os.close(master)
    assert code == GONE, f"still running 15 s after its reader closed, {spun:.1f} s of CPU in them"


def test_watch_ends_on_a_hangup_of_its_controlling_terminal(stream):
    """The usual SSH drop: the session's terminal hangs up and the kernel sends SIGHUP."""
    code, spun = _watch_losing_its_pty(stream, preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
    assert code == GONE, f"still running 15 s after the hang-up, {spun:.1f} s of CPU in them"


STUCK_APP = """
import os, sys, time
from pathlib import Path
from eagle3scope.tui import app
from eagle3scope.tui.app import ScopeApp
from eagle3scope.tui.lifecycle import run_app
from eagle3scope.tui.feed import ReplayFeed

class Stuck(ScopeApp):
    CSS_PATH = str(Path(app.__file__).with_name(ScopeApp.CSS_PATH))

    def on_mount(self):
        os.write(1, b"stuck\\n")  # not print: the app captures sys.stdout
        time.sleep(120)  # the event loop never runs again

sys.exit(run_app(Stuck(ReplayFeed(sys.argv[1]))))
"""


def test_sigterm_ends_the_tui_even_when_its_event_loop_is_stuck(long_recording):
    """The app's own shutdown cannot run while its loop is blocked; SIGTERM still ends the process
    with 128 + 15, after the grace period the clean shutdown had."""
    from eagle3scope.tui.lifecycle import SIGNAL_GRACE_S

    master, slave = _pty()
    proc = subprocess.Popen([sys.executable, "-c", STUCK_APP, str(long_recording)], stdin=slave,
                            stdout=subprocess.PIPE, stderr=slave, env=TUI_ENV, start_new_session=True)
    os.close(slave)
    try:
        assert select.select([proc.stdout], [], [], 60)[0] and proc.stdout.readline() == b"stuck\n"
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code, _ = _end_of(proc, SIGNAL_GRACE_S + 10)
    finally:
        os.close(master)
    assert code == 128 + signal.SIGTERM
    assert time.monotonic() - started >= SIGNAL_GRACE_S - 0.5
