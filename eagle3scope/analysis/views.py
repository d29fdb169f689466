"""What each panel shows, as plain rows: state in, views out, no wire bodies past this module.

Every function here runs under the feed's lock (the TUI calls them from its throttled refresh),
so it only reads and copies: no rendering, no rule evaluation (the state runs the rules on
ingest); :func:`advice_rows` alone runs outside it, on what :func:`advisor_logs` copied. Panels draw these views and never open a frame body; ``tones`` (``"ok"``, ``"bad"``,
``"muted"``, or None) name the meaning of a value, and the theme decides its colour.
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass, field

from eagle3scope.analysis import facts
from eagle3scope.analysis.advisor import Advice, RoundLog, advise
from eagle3scope.wire.bodies import Capture, Hello, Load, Weights
from eagle3scope.analysis.rules import Violation
from eagle3scope.analysis.state import Event, PassStats, SessionState
from eagle3scope.wire.aux_layers import CaptureRule


# -- header ------------------------------------------------------------------------------------


@dataclass
class PublisherRow:
    src: str
    version: str | None
    algorithm: str | None
    worker: str | None
    steps: object
    topk: object
    draft_tokens: object
    cuda_graph: object
    tp_rank: object
    dp_rank: object
    steps_per_s: float | None
    dropped: int  # by the shim (its heartbeat)
    gaps: int  # lost in transit (holes in the frame counter)
    hook_failures: int
    hooks_ok: int
    hooks_total: int
    has_hello: bool
    model_path: str | None = None
    run: int = 1  # 2, 3, ... after restarts under the same src
    state: str = "live"  # "live" | "stale Ns" | "replay": set by the app, which knows the clock
    shim_share: float | None = None  # the shim's hook time / round time, latest heartbeat
    worker_class: str | None = None
    unobserved: tuple = ()  # parts the shim cannot see (facts.UNOBSERVED_PARTS)
    engine: str = "sglang"  # the engine's wire name (hello.engine; absent from older shims' hellos)


def publisher_rows(state: SessionState) -> list[PublisherRow]:
    rows = []
    for src, pub in state.publishers.items():
        hello, args, loss = pub.hello, facts.server_args(pub), facts.loss(pub)
        seams = facts.seam_statuses(pub)
        rows.append(PublisherRow(
            src=src,
            version=hello.engine_release if hello else None,
            algorithm=args.algorithm,
            worker=hello.worker if hello else None,
            steps=args.num_steps,
            topk=args.topk,
            draft_tokens=args.num_draft_tokens,
            cuda_graph=args.cuda_graph,
            tp_rank=hello.tp_rank if hello else None,
            dp_rank=hello.publisher_index if hello else None,
            steps_per_s=pub.acceptance.steps_per_s,
            dropped=loss.dropped_by_shim,
            gaps=loss.lost_in_transit,
            hook_failures=loss.hook_failures,
            hooks_ok=sum(1 for status in seams.values() if status == "attached"),
            hooks_total=len(seams),
            has_hello=hello is not None,
            model_path=args.model_path,
            run=pub.run,
            shim_share=facts.shim_cost(pub).share,
            worker_class=hello.worker_class if hello else None,
            unobserved=tuple(facts.unobserved(pub)),
            engine=hello.engine_id if hello else "sglang",
        ))
    return rows


# -- acceptance --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SegmentRow:
    """Acceptance while one aux-layer configuration was in effect."""

    layers: list | None
    captured: list | None
    origin: str
    steps: int
    mean: float | None
    start_seq: int | None


def segment_rows(state: SessionState) -> list[SegmentRow]:
    return [SegmentRow(s.layers, s.captured, s.origin, s.steps, s.mean_accept_length, s.start_seq) for s in state.segments]


@dataclass(frozen=True)
class RankRow:
    """One publisher (a DP or attention-DP rank) of a server with several: its rolling acceptance."""

    label: str  # "dp1"; the publisher id when its hello has not arrived or DP ranks repeat (several servers)
    mean: float | None
    steps: int


@dataclass(frozen=True)
class RankSkew:
    """The spread of rolling acceptance across ranks, the worst rank named (fleet monitors' replica skew)."""

    worst: str
    worst_mean: float
    best: str
    best_mean: float

    @property
    def spread(self) -> float:
        return self.best_mean - self.worst_mean


@dataclass
class AcceptanceView:
    mean: float | None = None
    cumulative: float | None = None
    k: int = 0
    draft_tokens: object = None
    steps: int = 0
    request_steps: int = 0
    steps_per_s: float | None = None
    tokens_per_s: float | None = None
    per_position: list = field(default_factory=list)
    histogram: list = field(default_factory=list)
    history: list = field(default_factory=list)  # rolling mean per decode step, oldest first
    marks: list = field(default_factory=list)  # indexes into history where a later aux segment starts
    segments: list = field(default_factory=list)  # SegmentRow
    ranks: list = field(default_factory=list)  # RankRow per publisher, only when there are several
    skew: RankSkew | None = None
    slices: list = field(default_factory=list)  # SliceRow per dimension with more than one label


def publisher_labels(state: SessionState) -> dict[str, str]:
    """A short name per publisher that tells it from the others: its DP rank (``dp1``) while those are
    unique, else the shortest tail of its ``src`` (``host:pid:dpN``) that no other publisher shares
    (``4711:dp0`` for two servers on one host), the whole ``src`` at worst."""
    ranks = {src: f"dp{pub.hello.publisher_index}" if pub.hello is not None and pub.hello.publisher_index is not None else None
             for src, pub in state.publishers.items()}
    if None not in ranks.values() and len(set(ranks.values())) == len(ranks):
        return ranks
    parts = {src: tuple(src.split(":")) for src in state.publishers}
    longest = max(map(len, parts.values()), default=0)
    tails = [Counter(p[-n:] for p in parts.values()) for n in range(1, longest)]  # tails[n - 1]: of n parts
    labels = {}
    for src, mine in parts.items():
        n = next((n for n in range(1, len(mine)) if tails[n - 1][mine[-n:]] == 1), None)
        labels[src] = src if n is None else ":".join(mine[-n:])
    return labels


def rank_rows(state: SessionState) -> tuple[list[RankRow], RankSkew | None]:
    """Per-publisher acceptance and the skew between ranks; nothing for a single publisher."""
    if len(state.publishers) < 2:
        return [], None
    labels = publisher_labels(state)
    rows = [RankRow(labels[src], pub.acceptance.mean_accept_length, pub.acceptance.n_steps)
            for src, pub in state.publishers.items()]
    judged = sorted((r for r in rows if r.mean is not None), key=lambda r: r.mean)
    skew = RankSkew(judged[0].label, judged[0].mean, judged[-1].label, judged[-1].mean) if len(judged) >= 2 else None
    return rows, skew


@dataclass(frozen=True)
class SliceRow:
    """One dimension of the cumulative acceptance slices: (label, mean accept length, request-steps) per label seen."""

    dimension: str
    cells: tuple[tuple[str, float | None, int], ...]


def slice_rows(state: SessionState) -> list[SliceRow]:
    """The dimensions whose request-steps fell in more than one label (one label says nothing the mean does not)."""
    rows = []
    for dim, entries in state.slices.summary(state.acceptance.k).items():
        if len(entries) > 1:
            rows.append(SliceRow(dim, tuple((e["label"], e["mean_accept_length"], e["request_steps"]) for e in entries)))
    return rows


def acceptance_view(state: SessionState) -> AcceptanceView:
    acc = state.acceptance
    history = acc.history
    first_step = acc.n_steps - len(history)  # the session step of history[0]
    marks = [s.start_step - first_step for s in state.segments[1:]
             if s.start_step is not None and 0 <= s.start_step - first_step < len(history)]
    ranks, skew = rank_rows(state)
    return AcceptanceView(
        mean=acc.mean_accept_length,
        cumulative=acc.cumulative_mean_accept_length,
        k=acc.k,
        draft_tokens=next((a.num_draft_tokens for a in map(facts.server_args, state.publishers.values()) if a), None),
        steps=acc.n_steps,
        request_steps=acc.total.n,
        steps_per_s=acc.steps_per_s,
        tokens_per_s=acc.accepted_tokens_per_s,
        per_position=acc.per_position,
        histogram=acc.histogram,
        history=[h[2] for h in history],
        marks=marks,
        segments=segment_rows(state),
        ranks=ranks,
        skew=skew,
        slices=slice_rows(state),
    )


# -- violations and events ---------------------------------------------------------------------


def violations(state: SessionState) -> list[Violation]:
    """Copies: the state updates its violations in place on the next rule pass."""
    return [copy.copy(v) for v in state.violations()]


def events(state: SessionState) -> list[Event]:
    return list(state.events)


# -- hidden states and aux ---------------------------------------------------------------------


@dataclass(frozen=True)
class PassRow:
    """Draft forwards of one forward mode: widths entering the draft, fc applied or skipped."""

    mode: str
    calls: int
    widths: tuple  # ((width, count), ...), then ("other", count) past MAX_WIDTHS
    fc_applied: int
    fc_skipped: int
    replayed: int = 0  # calls that replayed a captured graph (width and fc read at their caller)


@dataclass(frozen=True)
class Fact:
    """One line of a publisher's load summary."""

    label: str
    text: str
    tone: str | None = None  # "ok" | "bad" | "muted" | None


@dataclass
class AuxView:
    passes: list = field(default_factory=list)  # PassRow, by mode
    publishers: list = field(default_factory=list)  # (src, [Fact])
    segments: list = field(default_factory=list)  # SegmentRow
    seen: list = field(default_factory=list)  # (src, text, tone): draft passes replayed from graphs or not seen


def aux_view(state: SessionState) -> AuxView:
    return AuxView(
        passes=[PassRow(m, p.calls, _widths(p), p.fc_applied, p.fc_skipped, p.replayed)
                for m, p in sorted(state.passes.items(), key=lambda kv: str(kv[0]))],  # a mode may be None
        publishers=[(src, load_summary(pub.load, pub.capture, facts.capture_rule(pub))) for src, pub in state.publishers.items()],
        segments=segment_rows(state),
        seen=[line for src, pub in state.publishers.items() for line in _pass_lines(src, pub.hello)],
    )


def _pass_lines(src: str, hello: Hello | None) -> list[tuple[str, str, str | None]]:
    """What the shim could not watch run on this publisher, said rather than left out."""
    lines = []
    captured = facts.graphs_captured(hello)
    for name, how in facts.pass_visibility(hello).items():
        if how == "graph":
            sizes = sorted({g.bs for g in captured if _GRAPH_PASS.get(g.mode) == name} - {None})
            where = f" (captured for batch sizes {', '.join(map(str, sizes))})" if sizes else " (capture not seen)"
            lines.append((src, f"{name}: replayed from graphs{where}; width and fc read where SGLang hands the draft "
                          "its hidden states", "muted"))
        elif how == "unseen":
            lines.append((src, f"{name}: not seen on this server (replays a graph, and its caller is not hooked): "
                          "fc and widths cannot be judged for it", "bad"))
    return lines


#: Draft forward modes of each pass (hello.graphs.captured names modes).
_GRAPH_PASS = {"decode": "draft decode", "draft_extend": "draft extend", "draft_extend_v2": "draft extend",
               "extend": "prefill"}


def _widths(p: PassStats) -> tuple:
    listed = tuple(sorted(p.widths.items(), key=lambda kv: str(kv[0])))
    if p.unlisted_width_calls:
        return listed + (("other", p.unlisted_width_calls),)
    return listed


def load_summary(load: Load | None, capture: Capture | None, rule: CaptureRule | None = None) -> list[Fact]:
    """The load report's facts that decide whether the draft can work, each with its tone;
    ``rule`` is the target family's aux id rule (:func:`~eagle3scope.analysis.facts.capture_rule`)."""
    if load is None or not load.sent:
        return [Fact("load report", "not received yet", "muted")]
    aux = load.aux
    live = None if capture is None else capture.layers
    lines = [
        Fact("draft / target", f"{load.draft_class} / {load.target_class}"),
        Fact("fc", f"{load.fc_in} → {load.fc_out}") if load.has_fc else Fact("fc", "none", "bad"),
        Fact("configured aux ids", str(aux.configured)),
        Fact("captured (load)", str(aux.captured), "ok" if aux.captured is not None and aux.configured is not None else None),
        Fact("captured (live)", f"{live} capture {'on' if capture.on else 'off'}" if capture else "–",
             "bad" if capture and not capture.on else None),
        Fact("use_aux / rule", f"{aux.use_aux} / {aux.offset_rule}"),
        Fact("family id rule", f"{rule}: {rule.summary}") if rule else Fact("family id rule", "unknown family", "muted"),
    ]
    d2t = load.d2t
    if d2t:
        flags = []
        if d2t.out_of_range:
            flags.append(f"{d2t.out_of_range} out of range")
        if d2t.injective is False:
            flags.append("not injective")
        if d2t.looks_absolute:
            flags.append("looks absolute")
        if d2t.t2d_consistent is False:
            flags.append("t2d inconsistent")
        lines.append(Fact("d2t", f"size {d2t.size} → target [{d2t.target_min}, {d2t.target_max}] "
                           + ("; ".join(flags) or "ok"), "bad" if flags else "ok"))
    else:
        lines.append(Fact("d2t", "absent (draft vocab = target vocab?)", "muted"))
    head = load.lm_head
    source, shape = (head.source, head.shape) if head else (None, None)
    lines.append(Fact("lm_head", f"{source} {shape}", "bad" if source == "init" else None))
    lines.append(Fact("embed_tokens", str(load.embed_source)))
    weights = load.weights or Weights()
    skipped, unwritten = list(weights.skipped), list(weights.unwritten)
    named = f": {', '.join(map(str, (skipped + unwritten)[:4]))}" if skipped or unwritten else ""
    lines.append(Fact("weights", f"{len(weights.consumed)} consumed, {len(skipped)} skipped, "
                       f"{len(unwritten)} never written{named}", "bad" if skipped or unwritten else "ok"))
    return lines


# -- draft vs target ---------------------------------------------------------------------------


@dataclass(frozen=True)
class DraftRow:
    """One request in one step: what the draft proposed and what the target committed."""

    seq: int
    src: str
    rid: str
    proposed: list  # draft token ids
    accepted: int
    bonus: int
    committed: list  # token ids the step committed (accepted drafts + bonus)
    mode: str
    path: tuple | None = None  # trees: indices into ``proposed`` of the accepted path; None: a chain
    label: str = ""  # the publisher's short name (:func:`publisher_labels`)

    def fate(self, j: int) -> str:
        """What became of proposed token ``j``: accepted, rejected (the chain's first rejection),
        off-path (a tree node not on the accepted path) or unreached."""
        if self.path is not None:
            return "accepted" if j in self.path else "off-path"
        return "accepted" if j < self.accepted else "rejected" if j == self.accepted else "unreached"


def draft_rows(state: SessionState, rid_filter: str | None, limit: int = 60) -> list[DraftRow]:
    """The newest ``limit`` request-steps, newest first, of requests whose id contains ``rid_filter``."""
    rows = []
    labels = publisher_labels(state)
    for src, step in reversed(state.recent):
        for request in step.requests:
            if rid_filter and rid_filter not in str(request.rid):
                continue
            path = request.accepted_path
            rows.append(DraftRow(step.seq, src, str(request.rid), request.draft_ids, request.accepted, request.bonus,
                                 request.accepted_ids, step.mode, None if path is None else tuple(path),
                                 labels.get(src, src)))
            if len(rows) >= limit:
                return rows
    return rows


# -- load report -------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadReport:
    """A publisher's hello and load report, every field as sent (values as JSON text)."""

    src: str
    hello: tuple | None  # ((key, text), ...) or None when not received
    load: tuple | None


def load_reports(state: SessionState) -> list[LoadReport]:
    return [LoadReport(src, *facts.sent(pub)) for src, pub in state.publishers.items()]


# -- advisor -----------------------------------------------------------------------------------

#: bootstrap resamples behind the TUI's advice (``advise`` takes advisor.BOOTSTRAP): a quarter of
#: the cost, the interval's ends a little less settled
TUI_BOOTSTRAP = 50


@dataclass(frozen=True)
class AdviceRow:
    """One publisher's advice, under its short name."""

    label: str
    advice: Advice


def advisor_logs(state: SessionState) -> list[tuple[str, RoundLog]]:
    """Each current publisher's decode rounds, copied (a deque copy, cheap under the lock), once its
    hello or a decode round arrived."""
    labels = publisher_labels(state)
    return [(labels[src], pub.rounds.copy()) for src, pub in state.publishers.items()
            if pub.rounds.seen or pub.rounds.num_steps]


def advice_rows(logs: list[tuple[str, RoundLog]], bootstrap: int = TUI_BOOTSTRAP) -> list[AdviceRow]:
    """The advisor on each copied log: tens of milliseconds for a full log, so the TUI calls it every
    few seconds, never per frame, and outside the feed's lock."""
    return [AdviceRow(label, advise(log, bootstrap=bootstrap)) for label, log in logs]
