"""The shim as one object, in OpenTelemetry's instrumentor shape: :meth:`Instrumentor.instrument` /
:meth:`~Instrumentor.uninstrument`, a version guard in front of every way in, and reversible wrapping
(:class:`~eagle3scope_shim.patching.Patcher`). Three ways in, one per activation: ``install()`` for
``sglang.Engine`` users (:meth:`~Instrumentor.instrument`), SGLang's general plugin
(:meth:`~Instrumentor.register`, :mod:`eagle3scope_shim.plugin`) and the ``.pth`` bootstrap of releases
without plugins (:meth:`~Instrumentor.activate`, :mod:`eagle3scope_shim.bootstrap`). Each is
idempotent, and the first one taken excludes the others. The first one taken builds the shim's state
(:class:`~eagle3scope_shim.shim_state.Shim`), which every hook is made with.
"""

from __future__ import annotations

import logging
import os

from eagle3scope.wire import env
from eagle3scope.wire.endpoints import default_endpoint
from eagle3scope.wire.releases import release
from eagle3scope_shim import patching, seams
from eagle3scope_shim.shim_state import Shim, requested_endpoint

log = logging.getLogger("eagle3scope")


class Instrumentor:
    def __init__(self) -> None:
        self.shim: Shim | None = None  # built by the first way in taken (built)
        self.patcher: patching.Patcher | None = None
        self._set_env: str | None = None  # the endpoint instrument() put in the environment

    def built(self) -> Shim:
        """The shim's state and the patcher that wraps SGLang with hooks made for it, built once."""
        if self.shim is None:
            self.shim = Shim()
            self.patcher = patching.Patcher(self.shim)
        return self.shim

    @staticmethod
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

    @property
    def is_instrumented(self) -> bool:
        return self.shim is not None and (self.shim.seams.registered or self.patcher.active)

    def instrument(self, endpoint: str | None = None) -> bool:
        """Turn the shim on for this process and the SGLang processes it starts (``install()``).

        Sets ``EAGLE3SCOPE_ENDPOINT`` (inherited by the scheduler processes, where the plugin or the
        ``.pth`` bootstrap activates; without ``endpoint``: this user's private default, which raises
        :class:`~eagle3scope.wire.endpoints.EndpointError` when its directory is not safe) and patches
        this process. False when the version guard refuses the installed SGLang.
        """
        if endpoint is not None and os.environ.get(env.ENDPOINT) != endpoint:
            os.environ[env.ENDPOINT] = endpoint
            self._set_env = endpoint
        elif requested_endpoint() is None:
            os.environ[env.ENDPOINT] = self._set_env = default_endpoint()
        if not self.version_ok():
            return False
        if not self.is_instrumented:
            self.built()
            self.patcher.patch_all()
        return True

    def uninstrument(self) -> None:
        """Undo :meth:`instrument`: restore patched functions, stop publishing."""
        if self.patcher is not None:
            self.patcher.unpatch_all()
        if self._set_env is not None and os.environ.get(env.ENDPOINT) == self._set_env:
            del os.environ[env.ENDPOINT]
        self._set_env = None
        if self.shim is not None and self.shim.publisher is not None:
            self.shim.publisher.close()
            self.shim.publisher = None

    def register(self) -> None:
        """SGLang's plugin path: hand the seams to its ``HookRegistry`` when asked for and allowed."""
        if requested_endpoint() is None or self.is_instrumented or not self.version_ok():
            return
        patching.register_with_hook_registry(self.built())

    def activate(self) -> None:
        """The ``.pth`` path of releases without plugins: patch SGLang's modules as they are imported."""
        if requested_endpoint() is None or self.is_instrumented or patching.has_hook_registry() \
                or not self.version_ok():
            return
        self.built()
        self.patcher.patch_all()


#: the process's one instrumentor, the one process-wide handle: SGLang loads the plugin by name, and
#: ``install()``, the plugin and the bootstrap must find the same shim
INSTRUMENTOR = Instrumentor()
