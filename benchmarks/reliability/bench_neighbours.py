"""Neighbour figures for RELIABILITY.md: what another local user, a race or a signal does to a
checkout, before and after the private-stream change.

Run as root (a second uid acts through ``benchmarks/support/neighbour_support.py``):
``.venv/bin/python benchmarks/reliability/bench_neighbours.py [--before /path/to/older/checkout]``. Each
checkout runs with its own ``.venv/bin/python`` and its own code first on ``PYTHONPATH``; the
neighbour is a forked child dropped to the ``e3s-neighbour`` uid.

- **default stream**: a publisher on the checkout's default endpoint (before: loopback TCP on a free
  port; after: the private ipc socket) sends 500 steps/s; frames the neighbour reads in 3 s.
- **squatted port**: the neighbour binds a TCP port first and forges a healthy stream under the
  victim's ``src``; the checkout's ``gate --steps 50`` on that port: exit status (0 = PASS).
- **token race**: ``read_token`` 30,000 times while the directory entry is swapped by rename between
  the good token, the neighbour's file and a link to it; calls that returned the neighbour's token.
- **two recorders**: 25 rounds of four ``SessionWriter`` on one path behind a barrier: rounds with
  exactly one writer, and what the others raised.
- **signals**: ``record`` on SIGHUP/SIGQUIT/SIGTERM/SIGINT (exit status, file closed, steps in
  it), ``gate`` on SIGHUP (a verdict printed?), the replay TUI on SIGTERM/SIGHUP (terminal restored?).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(HERE / "instrumentation"))
sys.path.insert(0, str(HERE))

import zmq  # noqa: E402

from benchmarks.support.neighbour_support import as_neighbour, become, ensure_neighbour, terminal_restored, tui_in_pty, zmq_read  # noqa: E402

PUBLISH = r"""
import sys, time
from eagle3scope_shim.publisher import Publisher
pub = Publisher(sys.argv[1], "victim:1:dp0", flush_interval_s=0.02)
pub.start()
print(pub.endpoint, flush=True)
for i in range(4000):
    pub.submit("step", {"seq": i, "draft_ids": [[1, 2, 3]], "accepted": [2], "rids": ["secret-request"]})
    time.sleep(0.002)
pub.close()
"""

TOKEN_RACE = r"""
import json, os, sys
sys.path.append(sys.argv[1])
from pathlib import Path
from eagle3scope.wire.token import create_token_file, read_token
from benchmarks.support.neighbour_support import rename_race
directory = Path(sys.argv[2])
good = create_token_file(directory)
evil = directory / "evil.token"
evil.write_text("A" * 43 + "\n"); os.chmod(evil, 0o600); os.chown(evil, int(sys.argv[3]), int(sys.argv[4]))
print(json.dumps(rename_race(read_token, good, evil, directory / "control.token", 30000)))
"""

WRITERS = r"""
import json, sys, threading
from pathlib import Path
from eagle3scope.store import SessionWriter, StoreError
root, tally = Path(sys.argv[1]), {"one_writer": 0, "rounds": 25, "losers": {}}
for r in range(25):
    barrier, out = threading.Barrier(4), []
    def start():
        barrier.wait()
        try:
            out.append(SessionWriter(root / f"r{r}.e3s"))
        except Exception as exc:
            why = str(exc)
            key = type(exc).__name__ + (": UNIQUE constraint" if "UNIQUE" in why else ": another recorder" if "another recorder" in why else ": already exists" if "already exists" in why else ": " + why[:60])
            out.append(key)
    threads = [threading.Thread(target=start) for _ in range(4)]
    [t.start() for t in threads]; [t.join(30) for t in threads]
    writers = [o for o in out if not isinstance(o, str)]
    tally["one_writer"] += len(writers) == 1
    for o in out:
        if isinstance(o, str):
            tally["losers"][o] = tally["losers"].get(o, 0) + 1
    for w in writers:
        try:
            w.close()
        except Exception:
            pass
print(json.dumps(tally))
"""


class Checkout:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.python = str(root / ".venv" / "bin" / "python")

    def env(self, **extra: str) -> dict:
        env = {k: v for k, v in os.environ.items() if k not in ("EAGLE3SCOPE_TRUSTED_NETWORK", "PYTHONPATH")}
        return {**env, "PYTHONPATH": f"{self.root}{os.pathsep}{self.root / 'instrumentation'}", **extra}

    def run(self, args: list[str], timeout: float = 120, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([self.python, *args], cwd=self.root, env=self.env(**extra), capture_output=True,
                              text=True, timeout=timeout)

    def popen(self, args: list[str], **extra: str) -> subprocess.Popen:
        return subprocess.Popen([self.python, *args], cwd=self.root, env=self.env(**extra), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def default_stream(co: Checkout, who, runtime: Path, old: bool) -> int:
    endpoint = f"tcp://127.0.0.1:{free_port()}" if old else ""  # the old default was loopback TCP 5557
    proc = co.popen(["-c", PUBLISH, endpoint], XDG_RUNTIME_DIR=str(runtime))
    bound = proc.stdout.readline().strip()
    try:
        return as_neighbour(who, zmq_read, bound, 3.0)
    finally:
        proc.kill()
        proc.wait()


def squatted_port(co: Checkout, who, keys: Path) -> int:
    from eagle3scope.wire import encode_frame
    from benchmarks.support.synthetic import hello_body, load_body, step_body

    port = free_port()
    child = os.fork()
    if child == 0:
        try:
            become(who)
            ctx = zmq.Context()
            sock = ctx.socket(zmq.PUB)
            sock.bind(f"tcp://127.0.0.1:{port}")
            n = 0
            for seq in range(10_000):
                if seq % 50 == 0:
                    for kind, body in (("hello", hello_body()), ("load", load_body())):
                        sock.send(encode_frame(kind, body, src="victim:1:dp0", n=n, t=time.time_ns()))
                        n += 1
                sock.send(encode_frame("step", step_body(seq, t_ns=time.time_ns()), src="victim:1:dp0", n=n,
                                       t=time.time_ns()))
                n += 1
                time.sleep(0.002)
        finally:
            os._exit(0)
    try:
        time.sleep(0.5)
        done = co.run(["-m", "eagle3scope", "gate", "--connect", f"tcp://127.0.0.1:{port}", "--steps", "50",
                       "--timeout", "15"], EAGLE3SCOPE_CURVE_KEY_FILE=str(keys))
        return done.returncode
    finally:
        os.kill(child, 9)
        os.waitpid(child, 0)


def signals(co: Checkout, scratch: Path) -> dict:
    from eagle3scope.store import SessionReader, SessionWriter
    from eagle3scope.wire import encode_frame
    from eagle3scope.wire.endpoints import fresh_ipc_endpoint
    from eagle3scope_shim.publisher import Publisher
    from benchmarks.support.analysis_streams import session

    out = {}
    pub = Publisher(fresh_ipc_endpoint(), "sig:1:dp0", flush_interval_s=0.02)
    pub.start()
    import threading

    stop = threading.Event()

    def feed():
        from benchmarks.support.synthetic import step_body
        seq = 0
        while not stop.is_set():
            pub.submit("step", step_body(seq, t_ns=time.time_ns()))
            seq += 1
            time.sleep(0.002)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        for sig in ("SIGHUP", "SIGQUIT", "SIGTERM", "SIGINT"):
            path = scratch / f"{co.root.name}-{sig}.e3s"
            proc = co.popen(["-m", "eagle3scope", "record", "--connect", pub.endpoint, "--out", str(path)])
            while "receiving from" not in proc.stderr.readline():
                pass
            time.sleep(0.45)
            proc.send_signal(getattr(signal, sig))
            code = proc.wait(30)
            reader = SessionReader(path)
            out[f"record {sig}"] = f"exit {code}, closed {reader.complete}, {reader.count('step')} steps in the file"
        proc = co.popen(["-m", "eagle3scope", "gate", "--connect", pub.endpoint, "--steps", "1000000", "--timeout", "60"])
        time.sleep(3)
        proc.send_signal(signal.SIGHUP)
        code = proc.wait(30)
        text = proc.stdout.read() + proc.stderr.read()
        out["gate SIGHUP"] = f"exit {code}, verdict printed {'decode steps' in text}"
    finally:
        stop.set()
        feeder.join(5)
        pub.close()
    long = scratch / f"{co.root.name}-long.e3s"
    with SessionWriter(long) as writer:
        for f in session(3000, bs=2):
            writer.add(encode_frame(f.kind, f.body, src=f.src, n=f.n, t=f.t), f)
    for sig in ("SIGTERM", "SIGHUP"):
        code, raw = tui_in_pty([co.python, "-m", "eagle3scope", "replay", str(long)], getattr(signal, sig), cwd=co.root,
                               env=co.env())
        out[f"replay TUI {sig}"] = f"exit {code}, terminal restored {terminal_restored(raw)}"
    return out


def measure(co: Checkout, who, old: bool, only: str | None = None) -> dict:
    scratch = Path(tempfile.mkdtemp(prefix="e3s-bench-"))
    os.chmod(scratch, 0o755)
    runtime = scratch / "run"
    runtime.mkdir(mode=0o700)
    try:
        if only == "token":
            done = co.run(["-c", TOKEN_RACE, str(HERE), str(scratch / "tokens"), str(who[0]), str(who[1])])
            return {"token race, 30000 reads": json.loads(done.stdout) if done.returncode == 0 else done.stderr[-300:]}
        figures = {"default stream: frames the neighbour read in 3 s": default_stream(co, who, runtime, old)}
        keys = scratch / "keys" / "curve.key"
        if not old:
            from eagle3scope.wire.curve import load_keys
            os.environ["EAGLE3SCOPE_CURVE_KEY_FILE"] = str(keys)
            load_keys(create=True)
        figures["squatted port: gate exit status (0 = PASS)"] = squatted_port(co, who, keys)
        tokens = scratch / "tokens"
        done = co.run(["-c", TOKEN_RACE, str(HERE), str(tokens), str(who[0]), str(who[1])])
        figures["token race, 30000 reads"] = json.loads(done.stdout) if done.returncode == 0 else done.stderr[-300:]
        writers = scratch / "writers"
        writers.mkdir()
        done = co.run(["-c", WRITERS, str(writers)])
        figures["four writers on one path, 25 rounds"] = json.loads(done.stdout) if done.returncode == 0 else done.stderr[-300:]
        figures.update(signals(co, scratch))
        return figures
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, default=None, help="an older checkout with its .venv")
    parser.add_argument("--only", choices=["token"], default=None, help="only this figure")
    args = parser.parse_args()
    who = ensure_neighbour()
    runs = [("after", Checkout(HERE), False)]
    if args.before is not None:
        runs.insert(0, ("before", Checkout(args.before.resolve()), True))
    for label, co, old in runs:
        print(f"## {label}: {co.root}")
        for key, value in measure(co, who, old, args.only).items():
            print(f"- {key}: {value}")


if __name__ == "__main__":
    main()
