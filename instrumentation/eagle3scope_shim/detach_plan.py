"""Which hooks a server needs, decided once at its first step (:func:`plan_first_step`): a hook whose
work another hook can do from what it already reads is taken out of SGLang's code (each hook call
costs µs after a forward has swept the caches), and the shim's :class:`~eagle3scope_shim.shim_state.HookPlan`
says which hook does that work now.
"""

from __future__ import annotations

from eagle3scope_shim import graph_capture, ring, seams

#: v2's draft and draft extend around verify: taken out with the forward hook (verify's hook adds their passes)
DRAFT_SEAM, EXTEND_SEAM = "v2.draft", "v2.draft_extend"
#: where SGLang settles a round per request (the commit hook), taken out where no round is discarded
COMMIT_SEAM = "commit.resolve"


def plan_first_step(shim, worker) -> None:
    """At the first step, with the worker SGLang built: take out what this server does not need."""
    _detach_counting_forwards(shim, worker)
    _detach_draft_and_extend(shim, worker)
    _detach_commit(shim)


def _detach_counting_forwards(shim, worker) -> None:
    """On a server where no draft pass can replay a graph (no draft graph runner: a CPU server, or
    ``--disable-cuda-graph``), every caller's draft call runs its forwards eagerly, always as many
    (``_uncounted``), and the caller knows their width and fc. The draft-forward hook would only
    count them, three calls a round that cost more than the rest of the round's hooks together
    (BENCHMARKS.md, "Shim"), so its wrapper is taken out and the callers add the passes. Not when
    a caller cannot tell fc (no embedding width), the draft's forward is not one the shim hooks, or
    adaptive steps may swap graph runners in later (eagle_worker_v2.py 0.5.23, ``apply_runtime_state``)."""
    load = shim.load
    kind = load.workers[-1][0] if load.workers else None
    if kind is None or "draft_model" in shim.unobserved or (load.draft_embed_width is None and not load.draft_fc_always):
        return
    if getattr(worker, "adaptive_controller", None) is not None:
        return
    if any(graph_capture.replayed_passes(kind, worker).values()):
        return
    for seam in seams.OBSERVING_SEAMS["draft_model"]:
        if shim.seams.detach(seam):
            shim.plan.forwards_at_callers = True


def _detach_draft_and_extend(shim, worker) -> None:
    """Where the forward hook is out on a v2 server, the draft and draft-extend hooks go too, two calls
    a round less: around verify, SGLang's ``forward_batch_generation`` only drafts from
    ``batch.spec_info`` (unless it already holds a verify input) and hands the extend verify's result,
    and verify gets the draft's tokens in ``batch.spec_info``. So the step's hook reads the draft's
    width, verify's hook the tokens and the extend's width and adds the passes, and the draft is timed
    from the step's start to verify's, the extend from verify's end to the step's (``draft_ms``,
    ``extend_ms``). Not with 0 steps, where SGLang drafts nothing and may stub the extend out, nor
    under pipeline parallelism, whose last stage drafts the next round at the end of the step (the PP
    tail-draft, whose tokens are the next round's: verify's hook takes the verified ones there,
    ``HookPlan.tail_draft``), nor where the device times the phases: only those hooks mark the draft's
    and the extend's boundaries. Each hook's work moves only once it is out."""
    plan = shim.plan
    plan.tail_draft = ((shim.topology or {}).get("parallel") or {}).get("pp_size", 1) > 1
    kind = shim.load.workers[-1][0] if shim.load.workers else None
    if ring.times_device(getattr(shim.scheduler, "server_args", None)):
        return  # their hooks mark the draft's and the extend's device boundaries (ring.mark)
    if plan.forwards_at_callers and kind == "v2" and (getattr(worker, "speculative_num_steps", 0) or 0) > 0 and not plan.tail_draft:
        plan.draft_at_verify = shim.seams.detach(DRAFT_SEAM)
        plan.extend_at_verify = shim.seams.detach(EXTEND_SEAM)


def _detach_commit(shim) -> None:
    """A scheduler without the overlap loop processes each round's result right after running it and
    never runs a finished request one more tick, so it discards no round: a step is published as it
    ends, and the commit hook (one call a round) is taken out. SGLang runs speculative decoding on a
    CPU that way (``_disable_overlap_schedule_for_cpu``, arg_groups/speculative_hook.py 0.5.23), and
    any server started with ``--disable-overlap-schedule``. A scheduler that does not say
    (``enable_overlap`` missing) keeps the hook."""
    if getattr(shim.scheduler, "enable_overlap", True) is False:
        shim.plan.published_at_step = shim.seams.detach(COMMIT_SEAM)
