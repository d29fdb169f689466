"""What the shim handed to SGLang's own ``HookRegistry`` (releases with plugins), the check
that SGLang really patched it, and how one seam's wrapper is taken out again. Apart from
:mod:`patching` so the hooks can confirm the registration and detach a seam without importing the
patcher that imports the hooks."""

from __future__ import annotations

from typing import Callable

from eagle3scope_shim.state import STATE

targets: dict[str, str] = {}  # seam name -> dotted target in use
#: seam name -> takes its wrapper out of SGLang's code, True when it did (set where it was attached)
detachers: dict[str, Callable[[], bool]] = {}
_registered = False


def registered() -> bool:
    return _registered


def mark_registered() -> None:
    global _registered
    _registered = True


def confirm_registered() -> None:
    """After SGLang applied the hooks, report any target it could not patch as ``failed``."""
    if not _registered:
        return
    from sglang.srt.plugins.hook_registry import HookRegistry  # only ever called inside SGLang

    patched = getattr(HookRegistry, "_patched", None)
    if patched is None:
        return
    for name, target in targets.items():
        if STATE.seam_status.get(name) == "attached" and target not in patched:
            STATE.report(name, "failed", f"SGLang's HookRegistry did not patch {target}")


def detach(seam: str) -> bool:
    """Put back the function ``seam``'s wrapper wraps, where the shim's wrapper is still the one in
    place (one wrapped again since is left alone, as unwrapping does), so its hook is no longer
    called. For a hook whose work another hook has taken over: its calls would only cost. The
    seam's status stays as it was: what it observed is still observed. True when it was taken out."""
    undo = detachers.pop(seam, None)
    return undo is not None and undo()
