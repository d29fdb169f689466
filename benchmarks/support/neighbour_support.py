"""What the neighbour tests and ``benchmarks/reliability/bench_neighbours.py`` share: a second local user to act
as, a rename race against a file reader, and a TUI run in a real pseudo-terminal.

No project imports (standard library and pyzmq), so the benchmark can run it against an older
checkout for the "before" figures.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import pwd
import select
import shutil
import struct
import subprocess
import termios
import time
from pathlib import Path

NEIGHBOUR = "e3s-neighbour"


def ensure_neighbour() -> tuple[int, int]:
    """(uid, gid) of another local user, created with ``useradd`` when missing; RuntimeError saying
    why when that is impossible (not root, no useradd)."""
    if os.geteuid() != 0:
        raise RuntimeError("acting as a second user needs root (CI runs the suite as root)")
    try:
        entry = pwd.getpwnam(NEIGHBOUR)
    except KeyError:
        tool = shutil.which("useradd")
        if tool is None:
            raise RuntimeError("useradd is not installed") from None
        done = subprocess.run([tool, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", NEIGHBOUR],
                              capture_output=True, text=True, timeout=60)
        try:
            entry = pwd.getpwnam(NEIGHBOUR)
        except KeyError:
            raise RuntimeError(f"useradd {NEIGHBOUR} failed: {done.stderr.strip()}") from None
    assert entry.pw_uid != 0
    return entry.pw_uid, entry.pw_gid


def become(who: tuple[int, int]) -> None:
    """Drop this (forked) process to the neighbour's uid and gid, no supplementary groups."""
    os.setgroups([])
    os.setgid(who[1])
    os.setuid(who[0])


def as_neighbour(who: tuple[int, int], action, *args, timeout: float = 60):
    """Run ``action(*args)`` in a forked child under the neighbour's uid; its JSON-able result."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to the other user, act, report, leave without cleanup handlers
        code = 0
        try:
            os.close(read)
            become(who)
            out = {"ok": action(*args)}
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            out, code = {"error": f"{type(exc).__name__}: {exc}"}, 1
        os.write(write, json.dumps(out).encode())
        os._exit(code)
    os.close(write)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.02)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        raise AssertionError("the neighbour's action hung")
    with os.fdopen(read, "rb") as fh:
        out = json.loads(fh.read() or b"{}")
    assert "error" not in out, out["error"]
    return out["ok"]


def rename_race(read, good: Path, evil: Path, target: Path, calls: int, min_seconds: float = 0.0) -> dict:
    """``read(target)`` ``calls`` times (and for at least ``min_seconds``) while another process
    swaps ``target`` by rename (atomic, as an attacker with write access to the directory would)
    between a hard link to the good token file, one to ``evil`` (another user's) and a symbolic
    link to ``evil``. Tally of what came back."""
    staged = target.with_name(f".{target.name}.staged")
    os.link(good, target)
    running, told = os.pipe()
    racer = os.fork()
    if racer == 0:  # only system calls here: safe in a forked child of a threaded process
        i = 0
        try:
            while True:
                if i == 16:
                    os.write(told, b"x")  # swapping: the reader may start
                kind = i % 4
                if kind == 3:
                    os.symlink(evil, staged)
                else:
                    os.link(evil if kind == 1 else good, staged)
                os.rename(staged, target)
                if os.path.lexists(staged):  # rename between two links of one file does nothing
                    os.unlink(staged)
                i += 1
        finally:
            os._exit(0)
    tally = {"good": 0, "evil": 0, "refused": 0}
    good_text, evil_text = good.read_text().strip(), evil.read_text().strip()
    os.close(told)
    try:
        os.read(running, 1)
        os.close(running)
        until, n = time.monotonic() + min_seconds, 0
        while n < calls or time.monotonic() < until:
            n += 1
            try:
                got = read(target)
            except Exception:
                tally["refused"] += 1
                continue
            tally["good" if got == good_text else "evil" if got == evil_text else "refused"] += 1
    finally:
        os.kill(racer, 9)
        os.waitpid(racer, 0)
    return tally


def zmq_read(endpoint: str, seconds: float, curve: tuple[bytes, bytes, bytes] | None = None) -> int:
    """Frames a SUB socket of its own context receives from ``endpoint`` in ``seconds``
    (``curve``: server key, own public and secret key)."""
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.SUB)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.setsockopt(zmq.LINGER, 0)
    if curve is not None:
        sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = curve
    sock.connect(endpoint)
    n, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        if sock.poll(50):
            sock.recv()
            n += 1
    sock.close(0)
    ctx.term()
    return n


ALT_ON, ALT_OFF, MOUSE_OFF = b"\x1b[?1049h", b"\x1b[?1049l", b"\x1b[?1000l"


def tui_in_pty(cmd: list[str], sig: int, *, cwd=None, env=None, settle_s: float = 1.5) -> tuple[int, bytes]:
    """Run a TUI command on a pty (80x24), wait until it drew, send ``sig``; (exit status, output)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = {**(env or os.environ), "TERM": "xterm-256color", "COLUMNS": "80", "LINES": "24"}
    proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd, start_new_session=True)
    os.close(slave)
    out, deadline, drawn = b"", time.monotonic() + 90, None
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        if drawn is None and ALT_ON in out and len(out) > 2000:
            drawn = time.monotonic()
        if drawn is not None and time.monotonic() - drawn > settle_s and proc.returncode is None:
            proc.send_signal(sig)
            drawn = float("inf")
        if proc.poll() is not None and not ready:
            break
    os.close(master)
    if proc.poll() is None:
        proc.kill()
    return proc.wait(30), out


def terminal_restored(out: bytes) -> bool:
    """The output left the alternate screen and turned mouse reporting off after it last entered."""
    after = out[out.rfind(ALT_ON):] if ALT_ON in out else b""
    return bool(after) and ALT_OFF in after and MOUSE_OFF in after
