"""vLLM general-plugin entry point (group ``vllm.general_plugins``): vLLM calls :func:`load` in every
process it starts (front end, EngineCore, each Worker; all three are one with
``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so it is idempotent. It does nothing unless the user asked
for the shim (``EAGLE3SCOPE_ENDPOINT``, or ``EAGLE3SCOPE=1`` for the default endpoint) and the version
guard passes; then it builds the process's shim state on the one instrumentor
(:data:`~eagle3scope_shim.instrumentor.INSTRUMENTOR`) and wraps every seam of :mod:`.seams`, with
hooks made for that state, as its module is imported (the front end never imports the scheduler or
model code, so nothing is wrapped there). Never raises into vLLM.
"""

from __future__ import annotations

import logging

from eagle3scope_shim.instrumentor import INSTRUMENTOR
from eagle3scope_shim.shim_state import requested_endpoint
from eagle3scope_shim.vllm import engine, seams, worker
from eagle3scope_shim.vllm.vllm_shim import VllmShim

log = logging.getLogger("eagle3scope")

FACTORIES = {**worker.FACTORIES, **engine.FACTORIES}


def plan(state: VllmShim) -> list[tuple[str, tuple[str, str], object]]:
    """(seam, (module, qualname), hook) for every seam, each hook made for ``state``."""
    return [(name, target, FACTORIES[name](state, name)) for name, target in seams.TARGETS.items()]


def load() -> None:
    try:
        if requested_endpoint() is None or INSTRUMENTOR.is_instrumented:
            return
        version = engine.vllm_version()
        if not seams.supported(version):
            log.warning("eagle3scope: vLLM %s is not a release line this shim knows (supported: %s); not patching",
                        version, seams.supported_text())
            return
        state = VllmShim(INSTRUMENTOR.built())
        INSTRUMENTOR.patcher.patch_all(plan(state))
    except Exception as exc:  # a plugin must never take vLLM down
        log.warning("eagle3scope: shim not activated: %s: %s", type(exc).__name__, exc)
