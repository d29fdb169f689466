"""``eagle3scope launch``: environment for the shim and the control channel, token file lifetime,
exit code and signal forwarding, with a stand-in child command (the real server: test_aux_engine)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

CHILD = r"""
import json, os, stat, sys
path = os.environ.get("EAGLE3SCOPE_CONTROL_TOKEN_FILE")
info = {k: os.environ.get(k) for k in ("EAGLE3SCOPE_ENDPOINT", "EAGLE3SCOPE_CONTROL", "EAGLE3SCOPE_CONTROL_TOKEN_FILE")}
if path:
    info["mode"] = oct(stat.S_IMODE(os.stat(path).st_mode))
    info["dir_mode"] = oct(stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode))
print(json.dumps(info))
sys.exit(3)
"""


def _launch(*args, **kw):
    return subprocess.run([sys.executable, "-m", "eagle3scope.cli", "launch", *args], capture_output=True, text=True,
                          timeout=60, **kw)


def test_launch_with_control_sets_env_and_cleans_the_token():
    out = _launch("--endpoint", "tcp://127.0.0.1:6123", "--control", "--", sys.executable, "-c", CHILD)
    assert out.returncode == 3, out.stderr
    info = json.loads(out.stdout.strip().splitlines()[-1])
    assert info["EAGLE3SCOPE_ENDPOINT"] == "tcp://127.0.0.1:6123"
    assert info["EAGLE3SCOPE_CONTROL"].startswith("tcp://127.0.0.1:")
    assert info["mode"] == "0o600" and info["dir_mode"] == "0o700"
    assert not os.path.exists(info["EAGLE3SCOPE_CONTROL_TOKEN_FILE"])  # removed with its private dir
    assert f"--token-file {info['EAGLE3SCOPE_CONTROL_TOKEN_FILE']}" in out.stderr and "aux list" in out.stderr


def test_launch_without_control_and_refusals(tmp_path):
    out = _launch("--", sys.executable, "-c", CHILD)
    info = json.loads(out.stdout.strip().splitlines()[-1])
    assert out.returncode == 3 and info["EAGLE3SCOPE_CONTROL"] is None and info["EAGLE3SCOPE_ENDPOINT"]
    out = _launch("--control", "tcp://0.0.0.0:7000", "--", sys.executable, "-c", CHILD)
    assert out.returncode == 2 and "loopback" in out.stderr
    kept = tmp_path / "tokens"
    out = _launch("--control", "7001", "--token-dir", str(kept), "--", sys.executable, "-c", CHILD)
    info = json.loads(out.stdout.strip().splitlines()[-1])
    assert info["EAGLE3SCOPE_CONTROL"] == "tcp://127.0.0.1:7001" and info["EAGLE3SCOPE_CONTROL_TOKEN_FILE"].startswith(str(kept))
    assert kept.is_dir() and not os.listdir(kept)  # the token goes, the chosen directory stays


def test_launch_forwards_sigterm_to_the_server_group():
    child = "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(7))\nprint('up', flush=True)\ntime.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-m", "eagle3scope.cli", "launch", "--", sys.executable, "-c", child],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "up"
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 7 and time.monotonic() - t0 < 10
