"""One cached build for every demo model family: keyed by its recipe, built once under a lock.

A build trains for minutes, so its cache key is the recipe (the code and parameters that decide
the weights and the stamp's figures) and not whole files: a docstring, a comment or a function that
only locates the cache can change without a rebuild. The build writes a temporary sibling, stamps
it and renames it into place, so a reader sees a whole build or none, and a second builder waits.
"""

from __future__ import annotations

import ast
import fcntl
import hashlib
import inspect
import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Callable

from eagle3scope.demo.server import cache_dir as cache_root
from eagle3scope.demo.server import checkout_pythonpath, engine_python

Progress = Callable[[str], None]
STAMP = "stamp.json"


def _without_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
    return tree


def _code(source: str) -> str:
    return ast.dump(_without_docstrings(ast.parse(textwrap.dedent(source))))


def recipe_key(module: ModuleType, *, apart: frozenset[str] = frozenset(), uses: tuple = (),
               parents: tuple[str, ...] = ()) -> str:
    """Hash of ``module``'s code without docstrings, comments and the top-level ``apart`` names
    (those that only find or load the cache), of the outside functions or modules it builds
    with (``uses``), and of the keys of the builds it starts from (``parents``)."""
    tree = ast.parse(inspect.getsource(module))
    tree.body = [node for node in tree.body if getattr(node, "name", None) not in apart]
    digest = hashlib.sha256(ast.dump(_without_docstrings(tree)).encode())
    for used in uses:
        digest.update(_code(inspect.getsource(used)).encode())
    for parent in parents:
        digest.update(parent.encode())
    return digest.hexdigest()[:12]


def stamped(root: Path) -> bool:
    """Whether ``root`` holds a finished build."""
    return (root / STAMP).exists()


def stats(root: Path) -> dict:
    """The figures a build recorded in its stamp (times, training accuracy)."""
    return json.loads((root / STAMP).read_text())["stats"]


def build_once(root: Path, build: Callable[[Path], dict], key: str) -> None:
    """``build(tmp)`` into a temporary sibling of ``root``, stamp it with its figures, rename it to
    ``root``; a second builder waits on the lock, then finds the stamp."""
    if stamped(root):
        return
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.with_name(root.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamped(root):
            return
        tmp = root.with_name(root.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        figures = build(tmp)
        (tmp / STAMP).write_text(json.dumps({"version": key, "stats": figures}, indent=1))
        shutil.rmtree(root, ignore_errors=True)
        tmp.rename(root)


def build_in_engine(module: ModuleType, cache_dir=None, progress: Progress | None = None,
                    python: Path | str | None = None):
    """``module.cached(cache)``, else ``python -m module --cache CACHE`` in the engine venv (which
    has torch), then that; the build's progress lines are passed to ``progress`` as they come."""
    found = module.cached(cache_dir)
    if found:
        return found
    cache = Path(cache_dir or cache_root())
    cmd = [str(python or engine_python()), "-m", module.__name__, "--cache", str(cache)]
    env = {**os.environ, **checkout_pythonpath(os.environ)}
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env) as proc:
        lines = []
        for line in proc.stdout:
            lines.append(line.rstrip())
            if progress and not line.startswith("{"):
                progress(line.rstrip())
    found = module.cached(cache)
    if proc.returncode or not found:
        raise RuntimeError(f"building the demo models failed ({proc.returncode}):\n" + "\n".join(lines[-30:]))
    return found
