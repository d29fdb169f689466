"""Where a scheduler sits in SGLang's parallel layout, and whether it is the one that publishes.

One adapter for the two ways SGLang keeps ranks: 0.5.23's ``runtime_context.get_parallel()``
and the scheduler attributes of older releases (``Scheduler.__init__`` in 0.5.10 sets
``tp_rank``, ``pp_rank``, ``dp_rank``, ``attn_tp_rank`` ... from its arguments). The names are
SGLang's own. The publishers are SGLang's entry ranks (``managers/scheduler.py`` of 0.5.23 tests
``pp_rank == 0 and attn_tp_rank == 0 and attn_cp_rank == 0`` for its request intake): one per
attention-DP group under DP attention, one per DP replica otherwise, on the last pipeline stage
only, which holds the draft (``speculative/eagle_worker_v2.py``: stage 0 of several has
``_draft_worker=None``). Startup only; the result is kept in ``Shim.topology``.
"""

from __future__ import annotations

import inspect

#: SGLang's names for the widths the hello reports
PARALLEL_FIELDS = ("tp_size", "dp_size", "pp_size", "attn_tp_size", "attn_dp_size", "ep_size")
RANK_FIELDS = ("tp_rank", "dp_rank", "attn_tp_rank", "attn_dp_rank", "attn_cp_rank", "pp_rank")


def _int(value, default: int) -> int:
    return value if type(value) is int else default


def _get(obj, name: str):
    try:
        return getattr(obj, name, None)
    except Exception:  # a property of this release that is not written in this process
        return None


def read(scheduler, args=(), kwargs=None) -> tuple[dict, dict]:
    """``(parallel, rank)`` of the scheduler being built (``args``/``kwargs``: its ``__init__``'s)."""
    values: dict = {}
    try:
        values.update(inspect.signature(type(scheduler).__init__).bind(scheduler, *args[1:], **(kwargs or {})).arguments)
    except (TypeError, ValueError):
        pass
    for name in PARALLEL_FIELDS + RANK_FIELDS + ("moe_ep_size",):
        if values.get(name) is None:
            values[name] = _get(scheduler, name)
    parallel = None
    try:  # 0.5.23: the process-wide parallel context, published before the scheduler is built
        from sglang.srt.runtime_context import get_parallel

        parallel = get_parallel()
    except ImportError:
        pass
    for name in PARALLEL_FIELDS + RANK_FIELDS + ("num_dp_ranks",):
        if parallel is not None and values.get(name) is None:
            values[name] = _get(parallel, name)
    sa = getattr(scheduler, "server_args", None) or values.get("server_args")
    for name in ("tp_size", "dp_size", "pp_size", "ep_size"):
        if values.get(name) is None:
            values[name] = _get(sa, name)
    tp_size, dp_size = _int(values.get("tp_size"), 1), _int(values.get("dp_size"), 1)
    dp_attention = bool(getattr(sa, "enable_dp_attention", False))
    # 0.5.10 has no attn_dp_size: compute_dp_attention_world_info's dp_size if enabled else 1
    attn_dp_size = _int(values.get("attn_dp_size"), dp_size if dp_attention else 1)
    attn_tp_size = _int(values.get("attn_tp_size"), max(tp_size // max(attn_dp_size, 1), 1))
    tp_rank = _int(values.get("tp_rank"), 0)
    parallel_out = {
        "tp_size": tp_size, "dp_size": dp_size, "pp_size": _int(values.get("pp_size"), 1),
        "attn_tp_size": attn_tp_size, "attn_dp_size": attn_dp_size,
        "ep_size": _int(values.get("ep_size"), _int(values.get("moe_ep_size"), 1)),
    }
    rank = {
        "tp_rank": tp_rank, "dp_rank": _int(values.get("dp_rank"), 0),
        "attn_tp_rank": _int(values.get("attn_tp_rank"), tp_rank % attn_tp_size),
        "attn_dp_rank": _int(values.get("attn_dp_rank"), tp_rank // attn_tp_size if attn_dp_size > 1 else 0),
        "attn_cp_rank": _int(values.get("attn_cp_rank"), 0), "pp_rank": _int(values.get("pp_rank"), 0),
    }
    # publishers: one per DP scheduler (0.5.23 counts replicas x attention-DP groups, one of them 1;
    # 0.5.10's dp_size counts the attention-DP groups itself)
    parallel_out["publishers"] = _int(values.get("num_dp_ranks"), max(dp_size, attn_dp_size))
    return parallel_out, rank


def publisher_index(parallel: dict, rank: dict) -> int:
    """Which of the server's publishers this scheduler is: its attention-DP rank under DP attention
    (the controller hands that out as ``dp_rank`` there), its DP replica otherwise."""
    return rank["attn_dp_rank"] if parallel["attn_dp_size"] > 1 else rank["dp_rank"]


def entry_rank(parallel: dict, rank: dict) -> tuple[bool, str]:
    """Whether this scheduler publishes, and the reason in words (kept in the hello)."""
    last_stage = parallel["pp_size"] - 1
    if rank["pp_rank"] != last_stage:
        return False, f"pipeline stage {rank['pp_rank']} of {parallel['pp_size']} holds no draft (the last one publishes)"
    if rank["attn_tp_rank"] != 0 or rank["attn_cp_rank"] != 0:
        return False, f"attn_tp_rank {rank['attn_tp_rank']} / attn_cp_rank {rank['attn_cp_rank']} is not SGLang's entry rank"
    if parallel["attn_dp_size"] > 1:
        why = f"attn_tp_rank 0 of attention-DP rank {rank['attn_dp_rank']} (DP attention, {parallel['attn_dp_size']} groups)"
    elif parallel["dp_size"] > 1:
        why = f"tp_rank 0 of DP replica {rank['dp_rank']} ({parallel['dp_size']} replicas)"
    else:
        why = "tp_rank 0: SGLang's entry rank"
    if parallel["pp_size"] > 1:
        why += f", last pipeline stage ({rank['pp_rank']})"
    return True, why
