"""Import contracts that hold by construction: the pyproject's import-linter contracts (the shim
imports only ``eagle3scope.wire``, ``wire`` nothing else of the project, the viewer's layers, no
cycles), and a shim whose modules each import alone, with their own imports at module top."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHIM = ROOT / "instrumentation" / "eagle3scope_shim"
SHIM_MODULES = sorted(p.stem for p in SHIM.glob("*.py") if p.stem != "__init__")
#: What a hook body may import late: the host's own packages, loaded by SGLang long before a hook
#: runs, but never by the shim at import (the .pth bootstrap imports it at interpreter start);
#: prometheus_client must not be imported before SGLang sets PROMETHEUS_MULTIPROC_DIR (it reads it at import).
LATE_IMPORTS = ("torch", "sglang", "prometheus_client")


def test_import_contracts_hold():
    # In its own process: import-linter configures logging with disable_existing_loggers, which
    # silenced the "eagle3scope" logger for every later test in this one.
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    done = subprocess.run([sys.executable, "-c", code, "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report
    assert report.count(" KEPT") == 5, report


def test_shim_forbids_every_viewer_package():
    """The forbidden list names every package beside wire, so a new one cannot slip past it."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    shim = next(c for c in config["contracts"] if c["source_modules"] == ["eagle3scope_shim"])
    packages = {f"eagle3scope.{p.stem if p.suffix else p.name}" for p in (ROOT / "eagle3scope").iterdir()
                if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and p.stem not in ("__init__", "__main__"))}
    assert set(shim["forbidden_modules"]) == packages - {"eagle3scope.wire"}


@pytest.mark.parametrize("module", ["eagle3scope_shim", *(f"eagle3scope_shim.{m}" for m in SHIM_MODULES)])
def test_each_shim_module_imports_alone(module, request):
    """A fresh interpreter imports the module on its own (no cycle needs another one loaded first)
    and loads neither torch nor SGLang doing so."""
    python = sys.executable
    if module.endswith(".syncguard") and importlib.util.find_spec("torch") is None:
        python = str(request.getfixturevalue("engine_python"))  # the guard is a TorchFunctionMode: torch's venv
    code = f"import {module}, sys; print(sorted(m for m in {LATE_IMPORTS!r} if m in sys.modules))"
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'instrumentation'}"})
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = done.stdout.strip()
    assert loaded == ("['torch']" if module.endswith(".syncguard") else "[]"), loaded


@pytest.mark.parametrize("module", SHIM_MODULES + ["__init__"])
def test_shim_imports_its_own_modules_at_module_top(module):
    """Inside functions only the host's packages are imported (late, see LATE_IMPORTS)."""
    tree = ast.parse((SHIM / f"{module}.py").read_text())
    late = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    late += [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    late.append(node.module or "")
    assert [m for m in late if m.split(".")[0] not in LATE_IMPORTS] == []


def test_no_shim_module_imports_the_package_itself():
    """Shim modules import their siblings, never a name of the package's ``__init__`` (which imports the
    instrumentor, and through it every hook): the package and its modules form no circle at any level."""
    for module in SHIM_MODULES:
        for node in ast.walk(ast.parse((SHIM / f"{module}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "eagle3scope_shim":
                assert {a.name for a in node.names} <= set(SHIM_MODULES), (module, [a.name for a in node.names])
            elif isinstance(node, ast.Import):
                assert "eagle3scope_shim" not in {a.name for a in node.names}, module


def _layout_rows() -> list[list[str]]:
    """README's Layout table: the paths of each row, in order."""
    text = (ROOT / "README.md").read_text()
    table = text.split("## Layout", 1)[1].split("\n\n", 2)[1]
    return [re.findall(r"`([^`]+)`", line.split("|")[1]) for line in table.splitlines()[2:]]


def test_readme_layout_names_every_package_in_layer_order():
    """Every package and top-level module of eagle3scope has a row, every path in the table exists,
    and the rows run in the order of pyproject's viewer layers (what the sentence under it says)."""
    import tomllib

    def module_of(path: str) -> str | None:
        """The eagle3scope package or module a table path names (None: outside eagle3scope)."""
        inner = path.removeprefix("eagle3scope/")
        if inner == path and not (ROOT / "eagle3scope" / path).exists():
            return None
        return inner.split("/")[0].removesuffix(".py")

    rows = _layout_rows()
    paths = [p for row in rows for p in row]
    assert all((ROOT / p).exists() or (ROOT / "eagle3scope" / p).exists() for p in paths), paths
    top = ROOT / "eagle3scope"
    packages = {p.name for p in top.iterdir() if (p / "__init__.py").exists()} | \
        {p.stem for p in top.glob("*.py") if p.stem not in ("__init__", "__main__")}
    assert {module_of(p) for p in paths} - {None} == packages
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c["layers"] for c in config["contracts"] if c["type"] == "layers" and "eagle3scope.cli" in c["layers"])
    layer_of = {name.strip().split(".")[1]: i for i, layer in enumerate(layers) for name in layer.split("|")}
    assert set(layer_of) == packages  # every package has its place in the contract
    order = [layer_of[m] for row in rows for m in map(module_of, row) if m]
    assert order == sorted(order), order
    assert not config["exclude_type_checking_imports"]  # "not even for type annotations"


def test_connect_is_declared_once():
    """Every command that subscribes takes the same --connect/-c (one declaration, one help text)."""
    import click

    from eagle3scope.cli import main
    from eagle3scope.commands import CONNECT_HELP, connect_option

    def commands(group, ctx):
        for name in group.list_commands(ctx):
            cmd = group.get_command(ctx, name)
            yield cmd
            if isinstance(cmd, click.Group):
                yield from commands(cmd, ctx)

    ctx = click.Context(main)
    reference = connect_option()(click.command()(lambda endpoints: None)).params[0]
    found = [(cmd.name, p) for cmd in commands(main, ctx) for p in cmd.params if "--connect" in p.opts]
    assert {name for name, _ in found} >= {"watch", "record", "gate", "exporter", "cycle", "advise"}
    for name, param in found:
        assert (param.opts, param.secondary_opts, param.name, param.multiple) == \
            (reference.opts, reference.secondary_opts, reference.name, reference.multiple), name
        assert param.help.startswith(CONNECT_HELP + " "), name


def test_readme_walk_names_what_exists():
    """"One step, from the SGLang seam to the pixel" names files and functions of this checkout:
    every ``x.py`` is a file of eagle3scope or the shim, every ``module.name`` a project module
    (the walk's own) that has that attribute, so a rename or a move cannot leave the walk behind."""
    import importlib

    text = (ROOT / "README.md").read_text()
    walk = text.split("### One step, from the SGLang seam to the pixel", 1)[1].split("\n## ", 1)[0]
    names = set(re.findall(r"`([^`\s]+)`", walk))
    files = [p.relative_to(ROOT).as_posix() for p in (*(ROOT / "eagle3scope").rglob("*.py"), *SHIM.glob("*.py"))]
    modules: dict[str, list[str]] = {}
    for path in files:
        parts = path.removesuffix(".py").removesuffix("/__init__").split("/")
        dotted = ".".join(parts[1:] if parts[0] == "instrumentation" else parts)
        modules.setdefault(parts[-1], []).append(dotted)
    checked = []
    for name in sorted(names):
        if name.endswith(".py"):
            assert any(f == name or f.endswith("/" + name) for f in files), f"README's walk names {name}: no such file"
            checked.append(name)
        elif re.fullmatch(r"[a-z_]+(\.\w+)+", name) and name.split(".")[0] in modules:
            first, *attrs = name.split(".")

            def has(module: str) -> bool:
                obj = importlib.import_module(module)
                for attr in attrs:
                    if not hasattr(obj, attr):
                        return False
                    obj = getattr(obj, attr)
                return True

            assert any(has(m) for m in modules[first]), f"README's walk names {name}: not in {modules[first]}"
            checked.append(name)
    assert len(checked) >= 15, checked  # the walk still names the code it walks through


#: body field names that other dicts share by name (a draft's config.json, the doctor's report, the aux
#: channel's reply and outcomes, rule evidence, the control protocol, export rows, the shim's own maps): a read
#: of those cannot be told apart by the key alone.
SHARED_NAMES = {"engine_version", "hidden_size", "target_hidden_size", "draft_vocab_size", "target_vocab_size", "target_class", "d2t",
                "graphs", "aux", "sglang_version", "endpoint", "unobserved", "seq", "mode", "status", "detail", "reason",
                "layers", "captured", "applied", "origin", "request_id", "steps", "dropped", "width", "fc", "n", "bs",
                "source", "shape", "size", "min", "max", "on", "in", "out", "present", "pid", "host", "worker", "rid",
                "tp_rank", "dp_rank", "pp_rank", "tp_size", "dp_size", "pp_size", "ep_size", "algorithm", "num_steps",
                "topk", "dtype", "model_path", "control", "calls", "slots", "capacity", "requested", "configured",
                "consumed", "skipped", "histogram", "accepted", "bonus", "capture", "started", "ring", "passes",
                "num_draft_tokens", "cuda_graph", "draft_model_path", "attention_backend", "parallel", "engine",
                "use_aux", "capture_on", "offset_rule", "greedy", "requests", "pause_ms"}
#: Where bodies are declared and read into their records (every other module reads record attributes).
BODY_MODULES = {"wire/bodies.py", "wire/schema.py"}


def _key_reads(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and node.args and isinstance(node.args[0], ast.Constant):
            yield node.lineno, node.args[0].value
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.ctx, ast.Load):
            yield node.lineno, node.slice.value


def _records() -> dict[str, tuple[str, ...]]:
    """Every body record and nested record of ``wire/bodies.py``: name -> its wire field names."""
    import msgspec

    from eagle3scope.wire import bodies

    return {name: tuple(getattr(bodies, name).__struct_encode_fields__) for name in dir(bodies)
            if isinstance(getattr(bodies, name), type) and issubclass(getattr(bodies, name), msgspec.Struct)
            and getattr(bodies, name).__module__ == bodies.__name__}


def test_no_module_outside_the_wire_opens_a_frame_body():
    """Consumers read record attributes: no ``body.get(`` / ``body["`` outside ``eagle3scope/wire/``,
    and under no other name a read of a key only a frame body has (``x.get("draft_ids")``)."""
    package = ROOT / "eagle3scope"
    raw = [f"{path.relative_to(ROOT)}:{i}" for path in sorted(package.rglob("*.py")) if "wire" not in path.parts
           for i, line in enumerate(path.read_text().splitlines(), 1) if re.search(r'\bbody(\.get\(|\[")', line)]
    assert raw == []
    body_only = {name for fields in _records().values() for name in fields} - SHARED_NAMES
    assert {"draft_ids", "accepted_ids", "server_args", "siblings", "draft_class", "seams", "lm_head", "weights",
            "shim_us", "verify_ct"} <= body_only
    reads = [f"{path.relative_to(package)}:{line} {key}" for path in sorted(package.rglob("*.py"))
             if path.relative_to(package).as_posix() not in BODY_MODULES
             for line, key in _key_reads(ast.parse(path.read_text())) if key in body_only]
    assert reads == []


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in a file, nested ones included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def test_no_test_module_imports_another():
    """Shared helpers live in tests/support/ or a folder's conftest.py: a test module importing another
    one (its helpers or fixtures) ties the two together and works only through sys.path accidents."""
    tests = ROOT / "tests"
    test_modules = {p.stem for p in tests.rglob("test_*.py")} | {"conftest"}
    imports = [f"{path.relative_to(ROOT)}:{line} imports {module}" for path in sorted(tests.rglob("*.py"))
               for line, module in _imported_modules(path)
               if module.split(".")[-1] in test_modules or module.split(".")[0] in test_modules]
    assert imports == []


def test_benchmarks_do_not_reach_into_tests():
    """Benchmarks import what they share with the tests from benchmarks/support/, never from tests/:
    no import of the tests' packages, no tests/ folder put on sys.path (running the tests is fine)."""
    tests = ROOT / "tests"
    test_packages = {"tests", "support", "conftest"} | {p.stem for p in tests.rglob("test_*.py")}
    reaches = []
    for path in sorted((ROOT / "benchmarks").rglob("*.py")):
        reaches += [f"{path.relative_to(ROOT)}:{line} imports {module}" for line, module in _imported_modules(path)
                    if module.split(".")[0] in test_packages]
        reaches += [f"{path.relative_to(ROOT)}:{node.lineno} puts the tests folder on sys.path"
                    for node in ast.walk(ast.parse(path.read_text(), str(path)))
                    if isinstance(node, (ast.Expr, ast.Assign)) and "sys.path" in ast.unparse(node)
                    and any(isinstance(c, ast.Constant) and str(c.value).startswith("tests") for c in ast.walk(node))]
    assert reaches == []
def _declared_fields(tree: ast.AST):
    """(class name, its annotated field names) of every class, and of every functional TypedDict."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            yield node.lineno, node.name, {s.target.id for s in node.body
                                           if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "TypedDict" and len(node.args) > 1 \
                and isinstance(node.args[1], ast.Dict):
            yield node.lineno, node.args[0].value, {k.value for k in node.args[1].keys if isinstance(k, ast.Constant)}


def test_each_frame_kind_is_declared_once():
    """One declaration per frame kind and nested map, in ``wire/bodies.py``: a class elsewhere (a
    TypedDict, dataclass, Struct or NamedTuple) restating most of its fields, or a viewer class named
    like one, fails (the shim's ``Step`` is the state of a round in flight, not a body)."""
    records = _records()
    sources = [*(ROOT / "eagle3scope").rglob("*.py"), *SHIM.rglob("*.py")]
    found = []
    for path in sorted(sources):
        if path.relative_to(ROOT).as_posix() == "eagle3scope/wire/bodies.py":
            continue
        for line, name, fields in _declared_fields(ast.parse(path.read_text())):
            for record, wire in records.items():
                named = set(wire) | {f.rstrip("_") for f in wire}
                restated = len(fields & named) >= max(3, 0.6 * len(wire))
                if restated or (name == record and path.is_relative_to(ROOT / "eagle3scope")):
                    found.append(f"{path.relative_to(ROOT)}:{line} {name} restates bodies.{record}")
    assert found == []
