"""Applying the chosen seams: through SGLang's ``HookRegistry`` (releases with general plugins) or
through the shim's own reversible patcher (``install()``, and the import hook older releases need).

Both paths wrap the same AROUND hooks from :mod:`eagle3scope_shim.hooks`. Which seams exist is
decided by :func:`seams.choose` over the installed source (no import); a seam whose target is
absent is reported ``missing``. The own patcher patches a module when it is imported (or at once
if it already is), so activation never imports SGLang early.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import logging
import sys

from eagle3scope.wire.releases import release
from eagle3scope_shim import hooks, registry, seams
from eagle3scope_shim.state import STATE

log = logging.getLogger("eagle3scope")

_OWN: dict[str, tuple] = {}  # dotted target -> (owner, attr, raw original) for uninstall
_PENDING: dict[str, list] = {}  # module not yet imported -> [(seam, dotted, hook)]


def version_ok() -> bool:
    """The version guard: refuse, with a clear log line, a SGLang the shim was not built for."""
    ver = seams.sglang_version()
    parsed = release(ver)
    if parsed is None or parsed[:2] not in seams.SUPPORTED_MAJORS:
        log.warning(
            "eagle3scope: SGLang %s is not a release line this shim knows (supported: %s); not patching",
            ver,
            ", ".join(f"{a}.{b}.x" for a, b in sorted(seams.SUPPORTED_MAJORS)),
        )
        return False
    return True


def plan() -> list[tuple[str, str, object]]:
    """(seam name, dotted target, hook) for every present seam; absent ones are reported."""
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
                STATE.report(seam.name, "missing", f"adapter {adapter.name}: none of {alternatives} in this release")
                continue
            registry.targets[seam.name] = seams.dotted(target)
            out.append((seam.name, target, hooks.FACTORIES[seam.hook](seam.name)))
    return out


def has_hook_registry() -> bool:
    root = seams.installed_root()
    return root is not None and seams.module_file(root, "sglang.srt.plugins.hook_registry") is not None


def own_active() -> bool:
    return bool(_OWN or _PENDING)


def register_with_hook_registry() -> None:
    """Hand every present seam to SGLang's HookRegistry (it patches when plugins are applied)."""
    if registry.registered() or own_active():
        return
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType  # the plugin runs inside SGLang

    for name, target, hook in plan():
        HookRegistry.register(seams.dotted(target), hook, HookType.AROUND)
        STATE.seam_status[name] = "attached"
    registry.mark_registered()


# -- the own patcher -----------------------------------------------------------------------------
def patch_all() -> None:
    """Patch every present seam now or when its module is imported. Idempotent."""
    if registry.registered() or own_active():
        return
    for name, target, hook in plan():
        _PENDING.setdefault(target[0], []).append((name, target, hook))
    for module in [m for m in _PENDING if m in sys.modules]:
        _patch_module(module)
    if _PENDING and _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def unpatch_all() -> None:
    for owner, attr, raw in _OWN.values():
        setattr(owner, attr, raw)
    _OWN.clear()
    _PENDING.clear()
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
    for name in list(STATE.seam_status):
        STATE.seam_status[name] = "disabled"


def _patch_module(module_name: str) -> None:
    module = sys.modules[module_name]
    for name, (_, qual), hook in _PENDING.pop(module_name, []):
        try:
            owner = module
            *path, attr = qual.split(".")
            for part in path:
                owner = getattr(owner, part)
            raw = owner.__dict__[attr]
            original = getattr(owner, attr)
            setattr(owner, attr, _wrap(original, hook))
            _OWN[f"{module_name}.{qual}"] = (owner, attr, raw)
            STATE.seam_status[name] = "attached"
        except Exception as exc:
            STATE.fail(name, exc)


def _wrap(original, hook):
    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        return hook(original, *args, **kwargs)

    return wrapper


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Lets the normal finders load a watched module, then patches it right after it executes."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in _PENDING:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            try:
                _patch_module(fullname)
            except Exception as exc:  # never break the host's import
                log.warning("eagle3scope: patching %s failed: %s", fullname, exc)

        spec.loader.exec_module = exec_and_patch
        return spec


_FINDER = _PostImportFinder()
