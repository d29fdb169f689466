"""Speculative sampling verify: SGLang's ``tree_speculative_sampling_target_only`` in plain torch.

SGLang 0.5.23 runs it on CUDA (``sglang/kernels/jit/include/sgl_kernel/speculative/sampling.cuh``,
``TreeSpeculativeSamplingTargetOnly``); MUSA imports it from ``sgl_kernel``; other platforms have
none, which is why ``_verify_uses_greedy`` sends CPU verify down the argmax path. This is the
same function on CPU: the same tree walk, the same coins, float32 arithmetic as in the kernel,
the same in-place outputs. Batches on the CPU path are small, so the walk is a per-request loop.

Per request: walk down the draft tree from the root. At each depth try the children in sibling
order; a child with target probability ``q`` is accepted when ``coin < acc / threshold_acc`` (``acc``
adds up the target mass of the children tried at this depth, so with thresholds 1 the draft
tokens are taken as fixed proposals and the committed token follows the target exactly) or
``q >= threshold_single``. A rejected child's mass is written into ``draft_probs`` so that the
final token, drawn with the final coin by inverse CDF from ``relu(target - draft)`` at the last
accepted node, excludes every token already rejected there.
"""

import numpy as np
import torch


def tree_speculative_sampling_target_only(
    predicts,
    accept_index,
    accept_token_num,
    candidates,
    retrive_index,
    retrive_next_token,
    retrive_next_sibling,
    uniform_samples,
    uniform_samples_for_final_sampling,
    target_probs,
    draft_probs,
    threshold_single=1.0,
    threshold_acc=1.0,
    deterministic=True,
):
    """predicts[bs*n] (int32), accept_index[bs, depth+1] (int32, -1 filled), accept_token_num[bs]
    are written; draft_probs[bs, n, vocab] gets the rejected children's target mass."""
    bs, n = candidates.shape
    steps = accept_index.shape[1]
    if bs == 0:
        return
    if not 0 <= threshold_single <= 1 or not 0 <= threshold_acc <= 1:
        raise ValueError("tree_speculative_sampling_target_only: thresholds must lie in [0, 1]")
    single = np.float32(threshold_single)
    acc_scale = np.float32(max(threshold_acc, 1e-9))  # the launcher's floor
    cand, ridx = candidates.tolist(), retrive_index.tolist()
    nxt, sib = retrive_next_token.tolist(), retrive_next_sibling.tolist()
    coins = uniform_samples.to(torch.float32).numpy()
    final_coins = uniform_samples_for_final_sampling.to(torch.float32).numpy()
    probs = target_probs.view(bs, n, -1)
    vocab = probs.shape[-1]
    for bx in range(bs):
        row = 0  # node whose target distribution the next child is judged by
        coin = coins[bx, 0]
        last = ridx[bx][0]
        accept_index[bx, 0] = last
        accepted, cur, prob_acc = 0, 0, np.float32(0.0)
        q_row = probs[bx, row].numpy()
        for _ in range(1, steps):
            cur = nxt[bx][cur]
            while cur != -1:
                token = cand[bx][cur]
                q = q_row[token]
                prob_acc = np.float32(prob_acc + q)
                if q > 0 and (coin < np.float32(prob_acc / acc_scale) or q >= single):
                    prob_acc = np.float32(0.0)
                    row, coin = cur, coins[bx, cur]
                    q_row = probs[bx, row].numpy()
                    predicts[last] = token
                    accepted += 1
                    accept_index[bx, accepted] = ridx[bx][cur]
                    last = ridx[bx][cur]
                    break
                draft_probs[bx, row, token] = target_probs[bx, row, token]
                cur = sib[bx][cur]
            if cur == -1:
                break
        accept_token_num[bx] = accepted
        # The last accepted node's distribution, less what was rejected there (the bonus
        # position, reached when every depth accepted, has nothing rejected).
        q = probs[bx, row]
        rest = q if accepted == steps - 1 else (q - draft_probs[bx, row]).clamp_min(0)
        predicts[last] = _sample_from(rest, np.float32(final_coins[bx]), vocab)


def _sample_from(weights, coin, vocab):
    """flashinfer's ``DeviceSamplingFromProb``: the first positive entry whose inclusive prefix sum
    exceeds ``coin * sum``; if rounding leaves none, the last positive entry (else the last id)."""
    w = weights.to(torch.float32)
    u = torch.tensor(coin, dtype=torch.float32) * w.sum()
    positive = w > 0
    hits = torch.nonzero((w.cumsum(0) > u) & positive)
    if hits.numel():
        return int(hits[0, 0])
    valid = torch.nonzero(positive)
    return int(valid[-1, 0]) if valid.numel() else vocab - 1


def _renorm_from_pivots(probs: torch.Tensor, pivots: torch.Tensor) -> torch.Tensor:
    """Keep each row's probabilities at or above its pivot (ties included), then renormalise."""
    kept = torch.where(probs >= pivots.unsqueeze(1), probs, torch.zeros((), dtype=probs.dtype))
    return kept / kept.sum(dim=1, keepdim=True)


def _per_row(value, batch_size: int, dtype: torch.dtype) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        values = value.to(dtype=dtype).reshape(-1)
        if values.numel() == 1:
            return values.expand(batch_size)
        if values.numel() != batch_size:
            raise ValueError(f"expected a scalar or one value per row, got {values.numel()} for {batch_size} rows")
        return values
    return torch.full((batch_size,), value, dtype=dtype)


def top_k_renorm_prob(probs: torch.Tensor, top_k) -> torch.Tensor:
    """FlashInfer's ``top_k_renorm_probs`` (as SGLang's ROCm fallback states it): keep the k highest
    probabilities of each row, every tie at the k-th value included, and renormalise, in float32.
    SGLang's verify calls it for a batch whose requests mix top-k settings (a greedy request is top-k 1)."""
    probs = probs.float().contiguous()
    batch_size, vocab_size = probs.shape
    if batch_size == 0 or vocab_size == 0:
        return probs
    top_ks = _per_row(top_k, batch_size, torch.int64)
    ordered = torch.sort(probs, dim=-1, descending=True).values
    cutoff = (top_ks - 1).clamp(min=0, max=vocab_size - 1)
    return _renorm_from_pivots(probs, ordered.gather(1, cutoff.unsqueeze(1)).squeeze(1))


def top_p_renorm_prob(probs: torch.Tensor, top_p) -> torch.Tensor:
    """FlashInfer's ``top_p_renorm_probs``: sort ascending, drop the prefix whose mass is below 1 - p,
    keep every tie at the pivot, renormalise, in float32."""
    probs = probs.float().contiguous()
    batch_size, vocab_size = probs.shape
    if batch_size == 0 or vocab_size == 0:
        return probs
    top_ps = _per_row(top_p, batch_size, torch.float32)
    ordered = torch.sort(probs, dim=-1).values
    cdf = torch.cumsum(ordered, dim=-1)
    cutoff = torch.searchsorted(cdf, (1.0 - top_ps).unsqueeze(1), right=False).squeeze(1).clamp(max=vocab_size - 1)
    return _renorm_from_pivots(probs, ordered.gather(1, cutoff.unsqueeze(1)).squeeze(1))
