"""One change on every TP rank in the same iteration: the adapter of the request-broadcast seam family.

Each scheduler iteration the TP rank that pulls requests broadcasts them to the other TP ranks
with ``broadcast_pyobj`` over the TP CPU group, and every rank then dispatches the same list
(``SchedulerRequestReceiver._broadcast_reqs_across_ranks``, managers/scheduler_components/
request_receiver.py, 0.5.14 to 0.5.23; up to 0.5.12 it is inline in ``Scheduler.recv_requests``,
which the shim does not ride). A change rides that broadcast as one small marked ``dict`` appended
by the channel's rank (:func:`inject`) and taken out again on every rank right after the
broadcast (:func:`take`), before SGLang's dispatcher (which raises on unknown objects) sees it.
Under DP attention SGLang sends non-request objects over the full TP group from its first rank
(``control_reqs``), unless control messages are kept local to each attention-DP group
(``enable_dp_attention_local_control_broadcast``, or an elastic-EP joiner in 0.5.23): then a
change would reach one group only and is refused (:func:`blocker`). Outcomes come back with
``all_gather_object`` over the same CPU group, as ``Scheduler.handle_rpc_request`` ends its RPCs
with a barrier over it: every rank knows every rank's result and takes the same next step.

Release differences live here: the TP group is the receiver's ``tp_group`` field up to 0.5.20 and
``runtime_context.get_parallel().tp_group`` in 0.5.23.
"""

from __future__ import annotations

#: the key that marks the shim's object in SGLang's broadcast list (a plain dict unpickles anywhere)
MARK = "eagle3scope.aux_change"


def inject(reqs: list, change: dict) -> list:
    """``reqs`` (what this rank broadcasts) with ``change`` riding along at the end."""
    return [*reqs, {MARK: change}]


def take(reqs: list) -> list[dict]:
    """Remove the shim's objects from a broadcast list in place; their changes, in order."""
    if dict not in map(type, reqs):  # every iteration with requests: a C-level scan, no Python loop
        return []
    found = [i for i, r in enumerate(reqs) if type(r) is dict and MARK in r]
    changes = [reqs[i][MARK] for i in found]
    for i in reversed(found):
        del reqs[i]
    return changes


def _parallel():
    try:
        from sglang.srt.runtime_context import get_parallel  # 0.5.18 on
    except ImportError:
        return None
    return get_parallel()


def tp_group(receiver):
    """SGLang's TP ``GroupCoordinator`` (``ranks``, ``rank_in_group``, ``cpu_group``)."""
    group = getattr(receiver, "tp_group", None)
    return group if group is not None else _parallel().tp_group


def gather_over(group):
    """``obj -> [obj of every rank]`` over the group's CPU (gloo) group; a single rank skips it."""
    if group.world_size == 1:
        return lambda obj: [obj]
    import torch.distributed as dist

    def gather(obj):
        out = [None] * group.world_size
        dist.all_gather_object(out, obj, group=group.cpu_group)
        return out

    return gather


def _flag(name: str, server_args):
    """A parallel setting as the release names it: the runtime context, else server args; None: unknown."""
    parallel = _parallel()
    try:
        value = getattr(parallel, name)
    except Exception:
        value = None
    return getattr(server_args, name, None) if value is None else value


def _ep_scale_joiner(server_args) -> bool | None:
    try:
        from sglang.srt.runtime_context import get_exec  # 0.5.23
    except ImportError:
        get_exec = None
    if get_exec is not None:
        try:
            return bool(get_exec().moe.is_ep_scale_joiner)
        except Exception:
            return None
    try:
        from sglang.srt.runtime_context import is_ep_scale_joiner  # 0.5.18
    except ImportError:
        return False  # releases before elastic-EP joiners
    try:
        return bool(is_ep_scale_joiner())
    except Exception:
        return None


def blocker(server_args, tp_rank: int, seam_attached: bool) -> str:
    """Why a change under TP cannot reach every TP rank from this one ("" when it can)."""
    if not seam_attached:
        return ("this release has no request broadcast the shim rides (SchedulerRequestReceiver."
                "_broadcast_reqs_across_ranks, SGLang 0.5.14 on), so other TP ranks cannot be reached")
    if tp_rank != 0:
        return (f"this is TP rank {tp_rank}: changes ride the broadcast from TP rank 0, use its control endpoint "
                "(DP rank 0's under DP attention)")
    if getattr(server_args, "enable_dp_attention", False):
        local = _flag("enable_dp_attention_local_control_broadcast", server_args)
        joiner = _ep_scale_joiner(server_args)
        if local is None or joiner is None:
            return "DP attention: cannot tell whether control messages reach every TP rank in this release"
        if local or joiner:
            return ("DP attention with local control broadcast: control messages stay inside each attention-DP "
                    "group, so a change would reach one group only")
    return ""
