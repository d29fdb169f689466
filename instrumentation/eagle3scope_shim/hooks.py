"""Hook bodies, one per seam kind named in :mod:`eagle3scope_shim.seams` (``Seam.hook``).

Each ``make_<hook>(shim, seam)`` returns an AROUND hook for that shim, built with :func:`guard.around`, so it fails
closed. Hot-path bodies (step, draft, verify, draft-extend, draft forward) read only host metadata
(shapes, forward modes, Python lists SGLang already holds) and take :func:`ring.snap` copies of
device tensors into the step's :class:`ring.HostRing` slot; the publisher thread does every
device ``tolist`` in :func:`step_body.finalize_step` and hands the slot back (a CPU tensor is listed at once:
there is no device to wait for, and it is cheaper than a clone). The draft-forward hook, which
fires on every eager draft pass, only counts passes inside the callers that read the width they
hand the draft (BENCHMARKS.md, "Shim": each hook call costs tens of µs after a forward has swept
the caches, so the round's work is done where it fires once). Where nothing can replay a graph it
is taken out, and on v2 so are the draft and draft-extend hooks, whose work verify's hook does
(:mod:`detach_plan`); without the overlap loop the commit hook goes too
(:func:`detach_plan._detach_commit`): two hook calls a round on a CPU server, step and verify, and verify's has
one body, after the call. Passes are appended as the hooks see them; fc, where a caller read the
width, and the merging are the publisher thread's (:func:`step_body.merged_passes`).
"""

from __future__ import annotations

import functools
import logging
import operator
import sys
import time
import weakref

from eagle3scope.wire.aux_layers import capture_owner
from eagle3scope_shim import aux_channel, collective, control_apply, graph_capture, loadreport, ring, seams, topology
from eagle3scope_shim.finish import make_finish
from eagle3scope_shim.guard import Rewrite, around
from eagle3scope_shim.detach_plan import COMMIT_SEAM, DRAFT_SEAM, EXTEND_SEAM, plan_first_step
from eagle3scope_shim.ring import CAPTURE_GATE, HostRing, mark, snap
from eagle3scope_shim.shim_state import Step, requested_endpoint
from eagle3scope_shim.step_body import finalize_step

_now = time.perf_counter_ns
_RID = operator.attrgetter("rid")
log = logging.getLogger("eagle3scope")


# -- process: SGLang's entry ranks publish (topology.entry_rank) -------------------------------
def make_scheduler_init(shim, seam):
    def pre(*args, **kwargs):
        return requested_endpoint()

    def post(endpoint, result, *args, **kwargs):
        if endpoint is None or shim.publisher is not None:
            return
        shim.scheduler = args[0]  # every rank: the TP collective of aux changes reaches them all
        parallel, rank = topology.read(args[0], args, kwargs)
        publishes, reason = topology.entry_rank(parallel, rank)
        index = topology.publisher_index(parallel, rank)
        shim.topology = {"parallel": parallel, "rank": rank, "index": index, "publishes": publishes, "reason": reason}
        if not publishes:
            return
        shim.confirm_registered()
        if not shim.start_publisher(endpoint, index, parallel["publishers"]):
            return  # said so on the server's log; nothing to report to
        aux_channel.start(shim, args[0], index, rank["tp_rank"])
        report_unobserved(shim, getattr(args[0], "draft_worker", None))
        loadreport.publish_startup(shim, args[0])
        _start_ring(shim, args[0])

    return around(shim, seam, pre, post)


# -- which speculative worker and draft SGLang chose, and whether the hooks see them ------------
def _observes(targets: dict[str, str], obj, family: str) -> bool:
    """Whether ``obj``'s class runs the hooked method of one of ``family``'s observing seams."""
    return _runs(targets, obj, seams.OBSERVING_SEAMS[family])


def _runs(targets: dict[str, str], obj, names) -> bool:
    """Whether ``obj``'s class runs, unchanged, the hooked method of one of the seams ``names``."""
    for name in names:
        target = targets.get(name)
        if target is None:
            continue
        module, cls_name, method = target.rsplit(".", 2)
        cls = getattr(sys.modules.get(module), cls_name, None)
        if isinstance(cls, type) and isinstance(obj, cls) and getattr(type(obj), method, None) is getattr(cls, method, None):
            return True
    return False


def _observed_classes(targets: dict[str, str], family: str) -> str:
    """The hooked classes, named as ``module.Class`` (``llama_eagle3.LlamaModel``: there are several LlamaModels)."""
    names = []
    for name in seams.OBSERVING_SEAMS[family]:
        if name in targets:
            module, cls_name, _ = targets[name].rsplit(".", 2)
            names.append(f"{module.rsplit('.', 1)[-1]}.{cls_name}")
    return ", ".join(names)


def _draft_model(worker):
    inner = getattr(worker, "draft_worker", None)
    runner = getattr(inner, "draft_runner", None) if inner is not None else getattr(worker, "model_runner", None)
    return getattr(runner, "model", None)


def report_unobserved(shim, worker) -> None:
    """Say, naming it, when the speculative worker (multi-layer EAGLE, MTP, NGRAM, DFlash, ...) or
    the draft model is one whose rounds or forwards the hooks never see: silence would read as health."""
    if worker is None:  # no speculative decoding, or a pipeline stage without the draft
        return
    targets = shim.seams.targets
    if not _observes(targets, worker, "worker"):
        _unhooked(shim, "worker", f"SGLang runs speculative decoding with {type(worker).__name__}, which the shim does not "
                  f"observe (it hooks {_observed_classes(targets, 'worker')}): no steps, acceptance or draft passes are published")
        return
    draft = _draft_model(worker)
    if draft is not None and not (_observes(targets, draft, "draft_model")
                                  or _observes(targets, getattr(draft, "model", None), "draft_model")):
        _unhooked(shim, "draft_model", f"the draft model is {type(draft).__name__}, whose forward the shim does not hook (it "
                  f"hooks {_observed_classes(targets, 'draft_model')}): steps and acceptance are observed, the width entering "
                  "the draft and whether fc ran are not")


def _unhooked(shim, part: str, detail: str) -> None:
    shim.unobserved[part] = detail  # the sticky hello repeats it: a hook frame sent at startup may be missed
    shim.report(part, "unhooked", detail)


def _start_ring(shim, scheduler) -> None:
    """Size the snapshot ring and allocate all its buffers as the scheduler starts, on its thread:
    never in a step (a pinned allocation serialises device work). SGLang has built the request
    pool by then (after the worker's ``__init__``). A scheduler without a speculative worker (a
    pipeline stage without the draft) snapshots nothing."""
    worker = getattr(scheduler, "draft_worker", None)
    if worker is None:
        return
    device = getattr(getattr(scheduler, "server_args", None), "device", None) or "cuda"
    shim.snapshots.start(str(device), _ring_capacity(worker), wake=shim.publisher.wake)


def _ring_capacity(worker) -> int:
    """Ring buffers hold one step's largest snapshot: request pool size x draft tokens. Adaptive
    steps widen a round up to their largest candidate."""
    runner = getattr(getattr(worker, "target_worker", None), "model_runner", None)
    pool = getattr(worker, "req_to_token_pool", None) or getattr(runner, "req_to_token_pool", None)
    rows = getattr(pool, "size", None) or getattr(runner, "max_running_requests", None) or 0
    steps = [getattr(worker, "speculative_num_steps", None) or 0]
    steps += list(getattr(getattr(worker, "adaptive_controller", None), "candidate_steps", None) or ())
    width = max([getattr(worker, "speculative_num_draft_tokens", None) or 0] + [int(n) + 1 for n in steps])
    return int(rows) * int(width)


#: where each hands the draft its hidden states, and the mode of its passes (seams.DRAFT_INPUTS)
_DRAFT_PATH, _DRAFT_MODE = seams.DRAFT_INPUTS[DRAFT_SEAM][2:]
_EXTEND_PATH, _EXTEND_MODE = seams.DRAFT_INPUTS[EXTEND_SEAM][2:]


def _embed_width(draft) -> int | None:
    weight = getattr(getattr(getattr(draft, "model", None), "embed_tokens", None), "weight", None)
    return None if weight is None else int(weight.shape[-1])


def _draft_facts(shim, draft) -> None:
    """What decides ``fc`` on a pass read at its caller: the draft's embedding width, or an
    EAGLE-1/2 draft (``seams.FC_ALWAYS``), whose fc runs whatever the width."""
    load = shim.load
    load.draft_embed_width = _embed_width(draft) or load.draft_embed_width
    load.draft_fc_always = _runs(shim.seams.targets, getattr(draft, "model", None), seams.FC_ALWAYS)


def make_worker_init_v2(shim, seam):
    def post(ctx, result, self, *args, **kwargs):
        if getattr(self, "_draft_worker", self) is None:  # a pipeline stage without the draft
            return
        draft = self.draft_worker.draft_runner.model
        shim.load.workers.append(("v2", self, self.target_worker.model_runner.model, draft))
        _draft_facts(shim, draft)

    return around(shim, seam, None, post)


def make_worker_init_v1(shim, seam):
    def post(ctx, result, self, *args, **kwargs):
        shim.load.workers.append(("v1", self, self.target_worker.model_runner.model, self.model_runner.model))
        _draft_facts(shim, self.model_runner.model)

    return around(shim, seam, None, post)


# -- one speculative round ----------------------------------------------------------------------
def make_step(shim, seam):
    plan = shim.plan
    finalize = functools.partial(finalize_step, shim)  # built once: no allocation per step
    modes: dict = {}  # forward mode -> (idle, extend), asked once per mode (_asked_once)
    verify_types: dict = {}  # spec_input_type -> whether it is a verify input (_draft_start)

    def pre(self, *args, **kwargs):
        if shim.publisher is None:
            return None
        channel = shim.aux_channel
        if channel is not None and channel._pending is not None:  # a call only with a change queued
            channel.apply_pending()  # between steps, on the scheduler's own thread
        batch = args[0] if args else next(iter(kwargs.values()))
        mode = batch.forward_mode
        try:  # asked once per mode, inline: a call here costs µs after a forward (BENCHMARKS.md, "Shim")
            idle, extend = modes[mode]
        except (KeyError, TypeError):
            idle, extend = _asked_once(modes, mode, _ask_mode, mode)
        if idle:  # an idle attention-DP rank's collective-only pass: nothing to report
            return None
        stale = shim.step
        if stale is not None and stale.slot is not None:  # its post never ran (SGLang raised)
            HostRing.release(stale.slot)
        if not plan.stepped:  # the first step
            plan.stepped = True
            plan_first_step(shim, self)
        step = Step()
        # provisional: a round whose verify runs is a decode round whatever the batch says (post)
        step.prefill = extend or bool(getattr(batch, "is_extend_in_batch", False))
        if plan.draft_at_verify and not extend:
            step.draft_from = _draft_start(batch, verify_types)
        shim.step = step
        return step

    def post(step, result, self, *args, **kwargs):
        if step is None:
            return
        shim.step = None
        if step.verify is not None:  # under DP spec-prefill coordination a decode rank's batch says extend
            step.prefill = False
        slot, pub = step.slot, shim.publisher
        if slot is not None:
            HostRing.record(slot)
        if step.dropped:
            if slot is not None:
                HostRing.release(slot)
            pub.drop("step")
            return
        if not step.prefill and step.verify is None:
            if slot is not None:
                HostRing.release(slot)
            return  # verify went unobserved (its hook failed): no acceptance to report
        batch = args[0] if args else next(iter(kwargs.values()))
        rids = list(map(_RID, batch.reqs))  # no comprehension: its frame is a call
        if getattr(batch, "has_grammar", True):  # SGLang's own flag: no per-request look for a free batch
            step.constrained = _constrained(batch.reqs)
        if not step.prefill:
            _request_facts(step, batch)
            step.num_steps = getattr(self, "speculative_num_steps", None)  # adaptive: this round's budget
            if step.verify_end is not None:  # the extend's hook is out: the round after verify is the extend
                step.extend_ns = _now() - step.verify_end
        step.t_ns, step.rids, step.capture = time.time_ns(), rids, loadreport.capture_now(shim)
        pending = shim.uncommitted
        key = None if plan.published_at_step or step.prefill or not rids or not shim.seams.live(COMMIT_SEAM) else _result_key(result)
        if key is None:
            while pending:  # the commit seam went away (disabled): what waited goes out as run
                _submit(shim, pending.popleft()[1], finalize)
            _submit(shim, step, finalize)
            return
        # SGLang decides which requests' rounds it commits when it processes the result (the
        # commit seam); until then the step waits, a few at most.
        pending.append((key, step))
        if len(pending) > MAX_UNCOMMITTED:
            _submit(shim, pending.popleft()[1], finalize)  # never committed through the seam: published as run

    return around(shim, seam, pre, post, hot=True, step=True, traceable=False)


def _request_facts(step, batch) -> None:
    """What the acceptance slices read per request, kept by reference for the publisher thread (no
    device read, no copy here): the context lengths, ``ScheduleBatch.seq_lens_cpu``, a host tensor
    SGLang replaces and never writes in place ("New-tensor avoids racing model_worker_batch refs
    queued for overlap forward": managers/schedule_batch.py ``prepare_for_decode``; overlap_utils.py
    clones before it writes; 0.5.23); and the requests, whose ``sampling_params.top_k`` (1 for a
    greedy request once SGLang normalised it: sampling/sampling_params.py; ``is_all_greedy`` in
    sampling/sampling_batch_info.py tests the same) never changes."""
    step.ctx_len = getattr(batch, "seq_lens_cpu", None)
    step.reqs = tuple(batch.reqs)


#: Decode steps that wait for SGLang's commit (the overlap scheduler processes a result one tick late).
MAX_UNCOMMITTED = 4


def _constrained(reqs) -> list[bool] | None:
    """Per request, whether a grammar constrains it (host metadata: ``Req.grammar``, set by SGLang's
    grammar backend); None when none does, so a free batch's step carries no field."""
    flags = [getattr(req, "grammar", None) is not None for req in reqs]
    return flags if True in flags else None


def _result_key(result):
    """A weak reference to the round's result, which the commit hook gets back (an id could be reused
    by a later result once this one is freed; a strong one would keep its device tensors alive)."""
    try:
        return weakref.ref(result)
    except TypeError:
        return None


def _submit(shim, step: Step, finalize) -> None:
    """Number the step (seq follows publication order) and hand it, whole, to the publisher thread
    (``finalize``: :func:`finalize_step` bound to the shim); a refused step gives its slot back."""
    shim.seq += 1
    step.seq = shim.seq
    slot = step.slot
    if not shim.publisher.submit("step", step, finalize) and slot is not None:
        HostRing.release(slot)


def make_commit(shim, seam):
    """Where SGLang settles a round per request: the requests whose ``spec_verify_ct`` it advanced
    are the ones it committed (under the overlap scheduler a request that finished runs one more
    tick, which SGLang discards and does not count); the waiting step is published without the others."""
    finalize = functools.partial(finalize_step, shim)

    def pre(self, result, batch, *args, **kwargs):
        pending = shim.uncommitted
        if not pending or shim.publisher is None:
            return None
        for i, (waiting, step) in enumerate(pending):
            if waiting() is result:
                del pending[i]
                reqs = batch.reqs
                return step, reqs, [getattr(req, "spec_verify_ct", None) for req in reqs]
        return None

    def post(ctx, out, *args, **kwargs):
        if ctx is None:
            return
        step, reqs, before = ctx
        discarded = [req.rid for req, ct in zip(reqs, before) if ct is not None and req.spec_verify_ct == ct]
        if discarded:
            step.discarded = discarded
        _submit(shim, step, finalize)

    return around(shim, seam, pre, post, hot=True, traceable=False)


def _draft_start(batch, verify_types: dict) -> tuple[int, int | None] | None:
    """Where the draft hook is out: the draft's start and the width of the hidden states it is handed,
    unless the batch already holds a verify input (SGLang then drafts nothing this round)."""
    spec = batch.spec_info
    if spec is None:  # SGLang makes an idle input (its width unknown here) and drafts from it
        return _now(), None
    # SGLang's spec.is_verify_input(), asked once per spec_input_type (an enum member): the method
    # builds a set of five members on every call
    kind = getattr(spec, "spec_input_type", None)
    try:
        verify = verify_types[kind]
    except (KeyError, TypeError):  # None (a release or stand-in without it) is never kept: asked every time
        verify = _ask_verify(spec) if kind is None else _asked_once(verify_types, kind, _ask_verify, spec)
    if verify:
        return None
    return _now(), _hidden_width(batch, _DRAFT_PATH)


def _ask_verify(spec) -> bool:
    return bool(spec.is_verify_input())


def _ask_mode(mode) -> tuple[bool, bool]:
    """(idle, extend) of a batch's ``forward_mode``, asked once per mode (a ``ForwardMode`` member,
    whose ``is_idle``/``is_extend`` answers never change)."""
    idle = getattr(mode, "is_idle", None)
    return (idle is not None and bool(idle()), bool(mode.is_extend()))


def _asked_once(memo: dict, key, ask, arg):
    """``ask(arg)``, kept in ``memo`` under ``key`` (an enum member of SGLang's, whose answer never
    changes) while it holds fewer than MAX_MEMO; an unhashable key is asked every time."""
    try:
        return memo[key]
    except KeyError:
        got = ask(arg)
        if len(memo) < MAX_MEMO:
            memo[key] = got
        return got
    except TypeError:
        return ask(arg)


#: the most answers one memo of :func:`_asked_once` keeps (SGLang's enums have a few dozen members;
#: anything past that is asked every time)
MAX_MEMO = 64


def _drafted(shim, step, worker, batch, verify_began: int) -> None:
    """Where the draft hook is out: the draft's tokens (``batch.spec_info``, the verify input, which
    verify reads and never rebinds or writes: eagle_worker_v2.py / eagle_worker_common.py 0.5.23,
    eagle_worker_v2.py 0.5.10), its time up to verify's start and its ``speculative_num_steps - 1``
    decode passes, each eager (``_uncounted``, whose other cases the hook's removal rules out:
    ``detach_plan._detach_draft_and_extend``)."""
    step.draft = snap(shim.snapshots, step, "draft", batch.spec_info.draft_token)
    began = step.draft_from
    if began is not None:
        step.draft_ns = verify_began - began[0]
        width = began[1]
        n = worker.speculative_num_steps - 1
        if width is not None and n >= 1:
            step.passes.append((_DRAFT_MODE, width, None, n, None))


#: the host-time slot of a timed call -> the device marks at its start and end (ring.MARKS)
_MARKS = {"draft_ns": (ring.DRAFT_START, ring.DRAFT_END), "verify_ns": (ring.VERIFY_START, ring.VERIFY_END),
          "extend_ns": (ring.EXTEND_START, ring.EXTEND_END)}


def _timed(shim, seam, slot: str | None, observe=None):
    """Host time of one worker call into ``step.<slot>``, and on a timed ring its device boundaries
    (:func:`ring.mark`); ``observe(shim, step, result, worker)`` keeps data.
    For a caller in ``seams.DRAFT_INPUTS`` it also reads the width of the hidden states it hands
    the draft (a shape: host metadata), and the draft passes of the call come from that one read:
    the draft-forward hook only counts the forwards that ran (``Step.feed``), and when none did
    (the pass replayed a graph) the read stands for the replayed pass."""
    feeds = seams.DRAFT_INPUTS.get(seam)
    start, end = _MARKS.get(slot, (None, None))
    snapshots, load = shim.snapshots, shim.load

    def pre(*args, **kwargs):
        step = shim.step
        if step is None:
            return None
        if start is not None and snapshots.timed:
            mark(snapshots, step, start)
        feed = None
        if feeds is not None:
            index, name, path, mode = feeds
            width = _hidden_width(args[index] if len(args) > index else kwargs.get(name), path)
            if width is not None:
                feed = [mode, width, 0]
                # fc decidable from the width (step_body.fc_of): the forward hook just counts
                step.feed = feed if load.draft_fc_always or load.draft_embed_width is not None else None
        return _now(), feed, step.forwards

    def post(ctx, result, *args, **kwargs):
        step = shim.step
        if ctx is None or step is None:
            return
        t0, feed, forwards = ctx
        if end is not None and snapshots.timed:
            mark(snapshots, step, end)
        if slot is not None:
            setattr(step, slot, _now() - t0)
        if observe is not None:
            observe(shim, step, result, args[0])
        if feed is not None:
            step.feed = None
            if feed[2]:  # forwards that ran eagerly, each counted by the draft-forward hook
                step.passes.append((feed[0], feed[1], None, feed[2], None))
            elif step.forwards == forwards:
                _uncounted(shim, step, args, feed[0], feed[1])

    return around(shim, seam, pre, post, hot=True, in_step=True, traceable=False)


def _hidden_width(owner, path: tuple[str, ...]) -> int | None:
    """The width of the hidden states a caller hands the draft, at ``path`` under ``owner``
    (``seams.DRAFT_INPUTS``; a shape: host metadata), None where SGLang holds none."""
    for attr in path:
        owner = getattr(owner, attr)
    return None if owner is None else int(owner.shape[-1])


def _uncounted(shim, step, args, mode: str, width: int) -> None:
    """The caller ran and the draft-forward hook counted nothing: its pass replayed a captured graph,
    or, where that hook was taken out because nothing can replay (``detach_plan._detach_counting_forwards``), ran
    eagerly. Either way as many forwards as the caller always runs: ``speculative_num_steps - 1``
    decode forwards in ``draft`` (eagle_worker_v2.py / eagle_worker.py, 0.5.23), one in each extend.
    Not on a draft whose forward the hooks do not see (report_unobserved): it ran, unseen, and says nothing."""
    if "draft_model" in shim.unobserved:
        return
    worker = args[0]
    n = getattr(worker, "speculative_num_steps", 2) - 1 if mode == "decode" else 1
    if n < 1:
        return  # a one-step draft runs no decode forward at all
    graph = None if shim.plan.forwards_at_callers else _graph_chosen(shim.load, worker, mode, args[1])
    step.passes.append((mode, width, None, n, graph))


#: the draft worker's graph runner of each pass mode (seams.DRAFT_GRAPH_SLOTS: the same slot names in v1 and v2)
_RUNNER_OF = {"decode": seams.DRAFT_GRAPH_SLOTS["v1"]["decode"][-1],
              "draft_extend_v2": seams.DRAFT_GRAPH_SLOTS["v1"]["draft_extend"][-1],
              "draft_extend": seams.DRAFT_GRAPH_SLOTS["v1"]["draft_extend"][-1]}


def _graph_chosen(load, worker, mode: str, batch) -> int:
    """The batch size of the graph a replayed pass ran: the key its runner chose, which SGLang's
    draft runners keep as ``bs`` after each replay (padded up to a captured size; under DP
    attention from the largest batch of all ranks, not this rank's), else the smallest captured
    size that holds this rank's batch."""
    chosen = getattr(getattr(worker, _RUNNER_OF.get(mode, ""), None), "bs", None)
    return chosen if type(chosen) is int else graph_capture.graph_bs(load, mode, len(batch.seq_lens))


def _observe_draft(shim, step, result, worker):
    if shim.plan.tail_draft:  # the next round's proposals: verify's hook took this round's
        return
    verify_input = result[0] if isinstance(result, tuple) else result
    step.draft = snap(shim.snapshots, step, "draft", verify_input.draft_token)


def make_verify_v2(shim, seam):
    """verify on v2, one body after the call (``around`` gives it the call's start): ``accept_lens``
    INCLUDES the bonus token; ``next_token_ids`` is strided per request (for trees SGLang has compacted
    the accepted path to the front). A tree's ``draft_token`` holds nodes in score order, so which
    ones were accepted comes from ``accept_index`` ([bs, steps + 1] global node indices, -1 padded):
    one more non-blocking copy. Where the draft and extend hooks are out, their work is done here
    (:func:`_drafted`, and the width of what the extend gets from this result)."""

    snapshots, plan = shim.snapshots, shim.plan

    def post(began, result, self, *args, **kwargs):
        step = shim.step
        if step is None:
            return
        if snapshots.timed:
            mark(snapshots, step, ring.VERIFY_END)
        step.verify_ns = _now() - began
        if plan.draft_at_verify:
            _drafted(shim, step, self, args[0] if args else kwargs["batch"], began)
        elif plan.tail_draft:  # the draft this round verifies, relayed from the first stage
            step.draft = snap(snapshots, step, "draft", (args[0] if args else kwargs["batch"]).spec_info.draft_token)
        step.verify = ("v2", snap(snapshots, step, "lens", result.accept_lens), snap(snapshots, step, "ids", result.next_token_ids))
        if (getattr(self, "topk", 1) or 1) > 1:
            step.path = snap(snapshots, step, "path", getattr(result, "accept_index", None))
        if plan.extend_at_verify:  # the draft extend SGLang runs next, on this result (detach_plan._detach_counting_forwards)
            width = _hidden_width(result, _EXTEND_PATH)
            if width is not None:
                step.passes.append((_EXTEND_MODE, width, None, 1, None))
            step.verify_end = _now()

    return around(shim, seam, None, post, hot=True, in_step=True, traceable=False)


def _observe_verify_v1(shim, step, result, worker):
    """v1 per-request counts EXCLUDE the bonus and are a CPU list already; ``verified_id`` is packed."""
    out = result[1]
    counts = next(getattr(out, f) for f in seams.V1_COUNT_FIELDS if hasattr(out, f))
    tokens = next(getattr(out, f) for f in seams.V1_TOKEN_FIELDS if hasattr(out, f))
    step.verify = ("v1", list(counts), snap(shim.snapshots, step, "ids", tokens))


def make_draft(shim, seam):
    return _timed(shim, seam, "draft_ns", _observe_draft)


def make_verify_v1(shim, seam):
    return _timed(shim, seam, "verify_ns", _observe_verify_v1)


def make_draft_extend(shim, seam):
    return _timed(shim, seam, "extend_ns")


def make_draft_extend_prefill(shim, seam):
    return _timed(shim, seam, None)


# -- draft model forward: width entering the draft and whether fc ran ----------------------------
# -- TP: a control change rides the broadcast of what rank 0 pulled -----------------------------
def make_tp_broadcast(shim, seam):
    def pre(self, *args, **kwargs):
        channel = shim.aux_channel
        if channel is None or channel._pending is None:  # the per-iteration cost: two attribute reads
            return None
        reqs = kwargs["recv_reqs"] if "recv_reqs" in kwargs else args[0]
        if reqs is None:  # not the rank that pulls requests
            return None
        change = channel.take_for_broadcast()
        if change is None:
            return None
        if "recv_reqs" in kwargs:
            return Rewrite(None, (self, *args), {**kwargs, "recv_reqs": collective.inject(reqs, change)})
        return Rewrite(None, (self, collective.inject(reqs, change), *args[1:]), kwargs)

    def post(ctx, result, self, *args, **kwargs):
        if not result:  # empty on most iterations
            return
        try:  # never disable this seam: a change it did not take out would reach SGLang's dispatcher
            changes = collective.take(result)
        except Exception as exc:
            log.warning("eagle3scope: reading SGLang's broadcast failed: %s: %s", type(exc).__name__, exc)
            return
        if changes:
            control_apply.apply_broadcast(shim, self, changes)

    return around(shim, seam, pre, post)


def make_draft_forward(shim, seam):
    """Fires once per eager draft pass (two or more a round). Inside a caller that read the width it
    hands the draft (``Step.feed``, set by :func:`_timed`) it only counts the pass: the caller adds
    it with that width and fc. Elsewhere, and at graph capture, it reads width and fc itself: a
    capture can run inside a caller (SGLang captures the draft's graphs at start-up, but the CPU
    graph stand-in captures each shape at its first use, in a step), and is recorded as a capture."""
    capturing = None
    fc_always = seam in seams.FC_ALWAYS

    def pre(self, *args, **kwargs):
        nonlocal capturing
        if capturing is None:
            capturing = graph_capture.capture_flag()  # kept once found
        in_capture = capturing is not None and capturing()
        step = shim.step
        if not in_capture:
            if step is None:
                return None
            step.forwards += 1
            if step.feed is not None:
                step.feed[2] += 1
                return None
        forward_batch = args[2] if len(args) > 2 else kwargs["forward_batch"]
        width = int(forward_batch.spec_info.hidden_states.shape[-1])
        embed_width = int(self.embed_tokens.weight.shape[-1])
        # EAGLE-3: SGLang applies fc iff the incoming width differs from the embedding width.
        mode, fc = forward_batch.forward_mode.name.lower(), fc_always or width != embed_width
        if in_capture:  # runs once per graph; its replays run none of this
            if graph_capture.record_capture(shim.load, mode, int(forward_batch.batch_size), width, fc):
                loadreport.refresh_hello(shim)
            return None
        step.passes.append((mode, width, fc, 1, None))
        return None

    return around(shim, seam, pre, None, hot=True, in_step=True)


def make_target_graph_capture(shim, seam):
    def pre(self, *args, **kwargs):
        """The aux layers the target's graphs are captured with (the runner of another model,
        e.g. the draft's, holds none)."""
        owner = capture_owner(getattr(getattr(self, "model_runner", None), "model", None))
        layers = getattr(getattr(owner, "model", None), "layers_to_capture", None)
        if layers is None:
            return None
        shim.load.target_graph_aux = {"on": bool(getattr(owner, "capture_aux_hidden_states", False)),
                                      "layers": [int(x) for x in layers]}
        loadreport.refresh_hello(shim)
        return None

    observe = around(shim, seam, pre, None)

    def hook(original, *args, **kwargs):
        with CAPTURE_GATE:  # no shim thread's device call while SGLang captures (ring.CAPTURE_GATE)
            return observe(original, *args, **kwargs)

    hook.__name__, hook.eagle3scope_seam = observe.__name__, seam
    return hook


# -- load time: draft weights and aux capture ----------------------------------------------------
def make_draft_load(shim, seam):
    def pre(self, weights, *args, **kwargs):
        watch = loadreport.LoadWatch(self, shim.load)
        return Rewrite(watch, (self, watch.wrap(weights)) + args, kwargs)

    def post(watch, result, *args, **kwargs):
        watch.finish()

    return around(shim, seam, pre, post)


def make_aux_configure(shim, seam):
    def pre(*args, **kwargs):
        # Called for the target and for the draft runner; keyed by model so the target's stands.
        shim.load.aux_config[id(kwargs["model"])] = {
            "use_aux": bool(kwargs["eagle_use_aux_hidden_state"]),
            "layer_ids": _ids(kwargs.get("eagle_aux_hidden_state_layer_ids")),
        }

    return around(shim, seam, pre, None)


def make_aux_set_layers(shim, seam):
    def post(ctx, result, self, layer_ids=None, *args, **kwargs):
        shim.load.aux_calls.append(
            {"requested": _ids(layer_ids), "captured": _ids(self.model.layers_to_capture), "on": bool(self.capture_aux_hidden_states)}
        )
        if shim.publisher is not None and not shim.aux_change_applying:  # control reports its own
            loadreport.publish_config(shim, "runtime")

    return around(shim, seam, None, post)


def _ids(value):
    return None if value is None else [int(x) for x in value]


#: ``Seam.hook`` name -> the factory of its AROUND hook (tests/shim/test_shim_unit.py: exactly the names the seams use)
FACTORIES = {
    "scheduler_init": make_scheduler_init,
    "worker_init_v2": make_worker_init_v2,
    "worker_init_v1": make_worker_init_v1,
    "step": make_step,
    "commit": make_commit,
    "finish": make_finish,
    "draft": make_draft,
    "verify_v2": make_verify_v2,
    "verify_v1": make_verify_v1,
    "draft_extend": make_draft_extend,
    "draft_extend_prefill": make_draft_extend_prefill,
    "tp_broadcast": make_tp_broadcast,
    "draft_forward": make_draft_forward,
    "target_graph_capture": make_target_graph_capture,
    "draft_load": make_draft_load,
    "aux_configure": make_aux_configure,
    "aux_set_layers": make_aux_set_layers,
}
