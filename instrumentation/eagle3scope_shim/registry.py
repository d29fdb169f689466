"""What the shim handed to SGLang's own ``HookRegistry`` (releases with plugins), and the check
that SGLang really patched it. Apart from :mod:`patching` so the scheduler hook can confirm the
registration without importing the patcher that imports the hooks."""

from __future__ import annotations

from eagle3scope_shim.state import STATE

targets: dict[str, str] = {}  # seam name -> dotted target in use
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
