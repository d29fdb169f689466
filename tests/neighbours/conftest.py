"""Fixtures of the tests where another local user shares the host: that user, and a directory both reach."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from support.engine import engine_missing
from benchmarks.support.neighbour_support import ensure_neighbour


@pytest.fixture(scope="session")
def neighbour() -> tuple[int, int]:
    """(uid, gid) of another local user, created with useradd when missing."""
    try:
        return ensure_neighbour()
    except RuntimeError as exc:
        engine_missing(str(exc))


@pytest.fixture
def shared_tmp():
    """A world-writable sticky directory, like /tmp, that both users can reach."""
    path = Path(tempfile.mkdtemp(prefix="e3s-shared-", dir="/tmp"))
    os.chmod(path, 0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)
