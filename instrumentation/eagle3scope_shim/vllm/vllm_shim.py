"""The vLLM shim's state, one :class:`VllmShim` built when the plugin activates and handed to every vLLM
hook factory (OpenTelemetry's instrumentor shape, as the SGLang hooks get their
:class:`~eagle3scope_shim.shim_state.Shim`): the shared shim state (publisher, seam table, pending hook
reports, sequence numbers) and what the hooks of each vLLM process learn. No vLLM shim module holds
state of its own: a test builds a fresh one and hands it to the factories it exercises.
"""

from __future__ import annotations

from eagle3scope_shim.shim_state import Shim
from eagle3scope_shim.vllm.engine import EngineFacts
from eagle3scope_shim.vllm.worker import WorkerFacts


class VllmShim:
    """One vLLM process's shim state: ``shim`` (what every shim has), ``engine`` (the EngineCore's
    hooks), ``worker`` (the model runner's hooks; the same process with ``VLLM_ENABLE_V1_MULTIPROCESSING=0``)."""

    def __init__(self, shim: Shim | None = None) -> None:
        self.shim = shim if shim is not None else Shim()
        self.engine = EngineFacts()
        self.worker = WorkerFacts()
