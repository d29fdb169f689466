"""SGLang general plugin: keep the EAGLE-capable ``intel_amx`` attention backend on CPUs without AMX.

On a processor without AMX, SGLang rewrites ``--attention-backend intel_amx``
to ``torch_native``, which has no EAGLE draft backend. The ``intel_amx``
backend itself only needs the ``sgl_kernel`` ops (served in pure PyTorch by
this distribution), so declaring AMX present in SGLang's platform facts keeps
it. Only the platform fact is changed: ``cpu_has_amx_support()`` stays false
(no ``convert_weight_packed``), so layers still take their torch-native paths.

Active when ``SGLANG_USE_CPU_ENGINE=1``; ``EAGLE3SCOPE_CPU_AMX=0`` turns it
off, ``EAGLE3SCOPE_CPU_AMX=1`` forces it on.

It also gives the CPU engine SGLang's sampling verify: SGLang has no CPU kernel for
``tree_speculative_sampling_target_only``, so ``_verify_uses_greedy`` commits the target's
argmax on CPU whatever the temperature. With the pure-torch kernel in place (``sgl_kernel``,
the slot MUSA fills the same way) the CPU is no longer a reason to go greedy: requests with
temperature > 0 are verified by rejection sampling against the target's distribution, as on a
GPU. ``EAGLE3SCOPE_CPU_SAMPLING=0`` keeps the greedy-only behaviour.

``EAGLE3SCOPE_CPU_GRAPHS=1`` runs the draft's decode and draft-extend passes from CPU graphs
that stand in for SGLang's CUDA graph runners (:mod:`eagle3scope_cpu_engine.graphs`);
``EAGLE3SCOPE_CPU_GRAPHS=strict`` runs SGLang's own runners on them, captured at start-up.
"""

import logging
import os
import sys

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
    if os.environ.get("EAGLE3SCOPE_CPU_SAMPLING", "1") != "0":
        _enable_sampling_verify()
    _no_device_to_wait_for()
    from eagle3scope_cpu_engine import graphs

    if graphs.enabled():
        graphs.install()


def _no_device_to_wait_for() -> None:
    """``torch.cuda.synchronize()`` waits for the GPU; with no GPU there is nothing to wait for.

    SGLang 0.5.23's MLA EAGLE-3 draft (``kimi_k25_eagle3.Eagle3DeepseekV2ForCausalLM.set_embed``)
    calls it unconditionally, which a CPU build of torch answers with "Torch not compiled with CUDA
    enabled" and the scheduler dies. Only applied where CUDA is unavailable.
    """
    import torch

    if not torch.cuda.is_available():
        torch.cuda.synchronize = lambda device=None: None


def _verify_on_cpu_like_a_gpu(original, *args, **kwargs):
    """AROUND hook of ``_verify_uses_greedy``: being on CPU no longer forces greedy verify."""
    kwargs["is_cpu"] = False
    return original(*args, **kwargs)


def _fill_renorm_slots(eagle_utils) -> None:
    """Sampled verify renormalises the target's probabilities by top-k / top-p when a batch needs it
    (a greedy request beside a sampled one is top-k 1); the CPU platform has no kernel for either."""
    import sgl_kernel

    try:
        from sglang.kernels.ops.sampling import renorm
    except ImportError:
        renorm = None
    for name in ("top_k_renorm_prob", "top_p_renorm_prob"):
        for module in (renorm, eagle_utils):
            if module is not None and hasattr(module, name) and getattr(module, name) is None:
                setattr(module, name, getattr(sgl_kernel, name))


def _enable_sampling_verify() -> None:
    """Fill the platform's empty sampling-verify slot and stop CPU from forcing greedy verify.

    Releases without these seams (0.5.10) are left as they are.
    """
    try:
        from sglang.kernels.ops.speculative import verify_sampling
    except ImportError:
        logger.info("eagle3scope-cpu-engine: no sampling-verify seam in this SGLang; verify stays greedy")
        return
    import sgl_kernel
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    kernel = sgl_kernel.tree_speculative_sampling_target_only
    if verify_sampling.tree_speculative_sampling_target_only is None:
        verify_sampling.tree_speculative_sampling_target_only = kernel
    eagle_utils = sys.modules.get("sglang.srt.speculative.eagle_utils")  # imported before us: its copy too
    if eagle_utils is not None and getattr(eagle_utils, "tree_speculative_sampling_target_only", kernel) is None:
        eagle_utils.tree_speculative_sampling_target_only = kernel
    _fill_renorm_slots(eagle_utils)
    HookRegistry.register("sglang.srt.speculative.eagle_utils._verify_uses_greedy", _verify_on_cpu_like_a_gpu,
                          HookType.AROUND)
    logger.info("eagle3scope-cpu-engine: sampling verify on CPU (pure-torch tree_speculative_sampling_target_only)")
