"""scripts/install-torch.sh: where the engine env takes its CPU torch from, and that it says so.

The choice is tried against local stand-ins only (no network): a loopback HTTP server that lists a
torch wheel (a reachable PyTorch CPU index), a closed loopback port and a 404 (unreachable), a
wheel directory and an index URL given by the one variable. One run installs for real, offline,
a minimal ``torch`` wheel from a wheel directory into a throwaway venv. pip's own configuration
is cleared, as on a laptop.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import os
import socket
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "install-torch.sh"
VERSION = "2.13.0"


def run(python, *args, **env):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k not in
             ("EAGLE3SCOPE_TORCH_FROM", "TORCH_CPU_INDEX")}
    clean.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", **env)
    return subprocess.run(["bash", str(SCRIPT), str(python), VERSION, *args], capture_output=True, text=True,
                          env=clean, timeout=300)


@pytest.fixture
def index_server():
    """A loopback 'package index': /ok/torch/ lists a torch wheel, anything else is a 404."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            if self.path.startswith("/ok/torch"):
                body = f'<a href="torch-{VERSION}+cpu-cp311-cp311-linux_x86_64.whl">t</a>'.encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            else:
                self.send_error(404)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_reachable_cpu_index_is_used_and_named(index_server):
    done = run(sys.executable, "--dry-run", TORCH_CPU_INDEX=f"{index_server}/ok")
    assert done.returncode == 0, done.stderr
    assert f"from the PyTorch CPU wheel index {index_server}/ok" in done.stderr
    assert done.stdout.split() == ["pip", "install", "--no-deps", "--index-url", f"{index_server}/ok",
                                   f"torch=={VERSION}"]


@pytest.mark.parametrize("where", ["closed-port", "404"])
def test_unreachable_cpu_index_falls_back_to_the_package_index(index_server, where):
    url = f"http://127.0.0.1:{closed_port()}" if where == "closed-port" else f"{index_server}/missing"
    done = run(sys.executable, "--dry-run", TORCH_CPU_INDEX=url)
    assert done.returncode == 0, done.stderr
    assert f"from the package index (PyTorch CPU wheel index {url} not reachable" in done.stderr
    assert "EAGLE3SCOPE_TORCH_FROM" in done.stderr  # tells the user how to choose
    assert done.stdout.split() == ["pip", "install", "--no-deps", f"torch=={VERSION}"]


def test_the_one_variable_wins_over_a_reachable_cpu_index(index_server, tmp_path):
    done = run(sys.executable, "--dry-run", TORCH_CPU_INDEX=f"{index_server}/ok", EAGLE3SCOPE_TORCH_FROM=str(tmp_path))
    assert f"from the wheel directory {tmp_path}" in done.stderr
    assert done.stdout.split() == ["pip", "install", "--no-deps", "--no-index", "--find-links", str(tmp_path),
                                   f"torch=={VERSION}"]
    done = run(sys.executable, "--dry-run", EAGLE3SCOPE_TORCH_FROM="https://mirror.example/simple")
    assert "from the package index https://mirror.example/simple" in done.stderr
    assert done.stdout.split()[3:5] == ["--index-url", "https://mirror.example/simple"]


def _fake_torch_wheel(directory: Path) -> Path:
    """A minimal, valid ``torch`` wheel (a module with ``__version__``), written by hand."""
    name = f"torch-{VERSION}+cpu"
    files = {
        "torch/__init__.py": f'__version__ = "{VERSION}+cpu"\n',
        f"{name}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: torch\nVersion: {VERSION}+cpu\n",
        f"{name}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{name}.dist-info/RECORD"] = "\n".join(record + [f"{name}.dist-info/RECORD,,"]) + "\n"
    wheel = directory / f"{name}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return wheel


def test_installs_from_a_wheel_directory_into_a_throwaway_venv(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _fake_torch_wheel(wheels)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    done = run(venv / "bin" / "python", EAGLE3SCOPE_TORCH_FROM=str(wheels))
    assert done.returncode == 0, done.stderr
    assert f"torch {VERSION}+cpu installed" in done.stderr
