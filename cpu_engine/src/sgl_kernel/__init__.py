"""Pure-PyTorch stand-in for the CPU build of SGLang's ``sgl_kernel`` extension.

The CPU build of sgl-kernel is not on the package index, yet SGLang's CPU path
(``SGLANG_USE_CPU_ENGINE=1``, ``intel_amx`` attention backend) imports it for
the attention kernels and the speculative-decoding bookkeeping ops. Each op
here computes the same function as the C++ kernel it replaces, in plain torch.

SGLang reaches the ops two ways, so both are served by the same function:
``from sgl_kernel import X`` (module attribute) and ``torch.ops.sgl_kernel.X``
(registered below with the C++ schema names, so keyword calls work).

``convert_weight_packed`` is deliberately absent: SGLang's
``cpu_has_amx_support()`` tests for it, and its absence keeps every layer on
SGLang's own torch-native fallback instead of AMX-packed GEMMs.
"""

import torch

from sgl_kernel.attention import decode_attention_cpu, extend_attention_cpu
from sgl_kernel.kvcache import copy_all_layer_kv_cache_cpu
from sgl_kernel.sampling import top_k_renorm_prob, top_p_renorm_prob, tree_speculative_sampling_target_only
from sgl_kernel.speculative import (
    assign_draft_cache_locs_contiguous_cpu,
    assign_extend_cache_locs_cpu,
    assign_req_to_token_pool_cpu,
    build_draft_decode_metadata_cpu,
    build_tree_kernel_efficient_cpu,
    fill_accept_out_cache_loc_cpu,
    fill_bonus_tokens_cpu,
    verify_tree_greedy_cpu,
)

__version__ = "0.0.0+eagle3scope.cpu"

# Schemas follow the argument order of SGLang 0.5.23's call sites; "(a!)" marks
# the tensors an op writes in place.
_SCHEMAS = {
    decode_attention_cpu: (
        "decode_attention_cpu(Tensor query, Tensor(a!) k_cache, Tensor(b!) v_cache, "
        "float key_scale, float value_scale, Tensor(c!) output, Tensor? key, Tensor? value, "
        "Tensor loc, Tensor(d!) attn_logits, Tensor req_to_token, Tensor req_pool_indices, "
        "Tensor seq_lens, float sm_scale, float logit_cap, bool is_cross_attention, "
        "int sliding_window_size, Tensor? encoder_lens, Tensor? sinks) -> ()"
    ),
    extend_attention_cpu: (
        "extend_attention_cpu(Tensor q_extend, Tensor? k_extend, Tensor? v_extend, "
        "Tensor(a!) o_extend, Tensor k_buffer, Tensor v_buffer, float key_scale, "
        "float value_scale, Tensor req_to_token, Tensor req_pool_indices, Tensor seq_lens, "
        "Tensor extend_seq_lens, Tensor extend_start_loc, int? max_len_extend, "
        "float sm_scale, float logit_cap, bool is_cross_attention, int sliding_window_size, "
        "Tensor? encoder_lens, Tensor? sinks, Tensor? tree_mask, bool is_causal) -> ()"
    ),
    copy_all_layer_kv_cache_cpu: (
        "copy_all_layer_kv_cache_cpu(Tensor data_ptrs, Tensor strides, Tensor tgt_loc, "
        "Tensor src_loc) -> ()"
    ),
    assign_req_to_token_pool_cpu: (
        "assign_req_to_token_pool_cpu(Tensor req_pool_indices, Tensor(a!) req_to_token, "
        "Tensor start_offset, Tensor end_offset, Tensor out_cache_loc, int pool_len) -> ()"
    ),
    assign_extend_cache_locs_cpu: (
        "assign_extend_cache_locs_cpu(Tensor req_pool_indices, Tensor req_to_token, "
        "Tensor start_offset, Tensor end_offset, Tensor(a!) out_cache_loc, int pool_len) -> ()"
    ),
    assign_draft_cache_locs_contiguous_cpu: (
        "assign_draft_cache_locs_contiguous_cpu(Tensor req_pool_indices, Tensor req_to_token, "
        "Tensor seq_lens, Tensor(a!) out_cache_loc, int pool_len, int topk, int num_steps) -> ()"
    ),
    build_draft_decode_metadata_cpu: (
        "build_draft_decode_metadata_cpu(Tensor req_to_token, Tensor req_pool_indices, "
        "Tensor seq_lens, int topk, int num_steps, int pool_len) -> Tensor"
    ),
    fill_bonus_tokens_cpu: (
        "fill_bonus_tokens_cpu(Tensor accept_tokens, Tensor accept_lens, "
        "Tensor(a!) bonus_tokens, int accept_stride) -> ()"
    ),
    fill_accept_out_cache_loc_cpu: (
        "fill_accept_out_cache_loc_cpu(Tensor accept_index, Tensor out_cache_loc, "
        "Tensor(a!) accept_out_cache_loc) -> ()"
    ),
    build_tree_kernel_efficient_cpu: (
        "build_tree_kernel_efficient_cpu(Tensor parent_list, Tensor selected_index, "
        "Tensor verified_seq_len, Tensor(a!) tree_mask, Tensor(b!) positions, "
        "Tensor(c!) retrive_index, Tensor(d!) retrive_next_token, "
        "Tensor(e!) retrive_next_sibling, int topk, int depth, int draft_token_num, "
        "int tree_mask_mode) -> ()"
    ),
    verify_tree_greedy_cpu: (
        "verify_tree_greedy_cpu(Tensor(a!) predicts, Tensor(b!) accept_index, "
        "Tensor(c!) accept_token_num, Tensor candidates, Tensor retrive_index, "
        "Tensor retrive_next_token, Tensor retrive_next_sibling, Tensor target_predict) -> ()"
    ),
    tree_speculative_sampling_target_only: (
        "tree_speculative_sampling_target_only(Tensor(a!) predicts, Tensor(b!) accept_index, "
        "Tensor(c!) accept_token_num, Tensor candidates, Tensor retrive_index, "
        "Tensor retrive_next_token, Tensor retrive_next_sibling, Tensor uniform_samples, "
        "Tensor uniform_samples_for_final_sampling, Tensor target_probs, Tensor(d!) draft_probs, "
        "float threshold_single=1.0, float threshold_acc=1.0, bool deterministic=True) -> ()"
    ),
}

_LIB = torch.library.Library("sgl_kernel", "DEF")
for _fn, _schema in _SCHEMAS.items():
    _LIB.define(_schema)
    _LIB.impl(_fn.__name__, _fn, "CPU")

OPS = tuple(fn.__name__ for fn in _SCHEMAS)
