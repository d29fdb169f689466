"""The shim keeps no state in its modules: what it learns lives on the ``Shim`` its instrumentor builds
and hands to every hook factory, so a test builds a fresh one and nothing leaks from one to the next.

Read from the source (AST), for every module of ``eagle3scope_shim`` and its subpackages: no ``global`` statement, no
module-level instance of a shim class but the one process-wide instrumentor, and a module-level
container (a dict, list, set, deque, ... display or call) only as an UPPER_CASE constant that no shim
code writes to, in place or by handing it to a call that could (only read-only builtins may take it).
"""

from __future__ import annotations

import ast
from pathlib import Path

SHIM = Path(__file__).resolve().parents[2] / "instrumentation" / "eagle3scope_shim"

#: the one process-wide handle: SGLang loads the plugin by name, so it must find the shim's instrumentor
ALLOWED_INSTANCES = {("instrumentor.py", "INSTRUMENTOR")}
#: ``global`` statements that bind no state: guard's ``_compiling`` replaces itself with torch's
#: ``is_compiling`` at its first call (torch imported late, never at interpreter start), the same for any shim
ALLOWED_GLOBALS = {("guard.py", "_compiling")}
CONTAINER_CALLS = {"dict", "list", "set", "deque", "defaultdict", "OrderedDict", "Counter", "bytearray"}
MUTATING = {"append", "appendleft", "extend", "extendleft", "insert", "add", "update", "setdefault", "pop",
            "popleft", "popitem", "clear", "remove", "discard", "sort", "reverse", "__setitem__", "__delitem__"}
READ_ONLY_CALLS = {"len", "sorted", "list", "tuple", "dict", "set", "frozenset", "iter", "enumerate", "zip", "any",
                   "all", "next", "min", "max", "sum", "isinstance", "repr", "str", "reversed"}


def _modules() -> dict[str, ast.Module]:
    """Every module of the shim, its subpackages (the vLLM shim) included, by path under the package."""
    return {path.relative_to(SHIM).as_posix(): ast.parse(path.read_text(), str(path))
            for path in sorted(SHIM.rglob("*.py"))}


def _name(node) -> str | None:
    """The name a node refers to: ``X`` or ``module.X``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _shim_classes(modules) -> set[str]:
    return {node.name for tree in modules.values() for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}


def _module_globals(modules):
    """(module, name, kind) of each module-level assignment of a container or of a shim class instance."""
    classes = _shim_classes(modules)
    for module, tree in modules.items():
        for node in tree.body:
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
                kind = "container"
            elif isinstance(value, ast.Call) and _name(value.func) in CONTAINER_CALLS:
                kind = "container"
            elif isinstance(value, ast.Call) and _name(value.func) in classes:
                kind = "instance"
            else:
                continue
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        yield module, name.id, kind


def _writes(modules, name: str) -> list[str]:
    """Where shim code writes to, or hands away, the global ``name`` (by name, in every module)."""
    found = []
    for module, tree in modules.items():
        for node in ast.walk(tree):
            where = f"{module}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
                if any(isinstance(t, ast.Subscript) and _name(t.value) == name for t in targets):
                    found.append(f"{where} writes {name}[...]")
            elif isinstance(node, ast.Call):
                func = node.func
                if isinstance(func, ast.Attribute) and func.attr in MUTATING and _name(func.value) == name:
                    found.append(f"{where} calls {name}.{func.attr}")
                elif _name(func) not in READ_ONLY_CALLS and any(_name(a) == name for a in node.args):
                    found.append(f"{where} hands {name} to {_name(func)}()")
    return found


def shim_module_state(modules) -> list[str]:
    """Every breach of the module docstring's rules, one line each."""
    problems = []
    for module, tree in modules.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Global) and {(module, n) for n in node.names} - ALLOWED_GLOBALS:
                problems.append(f"{module}:{node.lineno} rebinds module state: global {', '.join(node.names)}")
    for module, name, kind in _module_globals(modules):
        if kind == "instance":
            if (module, name) not in ALLOWED_INSTANCES:
                problems.append(f"{module}: {name} is a module-level instance of a shim class")
        elif not name.lstrip("_").isupper():
            problems.append(f"{module}: {name} is a module-level container that is not a constant")
        else:
            problems += [f"{module}: constant {name} is mutable state: {w}" for w in _writes(modules, name)]
    return problems


def test_no_shim_module_holds_mutable_state():
    modules = _modules()
    assert "vllm/engine.py" in modules and "vllm/worker.py" in modules  # the subpackages are read too
    assert shim_module_state(modules) == []


def test_the_check_finds_each_kind_of_module_state():
    """The rules catch what the shim held before its state moved onto the Shim: a singleton, a registry
    dict rebound through ``global``, and a constant-looking memo mutated through a helper."""
    planted = ast.parse(
        "class ShimState:\n    pass\n"
        "STATE = ShimState()\n"
        "targets: dict = {}\n"
        "_registered = False\n"
        "def mark():\n    global _registered\n    _registered = True\n"
        "_MODES: dict = {}\n"
        "def step(mode):\n    return _asked_once(_MODES, mode)\n"
        "COUNTS = {'a': 1}\n"
        "def read():\n    return COUNTS['a'], len(COUNTS), sorted(COUNTS)\n")
    problems = shim_module_state({"planted.py": planted})
    assert any("STATE is a module-level instance" in p for p in problems)
    assert any("targets is a module-level container" in p for p in problems)
    assert any("global _registered" in p for p in problems)
    assert any("_MODES is mutable state" in p and "_asked_once" in p for p in problems)
    assert not any("COUNTS" in p for p in problems)  # a constant only read stays allowed


def test_two_shims_share_nothing():
    """What one shim's hooks learn stays on it: a seam failed in one shim still runs in another, and each
    keeps its own seam statuses and pending events (a ``disabled`` set shared by all seam tables fails here)."""
    from eagle3scope_shim.guard import around
    from eagle3scope_shim.shim_state import Shim

    first, second = Shim(), Shim()
    ran = []

    def broken(x):
        raise ValueError("boom")

    assert around(first, "s.seam", broken, None)(lambda x: x + 1, 1) == 2
    assert around(second, "s.seam", lambda x: ran.append(x), None)(lambda x: x + 1, 2) == 3
    assert first.seams.disabled == {"s.seam"} and second.seams.disabled == set() and ran == [2]
    assert first.seams.status == {"s.seam": "failed"} and second.seams.status == {}
    assert [b["seam"] for b in first.pending] == ["s.seam"] and second.pending == []
