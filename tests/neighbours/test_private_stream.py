"""Neighbours on a shared host: another local user can neither read nor forge the event stream.

The default endpoint is an ipc:// socket in a per-user 0700 runtime directory; TCP goes through
ZeroMQ CURVE with the key file's keys (or plain, only with EAGLE3SCOPE_TRUSTED_NETWORK=1). The
other user is real: a second uid (``useradd``; the suite runs as root in CI), acting in a forked
child that drops to that uid, against the real Publisher, Subscriber and CLI over real sockets.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import zmq

from eagle3scope.live.subscriber import Subscriber
from eagle3scope.wire import encode_frame
from eagle3scope.wire.curve import ENV_KEY_FILE, KeyFileError, load_keys
from eagle3scope.wire.endpoints import ENV_TRUSTED, EndpointError, default_endpoint, free_port, guard, runtime_dir
from eagle3scope_shim.publisher import Publisher
from eagle3scope_shim.shim_state import Shim
from benchmarks.support.neighbour_support import as_neighbour, become, ensure_neighbour, zmq_read
from benchmarks.support.synthetic import hello_body, load_body, step_body
from support.cli import CLI



@pytest.fixture
def private_env(monkeypatch, tmp_path, shared_tmp):
    """Nothing trusted; the runtime directory under the shared dir (the /tmp fallback) and a
    private key file path."""
    monkeypatch.delenv(ENV_TRUSTED, raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(shared_tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(shared_tmp))
    monkeypatch.setenv(ENV_KEY_FILE, str(tmp_path / "keys" / "curve.key"))
    return shared_tmp


def frames(src: str, n_steps: int):
    """A healthy stream, hello and load re-sent every 50 steps (sticky, as the shim does)."""
    out, n = [], 0
    for seq in range(n_steps):
        if seq % 50 == 0:
            for kind, body in (("hello", hello_body()), ("load", load_body())):
                out.append(encode_frame(kind, body, src=src, n=n, t=time.time_ns()))
                n += 1
        out.append(encode_frame("step", step_body(seq, t_ns=time.time_ns()), src=src, n=n, t=time.time_ns()))
        n += 1
    return out


def heard(sub: Subscriber, pub: Publisher, seconds: float = 15.0) -> bool:
    """True once a step ``pub`` keeps submitting reaches ``sub`` (connections settle at their pace)."""
    deadline, seq = time.monotonic() + seconds, 0
    while time.monotonic() < deadline:
        pub.submit("step", step_body(seq, t_ns=time.time_ns()))
        seq += 1
        if any(f.kind == "step" for f in sub.poll(50)):
            return True
    return False


def publish_steps(pub: Publisher, n: int = 40) -> None:
    pub.set_sticky("hello", hello_body())
    for seq in range(n):
        pub.submit("step", step_body(seq, t_ns=time.time_ns()))


# -- what the neighbour tries ---------------------------------------------------------------------
def _unix_attempts(path: str) -> dict:
    """Connect to the socket, list its directory, bind a socket at its name: each error, or 'done'."""
    out = {}
    for what, act in (("connect", lambda s: s.connect(path)), ("bind", lambda s: s.bind(path))):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            try:
                act(s)
                out[what] = "done"
            except OSError as exc:
                out[what] = type(exc).__name__
    try:
        os.listdir(os.path.dirname(path))
        out["list"] = "done"
    except OSError as exc:
        out["list"] = type(exc).__name__
    return out


def _squat_runtime_dir(path: str, mode: int) -> str:
    os.mkdir(path, mode)
    os.chmod(path, mode)
    return oct(os.stat(path).st_mode)


def _forge_on_tcp(port: int, src: str, seconds: float, bound_fd: int) -> int:
    """Bind the port first (plain PUB), say so on ``bound_fd``, publish a healthy-looking stream under ``src``."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUB)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(f"tcp://127.0.0.1:{port}")
    os.write(bound_fd, b"x")
    stream, sent, deadline = frames(src, 100_000), 0, time.monotonic() + seconds
    while time.monotonic() < deadline and sent < len(stream):
        sock.send(stream[sent])
        sent += 1
        time.sleep(0.002)
    sock.close(0)
    ctx.term()
    return sent


# -- the default stream ---------------------------------------------------------------------------
def test_the_default_stream_is_private_to_its_user(private_env, neighbour):
    endpoint = default_endpoint()
    path = endpoint[len("ipc://"):]
    home = Path(path).parent
    assert home == private_env / f"eagle3scope-{os.getuid()}"
    assert stat.S_IMODE(home.stat().st_mode) == 0o700 and home.stat().st_uid == os.getuid()
    denied = {"connect": "PermissionError", "bind": "PermissionError", "list": "PermissionError"}
    assert as_neighbour(neighbour, _unix_attempts, path) == denied  # before the server: no squatting its name
    assert not os.path.exists(path)
    pub = Publisher("", "victim:1:dp0", sticky_interval_s=0.2, flush_interval_s=0.02)
    pub.start()
    try:
        assert pub.endpoint == endpoint
        with Subscriber([endpoint]) as sub:  # its own user hears it, so silence below means something
            assert heard(sub, pub)
        assert as_neighbour(neighbour, _unix_attempts, path) == denied
        publish_steps(pub)
        assert as_neighbour(neighbour, zmq_read, endpoint, 1.5) == 0
    finally:
        pub.close()


def test_a_runtime_directory_made_first_by_a_neighbour_is_refused_loudly(private_env, neighbour, caplog):
    squatted = private_env / f"eagle3scope-{os.getuid()}"
    as_neighbour(neighbour, _squat_runtime_dir, str(squatted), 0o777)
    with pytest.raises(EndpointError, match=f"belongs to uid {neighbour[0]}, not to this user"):
        default_endpoint()
    with caplog.at_level(logging.ERROR, logger="eagle3scope"):
        assert Shim().start_publisher("", 0) is False
    assert "NOT PUBLISHING" in caplog.text and "hello goes to nobody" in caplog.text
    done = subprocess.run([*CLI, "gate", "--steps", "5", "--timeout", "2"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "belongs to uid" in done.stderr, done.stderr
    assert not os.listdir(squatted)  # nothing of ours went into it
    shutil.rmtree(squatted)
    os.mkdir(squatted, 0o755)  # ours, but open to others: refused too, not loosened or taken over
    with pytest.raises(EndpointError, match="must be 0700"):
        runtime_dir()


def test_a_second_server_on_the_same_socket_is_refused_not_stolen(private_env):
    first = Publisher("", "a:1:dp0")
    first.start()
    try:
        second = Publisher("", "b:2:dp0")
        with pytest.raises(EndpointError, match="already served by another publisher"):
            second.start()
        assert os.path.exists(first.endpoint[6:])
    finally:
        first.close()
    again = Publisher("", "b:2:dp0")  # a stale name (the first one gone) is fine
    again.start()
    again.close()
    precious = private_env / f"eagle3scope-{os.getuid()}" / "notes.txt"
    precious.write_text("mine")
    with pytest.raises(EndpointError, match="is not a socket"):
        Publisher(f"ipc://{precious}", "c:3:dp0").start()
    assert precious.read_text() == "mine"


def test_ipc_outside_a_private_directory_needs_the_trusted_flag(private_env, monkeypatch):
    endpoint = f"ipc://{private_env}/open.sock"  # a sticky world-writable dir: anyone could squat the name
    with pytest.raises(EndpointError, match="other users could read or forge"):
        guard(endpoint, bind=True)
    with pytest.raises(EndpointError, match="other users could read or forge"):
        Subscriber([endpoint])
    with pytest.raises(EndpointError, match="abstract socket name any local user can bind"):
        guard("ipc://@eagle3scope", bind=True)
    monkeypatch.setenv(ENV_TRUSTED, "1")
    assert guard(endpoint, bind=True) is None
    Subscriber([endpoint]).close()


# -- TCP: CURVE or the user's word ----------------------------------------------------------------
def test_tcp_goes_through_curve_with_the_key_file(private_env, tmp_path, neighbour):
    port = free_port()
    pub = Publisher(f"tcp://127.0.0.1:{port}", "victim:1:dp0", sticky_interval_s=0.2, flush_interval_s=0.02)
    pub.start()  # writes the key file on first use
    try:
        keys = load_keys()
        key_path = tmp_path / "keys" / "curve.key"
        assert keys.path == key_path and stat.S_IMODE(key_path.stat().st_mode) == 0o600
        assert stat.S_IMODE(key_path.parent.stat().st_mode) == 0o700
        with Subscriber([f"tcp://127.0.0.1:{port}"]) as sub:
            assert heard(sub, pub)
        # the neighbour, even knowing the server's public key, is refused by the server (ZAP)
        own_public, own_secret = zmq.curve_keypair()
        publish_steps(pub)
        assert as_neighbour(neighbour, zmq_read, f"tcp://127.0.0.1:{port}", 1.5,
                            (keys.public, own_public, own_secret)) == 0
        assert as_neighbour(neighbour, zmq_read, f"tcp://127.0.0.1:{port}", 1.0) == 0  # plain: no handshake
    finally:
        pub.close()
    # a viewer with no key file cannot authenticate anyone: refused with the reason
    os.environ[ENV_KEY_FILE] = str(tmp_path / "elsewhere" / "curve.key")
    with pytest.raises(EndpointError, match="does not exist"):
        Subscriber([f"tcp://127.0.0.1:{port}"])


def test_a_key_file_that_is_not_private_is_refused(private_env, tmp_path):
    path = Path(os.environ[ENV_KEY_FILE])
    load_keys(create=True)
    os.chmod(path, 0o644)
    with pytest.raises(KeyFileError, match="must be 0600"):
        load_keys()
    with pytest.raises(KeyFileError):
        Publisher(f"tcp://127.0.0.1:{free_port()}", "x").start()


def test_a_squatted_port_never_gives_a_pass(private_env, neighbour, caplog, monkeypatch):
    """The neighbour binds the port first and forges a healthy stream under the victim's src: the
    victim's shim says it cannot publish, and gate fails (exit 2, naming the failed authentication)
    instead of passing; only with the trusted flag, at the user's word, would it pass."""
    load_keys(create=True)
    port = free_port()
    pid_reader, pid_writer = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(pid_reader)
        try:
            become(neighbour)
            _forge_on_tcp(port, "victim:1:dp0", 90.0, pid_writer)
        finally:
            os._exit(0)
    os.close(pid_writer)
    try:
        assert os.read(pid_reader, 1) == b"x"  # the port is the neighbour's now
        with caplog.at_level(logging.ERROR, logger="eagle3scope"):
            assert Shim().start_publisher(f"tcp://127.0.0.1:{port}", 0) is False
        assert "NOT PUBLISHING" in caplog.text and "Address already in use" in caplog.text
        args = [*CLI, "gate", "--connect", f"tcp://127.0.0.1:{port}", "--steps", "50", "--timeout", "15"]
        done = subprocess.run(args, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "cannot authenticate the publisher" in done.stderr and "PASS" not in done.stdout
        trusted = subprocess.run(args, capture_output=True, text=True, timeout=60, env={**os.environ, ENV_TRUSTED: "1"})
        assert trusted.returncode == 0, trusted.stdout + trusted.stderr  # the forgery is convincing
    finally:
        os.kill(child, 9)
        os.waitpid(child, 0)
        os.close(pid_reader)


def test_plain_tcp_without_a_key_or_the_flag_is_refused_on_both_sides(private_env, monkeypatch, tmp_path):
    monkeypatch.setenv(ENV_KEY_FILE, str(tmp_path / "none" / "curve.key"))
    with pytest.raises(EndpointError, match="cannot authenticate a TCP publisher"):
        Subscriber([f"tcp://127.0.0.1:{free_port()}"])
    done = subprocess.run([*CLI, "record", "--connect", f"tcp://127.0.0.1:{free_port()}", "--out",
                           str(tmp_path / "r.e3s"), "--duration", "0.2"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "curve.key does not exist" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "r.e3s").exists()


# -- inside the real engine -----------------------------------------------------------------------
@pytest.mark.engine
def test_the_shim_publishes_on_the_private_default_inside_sglang(tiny_models, tmp_path, monkeypatch):
    """EAGLE3SCOPE=1 and nothing else: the scheduler binds this user's default socket (0700 runtime
    directory), a bare viewer of the same user finds it, and the server's log names it (the line a
    failed bind turns into an error)."""
    from eagle3scope.demo.server import SGLangServer

    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.delenv("EAGLE3SCOPE_ENDPOINT", raising=False)
    monkeypatch.delenv(ENV_TRUSTED, raising=False)  # the server's environment: nothing trusted
    endpoint = default_endpoint()
    assert endpoint == f"ipc://{runtime}/eagle3scope/events.sock"
    target, draft = tiny_models
    frames = []
    with Subscriber([endpoint]) as sub:
        with SGLangServer(target, draft, env={"EAGLE3SCOPE": "1", "XDG_RUNTIME_DIR": str(runtime)}) as srv:
            srv.generate(["hello world"], max_new_tokens=8)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not {"hello", "step"} <= {f.kind for f in frames}:
                frames += sub.poll(200)
            log = srv.log_path.read_text(errors="replace")
    assert {"hello", "step"} <= {f.kind for f in frames}
    assert f"eagle3scope: publishing on {endpoint}" in log and "NOT PUBLISHING" not in log
    assert stat.S_IMODE((runtime / "eagle3scope").stat().st_mode) == 0o700


def test_launch_on_tcp_writes_the_key_file_first_and_says_where(private_env, tmp_path):
    key = tmp_path / "keys" / "curve.key"
    child = "import os; print(os.environ['EAGLE3SCOPE_ENDPOINT'])"
    done = subprocess.run([*CLI, "launch", "--endpoint", "tcp://127.0.0.1:6553", "--", sys.executable, "-c", child],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "tcp://127.0.0.1:6553", done.stderr
    assert f"CURVE key file {key}" in done.stderr and stat.S_IMODE(key.stat().st_mode) == 0o600
    assert load_keys(key).public == load_keys().public  # what a viewer of this user reads
    done = subprocess.run([*CLI, "launch", "--", sys.executable, "-c", child], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == default_endpoint(), done.stderr
