"""The one CLI runner: ``invoke`` runs a command in this process (click's runner), ``run`` and
``spawn`` as ``python -m eagle3scope`` in a child (for what needs its own process: signals,
exit codes of the interpreter, stderr as a terminal sees it). Arguments may be paths or numbers."""

from __future__ import annotations

import json
import subprocess
import sys

from click.testing import CliRunner, Result

#: the command line of the CLI in a child process
CLI = [sys.executable, "-m", "eagle3scope"]


def invoke(*args: object, **kw) -> Result:
    """``eagle3scope ARGS`` in this process; ``kw`` goes to click's ``CliRunner.invoke``."""
    from eagle3scope.cli import main

    return CliRunner().invoke(main, [str(a) for a in args], **kw)


def run(*args: object, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    """``eagle3scope ARGS`` in a child, to its end; output captured as text."""
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=timeout, **kw)


def spawn(*args: object, **kw) -> subprocess.Popen:
    """``eagle3scope ARGS`` started in a child; ``kw`` goes to ``subprocess.Popen``."""
    return subprocess.Popen([*CLI, *map(str, args)], **kw)


def check_json(*args: object, timeout: float = 300) -> tuple[int, dict]:
    """``eagle3scope check ARGS --json`` in a child: its exit code and the report it printed."""
    done = run("check", *args, "--json", timeout=timeout)
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def fired(report: dict, severity: str = "error") -> set[str]:
    """The ids of the rules of one severity that fired in a ``check --json`` report."""
    return {v["id"] for v in report["violations"] if v["severity"] == severity}
