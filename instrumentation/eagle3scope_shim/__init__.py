"""eagle3scope's shim inside SGLang: streams per-step EAGLE-3 facts to the viewer.

Activation: SGLang's general plugin (:mod:`eagle3scope_shim.plugin`), the ``.pth`` bootstrap of
older releases (:mod:`eagle3scope_shim.bootstrap`), or :func:`install` for ``sglang.Engine``
users. Nothing is patched unless asked. Never imports the viewer side (Textual).
"""

from __future__ import annotations

import os

from eagle3scope.wire.endpoints import default_endpoint
from eagle3scope_shim import patching
from eagle3scope_shim.state import ENV_ENDPOINT, STATE, requested_endpoint
from eagle3scope_shim.version import __version__  # noqa: F401

_set_env: str | None = None


def install(endpoint: str | None = None) -> bool:
    """Turn the shim on for this process and the SGLang processes it starts. Idempotent.

    Sets ``EAGLE3SCOPE_ENDPOINT`` (inherited by the scheduler processes, where the plugin or the
    ``.pth`` bootstrap activates; without ``endpoint``: this user's private default, which raises
    :class:`~eagle3scope.wire.endpoints.EndpointError` when its directory is not safe) and patches
    this process. Returns False when the version guard refuses the installed SGLang.
    """
    global _set_env
    if endpoint is not None and os.environ.get(ENV_ENDPOINT) != endpoint:
        os.environ[ENV_ENDPOINT] = endpoint
        _set_env = endpoint
    elif requested_endpoint() is None:
        os.environ[ENV_ENDPOINT] = _set_env = default_endpoint()
    if not patching.version_ok():
        return False
    patching.patch_all()
    return True


def uninstall() -> None:
    """Undo :func:`install`: restore patched functions, stop publishing. Idempotent."""
    global _set_env
    patching.unpatch_all()
    if _set_env is not None and os.environ.get(ENV_ENDPOINT) == _set_env:
        del os.environ[ENV_ENDPOINT]
    _set_env = None
    if STATE.publisher is not None:
        STATE.publisher.close()
        STATE.publisher = None
