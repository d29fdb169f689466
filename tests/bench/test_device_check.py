"""The GPU kit (benchmarks/device/device_check.sh, device_check.py) on a machine without CUDA: it must end
cleanly with "no CUDA device: skipped", so a lent device's one run is not the first time it runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SKIPPED = "no CUDA device: skipped"


#: no CUDA device, even on a machine that has one (then the kit would run for real)
NO_CUDA = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}


def test_the_checks_say_skipped_and_exit_0_without_a_cuda_device(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "device" / "device_check.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT, env=NO_CUDA)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == SKIPPED
    assert json.loads((tmp_path / "device_check.json").read_text()) == {"skipped": SKIPPED, "rows": []}


def test_the_prepared_run_ends_cleanly_without_a_cuda_device_or_wheels(tmp_path):
    env = {**NO_CUDA, "OUT": str(tmp_path), "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "device" / "device_check.sh")], capture_output=True, text=True,
                          timeout=180, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr
    assert SKIPPED in done.stdout and (tmp_path / "gpu.txt").exists()
    assert not (tmp_path / "recapture.json").exists()  # nothing past the skip ran


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed (make shellcheck)")
def test_the_prepared_run_is_shellcheck_clean():
    done = subprocess.run(["shellcheck", str(ROOT / "benchmarks" / "device" / "device_check.sh")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout
