"""SGLang general plugin: keep the EAGLE-capable ``intel_amx`` attention backend on CPUs without AMX.

On a processor without AMX, SGLang rewrites ``--attention-backend intel_amx``
to ``torch_native``, which has no EAGLE draft backend. The ``intel_amx``
backend itself only needs the ``sgl_kernel`` ops (served in pure PyTorch by
this distribution), so declaring AMX present in SGLang's platform facts keeps
it. Only the platform fact is changed: ``cpu_has_amx_support()`` stays false
(no ``convert_weight_packed``), so layers still take their torch-native paths.

Active when ``SGLANG_USE_CPU_ENGINE=1``; ``EAGLE3SCOPE_CPU_AMX=0`` turns it
off, ``EAGLE3SCOPE_CPU_AMX=1`` forces it on.
"""

import logging
import os

logger = logging.getLogger(__name__)


def active() -> bool:
    """Whether the plugin should declare AMX present in this process."""
    forced = os.environ.get("EAGLE3SCOPE_CPU_AMX")
    if forced:
        return forced == "1"
    return os.environ.get("SGLANG_USE_CPU_ENGINE", "0") == "1"


def load() -> None:
    """Entry point of group ``sglang.srt.plugins``; SGLang calls it in every process."""
    if not active():
        return
    from sglang.srt.runtime_context import override_platform

    override_platform(has_amx=True).install()
    logger.info("eagle3scope-cpu-engine: platform has_amx declared (pure-PyTorch sgl_kernel)")
