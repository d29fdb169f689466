"""Speculative-decoding bookkeeping ops (KV slot maps, draft tree, greedy verify).

Each function mirrors the sgl-kernel CPU op of the same name (and the Triton
kernel SGLang uses on GPUs): same arguments, same in-place outputs. Batches on
the CPU path are small, so per-request Python loops over ``tolist()`` values
are both the clearest form and fast enough.
"""

import torch


def _segments(start_offset: torch.Tensor, end_offset: torch.Tensor, capacity: int, op: str):
    """Per-request (start, end, out_offset), out_offset being the exclusive prefix sum of
    lengths; refuses offsets that need more than `capacity` packed entries."""
    out, acc = [], 0
    for s, e in zip(start_offset.tolist(), end_offset.tolist()):
        out.append((s, e, acc))
        acc += e - s
    if acc > capacity:
        raise RuntimeError(f"{op}: out_cache_loc has {capacity} entries but offsets require {acc}")
    return out


def assign_req_to_token_pool_cpu(
    req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, pool_len
):
    """req_to_token[rpi[i], start[i]:end[i]] = out_cache_loc[prefix[i]:prefix[i+1]]."""
    segs = _segments(start_offset, end_offset, out_cache_loc.numel(), "assign_req_to_token_pool")
    for row, (s, e, o) in zip(req_pool_indices.tolist(), segs):
        req_to_token[row, s:e] = out_cache_loc[o : o + e - s].to(req_to_token.dtype)


def assign_extend_cache_locs_cpu(
    req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, pool_len
):
    """out_cache_loc[prefix[i]:prefix[i+1]] = req_to_token[rpi[i], start[i]:end[i]]."""
    segs = _segments(start_offset, end_offset, out_cache_loc.numel(), "assign_extend_cache_locs")
    for row, (s, e, o) in zip(req_pool_indices.tolist(), segs):
        out_cache_loc[o : o + e - s] = req_to_token[row, s:e].to(out_cache_loc.dtype)


def assign_draft_cache_locs_contiguous_cpu(
    req_pool_indices, req_to_token, seq_lens, out_cache_loc, pool_len, topk, num_steps
):
    """Copy each request's topk*num_steps slots starting at seq_lens[i] into out_cache_loc."""
    n = topk * num_steps
    if out_cache_loc.numel() != req_pool_indices.numel() * n:
        raise RuntimeError("assign_draft_cache_locs_contiguous: out_cache_loc has the wrong size")
    for i, (row, sl) in enumerate(zip(req_pool_indices.tolist(), seq_lens.tolist())):
        out_cache_loc[i * n : (i + 1) * n] = req_to_token[row, sl : sl + n].to(out_cache_loc.dtype)


def build_draft_decode_metadata_cpu(
    req_to_token, req_pool_indices, seq_lens, topk, num_steps, pool_len
):
    """Rows b*topk+k: request b's committed prefix, then candidate k's draft slots.

    Candidate k's slots lie at seq_len + k*num_steps in the request's row (the
    contiguous layout above); they move to seq_len .. seq_len+num_steps. Entries
    past that are undefined, as in the C++ op (zeros here).
    """
    num_seqs = req_pool_indices.numel()
    out = torch.zeros((num_seqs * topk, pool_len), dtype=req_to_token.dtype)
    for b, (row, sl) in enumerate(zip(req_pool_indices.tolist(), seq_lens.tolist())):
        src = req_to_token[row]
        for k in range(topk):
            dst = out[b * topk + k]
            dst[:sl] = src[:sl]
            start = sl + k * num_steps
            dst[sl : sl + num_steps] = src[start : start + num_steps]
    return out


def fill_bonus_tokens_cpu(accept_tokens, accept_lens, bonus_tokens, accept_stride):
    """bonus_tokens[i] = accept_tokens.flat[i*stride + accept_lens[i] - 1] (last accepted token)."""
    flat = accept_tokens.reshape(-1)
    idx = torch.arange(accept_lens.numel()) * accept_stride + accept_lens.to(torch.int64) - 1
    bonus_tokens.copy_(flat[idx].to(bonus_tokens.dtype))


def fill_accept_out_cache_loc_cpu(accept_index, out_cache_loc, accept_out_cache_loc):
    """Pack out_cache_loc[accept_index[j]] for every accept_index[j] != -1, in order."""
    flat = accept_index.reshape(-1).to(torch.int64)
    kept = flat[flat > -1]
    if kept.numel() and int(kept.max()) >= out_cache_loc.numel():
        raise RuntimeError("fill_accept_out_cache_loc: accept_index out of range")
    accept_out_cache_loc[: kept.numel()] = out_cache_loc[kept]


def _find(values, x):
    """Index of the first element equal to x, or -1."""
    try:
        return values.index(x)
    except ValueError:
        return -1


def build_tree_kernel_efficient_cpu(
    parent_list,
    selected_index,
    verified_seq_len,
    tree_mask,
    positions,
    retrive_index,
    retrive_next_token,
    retrive_next_sibling,
    topk,
    depth,
    draft_token_num,
    tree_mask_mode,
):
    """Build the draft tree: retrieval links, positions and the attention mask.

    Node 0 is the verified (bonus) token; node i>0 is selected_index[i-1]. A
    node's parent is found through parent_list; children are linked newest
    first (first child in retrive_next_token, older siblings chained in
    retrive_next_sibling). retrive_next_token/sibling arrive filled with -1.
    tree_mask_mode 0 (FULL_MASK) lays rows of seq_len+n columns after a
    prefix-sum offset; 1 (QLEN_ONLY) lays n x n blocks per request.
    """
    if tree_mask_mode not in (0, 1):
        raise RuntimeError(
            "build_tree_kernel_efficient_cpu: only FULL_MASK (0) and QLEN_ONLY (1) "
            f"are supported, got {tree_mask_mode}"
        )
    n = draft_token_num
    bs = verified_seq_len.numel()
    seq_lens = verified_seq_len.tolist()
    sel_rows = selected_index.tolist()
    par_rows = parent_list.tolist()
    ri = retrive_index.view(bs, n)
    rnt = retrive_next_token.view(bs, n)
    rns = retrive_next_sibling.view(bs, n)
    pos = positions.view(bs, n)
    mask_offset = 0
    for b in range(bs):
        sel, par, seq_len = sel_rows[b], par_rows[b], seq_lens[b]
        off = b * n
        next_token = rnt[b].tolist()
        next_sibling = rns[b].tolist()
        pos[b, 0] = seq_len
        ri[b] = torch.arange(off, off + n, dtype=ri.dtype)
        for i in range(n - 1, 0, -1):
            parent_tb = sel[i - 1] // topk
            parent_pos = 0
            if parent_tb > 0:
                found = _find(sel, par[parent_tb])
                if found < 0:
                    continue  # malformed tree: the C++ op warns and skips the node
                parent_pos = found + 1
            if next_token[parent_pos] != -1:
                next_sibling[i] = next_token[parent_pos]
            next_token[parent_pos] = i
        rnt[b] = torch.tensor(next_token, dtype=rnt.dtype)
        rns[b] = torch.tensor(next_sibling, dtype=rns.dtype)

        if tree_mask_mode == 1:
            row_len, row_base, block = n, off * n, 0
        else:
            row_len, row_base, block = seq_len + n, mask_offset, seq_len
            mask_offset += n * n + seq_len * n
        for tid in range(n):
            start = row_base + tid * row_len + block
            tree_mask[start] = True
            tree_mask[start + 1 : start + n] = False
            if tid == 0:
                continue
            position, cur = 0, tid - 1
            while position < depth:  # a root-ward walk has at most `depth` steps
                position += 1
                tree_mask[start + cur + 1] = True
                parent_tb = sel[cur] // topk
                if parent_tb == 0:
                    break
                cur = _find(sel, par[parent_tb])
                if cur < 0:
                    break
            pos[b, tid] = position + seq_len


def verify_tree_greedy_cpu(
    predicts,
    accept_index,
    accept_token_num,
    candidates,
    retrive_index,
    retrive_next_token,
    retrive_next_sibling,
    target_predict,
):
    """Accept the longest root path whose draft tokens equal the target's argmax.

    accept_index arrives filled with -1; accept_token_num counts accepted drafts
    (bonus excluded); predicts[last accepted] gets the target's next token.
    """
    bs, n = candidates.shape
    steps = accept_index.shape[1]
    cand, ridx = candidates.tolist(), retrive_index.tolist()
    nxt, sib = retrive_next_token.tolist(), retrive_next_sibling.tolist()
    target = target_predict.reshape(-1).tolist()
    for bx in range(bs):
        last = ridx[bx][0]
        accept_index[bx, 0] = last
        accepted, cur = 0, 0
        for _ in range(1, steps):
            cur = nxt[bx][cur]
            while cur != -1:
                if cand[bx][cur] == target[last]:
                    predicts[last] = target[last]
                    accepted += 1
                    accept_index[bx, accepted] = ridx[bx][cur]
                    last = ridx[bx][cur]
                    break
                cur = sib[bx][cur]
            if cur == -1:
                break
        accept_token_num[bx] = accepted
        predicts[last] = target[last]

