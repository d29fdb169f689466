"""The sync guard's coverage (eagle3scope_shim.syncguard): every operation class that makes a GPU
host wait is refused inside a hook body, on CPU tensors, and what the shim's hot bodies do is not.

The table runs in the engine venv (torch), without a server: tests/engine_side/sync_guard_cases.py.
"""

from __future__ import annotations

import json
import os

import pytest
from support.engine import run_engine_python

from eagle3scope.demo.server import checkout_pythonpath

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def table(engine_python):
    done = run_engine_python(engine_python, "tests/engine_side/sync_guard_cases.py", timeout=300,
                             env=checkout_pythonpath(os.environ))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_synchronising_operation_class_is_refused(table):
    assert {name: got for name, got in table["sync"].items() if got is not True} == {}
    assert len(table["sync"]) >= 33


def test_what_the_hot_bodies_do_is_not_refused(table):
    """Shape reads, clones, on-device dtype changes, non-blocking copies and the shim's own ring snap."""
    assert {name: got for name, got in table["fine"].items() if got is not False} == {}


def test_torch_cuda_synchronize_is_refused_only_inside_a_body_and_only_on_its_thread(table):
    """Even after something replaced it (the CPU engine swaps in a no-op at start-up)."""
    assert table["replaced synchronize"] is True
    assert table["another thread's synchronize"] is False and table["after the body"] is False
