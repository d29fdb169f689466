"""Checks of the pure-PyTorch sgl_kernel ops against straightforward references.

Runs inside the engine venv (it needs torch and the installed cpu_engine), as
``python tests/engine_side/kernel_checks.py``; prints one JSON object mapping
each op name to "ok" or the failure's traceback, plus "__registered__" (the ops
torch.ops.sgl_kernel carries) and "__has_convert_weight_packed__".
tests/cpu_engine/test_cpu_kernels.py drives it. The references are written as plain
per-element loops, independent of the vectorised code they check.
"""

import json
import math
import random
import traceback

import torch

import sgl_kernel

OPS = torch.ops.sgl_kernel


def close(a, b, tol=1e-5):
    assert a.shape == b.shape, (a.shape, b.shape)
    err = (a.double() - b.double()).abs().max().item() if a.numel() else 0.0
    assert err <= tol, f"max abs error {err}"


# ---------------------------------------------------------------- attention


def ref_attention_row(q, keys, values, scale, cap, sink=None):
    """One query head against a list of key/value vectors, as the textbook formula."""
    logits = []
    for k in keys:
        s = float((q.double() * k.double()).sum()) * scale
        if cap > 0:
            s = cap * math.tanh(s / cap)
        logits.append(s)
    extra = [float(sink)] if sink is not None else []
    m = max(logits + extra)
    weights = [math.exp(s - m) for s in logits]
    denom = sum(weights) + sum(math.exp(s - m) for s in extra)
    out = torch.zeros(values[0].shape, dtype=torch.float64)
    for w, v in zip(weights, values):
        out += w / denom * v.double()
    return out


def pool(num_slots, kv_heads, dim, gen):
    return torch.randn(num_slots, kv_heads, dim, generator=gen), torch.randn(num_slots, kv_heads, dim, generator=gen)


def check_decode_attention_cpu():
    check_mla_absorbed_decode(torch.Generator().manual_seed(10))
    gen = torch.Generator().manual_seed(0)
    heads, kv_heads, dim, slots = 4, 2, 8, 64
    for cap, use_sink in ((0.0, False), (5.0, False), (0.0, True)):
        k_cache, v_cache = pool(slots, kv_heads, dim, gen)
        seq_lens = torch.tensor([5, 1, 9], dtype=torch.int64)
        bs = seq_lens.numel()
        req_to_token = torch.zeros(6, 32, dtype=torch.int32)
        perm = torch.randperm(slots, generator=gen)
        rows = torch.tensor([4, 0, 2], dtype=torch.int64)
        used = 0
        for b in range(bs):
            n = int(seq_lens[b])
            req_to_token[rows[b], :n] = perm[used : used + n].int()
            used += n
        loc = torch.tensor([int(req_to_token[rows[b], seq_lens[b] - 1]) for b in range(bs)])
        q = torch.randn(bs, heads, dim, generator=gen)
        key = torch.randn(bs, kv_heads, dim, generator=gen)
        value = torch.randn(bs, kv_heads, dim, generator=gen)
        sinks = torch.randn(heads, generator=gen) if use_sink else None
        out = torch.empty(bs, heads, dim)
        logits = torch.zeros(bs, heads, 8, dim + 1)
        kc, vc = k_cache.clone(), v_cache.clone()
        OPS.decode_attention_cpu(q, kc, vc, 1.0, 1.0, out, key, value, loc, logits,
                                 req_to_token, rows, seq_lens, 0.3, cap, False, 0, None, sinks)
        expected_k, expected_v = k_cache.clone(), v_cache.clone()
        expected_k[loc], expected_v[loc] = key, value
        close(kc, expected_k, 0)
        close(vc, expected_v, 0)
        for b in range(bs):
            slot_ids = [int(s) for s in req_to_token[rows[b], : seq_lens[b]]]
            for h in range(heads):
                g = h // (heads // kv_heads)
                ref = ref_attention_row(q[b, h], [expected_k[s, g] for s in slot_ids],
                                        [expected_v[s, g] for s in slot_ids], 0.3, cap,
                                        None if sinks is None else sinks[h])
                close(out[b, h], ref.float())


def mla_pool(num_slots, kv_lora_rank, rope_dim, gen):
    """SGLang's MLATokenToKVPool layout: one latent "head"; the value buffer is a view of its first columns."""
    k_buf = torch.randn(num_slots, 1, kv_lora_rank + rope_dim, generator=gen)
    return k_buf, k_buf[..., :kv_lora_rank]


def check_mla_absorbed_decode(gen):
    """DeepSeek's absorbed MLA decode: latent-wide q over the latent pool (MQA), k/v written at loc."""
    heads, rank, rope, slots = 4, 16, 8, 40
    k_buf, v_buf = mla_pool(slots, rank, rope, gen)
    before = k_buf.clone()
    seq_lens = torch.tensor([3, 7], dtype=torch.int64)
    rows = torch.tensor([1, 0])
    req_to_token = torch.zeros(2, 16, dtype=torch.int32)
    req_to_token[1, :3] = torch.tensor([5, 9, 2])
    req_to_token[0, :7] = torch.tensor([11, 12, 30, 31, 4, 6, 20])
    loc = torch.tensor([2, 20])
    q = torch.randn(2, heads, rank + rope, generator=gen)
    latent = torch.randn(2, 1, rank + rope, generator=gen)
    out = torch.empty(2, heads, rank)
    OPS.decode_attention_cpu(q, k_buf, v_buf, 1.0, 1.0, out, latent, latent[..., :rank], loc,
                             torch.zeros(2, heads, 8, rank + 1), req_to_token, rows, seq_lens, 0.2, 0.0, False, 0,
                             None, None)
    before[loc] = latent
    close(k_buf, before, 0)
    for b in range(2):
        slot_ids = [int(x) for x in req_to_token[rows[b], : seq_lens[b]]]
        for h in range(heads):
            ref = ref_attention_row(q[b, h], [before[x, 0] for x in slot_ids],
                                    [before[x, 0, :rank] for x in slot_ids], 0.2, 0.0)
            close(out[b, h], ref.float())


def check_mla_prefill_skips_prefix(gen):
    """DeepSeek's MHA prefill: per-head K/V of the new tokens against a latent pool -> the prefix is skipped."""
    heads, qk_dim, v_dim, ext_lens = 4, 12, 8, [3, 5]
    k_buf, v_buf = mla_pool(32, 16, 8, gen)
    total = sum(ext_lens)
    q = torch.randn(total, heads, qk_dim, generator=gen)
    k = torch.randn(total, heads, qk_dim, generator=gen)
    v = torch.randn(total, heads, v_dim, generator=gen)
    out = torch.empty(total, heads, v_dim)
    req_to_token = torch.arange(64, dtype=torch.int32).view(2, 32) % 32
    # seq_lens claim a cached prefix of 2 tokens: the kernel must not read the (latent) pool for it.
    OPS.extend_attention_cpu(q, k, v, out, k_buf, v_buf, 1.0, 1.0, req_to_token, torch.tensor([0, 1]),
                             torch.tensor([e + 2 for e in ext_lens]), torch.tensor(ext_lens, dtype=torch.int32),
                             torch.tensor([0, ext_lens[0]], dtype=torch.int32), max(ext_lens), 0.3, 0.0, False, 0,
                             None, None, None, True)
    start = 0
    for n in ext_lens:
        for i in range(n):
            for h in range(heads):
                ref = ref_attention_row(q[start + i, h], [k[start + j, h] for j in range(i + 1)],
                                        [v[start + j, h] for j in range(i + 1)], 0.3, 0.0)
                close(out[start + i, h], ref.float())
        start += n


def check_extend_attention_cpu():
    check_mla_prefill_skips_prefix(torch.Generator().manual_seed(11))
    gen = torch.Generator().manual_seed(1)
    heads, kv_heads, dim, slots = 4, 2, 8, 128
    prefix_lens, ext_lens = [3, 0, 6], [4, 2, 4]
    bs = len(prefix_lens)
    for mode in ("causal", "tree", "full", "window"):
        k_buf, v_buf = pool(slots, kv_heads, dim, gen)
        req_to_token = torch.zeros(4, 32, dtype=torch.int32)
        rows = torch.tensor([3, 1, 0])
        perm = torch.randperm(slots, generator=gen)
        used = 0
        for b in range(bs):
            n = prefix_lens[b] + ext_lens[b]
            req_to_token[rows[b], :n] = perm[used : used + n].int()
            used += n
        total = sum(ext_lens)
        q = torch.randn(total, heads, dim, generator=gen)
        k_ext = torch.randn(total, kv_heads, dim, generator=gen)
        v_ext = torch.randn(total, kv_heads, dim, generator=gen)
        starts = [sum(ext_lens[:b]) for b in range(bs)]
        for b in range(bs):  # the backend stores the new tokens' KV before the kernel runs
            for i in range(ext_lens[b]):
                slot = int(req_to_token[rows[b], prefix_lens[b] + i])
                k_buf[slot], v_buf[slot] = k_ext[starts[b] + i], v_ext[starts[b] + i]
        tree = None
        if mode == "tree":  # random ancestor sets: every row sees itself and column 0
            blocks = []
            for n in ext_lens:
                m = torch.rand(n, n, generator=gen) < 0.5
                m = torch.tril(m)
                m[:, 0] = True
                m.fill_diagonal_(True)
                blocks.append(m.flatten())
            tree = torch.cat(blocks)
        window = 3 if mode == "window" else 0
        out = torch.empty(total, heads, dim)
        OPS.extend_attention_cpu(
            q, k_ext, v_ext, out, k_buf, v_buf, 1.0, 1.0, req_to_token, rows,
            torch.tensor([p + e for p, e in zip(prefix_lens, ext_lens)]),
            torch.tensor(ext_lens, dtype=torch.int32), torch.tensor(starts, dtype=torch.int32),
            max(ext_lens), 0.25, 0.0, False, window, None, None, tree, mode != "full")
        mask_off = 0
        for b in range(bs):
            p, n = prefix_lens[b], ext_lens[b]
            slot_ids = [int(s) for s in req_to_token[rows[b], : p + n]]
            for i in range(n):
                qpos = p + i
                if mode == "tree":
                    vis = list(range(p)) + [p + j for j in range(n) if tree[mask_off + i * n + j]]
                elif mode == "full":
                    vis = list(range(p + n))
                else:
                    vis = [j for j in range(qpos + 1) if not window or qpos - j < window]
                for h in range(heads):
                    g = h // (heads // kv_heads)
                    ref = ref_attention_row(q[starts[b] + i, h], [k_buf[slot_ids[j], g] for j in vis],
                                            [v_buf[slot_ids[j], g] for j in vis], 0.25, 0.0)
                    close(out[starts[b] + i, h], ref.float())
            mask_off += n * n


# ------------------------------------------- attention conventions pinned to SGLang 0.5.23


def _extend_case(gen, prefix_lens, ext_lens, heads=4, kv_heads=2, dim=8, slots=128):
    """A paged extend batch whose new tokens' KV the backend has already stored in the pool."""
    k_buf, v_buf = pool(slots, kv_heads, dim, gen)
    req_to_token = torch.zeros(4, 32, dtype=torch.int32)
    rows = torch.tensor([3, 1, 0][: len(prefix_lens)])
    perm = torch.randperm(slots, generator=gen)
    used = 0
    for b, (p, e) in enumerate(zip(prefix_lens, ext_lens)):
        req_to_token[rows[b], : p + e] = perm[used : used + p + e].int()
        used += p + e
    total = sum(ext_lens)
    q = torch.randn(total, heads, dim, generator=gen)
    k_ext = torch.randn(total, kv_heads, dim, generator=gen)
    v_ext = torch.randn(total, kv_heads, dim, generator=gen)
    starts = [sum(ext_lens[:b]) for b in range(len(ext_lens))]
    for b, (p, e) in enumerate(zip(prefix_lens, ext_lens)):
        for i in range(e):
            slot = int(req_to_token[rows[b], p + i])
            k_buf[slot], v_buf[slot] = k_ext[starts[b] + i], v_ext[starts[b] + i]
    return dict(q=q, k_ext=k_ext, v_ext=v_ext, k_buf=k_buf, v_buf=v_buf, req_to_token=req_to_token, rows=rows,
                seq_lens=torch.tensor([p + e for p, e in zip(prefix_lens, ext_lens)]),
                ext_lens=torch.tensor(ext_lens, dtype=torch.int32), starts=torch.tensor(starts, dtype=torch.int32),
                prefix_lens=prefix_lens, heads=heads, kv_heads=kv_heads, dim=dim)


def _run_extend(c, *, k_scale=1.0, v_scale=1.0, scale=0.25, cap=0.0, window=0, sinks=None, with_new_kv=True):
    out = torch.empty(c["q"].shape)
    OPS.extend_attention_cpu(
        c["q"], c["k_ext"] if with_new_kv else None, c["v_ext"] if with_new_kv else None, out, c["k_buf"], c["v_buf"],
        k_scale, v_scale, c["req_to_token"], c["rows"], c["seq_lens"], c["ext_lens"], c["starts"],
        int(c["ext_lens"].max()), scale, cap, False, window, None, sinks, None, True)
    return out


def _expect_extend(c, visible, *, k_scale=1.0, v_scale=1.0, scale=0.25, cap=0.0, sinks=None):
    """Reference: prefix KV from the pool times its scale, new tokens' KV as given; visible(b, qpos, kpos)."""
    group = c["heads"] // c["kv_heads"]
    for b, p in enumerate(c["prefix_lens"]):
        n, s = int(c["ext_lens"][b]), int(c["starts"][b])
        slots = [int(x) for x in c["req_to_token"][c["rows"][b], : p + n]]
        keys = [c["k_buf"][slots[j]] * k_scale if j < p else c["k_ext"][s + j - p] for j in range(p + n)]
        vals = [c["v_buf"][slots[j]] * v_scale if j < p else c["v_ext"][s + j - p] for j in range(p + n)]
        for i in range(n):
            vis = [j for j in range(p + n) if visible(b, p + i, j)]
            for h in range(c["heads"]):
                yield (s + i, h), ref_attention_row(c["q"][s + i, h], [keys[j][h // group] for j in vis],
                                                    [vals[j][h // group] for j in vis], scale, cap,
                                                    None if sinks is None else sinks[h])


def _close_all(out, expected):
    for (row, h), ref in expected:
        close(out[row, h], ref.float())


def _sglang_window_mask(sliding_window_size, q_len, kv_len, query_offset):
    """SGLang's own sliding-window rule for a layer's sliding_window_size (torch_native_backend.py)."""
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

    return TorchNativeAttnBackend._make_sliding_window_mask(
        q_len=q_len, kv_len=kv_len, sliding_window_size=sliding_window_size, device="cpu", query_offset=query_offset)


def check_convention_sliding_window():
    """A layer's sliding_window_size S reaches the kernel as S + 1 (intel_amx_backend.py, decode and extend);
    the kernel must then show exactly the keys SGLang's torch-native backend shows for S:
    k <= q and k >= q - S (S = -1: no window)."""
    import inspect

    from sglang.srt.layers.attention import intel_amx_backend

    assert inspect.getsource(intel_amx_backend).count("layer.sliding_window_size + 1,") == 2
    gen = torch.Generator().manual_seed(5)
    c = _extend_case(gen, [3, 0, 6], [4, 2, 4])
    for layer_window in (-1, 0, 1, 2, 4):
        out = _run_extend(c, window=layer_window + 1)
        masks = [_sglang_window_mask(layer_window if layer_window > -1 else 10**6, int(c["ext_lens"][b]),
                                     int(c["seq_lens"][b]), p) for b, p in enumerate(c["prefix_lens"])]
        _close_all(out, _expect_extend(c, lambda b, qpos, kpos: bool(masks[b][qpos - c["prefix_lens"][b], kpos])))
    # decode: the one query sits at the last position
    heads, kv_heads, dim = 4, 2, 8
    k_cache, v_cache = pool(32, kv_heads, dim, gen)
    seq_len = 9
    req_to_token = torch.arange(32, dtype=torch.int32).view(1, 32)
    q = torch.randn(1, heads, dim, generator=gen)
    for layer_window in (0, 2, 5):
        out = torch.empty(1, heads, dim)
        OPS.decode_attention_cpu(q, k_cache, v_cache, 1.0, 1.0, out, None, None, torch.tensor([seq_len - 1]),
                                 torch.zeros(1, heads, 8, dim + 1), req_to_token, torch.tensor([0]),
                                 torch.tensor([seq_len]), 0.3, 0.0, False, layer_window + 1, None, None)
        mask = _sglang_window_mask(layer_window, 1, seq_len, seq_len - 1)[0]
        vis = [j for j in range(seq_len) if mask[j]]
        assert len(vis) == layer_window + 1
        for h in range(heads):
            close(out[0, h], ref_attention_row(q[0, h], [k_cache[j, h // 2] for j in vis],
                                               [v_cache[j, h // 2] for j in vis], 0.3, 0.0).float())


def check_convention_kv_scales():
    """key_scale / value_scale multiply what is read from the pool (a quantised cache's scales); the
    extend kernel's own new-token k_extend / v_extend are used as given."""
    gen = torch.Generator().manual_seed(6)
    c = _extend_case(gen, [3, 0, 6], [4, 2, 4])
    causal = lambda b, qpos, kpos: kpos <= qpos  # noqa: E731
    _close_all(_run_extend(c, k_scale=0.5, v_scale=2.0), _expect_extend(c, causal, k_scale=0.5, v_scale=2.0))
    heads, kv_heads, dim = 4, 2, 8
    k_cache, v_cache = pool(32, kv_heads, dim, gen)
    req_to_token = torch.randperm(32, generator=gen).int().view(1, 32)
    q = torch.randn(1, heads, dim, generator=gen)
    out = torch.empty(1, heads, dim)
    OPS.decode_attention_cpu(q, k_cache, v_cache, 0.5, 3.0, out, None, None, torch.tensor([0]),
                             torch.zeros(1, heads, 8, dim + 1), req_to_token, torch.tensor([0]), torch.tensor([7]),
                             0.3, 0.0, False, 0, None, None)
    slots = [int(s) for s in req_to_token[0, :7]]
    for h in range(heads):
        close(out[0, h], ref_attention_row(q[0, h], [k_cache[s, h // 2] * 0.5 for s in slots],
                                           [v_cache[s, h // 2] * 3.0 for s in slots], 0.3, 0.0).float())


def check_convention_extend_reads_new_kv_from_the_pool():
    """k_extend = v_extend = None (Gemma4's KV-shared layers in intel_amx_backend.py): the new tokens'
    KV come from the pool, where the sharing layer wrote them; same result as passing them."""
    gen = torch.Generator().manual_seed(7)
    c = _extend_case(gen, [3, 0, 6], [4, 2, 4])
    given, from_pool = _run_extend(c), _run_extend(c, with_new_kv=False)
    close(from_pool, given, 0)
    c["k_ext"] = torch.zeros_like(c["k_ext"])  # proves the pool, not k_extend, was read
    close(_run_extend(c, with_new_kv=False), given, 0)


def check_convention_extend_sinks_and_logit_cap():
    gen = torch.Generator().manual_seed(8)
    c = _extend_case(gen, [3, 0, 6], [4, 2, 4])
    causal = lambda b, qpos, kpos: kpos <= qpos  # noqa: E731
    sinks = torch.randn(c["heads"], generator=gen)
    for cap, use_sinks in ((5.0, False), (0.0, True), (2.0, True)):
        s = sinks if use_sinks else None
        _close_all(_run_extend(c, cap=cap, sinks=s), _expect_extend(c, causal, cap=cap, sinks=s))


def check_convention_index_dtypes():
    """The C++ kernels refuse index tensors of other dtypes (TORCH_CHECK); so must the stand-in."""
    gen = torch.Generator().manual_seed(9)
    c = _extend_case(gen, [3], [2])
    bad = {"req_to_token": c["req_to_token"].short(), "seq_lens": c["seq_lens"].int(), "rows": c["rows"].int(),
           "ext_lens": c["ext_lens"].long(), "starts": c["starts"].long()}
    for name, value in bad.items():
        try:
            _run_extend({**c, name: value})
        except RuntimeError as exc:
            assert str(exc).startswith("extend: expect"), exc
        else:
            raise AssertionError(f"extend accepted {name} as {value.dtype}")
    _run_extend({**c, "req_to_token": c["req_to_token"].long(), "ext_lens": c["ext_lens"].long(),
                 "starts": c["starts"].long()})  # int64 indices throughout are fine
    q, out = torch.randn(1, 4, 8), torch.empty(1, 4, 8)
    k_cache, v_cache = pool(8, 2, 8, gen)
    good = dict(req_to_token=torch.zeros(1, 8, dtype=torch.int32), rows=torch.tensor([0]), seq_lens=torch.tensor([1]),
                logits=torch.zeros(1, 4, 8, 9))
    for name, value in {"req_to_token": good["req_to_token"].float(), "rows": good["rows"].int(),
                        "seq_lens": good["seq_lens"].int(), "logits": good["logits"].half()}.items():
        args = {**good, name: value}
        try:
            OPS.decode_attention_cpu(q, k_cache, v_cache, 1.0, 1.0, out, None, None, torch.tensor([0]), args["logits"],
                                     args["req_to_token"], args["rows"], args["seq_lens"], 0.3, 0.0, False, 0, None,
                                     None)
        except RuntimeError as exc:
            assert str(exc).startswith("decode: expect"), exc
        else:
            raise AssertionError(f"decode accepted {name} as {value.dtype}")


CONVENTIONS = [name[len("check_convention_"):] for name in list(globals()) if name.startswith("check_convention_")]


# ---------------------------------------------------------------- kv cache


def check_copy_all_layer_kv_cache_cpu():
    gen = torch.Generator().manual_seed(2)
    buffers = [torch.randn(20, 2, 4, generator=gen) for _ in range(3)] + [torch.randn(20, 3, generator=gen)]
    before = [b.clone() for b in buffers]
    ptrs = torch.tensor([b.data_ptr() for b in buffers], dtype=torch.uint64)
    strides = torch.tensor([b.stride(0) * b.dtype.itemsize for b in buffers])
    src = torch.tensor([3, 4, 5, 9], dtype=torch.int64)
    tgt = torch.tensor([4, 5, 6, 0], dtype=torch.int64)  # overlaps src: reads precede writes
    sgl_kernel.copy_all_layer_kv_cache_cpu(ptrs, strides, tgt, src)
    for b, old in zip(buffers, before):
        expected = old.clone()
        for t, s in zip(tgt.tolist(), src.tolist()):
            expected[t] = old[s]
        close(b, expected, 0)


# ---------------------------------------------------------------- slot maps


def check_assign_req_to_token_pool_cpu():
    req_to_token = torch.full((4, 16), -7, dtype=torch.int32)
    rpi = torch.tensor([2, 0, 3])
    start, end = torch.tensor([1, 0, 5], dtype=torch.int32), torch.tensor([4, 2, 6], dtype=torch.int32)
    locs = torch.arange(100, 106, dtype=torch.int64)
    expected = req_to_token.clone()
    k = 0
    for i in range(3):
        for j in range(int(start[i]), int(end[i])):
            expected[rpi[i], j] = int(locs[k])
            k += 1
    sgl_kernel.assign_req_to_token_pool_cpu(rpi, req_to_token, start, end, locs, 16)
    close(req_to_token, expected, 0)


def check_assign_extend_cache_locs_cpu():
    req_to_token = torch.arange(64, dtype=torch.int32).view(4, 16)
    rpi = torch.tensor([3, 1])
    start, end = torch.tensor([2, 7]), torch.tensor([5, 9])
    out = torch.full((8,), -1, dtype=torch.int64)  # sized past the need: the tail stays untouched
    expected = [int(req_to_token[r, j]) for r, s, e in zip(rpi, start, end) for j in range(int(s), int(e))]
    sgl_kernel.assign_extend_cache_locs_cpu(rpi, req_to_token, start, end, out, 16)
    assert out.tolist() == expected + [-1] * (8 - len(expected)), out.tolist()


def check_assign_draft_cache_locs_contiguous_cpu():
    req_to_token = torch.arange(80, dtype=torch.int32).view(4, 20)
    rpi, seq_lens = torch.tensor([2, 0]), torch.tensor([5, 11])
    topk, steps = 2, 3
    out = torch.empty(2 * topk * steps, dtype=torch.int64)
    expected = [int(req_to_token[r, sl + j]) for r, sl in zip(rpi, seq_lens) for j in range(topk * steps)]
    sgl_kernel.assign_draft_cache_locs_contiguous_cpu(rpi, req_to_token, seq_lens, out, 20, topk, steps)
    assert out.tolist() == expected


def check_build_draft_decode_metadata_cpu():
    req_to_token = torch.randperm(4 * 24).int().view(4, 24)
    rpi, seq_lens = torch.tensor([1, 3]), torch.tensor([6, 2])
    topk, steps = 2, 3
    out = sgl_kernel.build_draft_decode_metadata_cpu(req_to_token, rpi, seq_lens, topk, steps, 24)
    assert out.shape == (4, 24) and out.dtype == torch.int32
    for b in range(2):
        src = req_to_token[rpi[b]].tolist()
        sl = int(seq_lens[b])
        for k in range(topk):
            row = out[b * topk + k].tolist()
            assert row[:sl] == src[:sl]
            assert row[sl : sl + steps] == src[sl + k * steps : sl + (k + 1) * steps]


def check_fill_bonus_tokens_cpu():
    accept = torch.tensor([[5, 6, 7, -1], [8, -1, -1, -1], [1, 2, 3, 4]], dtype=torch.int32)
    lens = torch.tensor([3, 1, 4], dtype=torch.int32)
    bonus = torch.zeros(3, dtype=torch.int32)
    sgl_kernel.fill_bonus_tokens_cpu(accept, lens, bonus, 4)
    assert bonus.tolist() == [7, 8, 4]


def check_fill_accept_out_cache_loc_cpu():
    accept_index = torch.tensor([[0, 2, -1], [4, -1, -1], [6, 7, 8]], dtype=torch.int32)
    locs = torch.arange(200, 209, dtype=torch.int64)
    out = torch.full((9,), -5, dtype=torch.int64)
    sgl_kernel.fill_accept_out_cache_loc_cpu(accept_index, locs, out)
    assert out.tolist() == [200, 202, 204, 206, 207, 208, -5, -5, -5]


# ---------------------------------------------------------------- draft tree


def simulate_draft_tree(topk, depth, num_draft):
    """EAGLE's tree selection on random scores: (parent_list, selected_index, parent node per node).

    Score-list entries: step 0 has topk children of the root; each later step
    has topk children of each of the topk best entries of the step before.
    parent_list holds -1, then the score-list index of each step's beams.
    """
    score, parent_entry, parent_list = {}, {}, [-1] + list(range(topk))
    for c in range(topk):
        score[c] = random.random()
        parent_entry[c] = None
    beams = list(range(topk))
    for i in range(1, depth):
        base = topk + (i - 1) * topk * topk
        entries = []
        for j, beam in enumerate(beams):
            for c in range(topk):
                x = base + j * topk + c
                score[x] = score[beam] * random.uniform(0.05, 0.95)
                parent_entry[x] = beam
                entries.append(x)
        beams = sorted(entries, key=lambda x: -score[x])[:topk]
        if i < depth - 1:
            parent_list += beams
    chosen = sorted(sorted(score, key=lambda x: -score[x])[: num_draft - 1])
    node_of = {x: k + 1 for k, x in enumerate(chosen)}
    parents = [None] + [0 if parent_entry[x] is None else node_of[parent_entry[x]] for x in chosen]
    return parent_list, chosen, parents


def tree_reference(parents, seq_len):
    n = len(parents)
    children = {p: sorted(i for i in range(1, n) if parents[i] == p) for p in range(n)}
    next_token = [children[p][0] if children[p] else -1 for p in range(n)]
    next_sibling = [-1] * n
    for p in range(n):
        for a, b in zip(children[p], children[p][1:]):
            next_sibling[a] = b
    ancestors = []
    for i in range(n):
        chain, j = {i, 0}, i
        while parents[j] is not None:
            j = parents[j]
            chain.add(j)
        ancestors.append(chain)
    positions = [seq_len + len(a) - 1 for a in ancestors]
    return next_token, next_sibling, ancestors, positions


def check_build_tree_kernel_efficient_cpu():
    random.seed(3)
    for topk, depth, num_draft in ((1, 3, 4), (2, 3, 6), (4, 4, 8), (1, 1, 2)):
        seq_lens = [7, 3]
        bs = len(seq_lens)
        trees = [simulate_draft_tree(topk, depth, num_draft) for _ in range(bs)]
        width = topk * (depth - 1) + 1 if depth > 1 else 0
        parent_list = torch.tensor([t[0][:width] for t in trees], dtype=torch.int64).view(bs, width)
        selected = torch.tensor([t[1] for t in trees], dtype=torch.int64)
        for mode in (1, 0):
            n = num_draft
            size = bs * n * n if mode == 1 else (sum(seq_lens) + bs * n) * n
            # random, not SGLang's all-True fill: the op must write every tree cell and leave the
            # FULL_MASK prefix columns as the caller set them
            before = torch.rand(size, generator=torch.Generator().manual_seed(topk * 10 + mode)) < 0.5
            mask = before.clone()
            positions = torch.empty(bs * n, dtype=torch.int64)
            ri = torch.empty(bs, n, dtype=torch.int64)
            rnt = torch.full((bs, n), -1, dtype=torch.int64)
            rns = torch.full((bs, n), -1, dtype=torch.int64)
            sgl_kernel.build_tree_kernel_efficient_cpu(
                parent_list, selected, torch.tensor(seq_lens), mask, positions, ri, rnt, rns,
                topk, depth, n, mode)
            offset = 0
            for b in range(bs):
                nt, ns, anc, pos = tree_reference(trees[b][2], seq_lens[b])
                assert rnt[b].tolist() == nt, (rnt[b].tolist(), nt)
                assert rns[b].tolist() == ns, (rns[b].tolist(), ns)
                assert ri[b].tolist() == list(range(b * n, (b + 1) * n))
                assert positions[b * n : (b + 1) * n].tolist() == pos
                row_len = n if mode == 1 else seq_lens[b] + n
                prefix = 0 if mode == 1 else seq_lens[b]
                for i in range(n):
                    row = mask[offset + i * row_len : offset + (i + 1) * row_len].tolist()
                    assert row[:prefix] == before[offset + i * row_len : offset + i * row_len + prefix].tolist()
                    assert [j for j in range(n) if row[prefix + j]] == sorted(anc[i])
                offset += n * row_len


def check_verify_tree_greedy_cpu():
    random.seed(4)
    for topk, depth, num_draft in ((1, 3, 4), (2, 3, 6), (3, 4, 8)):
        for _ in range(30):
            bs, n, steps = 3, num_draft, depth + 1
            parents_per = [simulate_draft_tree(topk, depth, n)[2] for _ in range(bs)]
            rnt = torch.full((bs, n), -1, dtype=torch.int64)
            rns = torch.full((bs, n), -1, dtype=torch.int64)
            refs = [tree_reference(p, 0) for p in parents_per]
            for b, (nt, ns, _, _) in enumerate(refs):
                rnt[b], rns[b] = torch.tensor(nt), torch.tensor(ns)
            ri = torch.arange(bs * n).view(bs, n)
            cand = torch.randint(0, 3, (bs, n))
            target = torch.randint(0, 3, (bs, n))
            predicts = torch.full((bs * n,), -9, dtype=torch.int32)
            accept_index = torch.full((bs, steps), -1, dtype=torch.int32)
            accept_num = torch.empty(bs, dtype=torch.int32)
            sgl_kernel.verify_tree_greedy_cpu(
                predicts=predicts, accept_index=accept_index, accept_token_num=accept_num,
                candidates=cand, retrive_index=ri, retrive_next_token=rnt,
                retrive_next_sibling=rns, target_predict=target)
            expected_predicts = [-9] * (bs * n)
            for b in range(bs):
                parents = parents_per[b]
                path, node = [0], 0
                while len(path) < steps:
                    kids = [i for i in range(1, n) if parents[i] == node]
                    match = [k for k in kids if int(cand[b, k]) == int(target[b, node])]
                    if not match:
                        break
                    node = match[0]
                    path.append(node)
                flat = [b * n + i for i in path]
                assert accept_index[b].tolist() == flat + [-1] * (steps - len(flat)), (accept_index[b], flat)
                assert int(accept_num[b]) == len(path) - 1
                for i in path:
                    expected_predicts[b * n + i] = int(target[b, i])
            assert predicts.tolist() == expected_predicts


# ---------------------------------------------------------------- sampling verify


def tree_sampling_inputs(topk, depth, n, bs, vocab, gen, peaked=False):
    """A random draft tree per request, its retrive_* arrays, candidates, coins and target probs."""
    parents_per = [simulate_draft_tree(topk, depth, n)[2] for _ in range(bs)]
    rnt = torch.full((bs, n), -1, dtype=torch.int64)
    rns = torch.full((bs, n), -1, dtype=torch.int64)
    for b, parents in enumerate(parents_per):
        nt, ns, _, _ = tree_reference(parents, 0)
        rnt[b], rns[b] = torch.tensor(nt), torch.tensor(ns)
    logits = torch.randn(bs, n, vocab, generator=gen) * (3.0 if peaked else 1.0)
    logits[torch.rand(bs, n, vocab, generator=gen) < 0.2] = float("-inf")  # some tokens have no mass
    return dict(
        parents=parents_per, retrive_index=torch.arange(bs * n).view(bs, n), retrive_next_token=rnt,
        retrive_next_sibling=rns, candidates=torch.randint(0, vocab, (bs, n), generator=gen),
        coins=torch.rand(bs, n, generator=gen), final_coins=torch.rand(bs, generator=gen),
        target_probs=logits.softmax(-1),
    )


def run_tree_sampling(inp, steps, threshold_single=1.0, threshold_acc=1.0, op=None):
    bs, n = inp["candidates"].shape
    out = dict(
        predicts=torch.full((bs * n,), -9, dtype=torch.int32),
        accept_index=torch.full((bs, steps), -1, dtype=torch.int32),
        accept_token_num=torch.empty(bs, dtype=torch.int32),
        draft_probs=torch.zeros_like(inp["target_probs"]),
    )
    (op or sgl_kernel.tree_speculative_sampling_target_only)(
        predicts=out["predicts"], accept_index=out["accept_index"], accept_token_num=out["accept_token_num"],
        candidates=inp["candidates"], retrive_index=inp["retrive_index"],
        retrive_next_token=inp["retrive_next_token"], retrive_next_sibling=inp["retrive_next_sibling"],
        uniform_samples=inp["coins"], uniform_samples_for_final_sampling=inp["final_coins"],
        target_probs=inp["target_probs"], draft_probs=out["draft_probs"],
        threshold_single=threshold_single, threshold_acc=threshold_acc, deterministic=True)
    return out


def tree_sampling_reference(inp, b, steps, threshold_single, threshold_acc):
    """One request, from the parent list: (accepted node path, committed tokens, rejected (node, token))."""
    parents, n = inp["parents"][b], inp["candidates"].shape[1]
    cand = inp["candidates"][b].tolist()
    probs = inp["target_probs"][b].double().tolist()
    node, coin, path, tokens, rejected = 0, float(inp["coins"][b, 0]), [0], [], []
    while len(path) < steps:
        acc, chosen = 0.0, None
        for kid in [i for i in range(1, n) if parents[i] == node]:
            q = probs[node][cand[kid]]
            acc += q
            if q > 0 and (coin < acc / max(threshold_acc, 1e-9) or q >= threshold_single):
                chosen = kid
                break
            rejected.append((node, cand[kid]))
        if chosen is None:
            break
        node, coin = chosen, float(inp["coins"][b, chosen])
        path.append(node)
        tokens.append(cand[node])
    weights = [0.0 if (node, t) in rejected else p for t, p in enumerate(probs[node])]
    u, total, sampled = float(inp["final_coins"][b]) * sum(weights), 0.0, None
    for t, w in enumerate(weights):
        total += w
        if w > 0 and total > u:
            sampled = t
            break
    if sampled is None:
        sampled = max(t for t, w in enumerate(weights) if w > 0)
    return path, tokens + [sampled], rejected


def check_tree_speculative_sampling_target_only():
    random.seed(5)
    gen = torch.Generator().manual_seed(5)
    op_via_registry = OPS.tree_speculative_sampling_target_only
    for topk, depth, n in ((1, 3, 4), (2, 3, 6), (3, 4, 8)):
        for thresholds in ((1.0, 1.0), (0.4, 0.7)):
            for trial in range(20):
                steps, bs, vocab = depth + 1, 3, 7
                inp = tree_sampling_inputs(topk, depth, n, bs, vocab, gen, peaked=trial % 2 == 1)
                out = run_tree_sampling(inp, steps, *thresholds, op=op_via_registry if trial == 0 else None)
                for b in range(bs):
                    path, tokens, rejected = tree_sampling_reference(inp, b, steps, *thresholds)
                    flat = [b * n + i for i in path]
                    assert out["accept_index"][b].tolist() == flat + [-1] * (steps - len(flat))
                    assert int(out["accept_token_num"][b]) == len(path) - 1
                    assert [int(out["predicts"][i]) for i in flat] == tokens, (tokens, out["predicts"])
                    written = {(i, t) for i, t in (out["draft_probs"][b] != 0).nonzero().tolist()}
                    assert written == {(i, t) for i, t in rejected if inp["target_probs"][b, i, t] > 0}
    # With SGLang's coins (uniform), the committed tokens follow the target's distribution whatever
    # the draft proposes: the first one follows the root's, the one after an accepted draft its node's.
    for topk, depth, n in ((1, 3, 4), (2, 2, 5)):
        bs, vocab = 6000, 6
        inp = tree_sampling_inputs(topk, depth, n, 1, vocab, gen)
        inp["candidates"] = torch.randperm(vocab, generator=gen)[:n].view(1, n)  # siblings differ, as in EAGLE
        inp = {k: v.expand(bs, *v.shape[1:]).contiguous() if torch.is_tensor(v) and k not in ("coins", "final_coins")
               else v for k, v in inp.items()}
        inp["parents"], inp["retrive_index"] = inp["parents"] * bs, torch.arange(bs * n).view(bs, n)
        inp["coins"], inp["final_coins"] = torch.rand(bs, n, generator=gen), torch.rand(bs, generator=gen)
        out = run_tree_sampling(inp, depth + 1)
        committed = out["predicts"].view(bs, n).long()
        first = committed[:, 0]
        tv = 0.5 * (torch.bincount(first, minlength=vocab).double() / bs - inp["target_probs"][0, 0].double()).abs().sum()
        assert tv < 0.03, f"first committed token: total variation {tv:.3f} from the target"
        node = int(inp["retrive_next_token"][0, 0])  # the first child: its token accepted, then node's turn
        took = (out["accept_index"][:, 1] == node) & (out["accept_token_num"] >= 1)
        if took.sum() > 1000:
            second = committed[took, node]
            tv = 0.5 * (torch.bincount(second, minlength=vocab).double() / int(took.sum())
                        - inp["target_probs"][0, node].double()).abs().sum()
            assert tv < 0.05, f"token after an accepted draft: total variation {tv:.3f} from the target"


RENORMS = ["top_k_renorm_prob", "top_p_renorm_prob"]


def _renorm_rows(probs, pivots):
    out = []
    for row, pivot in zip(probs.tolist(), pivots):
        kept = [p if p >= pivot else 0.0 for p in row]
        total = sum(kept)
        out.append([p / total for p in kept])
    return torch.tensor(out)


def check_renorm_top_k_renorm_prob():
    """FlashInfer's top-k renorm, row by row: the k-th largest value is the pivot, ties kept. Distinct
    values keep exactly k entries; a tie at the pivot keeps both."""
    gen = torch.Generator().manual_seed(7)
    probs = torch.rand(6, 50, generator=gen).softmax(-1)
    probs[5, :4] = probs[5, 4]  # a tie across the pivot
    ks = torch.tensor([1, 2, 5, 50, 80, 3])
    expected = _renorm_rows(probs, [sorted(r, reverse=True)[min(int(k), 50) - 1] for r, k in zip(probs.tolist(), ks)])
    out = sgl_kernel.top_k_renorm_prob(probs, ks)
    close(out, expected, 1e-6)
    assert [int((out[i] > 0).sum()) for i in range(4)] == [1, 2, 5, 50]
    assert int((out[5] > 0).sum()) >= 3 and torch.allclose(out.sum(-1), torch.ones(6))
    close(sgl_kernel.top_k_renorm_prob(probs, 5), sgl_kernel.top_k_renorm_prob(probs, torch.tensor([5])), 0)


def check_renorm_top_p_renorm_prob():
    """FlashInfer's top-p renorm, row by row: ascending, the first value whose cumulative mass reaches
    1 - p is the pivot; the kept mass is at least p and dropping the smallest kept value goes below it."""
    gen = torch.Generator().manual_seed(8)
    probs = torch.rand(5, 40, generator=gen).pow(3).softmax(-1)
    ps = torch.tensor([0.1, 0.5, 0.9, 1.0, 0.75])
    pivots = []
    for row, p in zip(probs.tolist(), ps.tolist()):
        ordered, cdf = sorted(row), 0.0
        for value in ordered:
            cdf += value
            if cdf >= 1.0 - p:
                pivots.append(value)
                break
        else:
            pivots.append(ordered[-1])
    out = sgl_kernel.top_p_renorm_prob(probs, ps)
    close(out, _renorm_rows(probs, pivots), 1e-5)
    for i, p in enumerate(ps.tolist()):
        kept = probs[i][out[i] > 0]
        assert kept.sum() >= p - 1e-6 and kept.sum() - kept.min() < p + 1e-6


def main():
    results = {}
    groups = (("", "check_", sorted(sgl_kernel.OPS)), ("convention:", "check_convention_", CONVENTIONS),
              ("renorm:", "check_renorm_", RENORMS))
    for key_prefix, check_prefix, names in groups:
        for name in names:
            try:
                globals()[f"{check_prefix}{name}"]()
                results[f"{key_prefix}{name}"] = "ok"
            except Exception:
                results[f"{key_prefix}{name}"] = traceback.format_exc()
    results["__registered__"] = sorted(n for n in sgl_kernel.OPS if hasattr(OPS, n))
    results["__has_convert_weight_packed__"] = hasattr(OPS, "convert_weight_packed")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
