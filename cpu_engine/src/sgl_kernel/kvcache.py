"""KV-pool slot moves across every layer buffer at once.

SGLang hands this op raw buffer addresses (``data_ptrs``, uint64) and row
strides in bytes, not tensors, because the GPU kernel walks all layers in one
launch. Here each address is wrapped as a byte view with ctypes and rows are
moved with ordinary indexing.
"""

import ctypes

import torch


def copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt_loc, src_loc):
    """For every buffer: row[tgt_loc[j]] = row[src_loc[j]] (all rows read before any is written)."""
    if tgt_loc.numel() == 0:
        return
    tgt, src = tgt_loc.long(), src_loc.long()
    rows = int(max(tgt.max(), src.max())) + 1
    for ptr, stride in zip(data_ptrs.tolist(), strides.tolist()):
        raw = (ctypes.c_uint8 * (rows * stride)).from_address(ptr)
        buf = torch.frombuffer(raw, dtype=torch.uint8).view(rows, stride)
        buf[tgt] = buf[src].clone()
