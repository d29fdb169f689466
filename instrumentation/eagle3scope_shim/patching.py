"""Applying the chosen seams: through SGLang's ``HookRegistry`` (releases with general plugins) or
through the shim's own reversible :class:`Patcher` (``install()``, and the import hook older releases
need). :class:`~eagle3scope_shim.instrumentor.Instrumentor` decides which, and when.

Both paths wrap the same AROUND hooks from :mod:`eagle3scope_shim.hooks`. Which seams exist is
decided by :func:`seams.choose` over the installed source (no import); a seam whose target is
absent is reported ``missing``. The own patcher patches a module when it is imported (or at once
if it already is), so activation never imports SGLang early; it keeps the raw attribute it
replaced, so unwrapping puts back exactly what was there (a ``staticmethod`` stays one), and only
where its own wrapper is still in place: one that something else wrapped or replaced since is left
as it is (OpenTelemetry's unwrap does the same), said in one log line.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import logging
import pkgutil
import sys

from eagle3scope_shim import hooks, seams

log = logging.getLogger("eagle3scope")


def plan(shim) -> list[tuple[str, str, object]]:
    """(seam name, dotted target, hook) for every present seam, each hook made for ``shim``; absent
    ones are reported."""
    root = seams.installed_root()
    if root is None:
        return []
    out = []
    for adapter, resolved in seams.choose(seams.source_lookup(root)):
        for seam, target in resolved:
            if not seam.wanted():
                continue
            if target is None:
                alternatives = [seams.dotted(t) for t in seam.targets]
                shim.report(seam.name, "missing", f"adapter {adapter.name}: none of {alternatives} in this release")
                continue
            shim.seams.targets[seam.name] = seams.dotted(target)
            out.append((seam.name, target, hooks.FACTORIES[seam.hook](shim, seam.name)))
    return out


def has_hook_registry() -> bool:
    root = seams.installed_root()
    return root is not None and seams.module_file(root, "sglang.srt.plugins.hook_registry") is not None


def register_with_hook_registry(shim) -> None:
    """Hand every present seam to SGLang's HookRegistry (it patches when plugins are applied)."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType  # the plugin runs inside SGLang

    for name, target, hook in plan(shim):
        HookRegistry.register(seams.dotted(target), hook, HookType.AROUND)
        shim.seams.attached(name, functools.partial(_unwrap_registered, seams.dotted(target), hook))
    shim.seams.registered = True


def _unwrap_registered(dotted: str, hook) -> bool:
    """Put back what SGLang's AROUND wrapper of ``hook`` wraps (it keeps it as ``__wrapped__``), if that
    wrapper is still the attribute at ``dotted`` (a method: a module function's copies that SGLang
    propagated to importers stay wrapped)."""
    owner_path, _, attr = dotted.rpartition(".")
    owner = pkgutil.resolve_name(owner_path)
    raw = vars(owner).get(attr)
    func = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
    try:
        ours = any(cell.cell_contents is hook for cell in getattr(func, "__closure__", None) or ())
    except ValueError:  # an empty cell: not SGLang's wrapper
        ours = False
    if not ours or not hasattr(func, "__wrapped__"):
        return False
    setattr(owner, attr, func.__wrapped__ if func is raw else type(raw)(func.__wrapped__))
    return True


class Patcher:
    """The shim's own reversible patcher: every present seam wrapped now or when its module is imported."""

    def __init__(self, shim) -> None:
        self.shim = shim
        self._own: dict[str, tuple] = {}  # dotted target -> (owner, attr, raw original, wrapper) for unwrapping
        self._pending: dict[str, list] = {}  # module not yet imported -> [(seam, dotted, hook)]
        self._finder = _PostImportFinder(self)

    @property
    def active(self) -> bool:
        return bool(self._own or self._pending)

    def patch_all(self, planned: list[tuple[str, tuple[str, str], object]] | None = None) -> None:
        """Wrap ``planned`` (seam, (module, qualname), hook) triples, SGLang's :func:`plan` by default."""
        for name, target, hook in plan(self.shim) if planned is None else planned:
            self._pending.setdefault(target[0], []).append((name, target, hook))
        for module in [m for m in self._pending if m in sys.modules]:
            self.patch_module(module)
        if self._pending and self._finder not in sys.meta_path:
            sys.meta_path.insert(0, self._finder)

    def unpatch_all(self) -> None:
        for target in list(self._own):
            self._unpatch(target)
        self._pending.clear()
        if self._finder in sys.meta_path:
            sys.meta_path.remove(self._finder)
        self.shim.seams.all_disabled()

    def _unpatch(self, target: str) -> bool:
        """Put back what was at ``target`` before the shim wrapped it, if the shim's wrapper is still there."""
        entry = self._own.pop(target, None)
        if entry is None:
            return False
        owner, attr, raw, wrapper = entry
        if owner.__dict__.get(attr) is not wrapper:
            log.warning("eagle3scope: %s was replaced after the shim wrapped it; left as it is", target)
            return False
        setattr(owner, attr, raw)
        return True

    def watches(self, module_name: str) -> bool:
        return module_name in self._pending

    def patch_module(self, module_name: str) -> None:
        module = sys.modules[module_name]
        for name, (_, qual), hook in self._pending.pop(module_name, []):
            try:
                owner = module
                *path, attr = qual.split(".")
                for part in path:
                    owner = getattr(owner, part)
                raw = owner.__dict__[attr]
                original = getattr(owner, attr)
                wrapper = _wrap(original, hook)
                setattr(owner, attr, wrapper)
                self._own[f"{module_name}.{qual}"] = (owner, attr, raw, wrapper)
                self.shim.seams.attached(name, functools.partial(self._unpatch, f"{module_name}.{qual}"))
            except Exception as exc:
                self.shim.fail(name, exc)


def _wrap(original, hook):
    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        return hook(original, *args, **kwargs)

    return wrapper


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Lets the normal finders load a watched module, then patches it right after it executes."""

    def __init__(self, patcher: Patcher) -> None:
        self.patcher = patcher

    def find_spec(self, fullname, path, target=None):
        if not self.patcher.watches(fullname):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        exec_module = spec.loader.exec_module
        patcher = self.patcher

        def exec_and_patch(module):
            exec_module(module)
            try:
                patcher.patch_module(fullname)
            except Exception as exc:  # never break the host's import
                log.warning("eagle3scope: patching %s failed: %s", fullname, exc)

        spec.loader.exec_module = exec_and_patch
        return spec
