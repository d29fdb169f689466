"""Process-wide shim state: the publisher (SGLang's entry ranks only, see ``topology``), the step being
built, the seams' health and how a failed one is reported, the control channel. Load-time facts are
:mod:`eagle3scope_shim.facts`, the snapshot ring :mod:`eagle3scope_shim.ring`, the fail-closed wrapper
every hook runs in :mod:`eagle3scope_shim.guard`.
"""

from __future__ import annotations

import collections
import logging
import os
import socket
import time

from eagle3scope.wire import env
from eagle3scope.wire.endpoints import endpoint_for_dp_rank, resolve_bind_endpoint, sibling_endpoints
from eagle3scope_shim.publisher import Publisher
from eagle3scope_shim.ring import SNAPSHOTS, RingSlot

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
    """What the hooks learn during one ``forward_batch_generation`` call."""

    __slots__ = ("passes", "draft", "verify", "draft_ns", "verify_ns", "extend_ns", "prefill", "slot", "dropped",
                 "num_steps", "path", "discarded", "forwards", "feed", "verify_end", "draft_from", "ctx_len", "reqs",
                 "constrained")

    def __init__(self) -> None:
        #: (mode, width, fc, n, graph bs (a replay; 0: its capture unseen) or None) as the hooks saw them, appended
        #: without merging; fc None where a caller of the draft read the width (hooks.fc_of decides it). The
        #: publisher thread derives and merges (hooks.merged_passes): on the scheduler's thread each helper
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


class ShimState:
    def __init__(self) -> None:
        self.publisher = None
        self.src = None
        self.started_ns = time.time_ns()  # with the pid, tells a restarted process apart under the same src
        self.step: Step | None = None
        self.stepped = False  # a step began (the first step takes out the hooks this server does not need)
        self.seq = 0
        self.disabled: set[str] = set()
        self.seam_status: dict[str, str] = {}
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
        #: decode steps waiting for SGLang to commit them (the commit seam): (weakref to the result, payload), oldest first
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
        self.seam_status[seam] = status
        body = dict(seam=seam, status=status, detail=detail[:1000])
        if self.publisher is not None:
            self.publisher.submit("hook", body)
        elif len(self.pending) < 256:
            self.pending.append(body)

    def fail(self, seam: str, exc: BaseException) -> None:
        if seam in self.disabled:
            return
        self.disabled.add(seam)
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
            pub.heartbeat_extra = SNAPSHOTS.stats
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


STATE = ShimState()
