"""SGLangServer: a failed start explains itself, and Ctrl-C leaves no process behind."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eagle3scope.demo.server import ServerError, SGLangServer
from eagle3scope.wire.endpoints import free_port

pytestmark = pytest.mark.engine


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is `pgid`."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def test_failed_start_raises_with_log_tail_and_leaves_nothing(engine_python, tiny_models):
    target, _ = tiny_models
    server = SGLangServer(target, python=engine_python, extra_args=["--no-such-flag"])
    with pytest.raises(ServerError) as err:
        server.start()
    message = str(err.value)
    assert "exited with code" in message
    assert "--no-such-flag" in message  # argparse's complaint, quoted from the log
    assert server.proc is None


CHILD = """
import signal, sys, time
from eagle3scope.demo.server import SGLangServer
# Ctrl-C as a terminal delivers it: a shell's background job inherits SIGINT ignored, and Python
# then installs no handler of its own (seen when the suite ran as `.ci/run &`).
signal.signal(signal.SIGINT, signal.default_int_handler)
server = SGLangServer(sys.argv[1], python=sys.argv[2])
with server:
    print(server.proc.pid, flush=True)
    time.sleep(600)
"""


def test_ctrl_c_stops_the_whole_server_group(engine_python, tiny_models):
    target, _ = tiny_models
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(target), str(engine_python)],
                             stdout=subprocess.PIPE, text=True)
    pgid = None
    try:
        pgid = int(child.stdout.readline())  # printed once the server generates
        assert len(group_members(pgid)) >= 3  # launcher, scheduler, detokenizer
        child.send_signal(signal.SIGINT)
        child.wait(timeout=60)
        deadline = time.monotonic() + 10
        while group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert group_members(pgid) == []
    finally:
        if child.poll() is None:
            child.kill()
        if pgid is not None and group_members(pgid):  # a failed run must not leave an idle scheduler spinning
            os.killpg(pgid, signal.SIGKILL)


def test_a_server_whose_port_was_taken_is_relaunched_on_another(engine_python, tiny_models, monkeypatch):
    """CI saw SGLang's HTTP port held, between choosing and binding it, by a socket that never
    answers: uvicorn logged "address already in use", the post-warmup /freeze_gc timed out, and the
    server exited with code 3. The harness now relaunches on a fresh port."""
    import socket

    import eagle3scope.demo.server as server_module

    target, _ = tiny_models
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()  # accepts connections, never answers: what CI's port holder did
    taken = squatter.getsockname()[1]
    chosen = iter([taken])
    monkeypatch.setattr(server_module, "free_port", lambda: next(chosen, None) or free_port())
    server = SGLangServer(target, python=engine_python)
    try:
        with server:
            assert server.port != taken
            assert server.generate("hello", max_new_tokens=2)[0]["text"] is not None
        log = server.log_path.read_text(errors="replace").lower()
        assert "address already in use" in log  # the first launch really lost its port
    finally:
        squatter.close()
