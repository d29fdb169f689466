"""The demo models' cache: keyed by the recipe (not whole files), built once under a lock."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import multiprocessing
import sys
import time

import pytest

from eagle3scope.demo import cache, deepseek, deepseek_mla, models

RECIPE = '''"""A model module."""
import sys

STEPS = 100


def _train(x):
    """Train."""
    # a comment
    return x * STEPS


def cached():
    return "where"
'''


def _key(tmp_path, source: str, name: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        return cache.recipe_key(module, apart=frozenset({"cached"}))
    finally:
        del sys.modules[name]


def test_docstrings_comments_and_cache_locators_are_not_part_of_the_recipe(tmp_path):
    base = _key(tmp_path, RECIPE, "recipe_base")
    assert _key(tmp_path, RECIPE.replace('"""Train."""', '"""Train it longer, a reworded docstring."""'),
                "recipe_doc") == base
    assert _key(tmp_path, RECIPE.replace("# a comment", "# another comment"), "recipe_comment") == base
    assert _key(tmp_path, RECIPE.replace('return "where"', 'return "elsewhere"'), "recipe_locator") == base
    assert _key(tmp_path, RECIPE.replace('"""A model module."""', '"""Reworded."""'), "recipe_moddoc") == base


def test_code_and_parameters_that_decide_the_weights_are(tmp_path):
    base = _key(tmp_path, RECIPE, "recipe_base2")
    assert _key(tmp_path, RECIPE.replace("STEPS = 100", "STEPS = 101"), "recipe_const") != base
    assert _key(tmp_path, RECIPE.replace("x * STEPS", "x + STEPS"), "recipe_code") != base
    assert _key(tmp_path, RECIPE + "\n\ndef _more():\n    return 1\n", "recipe_new") != base


def test_used_functions_and_parent_keys_enter_the_key():
    plain = cache.recipe_key(models, apart=models.CACHE_LOCATORS)
    assert models.version() != plain  # the tiny.py writers and the language are part of it
    assert cache.recipe_key(deepseek, apart=deepseek.CACHE_LOCATORS, parents=("a",)) != \
        cache.recipe_key(deepseek, apart=deepseek.CACHE_LOCATORS, parents=("b",))
    assert len({models.version(), deepseek.version(), deepseek_mla.version()}) == 3


@pytest.mark.parametrize("module", models.RECIPE_MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_a_change_to_any_module_of_the_recipe_changes_the_key(module, monkeypatch):
    """The recipe spans several modules: editing any of them must rebuild, not reuse stale weights."""
    before = models.version()
    source = inspect.getsource

    def edited(obj):
        return source(obj) + "\nEDITED = 1\n" if obj is module else source(obj)

    monkeypatch.setattr(cache.inspect, "getsource", edited)
    assert models.version() != before


#: Demo modules the build imports that only find, lock or run it (or, for ``tiny``, lend the
#: functions the key names one by one): not part of the recipe.
NOT_RECIPE = {"eagle3scope.demo.cache", "eagle3scope.demo.server", "eagle3scope.demo.tiny"}


def _demo_imports(module) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if isinstance(node, ast.ImportFrom) and node.module == "eagle3scope.demo":
            names |= {f"eagle3scope.demo.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("eagle3scope.demo."):
            names.add(node.module)
    return names


def test_every_demo_module_the_build_imports_is_in_the_key():
    """A new module split out of the recipe and left out of ``RECIPE_MODULES`` would leave its
    code out of the key; every module reached from the build's imports is in it."""
    seen, todo = set(), [models]
    while todo:
        for name in _demo_imports(todo.pop()) - seen - NOT_RECIPE:
            seen.add(name)
            todo.append(importlib.import_module(name))
    assert seen - {"eagle3scope.demo.models"} == {m.__name__ for m in models.RECIPE_MODULES}


def test_every_locator_named_apart_exists():
    """A renamed locator left in the set would silently leave its new name in the recipe."""
    for module in (models, deepseek, deepseek_mla):
        assert module.CACHE_LOCATORS <= set(vars(module)), module.__name__


def _builder(root, log):
    def build(tmp):
        tmp.mkdir()
        with open(log, "a") as f:
            f.write("built\n")
        time.sleep(0.3)
        (tmp / "weights").write_text("w")
        return {"build_s": 0.3}

    cache.build_once(root, build, "key1")


def test_two_builders_build_once_and_readers_see_a_whole_build(tmp_path):
    root, log = tmp_path / "models" / "key1", tmp_path / "log"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_builder, args=(root, log)) for _ in range(2)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(30)
    assert [proc.exitcode for proc in procs] == [0, 0]
    assert log.read_text() == "built\n"
    assert cache.stamped(root) and (root / "weights").read_text() == "w"
    assert cache.stats(root) == {"build_s": 0.3}
    assert not list(root.parent.glob("*.tmp*"))


def test_a_failed_build_leaves_no_stamp(tmp_path):
    root = tmp_path / "models" / "k"

    def broken(tmp):
        tmp.mkdir()
        raise RuntimeError("training diverged")

    try:
        cache.build_once(root, broken, "k")
    except RuntimeError:
        pass
    assert not cache.stamped(root) and not root.exists()
