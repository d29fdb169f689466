"""SGLang general-plugin entry point (group ``sglang.srt.plugins``, releases with plugins).

SGLang calls :func:`load` early in its launcher, scheduler and detokenizer processes. It does
nothing unless the user asked for the shim (``EAGLE3SCOPE_ENDPOINT``, or ``EAGLE3SCOPE=1`` for the
default endpoint) and the version guard passes; then it registers the present seams with SGLang's
own ``HookRegistry``. Only the scheduler of TP rank 0 will publish (decided when it is built).
"""

from __future__ import annotations

import logging
import sys

from eagle3scope_shim.instrumentor import INSTRUMENTOR
from eagle3scope_shim.shim_state import requested_endpoint

log = logging.getLogger("eagle3scope")

#: Processes that never run a speculative step: registering there would only import model code.
_IDLE_PROCESS_ENTRIES = frozenset({"run_detokenizer_process", "run_data_parallel_controller_process"})


def _in_idle_process() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name in _IDLE_PROCESS_ENTRIES:
            return True
        frame = frame.f_back
    return False


def load() -> None:
    try:
        if requested_endpoint() is None or _in_idle_process():
            return
        INSTRUMENTOR.register()
    except Exception as exc:  # a plugin must never take SGLang down
        log.warning("eagle3scope: shim not activated: %s: %s", type(exc).__name__, exc)
