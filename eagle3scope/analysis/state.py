"""The viewer's data model: frames in, facts and violations out; the TUI only renders this.

:class:`SessionState` folds a stream of :class:`~eagle3scope.wire.Frame` objects (live or from a
recording) into per-publisher views, acceptance statistics, draft-pass counters, aux-config
segments and an event log. ``ingest`` is the hot path (one call per frame, no rendering). It
also evaluates the contract rules on each publisher's own schedule, after each of its non-step
frames and every ``rules_every`` of its steps, so ``check``, ``gate``, ``watch``, ``replay`` and the
exporter (one state per publisher) find the same violations at the same ``first_seq`` whatever is
on screen and whoever else publishes; ``violations()`` only reads them. What a hello or load
report says is read once, into :mod:`~eagle3scope.analysis.facts`.

Frames may come from a hostile publisher or file, so everything the state collects per distinct
value a frame names (``src``, seam, forward mode, hidden width, draft-id maximum, aux config) is
bounded by a ``MAX_*`` constant far above what a real server sends. Past a bound the rest is
counted, and the event log says so once per publisher and kind; what the rules read first (the
first bad width, the first draft-id rises, the modes fc-bypassed names) is what is kept.

Order and restarts (:mod:`eagle3scope.wire.loss`): a duplicated frame is dropped (counted, said
once), and a publisher restarted under the same ``src`` (its counter went back with time going on,
or its hello names another pid or start time) starts a new *run*: a fresh view with its own
statistics and its own violations (``Violation.run``), the ended run kept as it ended.
"""

from __future__ import annotations

import copy
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Iterable

from eagle3scope.analysis import facts
from eagle3scope.analysis.advisor import ROUNDS_KEPT, RoundLog
from eagle3scope.analysis.baseline import kept_round
from eagle3scope.analysis.slices import Slices, request_labels
from eagle3scope.analysis.facts import PublisherView
from eagle3scope.wire.bodies import MAX_SEAMS, Config, Hello, Hook, Step
from eagle3scope.wire.contracts import FcTally
from eagle3scope.analysis.rules import CONTRACT_RULES, Violation, evaluate
from eagle3scope.analysis.stats import AcceptanceStats, Tally
from eagle3scope.wire import FEATURE_CARRYING_MODES, Frame
from eagle3scope.wire.loss import DUPLICATE, RESTART
from eagle3scope.wire.schema import MAX_PUBLISHERS
from eagle3scope.wire.severity import SEVERITY_ORDER

#: A publisher's steps between two rule passes over it (each of its non-step frames triggers one
#: too): a rule without a first-seen seq of its own reports a ``first_seq`` at most this many steps late.
RULES_EVERY = 64
#: ... or this much stream time (frame ``t``), so a slow server's break shows within a second, and
#: every consumer of the same frames still evaluates at the same frames.
RULES_EVERY_NS = 250_000_000

#: Forward modes listed per publisher and for the session (SGLang has about ten); the modes
#: fc-bypassed reads (FEATURE_CARRYING_MODES) get a place past it, so junk modes cannot hide one.
MAX_PASS_MODES = 32
#: Widths listed per forward mode (a draft sees two: H and k x H); further ones are counted as "other".
MAX_WIDTHS = 16
#: Rises of a publisher's highest draft id kept (random ids set a new maximum about ln(steps) times).
MAX_DRAFT_MAX_RISES = 1024
#: Aux-config segments of the session: the first (the A/B baseline) and the latest ones.
MAX_SEGMENTS = 64
#: Ended runs kept (publishers restarted under the same ``src``); past it the oldest is forgotten.
MAX_ENDED_RUNS = 64
#: Decode rounds each publisher view keeps for the advisor (its newest): far above the request-steps
#: it needs before advising, and a plain tuple each (~300 B), so 256 publishers stay under 200 MB.
ADVISOR_ROUNDS = 2048


@dataclass(slots=True)
class PassStats(FcTally):
    """Draft-model forwards of one forward mode (fc applied/skipped and replays: :class:`FcTally`)."""

    calls: int = 0
    widths: Counter = field(default_factory=Counter)
    width_first_seq: dict = field(default_factory=dict)  # width -> seq where first seen
    unlisted_width_calls: int = 0  # calls with a width first seen after MAX_WIDTHS others

    def add(self, seq: int, width, fc, n: int, replayed: bool = False) -> bool:
        """Count ``n`` calls; True the first time a width finds no place, for the caller to report."""
        self.calls += n
        self.count(seq, fc, n, replayed)
        if width in self.width_first_seq:
            self.widths[width] += n
            return False
        return self._new_width(seq, width, n)

    def _new_width(self, seq: int, width, n: int) -> bool:
        if len(self.width_first_seq) < MAX_WIDTHS:
            self.widths[width] = n
            self.width_first_seq[width] = seq
            return False
        first_unlisted = not self.unlisted_width_calls
        self.unlisted_width_calls += n
        return first_unlisted


@dataclass(slots=True)
class Event:
    t_ns: int
    src: str
    level: str  # "info" | "warning" | "error"
    text: str


@dataclass(slots=True)
class ConfigSegment:
    """Acceptance while one aux-layer configuration was in effect (the aux-layer A/B view).

    ``layers`` are the ids as configured (``eagle_aux_hidden_state_layer_ids``, what ``aux set``
    takes; None = the release's default), ``captured`` the target layers SGLang captures for them.
    """

    layers: list | None
    origin: str
    start_seq: int | None
    src: str | None = None
    captured: list | None = None
    tally: Tally = field(default_factory=Tally)
    k: int = 0
    start_step: int | None = None  # the session's decode-step count where it starts (plot marks)

    @property
    def steps(self) -> int:
        return self.tally.steps

    @property
    def mean_accept_length(self) -> float | None:
        return self.tally.mean_accept_length

    @property
    def per_position(self) -> list[float | None]:
        return self.tally.per_position(self.k)


class SessionState:
    """Everything the viewer knows, built by :meth:`ingest` one frame at a time.

    ``acceptance`` and ``passes`` are session totals over all publishers' steps; the objects are
    swapped when a second publisher starts sending steps, so read them on each refresh instead of
    keeping a reference. Per-publisher figures are on ``publishers[src]``, for the first
    MAX_PUBLISHERS publishers; frames from later ones are counted in ``refused_frames``.
    """

    def __init__(self, *, window: int = 512, recent: int = 256, events: int = 1000, history: int = 4096,
                 rules_every: int = RULES_EVERY, advisor_rounds: int = ADVISOR_ROUNDS, keep_rounds: bool = False) -> None:
        self.publishers: dict[str, PublisherView] = {}
        self.acceptance = AcceptanceStats(window, history)
        self.slices = Slices()  # session totals by context length, batch size, sampling, constraint
        #: the newest decode rounds of every publisher (baseline.kept_round), for a baseline comparison
        self.kept_rounds: deque | None = deque(maxlen=ROUNDS_KEPT) if keep_rounds else None
        self.passes: dict[str, PassStats] = {}
        self.capture: dict | None = None
        self.recent: deque[tuple[str, dict]] = deque(maxlen=recent)
        self.segments: list[ConfigSegment] = []  # MAX_SEGMENTS of them
        self.dropped_segments = 0  # the oldest after the first, dropped to make room
        self.events: deque[Event] = deque(maxlen=events)
        self.frames = 0
        self.refused_frames = 0  # from publishers past MAX_PUBLISHERS
        self.ended_runs: list[PublisherView] = []  # runs a restart under the same src ended (MAX_ENDED_RUNS)
        self._runs_ahead: dict[str, tuple] = {}  # src -> (run, began) its first view gets (start_at_run)
        self.forgotten_runs = 0
        self._window = window
        self._history = history
        self._advisor_rounds = advisor_rounds  # 0 where nothing advises (the exporter): no round is kept
        self.rules_every = rules_every
        self._fired: dict[tuple[str, str], Violation] = {}
        self._solo: PublisherView | None = None  # the only publisher that sent steps so far
        self._forked = False

    # -- ingest -----------------------------------------------------------------------------

    def ingest(self, frame: Frame) -> None:
        self.frames += 1
        pub = self.publishers.get(frame.src)
        if pub is None:
            pub = self._new_publisher(frame)
            if pub is None:
                return
        for text in pub.loss.observe(frame):
            self.note(frame.src, "warning", text, frame.t)
        kind = frame.kind
        verdict = pub.loss.verdict
        if verdict is DUPLICATE:
            return
        hello = frame.record if kind == "hello" else None
        if verdict is RESTART or (hello is not None and pub.hello is not None and pub.hello.identity != hello.identity):
            pub = self._new_run(pub, frame)
        pub.last_seen_t = frame.t
        if kind == "step":
            self._step(pub, frame.record, frame.t)
            pub.steps_since_rules += 1
            if pub.steps_since_rules >= self.rules_every or frame.t - pub.rules_t >= RULES_EVERY_NS:
                self._scheduled(pub, frame.t)
            return
        if kind == "finish":  # SGLang's counts of the requests it finished, against this publisher's tallies
            if pub.accounting.finish(frame.record, *_loss_counts(pub)):  # a first mismatch: judged now; other
                self._scheduled(pub, frame.t)  # finishes wait for the steps' schedule
            return
        if hello is not None:
            self._hello(pub, hello, frame.t)
        elif kind == "load":
            load = frame.record
            if pub.load is None:
                self.note(frame.src, "info", f"load report: {load.draft_class} on {load.target_class}", frame.t)
            pub.load = load
        elif kind == "config":
            self._config(pub, frame.record, frame.t)
        elif kind == "hook":
            self._hook(pub, frame.record, frame.t)
        self._scheduled(pub, frame.t)  # only its sender changed

    def _new_publisher(self, frame: Frame) -> PublisherView | None:
        """A view for a new ``src``; None past MAX_PUBLISHERS (the frame is counted, the first one noted)."""
        if len(self.publishers) >= MAX_PUBLISHERS:
            if not self.refused_frames:
                self.note(frame.src, "warning", f"more than {MAX_PUBLISHERS} publishers: frames from new ones are "
                          "counted, not analysed", frame.t)
            self.refused_frames += 1
            return None
        run, began = self._runs_ahead.pop(frame.src, (1, (frame.n, frame.t)))
        self.publishers[frame.src] = PublisherView(frame.src, run=run, began=began,
                                                   acceptance=AcceptanceStats(self._window, self._history),
                                                   rounds=self._round_log())
        return self.publishers[frame.src]

    def _round_log(self) -> RoundLog:
        return RoundLog(rounds=deque(maxlen=self._advisor_rounds))

    def start_at_run(self, src: str, run: int, began: tuple[int, int]) -> None:
        """``src``'s first view is its run ``run``, which began at frame ``began`` (a replay seek
        into a later run rebuilds the state there)."""
        self._runs_ahead[src] = (run, began)

    def _new_run(self, old: PublisherView, frame: Frame) -> PublisherView:
        """``old``'s publisher restarted: judge ``old`` as it ended, keep it, start a fresh view."""
        self._judge(old)
        if len(self.ended_runs) >= MAX_ENDED_RUNS:
            gone = self.ended_runs.pop(0)
            for key in [k for k in self._fired if k[1:] == (gone.src, gone.run)]:
                del self._fired[key]
            if not self.forgotten_runs:
                self.note(gone.src, "warning", f"more than {MAX_ENDED_RUNS} restarted runs: the oldest are forgotten", frame.t)
            self.forgotten_runs += 1
        self.ended_runs.append(old)
        old.rounds.rounds.clear()  # an ended run is not advised on: its rounds would only hold memory
        pub = PublisherView(old.src, run=old.run + 1, began=(frame.n, frame.t),
                            acceptance=AcceptanceStats(self._window, self._history), rounds=self._round_log())
        self.publishers[old.src] = pub
        pub.loss.observe(frame)  # the new run's counting starts at this frame
        self.note(old.src, "warning", f"publisher restarted under the same src: run {pub.run} starts, kept apart from "
                  f"run {old.run} (its {old.decode_steps} decode steps and violations stay as they ended)", frame.t)
        return pub

    def runs(self) -> list[PublisherView]:
        """Every run of every publisher: the ended ones (oldest first), then the current ones."""
        return [*self.ended_runs, *self.publishers.values()]

    def _step(self, pub: PublisherView, step: Step, t: int) -> None:
        seq = step.seq
        pub.last_seq = seq
        self.recent.append((pub.src, step))
        if self._solo is not pub:
            self._share_or_fork(pub)
        forked = self._forked
        capture = step.capture
        if capture is not None:
            pub.capture = self.capture = capture
            if not capture.on:
                pub.capture_off_steps += 1
                if pub.capture_off_first_seq is None:
                    pub.capture_off_first_seq = seq
        passes = step.passes
        if passes:
            for p in passes:
                mode = p.mode
                width, fc, n, replayed = p.width, p.fc, p.n, p.replayed is True
                ps = pub.passes.get(mode)
                if ps is None:
                    ps = _new_pass_stats(pub.passes, mode)
                    if ps is None:
                        self._unlisted_passes(pub, n, t)
                        continue
                if ps.add(seq, width, fc, n, replayed):
                    self.note(pub.src, "warning", f"draft forwards in mode {mode} came in more than {MAX_WIDTHS} widths: "
                              "the rest are counted as other", t)
                if forked:
                    gs = self.passes.get(mode) or _new_pass_stats(self.passes, mode)
                    if gs is not None:
                        gs.add(seq, width, fc, n, replayed)
        draft_ids = step.draft_ids
        depth = 0
        if draft_ids:
            if all(draft_ids):
                depth = max(map(len, draft_ids))
                hi, lo = max(map(max, draft_ids)), min(map(min, draft_ids))
            else:
                flat = [i for ids in draft_ids for i in ids]
                depth = max(map(len, draft_ids))
                hi, lo = (max(flat), min(flat)) if flat else (None, None)
            if hi is not None:
                pub.draft_ids += sum(map(len, draft_ids))
                if pub.draft_id_max is None or hi > pub.draft_id_max:
                    pub.draft_id_max, pub.draft_max_seq = hi, seq
                    if len(pub.draft_max_rises) < MAX_DRAFT_MAX_RISES:
                        pub.draft_max_rises.append((seq, hi))
                    else:
                        self._unkept_rise(pub, t)
                if pub.draft_id_min is None or lo < pub.draft_id_min:
                    pub.draft_id_min = lo
                    pub.draft_min_seq = seq
        if not step.is_decode_step:
            if step.is_prefill:
                pub.accounting.start(step.rids, pub.accounting.lost_marker(*_loss_counts(pub)))
            return
        accepted, bonus = step.accepted, step.bonus
        pub.decode_steps += 1
        pub.accounting.count(step.rids, accepted, seq)
        if self._advisor_rounds:
            pub.rounds.add_step(step)
        t_ns = step.t_ns or t
        k = facts.num_steps(pub)
        budget = step.num_steps  # the round's own budget (adaptive steps); a tree's draft_ids are nodes
        if budget is not None:
            depth = budget
        elif k:
            depth = min(depth, k)
        if k:
            pub.acceptance.k_configured = self.acceptance.k_configured = k
        pub.acceptance.add_step(seq, t_ns, accepted, bonus, depth, budget)
        if forked:
            self.acceptance.add_step(seq, t_ns, accepted, bonus, depth, budget)
        self.slices.add(accepted, bonus, request_labels(step), budget)
        if self.kept_rounds is not None:
            self.kept_rounds.append(kept_round(step))
        if not self.segments:
            layers = facts.aux_layers(pub)
            self.segments.append(ConfigSegment(layers.configured, "startup", seq, pub.src, layers.captured))
        segment = self.segments[-1]
        if segment.start_seq is None:
            segment.start_seq = seq
        if segment.start_step is None:
            segment.start_step = self.acceptance.n_steps - 1
        segment.k = self.acceptance.k
        segment.tally.add(accepted, step.committed, 1, budget)

    def _unlisted_passes(self, pub: PublisherView, n: int, t: int) -> None:
        if not pub.unlisted_pass_calls:
            self.note(pub.src, "warning", f"draft forwards in more than {MAX_PASS_MODES} forward modes: new modes are "
                      "counted, not listed", t)
        pub.unlisted_pass_calls += n

    def _unkept_rise(self, pub: PublisherView, t: int) -> None:
        if not pub.unkept_max_rises:
            self.note(pub.src, "warning", f"the highest draft id rose more than {MAX_DRAFT_MAX_RISES} times: later rises "
                      "are counted, not kept (draft-token-out-of-vocab may date its break up to a rule pass late)", t)
        pub.unkept_max_rises += 1

    def _share_or_fork(self, pub: PublisherView) -> None:
        """While one publisher sends steps, the session totals ARE its own (no double work); when a
        second one starts, the totals become a separate aggregate seeded with the first's history."""
        if self._solo is None:
            self._solo = pub
            self.acceptance, self.passes = pub.acceptance, pub.passes
        elif not self._forked:
            self._forked = True
            self.acceptance, self.passes = copy.deepcopy(self._solo.acceptance), copy.deepcopy(self._solo.passes)

    def _hello(self, pub: PublisherView, hello: Hello, t: int) -> None:
        if pub.hello is None or pub.hello.pid != hello.pid:
            args = hello.args
            self.note(
                pub.src,
                "info",
                f"publisher {pub.src}: {hello.engine_label}, {args.algorithm} "
                f"steps={args.num_steps} topk={args.topk} draft_tokens={args.num_draft_tokens}",
                t,
            )
        pub.hello = hello
        pub.rounds.add_hello(hello.args, hello.observable)
        if hello.seams:
            self._hello_seams(pub, hello.seams, t)

    def _hello_seams(self, pub: PublisherView, seams: dict, t: int) -> None:
        """The hello's startup status of seams no hook frame named yet, within MAX_SEAMS (the rest counted)."""
        hooks = pub.hooks
        for seam, status in seams.items():
            if seam in hooks:
                continue
            if len(hooks) < MAX_SEAMS:
                hooks[seam] = {"status": status, "detail": None}
                continue
            if not pub.unlisted_hello_seams:
                self.note(pub.src, "warning", f"the hello names more than {MAX_SEAMS} seams: the rest are counted, "
                          "not listed", t)
            pub.unlisted_hello_seams += 1

    def _config(self, pub: PublisherView, config: Config, t: int) -> None:
        if config.applied:
            pub.applied_config = config
            pub.capture = None  # what steps captured before the change says nothing about the new set
            segment = ConfigSegment(config.layers, config.origin or "control", None, pub.src, config.captured)
            self._new_segment(segment, t)
            pause = config.pause_ms
            paused = "" if pause is None else f"; graphs recaptured, serving paused {pause:.0f} ms"
            self.note(pub.src, "info", f"aux layers now {config.layers} (captured {config.captured}, {config.origin}){paused}", t)
        else:
            self.note(pub.src, "warning", f"aux layer change to {config.layers} refused: {config.reason}", t)

    def _new_segment(self, segment: ConfigSegment, t: int) -> None:
        """Start a segment; past MAX_SEGMENTS the oldest but the first (the baseline) makes room."""
        if len(self.segments) >= MAX_SEGMENTS:
            if not self.dropped_segments:
                self.note(segment.src, "warning", f"more than {MAX_SEGMENTS} aux configurations: the oldest after the "
                          "first are dropped from the A/B view", t)
            self.dropped_segments += 1
            del self.segments[1]
        self.segments.append(segment)

    def _hook(self, pub: PublisherView, hook: Hook, t: int) -> None:
        seam, status = hook.seam, hook.status
        if seam in pub.hooks or len(pub.hooks) < MAX_SEAMS:
            pub.hooks[seam] = {"status": status, "detail": hook.detail}
        else:
            if not pub.unlisted_hook_frames:
                self.note(pub.src, "warning", f"hooks on more than {MAX_SEAMS} seams: new seams are counted, not listed "
                          "(a failure still shows here)", t)
            pub.unlisted_hook_frames += 1
        if hook.noteworthy:
            self.note(pub.src, "warning", f"hook {seam} {status}: {hook.detail}", t)

    def forget_counters(self) -> None:
        """Accept the next frame of every publisher without a gap check (after a replay seek)."""
        for pub in self.publishers.values():
            pub.loss.resync()

    def note(self, src: str, level: str, text: str, t_ns: int | None = None) -> None:
        """Add a line to the event log (also used by readers for schema errors)."""
        self.events.append(Event(t_ns if t_ns is not None else time.time_ns(), src, level, text))

    # -- rules ------------------------------------------------------------------------------

    def evaluate_rules(self) -> None:
        """Evaluate every rule for every publisher now (``ingest`` does it on its schedule).

        A violation that fired once stays listed (with the ``first_seq`` at which it was first
        seen) even when its condition no longer holds: ``active`` tells whether it still does.
        A silent break that healed itself is still worth knowing about, and ``check`` must
        report it even if the recording ends healthy. A first firing adds an event-log line.
        """
        for pub in self.publishers.values():
            self._judge(pub)

    def _scheduled(self, pub: PublisherView, t: int) -> None:
        """A pass on ingest's schedule: each publisher's own, so that a publisher's violations date
        the same whatever other publishers share the state (the exporter keeps one state each)."""
        pub.steps_since_rules, pub.rules_t = 0, t
        self._judge(pub)

    def _judge(self, pub: PublisherView) -> None:
        """Evaluate every rule for one publisher."""
        for rule in CONTRACT_RULES:
            key = (rule.id, pub.src, pub.run)
            previous = self._fired.get(key)
            current = evaluate(rule, pub, previous)
            if current is not None:
                self._fired[key] = current
                if previous is None:
                    self.note(pub.src, current.severity, f"{current.id}: {current.title}", pub.last_seen_t)

    def violations(self) -> list[Violation]:
        """Every violation found so far, active ones first, then by severity and ``first_seq``."""
        return sorted(self._fired.values(), key=lambda v: (not v.active, SEVERITY_ORDER[v.severity], v.first_seq or 0, v.id))


def _loss_counts(pub: PublisherView) -> tuple[int, int]:
    """(frames lost in transit, counter resets included; frames the shim dropped, as heartbeats said)."""
    loss = pub.loss
    return loss.lost_in_transit + loss.resets, loss.shim_dropped



def _new_pass_stats(passes: dict, mode) -> PassStats | None:
    """A place for a forward mode new to ``passes``, while there is room (MAX_PASS_MODES)."""
    if len(passes) < MAX_PASS_MODES or mode in FEATURE_CARRYING_MODES:
        passes[mode] = PassStats()
        return passes[mode]
    return None


def analyse(frames: Iterable[Frame], *, every: int = RULES_EVERY, keep_rounds: bool = False) -> SessionState:
    """Fold ``frames`` into a state (rules on ingest's schedule, ``every`` steps apart) and
    evaluate the rules once more at the end, so the state says how the stream ended."""
    state = SessionState(rules_every=every, keep_rounds=keep_rounds)
    ingest = state.ingest
    for frame in frames:
        ingest(frame)
    state.evaluate_rules()
    return state

