"""Paged attention over SGLang's token-indexed KV pool (decode and extend).

The KV pool is ``k_buffer[slot, kv_head, head_dim]``; a request's slots are
``req_to_token[req_pool_indices[b], :seq_len]``. Query heads share KV heads in
groups (GQA). Scores are computed in float32 and written back in the output's
dtype, as the C++ kernels do. ``attn_logits`` is the C++ kernels' split-K
scratch buffer; nothing reads it afterwards, so it is left alone here.
Cross-attention (encoder-decoder) is not a path a Llama target or an EAGLE-3
draft takes and is refused loudly.

MLA (DeepseekV2/V3, Kimi-K2) reaches both ops with a latent pool: one "head"
of width ``kv_lora_rank + rope_dim`` in ``k_buffer`` and its first
``kv_lora_rank`` columns as ``v_buffer``. The absorbed path (decode, verify,
draft-extend) passes latent-wide q/k/v with one KV head, which is ordinary
MQA over that pool. The prefill path (DeepSeek's ``forward_normal``) passes
per-head K/V for the new tokens only; there the pool's head count differs
from ``k_extend``'s and the C++ kernel skips the prefix (``is_prefix_skipped``
in sgl-kernel's extend.cpp), attending among the new tokens alone.
"""

import torch


def _attend(q, k, v, sm_scale, logit_cap, visible, sink):
    """q [Lq, Hq, D], k/v [Lk, Hkv, D*], visible [Lq, Lk] bool -> [Lq, Hq, Dv] float32."""
    group = q.shape[1] // k.shape[1]
    k = k.float().repeat_interleave(group, dim=1)
    v = v.float().repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), k) * sm_scale
    if logit_cap > 0:
        scores = logit_cap * torch.tanh(scores / logit_cap)
    scores = scores.masked_fill(~visible.unsqueeze(0), float("-inf"))
    if sink is not None:  # per-head sink logit joins the softmax, then is dropped
        sink_col = sink.float().view(-1, 1, 1).expand(-1, scores.shape[1], 1)
        probs = torch.softmax(torch.cat([scores, sink_col], dim=-1), dim=-1)[..., :-1]
    else:
        probs = torch.softmax(scores, dim=-1)
    return torch.einsum("hqk,khd->qhd", probs, v)


def _check_index_dtypes(op, req_to_token, seq_lens, req_pool_indices, *same_as_req_to_token):
    """The C++ kernels' TORCH_CHECKs on index dtypes (sgl-kernel csrc/cpu/decode.cpp, extend.cpp), same messages."""
    index_dtype = req_to_token.dtype
    if index_dtype not in (torch.int32, torch.int64):
        raise RuntimeError(f"{op}: expect req_to_token to be int32 or int64, got {index_dtype}")
    if seq_lens.dtype != torch.int64:
        raise RuntimeError(f"{op}: expect req_lens to be int64, got {seq_lens.dtype}")
    if req_pool_indices.dtype != torch.int64:
        raise RuntimeError(f"{op}: expect req_pool_indices to be int64, got {req_pool_indices.dtype}")
    if any(t.dtype != index_dtype for t in same_as_req_to_token):
        raise RuntimeError(f"{op}: expect extend_seq_lens and extend_start_loc to have same dtype as req_to_token.")


def _window(q_pos, k_pos, sliding_window_size):
    """Causal visibility, limited to the last `sliding_window_size` positions when > 0."""
    visible = k_pos.unsqueeze(0) <= q_pos.unsqueeze(1)
    if sliding_window_size > 0:
        visible &= (q_pos.unsqueeze(1) - k_pos.unsqueeze(0)) < sliding_window_size
    return visible


def decode_attention_cpu(
    query,
    k_cache,
    v_cache,
    key_scale,
    value_scale,
    output,
    key,
    value,
    loc,
    attn_logits,
    req_to_token,
    req_pool_indices,
    seq_lens,
    sm_scale,
    logit_cap,
    is_cross_attention,
    sliding_window_size,
    encoder_lens,
    sinks,
):
    """One new query token per sequence, attending to its seq_len cached tokens.

    When key/value are given they are first stored at slots `loc` (the kernel
    writes the new token's KV itself); seq_len already counts that token.
    """
    if is_cross_attention:
        raise NotImplementedError("sgl_kernel (eagle3scope CPU): cross-attention decode")
    _check_index_dtypes("decode", req_to_token, seq_lens, req_pool_indices)
    if attn_logits.dtype != torch.float32:
        raise RuntimeError(f"decode: expect attn_logits to be float32, got {attn_logits.dtype}")
    if key is not None and value is not None:
        k_cache[loc] = key.reshape(-1, *k_cache.shape[1:]).to(k_cache.dtype)
        v_cache[loc] = value.reshape(-1, *v_cache.shape[1:]).to(v_cache.dtype)
    rows = req_pool_indices.tolist()
    for b, seq_len in enumerate(seq_lens.tolist()):
        slots = req_to_token[rows[b], :seq_len].long()
        k = k_cache[slots].float() * key_scale
        v = v_cache[slots].float() * value_scale
        k_pos = torch.arange(seq_len)
        visible = _window(k_pos[-1:], k_pos, sliding_window_size)
        out = _attend(query[b : b + 1], k, v, sm_scale, logit_cap, visible, sinks)
        output[b] = out[0].to(output.dtype)


def extend_attention_cpu(
    q_extend,
    k_extend,
    v_extend,
    o_extend,
    k_buffer,
    v_buffer,
    key_scale,
    value_scale,
    req_to_token,
    req_pool_indices,
    seq_lens,
    extend_seq_lens,
    extend_start_loc,
    max_len_extend,
    sm_scale,
    logit_cap,
    is_cross_attention,
    sliding_window_size,
    encoder_lens,
    sinks,
    tree_mask,
    is_causal,
):
    """Each sequence appends extend_len query tokens after a cached prefix.

    Keys are the prefix (seq_len - extend_len slots from req_to_token) followed
    by the new tokens' k_extend/v_extend (read back from the pool when those are
    None); when the pool has another head count than k_extend (MLA prefill,
    see the module docstring) the prefix is skipped. Visibility among the new tokens is causal, or the request's
    extend_len x extend_len block of the QLEN_ONLY `tree_mask` when given (the
    prefix stays fully visible), or everything when is_causal is False.
    """
    if is_cross_attention:
        raise NotImplementedError("sgl_kernel (eagle3scope CPU): cross-attention extend")
    _check_index_dtypes("extend", req_to_token, seq_lens, req_pool_indices, extend_seq_lens, extend_start_loc)
    rows = req_pool_indices.tolist()
    starts = extend_start_loc.tolist()
    ext_lens = extend_seq_lens.tolist()
    prefix_skipped = k_extend is not None and k_buffer.shape[1] != k_extend.shape[1]
    mask_off = 0
    for b, seq_len in enumerate(seq_lens.tolist()):
        n, s = ext_lens[b], starts[b]
        if prefix_skipped:
            seq_len = n
        prefix = seq_len - n
        slots = req_to_token[rows[b], :seq_len].long()
        if prefix_skipped:
            k, v = k_extend[s : s + n].float(), v_extend[s : s + n].float()
        elif k_extend is not None and v_extend is not None:
            k = torch.cat([k_buffer[slots[:prefix]].float() * key_scale, k_extend[s : s + n].float()])
            v = torch.cat([v_buffer[slots[:prefix]].float() * value_scale, v_extend[s : s + n].float()])
        else:
            k = k_buffer[slots].float() * key_scale
            v = v_buffer[slots].float() * value_scale
        k_pos = torch.arange(seq_len)
        q_pos = k_pos[prefix:]
        if tree_mask is not None:
            visible = torch.ones((n, seq_len), dtype=torch.bool)
            visible[:, prefix:] = tree_mask[mask_off : mask_off + n * n].view(n, n)
            mask_off += n * n
        elif is_causal:
            visible = _window(q_pos, k_pos, sliding_window_size)
        else:
            visible = torch.ones((n, seq_len), dtype=torch.bool)
        out = _attend(q_extend[s : s + n], k, v, sm_scale, logit_cap, visible, sinks)
        o_extend[s : s + n] = out.to(o_extend.dtype)
