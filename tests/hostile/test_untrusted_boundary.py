"""Every output a command writes goes through :mod:`eagle3scope.wire.untrusted` (the static half of
the untrusted-text promise; the dynamic half runs every command over hostile recordings)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "eagle3scope"
#: functions whose result is safe to write to a terminal
SAFE_CALLS = {"terminal", "lines", "markup", "json_line"}
#: calls that write to the terminal (first argument checked) or raise a message click prints
SINKS = {"echo", "write", "print", "secho", "ClickException", "UsageError", "BadParameter", "Abort", "fail"}


def _safe(node: ast.AST, scope: ast.AST | None = None, safe_funcs: frozenset = frozenset()) -> bool:
    """A string the boundary made (or a constant): calls to its functions, or to functions of the
    module whose every return is such a string, and local names only ever assigned such strings."""
    safe = lambda n: _safe(n, scope, safe_funcs)  # noqa: E731
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (str, bytes, type(None)))
    if isinstance(node, ast.JoinedStr):  # an f-string of constants and safe calls only
        return all(isinstance(v, ast.Constant) or (isinstance(v, ast.FormattedValue) and safe(v.value))
                   for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
        return safe(node.left) and safe(node.right)
    if isinstance(node, ast.IfExp):
        return safe(node.body) and safe(node.orelse)
    if isinstance(node, ast.BoolOp):
        return all(safe(v) for v in node.values)
    if isinstance(node, (ast.GeneratorExp, ast.ListComp)):
        return safe(node.elt)
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name == "join" and isinstance(func.value, ast.Constant) and node.args:  # "sep".join(safe strings)
            return _safe(func.value) and safe(node.args[0])
        return name in SAFE_CALLS or (isinstance(func, ast.Name) and name in safe_funcs)
    if isinstance(node, ast.Name) and scope is not None:
        values = [a.value for a in ast.walk(scope) if isinstance(a, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == node.id for t in a.targets)]
        return bool(values) and all(safe(v) for v in values)
    return False


def _safe_functions(tree: ast.Module) -> frozenset:
    """The module's functions whose every ``return`` gives a safe string (to a fixed point)."""
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    known: frozenset = frozenset()
    while True:
        found = frozenset(name for name, f in funcs.items()
                          if (returns := [r.value for r in ast.walk(f) if isinstance(r, ast.Return)])
                          and all(r is not None and _safe(r, f, known) for r in returns))
        if found == known:
            return known
        known = found


def _sites(path: Path):
    tree = ast.parse(path.read_text(), str(path))
    safe_funcs = _safe_functions(tree)
    scopes = {id(n): f for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.Lambda)) for n in ast.walk(f)}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name not in SINKS or not node.args:
            continue
        if name == "write" and isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
                and func.value.id in ("writer", "fh", "f"):
            continue  # files in a format of their own (csv, jsonl): their own boundary, tested apart
        if not _safe(node.args[0], scopes.get(id(node)), safe_funcs):
            yield f"{path.relative_to(ROOT.parent)}:{node.lineno}: {ast.unparse(node)[:100]}"


#: modules that print what a stream, a recording or a server sent
COMMANDS = sorted((ROOT / "commands").glob("*.py"))


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: p.name)
def test_every_terminal_write_in_commands_goes_through_the_boundary(path: Path) -> None:
    bad = list(_sites(path))
    assert not bad, "terminal output not passed through eagle3scope.wire.untrusted:\n" + "\n".join(bad)
