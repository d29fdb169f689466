"""The shim's state, one :class:`Shim` built by the instrumentor and handed to every hook factory
(OpenTelemetry's instrumentor shape): the publisher (SGLang's entry ranks only, see ``topology``), the
step being built, the seam table, the hook plan, the load facts (:mod:`eagle3scope_shim.load_facts`), the
snapshot ring (:mod:`eagle3scope_shim.ring`), the verdict, the control channel. No module holds shim
state of its own: a test builds a fresh :class:`Shim` and hands it to the factories it exercises.
"""

from __future__ import annotations

import collections
import logging
import os
import socket
import time
from typing import Callable

from eagle3scope.wire import env
from eagle3scope.wire.endpoints import endpoint_for_dp_rank, resolve_bind_endpoint, sibling_endpoints
from eagle3scope_shim.load_facts import LoadFacts
from eagle3scope_shim.publisher import Publisher
from eagle3scope_shim.ring import RingSlot, Snapshots
from eagle3scope_shim.verdict import Verdict

log = logging.getLogger("eagle3scope")


def requested_endpoint() -> str | None:
    """The endpoint the user asked for ("": the default, resolved when the publisher starts), or
    None when the shim is off."""
    endpoint = os.environ.get(env.ENDPOINT, "").strip()
    if endpoint:
        return endpoint
    if os.environ.get(env.ENABLE, "").strip() in ("1", "true", "yes", "on"):
        return ""
    return None


class Step:
    """What the hooks learn during one ``forward_batch_generation`` call, and, once it ends, the record
    handed whole to the publisher thread (``seq``, ``t_ns``, ``rids``, ``capture``): the scheduler thread
    writes nothing to it after :meth:`Publisher.submit`, the publisher thread only reads it."""

    __slots__ = ("seq", "t_ns", "rids", "capture", "passes", "draft", "verify", "draft_ns", "verify_ns", "extend_ns", "prefill", "slot", "dropped",
                 "num_steps", "path", "discarded", "forwards", "feed", "verify_end", "draft_from", "ctx_len", "reqs",
                 "constrained")

    def __init__(self) -> None:
        self.seq = 0  # publication order, numbered as it is submitted (hooks._submit)
        self.t_ns = 0  # wall clock as the step ended
        self.rids: list | None = None  # the batch's request ids (the list the step hook built)
        self.capture: dict | None = None  # {"on", "layers"} in effect (loadreport.capture_now)
        #: (mode, width, fc, n, graph bs (a replay; 0: its capture unseen) or None) as the hooks saw them, appended
        #: without merging; fc None where a caller of the draft read the width (step_body.fc_of decides it). The
        #: publisher thread derives and merges (step_body.merged_passes): on the scheduler's thread each helper
        #: call costs µs after a forward has swept the caches (BENCHMARKS.md, "Shim")
        self.passes: list[tuple] = []
        self.forwards = 0  # draft-model forwards whose Python ran in this step (not replayed)
        #: while a caller of the draft runs (seams.DRAFT_INPUTS): [mode, width, forwards counted]
        #: from its read of the width it hands over; the draft-forward hook then only counts
        self.feed: list | None = None
        self.draft = None  # snapshot of EagleVerifyInput.draft_token
        self.verify = None  # (kind, per-request counts, token ids) snapshots
        self.path = None  # trees (topk > 1): snapshot of verify's accept_index, the nodes of the accepted path
        self.num_steps = None  # this round's step budget (adaptive steps vary it per round)
        self.discarded = None  # rids whose round SGLang ran but did not commit (the commit seam)
        self.ctx_len = None  # the batch's seq_lens_cpu, a host tensor SGLang never writes in place (hooks._request_facts)
        self.reqs: tuple | None = None  # the batch's requests, for their greedy flags (read by the publisher thread)
        self.constrained: list[bool] | None = None  # per request: has a grammar (only when one has)
        self.draft_ns = self.verify_ns = self.extend_ns = None
        self.verify_end: int | None = None  # perf_counter_ns as verify returned, where the extend is timed from it
        #: (perf_counter_ns, width of the hidden states it gets) as the step began, where the draft hook is out
        self.draft_from: tuple[int, int | None] | None = None
        self.prefill = False
        self.slot: RingSlot | None = None  # host buffers of this step's snapshots, taken on first use
        self.dropped = False  # every ring slot was busy: the step is counted as dropped, not published


class SeamTable:
    """Every seam's status, target and detacher in one place; the only writer of a seam's status."""

    def __init__(self) -> None:
        self.status: dict[str, str] = {}  # seam -> attached / missing / failed / unhooked / disabled
        self.targets: dict[str, str] = {}  # seam -> dotted target in use
        #: seam -> takes its wrapper out of SGLang's code, True when it did (set where it was attached)
        self.detachers: dict[str, Callable[[], bool]] = {}
        self.disabled: set[str] = set()  # seams whose hook failed: their wrapper calls straight through
        self.registered = False  # handed to SGLang's HookRegistry (releases with plugins)

    def attached(self, seam: str, detacher: Callable[[], bool]) -> None:
        self.status[seam] = "attached"
        self.detachers[seam] = detacher

    def live(self, seam: str) -> bool:
        """Attached and not disabled: its hook runs."""
        return self.status.get(seam) == "attached" and seam not in self.disabled

    def set(self, seam: str, status: str) -> None:
        self.status[seam] = status

    def all_disabled(self) -> None:
        """Every seam unwrapped (``uninstrument``)."""
        for name in self.status:
            self.status[name] = "disabled"

    def detach(self, seam: str) -> bool:
        """Put back the function ``seam``'s wrapper wraps, where the shim's wrapper is still the one in
        place (one wrapped again since is left alone, as unwrapping does), so its hook is no longer
        called. For a hook whose work another hook has taken over: its calls would only cost. The
        seam's status stays as it was: what it observed is still observed. True when it was taken out."""
        undo = self.detachers.pop(seam, None)
        return undo is not None and undo()


class HookPlan:
    """Which hook does which seam's work, decided at the first step (``detach_plan.plan_first_step``) from
    the load facts; apart from them: nothing here is a fact about SGLang, only about the hooks."""

    def __init__(self) -> None:
        self.stepped = False  # a step began (the first step takes out the hooks this server does not need)
        #: no draft pass can replay a graph and the draft-forward hook was taken out: the callers add
        #: every pass as eager (detach_plan._detach_counting_forwards)
        self.forwards_at_callers = False
        #: ... and the v2 draft hook too: verify's hook reads the draft's tokens and adds its passes at the
        #: width the step's hook read, the draft timed from the step's start to verify's
        self.draft_at_verify = False
        #: ... and the v2 draft-extend hook: verify's hook reads the width the extend gets and adds its
        #: pass, the extend timed from verify's end to the step's
        self.extend_at_verify = False
        #: pipeline parallelism: the last stage verifies the draft relayed with the batch, then drafts
        #: the next round (SGLang's PP tail draft), so verify's hook snapshots the draft and the draft
        #: hook does not (read at the first step)
        self.tail_draft = False
        #: the scheduler runs no overlap loop, so no round is discarded and the commit hook was taken
        #: out: a step is published as it ends (detach_plan._detach_commit)
        self.published_at_step = False


class Shim:
    """One instrumented process's shim state (module docstring)."""

    def __init__(self) -> None:
        self.seams = SeamTable()
        self.plan = HookPlan()
        self.load = LoadFacts()
        self.snapshots = Snapshots()
        self.verdict = Verdict()
        #: the facts of a TP rank without a control channel, gathered at its first change (aux_channel)
        self.rank_control_facts = None
        self.publisher = None
        self.src = None
        self.started_ns = time.time_ns()  # with the pid, tells a restarted process apart under the same src
        self.step: Step | None = None
        self.seq = 0
        self.pending: list[dict] = []  # hook events before the publisher exists
        self.unobserved: dict[str, str] = {}  # part ("worker", "draft_model") -> why the hooks cannot see it
        self.fault = os.environ.get(env.FAULT, "").strip() or None
        self.capture: dict | None = None
        self._capture_key = None
        #: (target model, the model holding its capture flag, the model holding its layers), found once
        self._capture_from: tuple | None = None
        self.aux_channel = None  # an aux_channel.AuxChannel while the control channel is open
        self.scheduler = None  # this process's SGLang Scheduler (every TP rank): its forward_ct dates a change
        self.aux_change_applying = False  # a control change is calling set_eagle3_layers_to_capture
        #: decode steps waiting for SGLang to commit them (the commit seam): (weakref to the result, its Step), oldest first
        self.uncommitted: collections.deque = collections.deque()
        # the shim's own cost (heartbeat ``shim_us``/``step_us``): one cell per seam, written only by
        # the thread running the hook, read as deltas by the publisher thread (no lock: int reads)
        self.self_ns: dict[str, list[int]] = {}  # seam -> [ns spent in its pre/post bodies]
        self.step_ns = [0]  # ns of the step seams' whole calls, hooks included (the rounds the cost relates to)
        self.round_seams: set[str] = set()  # seams whose hooks run within those calls (the rounds' share)
        #: {"parallel", "rank", "index", "publishes", "reason"} of this scheduler (topology), once it is built;
        #: the aux channel reads the ranks from here
        self.topology: dict | None = None
        self.siblings: list[str] | None = None  # every publisher's endpoint of this server, by index
        self.hello_args: tuple | None = None  # (scheduler,): hello is rebuilt on a new capture

    # -- reporting ----------------------------------------------------------------------------
    def report(self, seam: str, status: str, detail: str = "") -> None:
        self.seams.set(seam, status)
        body = dict(seam=seam, status=status, detail=detail[:1000])
        if self.publisher is not None:
            self.publisher.submit("hook", body)
        elif len(self.pending) < 256:
            self.pending.append(body)

    def fail(self, seam: str, exc: BaseException) -> None:
        if seam in self.seams.disabled:
            return
        self.seams.disabled.add(seam)
        if self.publisher is not None:
            self.publisher.hook_failures += 1
        detail = f"{type(exc).__name__}: {exc}"
        log.warning("eagle3scope: hook %s failed and is disabled (SGLang continues unaffected): %s", seam, detail)
        self.report(seam, "failed", detail)

    # -- publisher ----------------------------------------------------------------------------
    def start_publisher(self, endpoint: str, index: int, publishers: int = 1) -> bool:
        """Publish this scheduler's events on its endpoint, the server's ``index``-th of ``publishers``
        (one per DP scheduler, ``topology``). One that cannot be bound (taken, not private, no CURVE
        key for TCP) is an error line on the server's log, and nothing is published: the server
        serves on, its hello goes to nobody. False then."""
        self.src = f"{socket.gethostname()}:{os.getpid()}:dp{index}"
        wanted = endpoint or "the default endpoint"
        try:
            base = resolve_bind_endpoint(endpoint)
            wanted = endpoint_for_dp_rank(base, index)
            pub = Publisher(wanted, self.src)
            pub.heartbeat_extra = self.snapshots.stats
            pub.start()
        except Exception as exc:
            log.error("eagle3scope: NOT PUBLISHING: cannot bind %s: %s: %s. This server serves on, unobserved: its"
                      " hello goes to nobody, and no viewer, recorder, gate or exporter will see it.",
                      wanted, type(exc).__name__, exc)
            return False
        self.siblings = sibling_endpoints(base, publishers)
        for body in self.pending:
            pub.submit("hook", body)
        self.pending.clear()
        pub.self_time = (self.self_ns, self.step_ns, self.round_seams)
        self.publisher = pub
        log.info("eagle3scope: publishing on %s as %s", pub.endpoint, self.src)
        return True

    def confirm_registered(self) -> None:
        """After SGLang applied the hooks, report any target it could not patch as ``failed``."""
        if not self.seams.registered:
            return
        from sglang.srt.plugins.hook_registry import HookRegistry  # only ever called inside SGLang

        patched = getattr(HookRegistry, "_patched", None)
        if patched is None:
            return
        for name, target in self.seams.targets.items():
            if self.seams.status.get(name) == "attached" and target not in patched:
                self.report(name, "failed", f"SGLang's HookRegistry did not patch {target}")
