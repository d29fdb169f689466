"""The eagle3scope TUI: one Textual app for a live server and for a recording.

A :class:`~eagle3scope.tui.feed.Feed` thread folds frames into the session state (which runs the
contract rules itself); the app copies the views the visible panels need
(:mod:`eagle3scope.analysis.views`) on a throttled timer (``refresh_hz``, 8 by default) and only
then sets them on the panels, which draw. So a burst of 10,000 steps/s costs the terminal eight small redraws a second, and ingest
never waits for a slow SSH link. The num_steps advisor runs on copied round logs outside the lock,
at most every ``ADVISE_EVERY_S`` and only while the overview or its panel shows.
"""

from __future__ import annotations

import time
from pathlib import Path

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import ContentSwitcher, Footer

from eagle3scope.analysis import views
from eagle3scope.tui.driver import driver_class
from eagle3scope.tui.feed import Feed
from eagle3scope.tui.lifecycle import TERMINAL_GONE, EndingSignals, run_app
from eagle3scope.tui.panels import AcceptancePanel, AdvisorPanel, AuxPanel, DraftPanel, EventLog, PublisherBar, Timeline, \
    ViolationsPanel, advice_line
from eagle3scope.tui.screens import AuxScreen, HelpScreen, LoadReportScreen, PromptScreen, ViolationScreen
from eagle3scope.tui.seek import parse_seek
from eagle3scope.tui.themes import DEFAULT_THEME, available_themes, load_theme, remember_theme, remembered_theme
from eagle3scope.tui.tokens import load_decoder
from eagle3scope.wire.schema import DEFAULT_MAX_FRAME_BYTES
from eagle3scope.wire.untrusted import markup

PANELS = ("overview", "aux", "draft", "events", "advisor")
PANEL_FOCUS = {"overview": "#violations-table", "aux": "#aux", "draft": "#draft-table", "events": "#events",
               "advisor": "#advisor-table"}
ADVISED_ON = {"overview", "advisor"}  # the panels that show the advisor
ADVISE_EVERY_S = 3.0  # the advisor reruns at most this often (tens of ms on a full round log)
SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
STALE_AFTER_S = 5.0
REPLAY_ONLY = {"faster", "slower", "seek", "seek_relative"}
LIVE_ONLY = {"aux_control"}  # the control channel reaches a running server only


class ScopeApp(App):
    """Live or replay, same panels, same rules."""

    CSS_PATH = "app.tcss"
    TITLE = "eagle3scope"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    aux_client = None  # a ControlClient when `watch --control` names the server's control channel
    # description: the footer's word; tooltip: the help screen's sentence
    BINDINGS = [
        Binding("q", "quit", "Quit", tooltip="Leave eagle3scope"),
        Binding("question_mark,h", "help", "Help", tooltip="This list"),  # early: the footer at 80 columns shows it
        Binding("space,p", "toggle_pause", "Pause", tooltip="Pause / resume (live: freeze the screen, ingest goes on)"),
        Binding("s", "step", "Step", tooltip="Replay: one step on; live: pause and show the newest data"),
        Binding("f", "filter", "Filter rid", tooltip="Draft view: only requests whose id contains a text"),
        Binding("v", "next_panel", "Panel", tooltip="Next panel: overview, aux, draft, events, advisor"),
        Binding("1", "panel('overview')", "Overview panel", show=False, tooltip="Acceptance, violations, recent events"),
        Binding("2,a", "panel('aux')", "Hidden-state & aux panel", show=False, tooltip="Widths, fc applied/skipped, aux ids, load summary"),
        Binding("3,d", "panel('draft')", "Draft-vs-target panel", show=False, tooltip="Proposed tokens against the accepted ones"),
        Binding("4,e", "panel('events')", "Event log", show=False, tooltip="Publishers, hooks, drops, rules firing"),
        Binding("5,n", "panel('advisor')", "num_steps advisor", show=False,
                tooltip="Predicted accept length and tok/s for other --speculative-num-steps, and the advice"),
        Binding("l", "load_report", "Load report", tooltip="Load report and server arguments, as sent"),
        Binding("c", "aux_control", "Aux layers", tooltip="Aux-layer presets of the live server (watch --control)"),
        Binding("t", "cycle_theme", "Theme", tooltip="Next theme (dark, light, high-contrast); remembered"),
        Binding("plus,equals_sign", "faster", "Faster", tooltip="Replay speed up (to 64×)"),
        Binding("minus", "slower", "Slower", tooltip="Replay speed down (to 0.25×)"),
        Binding("g", "seek", "Seek", tooltip="Seek to a step (1234) or a time (12.5s, 2m, 1:30)"),
        Binding("right_square_bracket", "seek_relative(100)", "+100 steps", show=False),
        Binding("left_square_bracket", "seek_relative(-100)", "-100 steps", show=False),
    ]

    def __init__(self, feed: Feed, *, theme: str | None = None, refresh_hz: float = 8.0, remember: bool = True) -> None:
        super().__init__()
        self.feed = feed
        self.refresh_hz = refresh_hz
        self.rid_filter: str | None = None
        self.panel = "overview"
        self._remember = remember
        self._theme_source: tuple[str, str] | None = None
        self._frames_shown = -1
        self._step_view = False
        self._decoder_for: str | None = None
        self._advised: tuple[int, float] = (-1, 0.0)  # frames and monotonic time of the latest advice
        self.refresh_ms: float | None = None  # smoothed cost of one refresh (copy + panel updates)
        self._ending_signals = EndingSignals(lambda status: self.exit(None, status))
        self.gone_reason: str | None = None  # why the terminal is gone, once it is
        self.theme_name = ""
        self.apply_theme(theme or remembered_theme(), remember=False, fallback=True)

    def get_theme_variable_defaults(self) -> dict[str, str]:
        """The $e3s-* colours for a theme that lacks them (e.g. one picked from the command palette)."""
        theme_file = load_theme(DEFAULT_THEME).to_textual()
        return {**super().get_theme_variable_defaults(), **theme_file.variables}

    # -- layout -----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        with Vertical(id="top"):
            yield PublisherBar(id="publishers")
            yield Timeline(id="timeline")
        with ContentSwitcher(id="panels", initial="overview"):
            with Horizontal(id="overview"):
                yield AcceptancePanel(id="acceptance", classes="panel")
                with Vertical(id="overview-side"):
                    yield ViolationsPanel(id="violations", classes="panel")
                    recent = EventLog(id="recent-events", classes="panel")  # wide screens only (app.tcss)
                    # a tail to glance at, unfocusable before the first focus is given: Tab and Enter
                    # go to the violations (key 4: the full log)
                    recent.can_focus = False
                    yield recent
            yield AuxPanel(id="aux", classes="panel")
            yield DraftPanel(id="draft", classes="panel")
            yield EventLog(id="events", classes="panel")
            yield AdvisorPanel(id="advisor", classes="panel")
        yield Footer(compact=True, show_command_palette=False)  # room for more keys at 80 columns

    def get_driver_class(self):
        """Textual's driver, made to notice a vanished terminal (:mod:`eagle3scope.tui.driver`)."""
        return driver_class() or super().get_driver_class()

    def on_load(self) -> None:
        """Before the terminal enters application mode: every signal that would end the process
        ends the app instead, so the driver leaves the alternate screen and turns mouse reporting
        off (:mod:`eagle3scope.tui.lifecycle`)."""
        self._ending_signals.install()

    def terminal_gone(self, reason: str) -> None:
        """The driver saw the terminal go (EIO/EPIPE on output, stdin hung up): end as a hang-up
        ends a command (:data:`TERMINAL_GONE`); nothing is drawn any more."""
        if self.gone_reason is None:
            self.gone_reason = reason
            self.exit(None, TERMINAL_GONE)

    def on_mount(self) -> None:
        self.main = self.screen
        # widgets by class, kept so a refresh never looks them up on whatever screen is on top
        self.w = {cls: self.main.query_one(cls) for cls in (PublisherBar, Timeline, ContentSwitcher, AcceptancePanel, ViolationsPanel,
                                                              AuxPanel, DraftPanel, AdvisorPanel)}
        self.w[EventLog] = self.main.query_one("#events", EventLog)
        self.recent_events = self.main.query_one("#recent-events", EventLog)
        self.recent_events.border_title = "Recent events"
        self.w[AcceptancePanel].border_title = "Acceptance"
        self.feed.start()
        self.refresh_view(force=True)
        self.set_interval(1.0 / self.refresh_hz, self.refresh_view)

    def on_resize(self) -> None:
        if hasattr(self, "w"):  # violations wrap by terminal height, which their own size may not show
            self.call_after_refresh(self.w[ViolationsPanel].invalidate)

    def on_unmount(self) -> None:
        self._ending_signals.restore()
        self.feed.stop()

    # -- the throttled refresh --------------------------------------------------------------

    def refresh_view(self, force: bool = False) -> None:
        """Copy what the visible panels need under the lock, then draw outside it."""
        feed = self.feed
        if not self.main.is_attached:  # shutting down
            return
        frozen = feed.live and feed.paused and not self._step_view
        if frozen and not force:
            self._show_timeline()
            return
        self._step_view = False
        started = time.perf_counter()
        panel = self.panel
        rid_filter = self.rid_filter
        now = time.monotonic()
        advise = panel in ADVISED_ON and (force or now - self._advised[1] >= ADVISE_EVERY_S)

        def capture(state):
            snap = {"frames": state.frames, "pubs": views.publisher_rows(state), "events": views.events(state)}
            if advise and state.frames != self._advised[0]:
                snap["rounds"] = views.advisor_logs(state)
            if force or state.frames != self._frames_shown:
                if panel == "overview":
                    snap["acc"] = views.acceptance_view(state)
                    snap["viol"] = views.violations(state)
                elif panel == "aux":
                    snap["aux"] = views.aux_view(state)
                elif panel == "draft":
                    snap["draft"] = views.draft_rows(state, rid_filter)
            return snap

        snap = feed.read(capture)
        self._frames_shown = snap["frames"]
        if "rounds" in snap:
            self._advised = (snap["frames"], now)
            self._show_advice(views.advice_rows(snap["rounds"]))
        for row in snap["pubs"]:
            if not feed.live:
                row.state = "replay"
            else:
                age = now - feed.arrivals.get(row.src, now)
                row.state = "live" if age < STALE_AFTER_S else f"stale {age:.0f}s"
        self.w[PublisherBar].rows = tuple(snap["pubs"])
        self._maybe_load_decoder(snap["pubs"])
        if "acc" in snap:
            self.w[AcceptancePanel].view = snap["acc"]
            self.w[ViolationsPanel].violations = tuple(snap["viol"])
            if force:
                self.w[ViolationsPanel].invalidate()
        if "aux" in snap:
            self.w[AuxPanel].view = snap["aux"]
        if "draft" in snap:
            self.w[DraftPanel].rows = tuple(snap["draft"])
        self.w[EventLog].events = snap["events"]
        self.recent_events.events = snap["events"]
        elapsed_ms = (time.perf_counter() - started) * 1000
        self.refresh_ms = elapsed_ms if self.refresh_ms is None else 0.8 * self.refresh_ms + 0.2 * elapsed_ms
        self._show_timeline(snap["frames"])

    def _show_advice(self, rows: list) -> None:
        """The overview's line (the first publisher's advice; the panel has every one) and the panel."""
        line = ""
        if rows:
            first = rows[0]
            line = advice_line(first.advice) if len(rows) == 1 else \
                f"{first.label}: {advice_line(first.advice)} (+{len(rows) - 1} more publishers)"
        self.w[AcceptancePanel].advisor = line
        self.w[AdvisorPanel].rows = tuple(rows)

    def _show_timeline(self, frames: int | None = None) -> None:
        feed = self.feed
        info = {"paused": feed.paused, "filter": self.rid_filter, "error": feed.error, "replay": not feed.live, "label": getattr(feed, "label", "")}
        info["frames"] = frames if frames is not None else self.w[Timeline].info.get("frames", 0)
        info["refresh_ms"] = self.refresh_ms
        if not feed.live:
            info.update(feed.position())
        self.w[Timeline].info = info

    def _maybe_load_decoder(self, rows) -> None:
        model = next((row.model_path for row in rows if row.model_path), None)
        if model and model != self._decoder_for:
            self._decoder_for = model
            self._load_decoder(model)

    @work(thread=True, exclusive=True, group="tokenizer")
    def _load_decoder(self, model: str) -> None:
        decoder = load_decoder(model)
        if decoder is not None:
            self.call_from_thread(self._set_decoder, decoder)

    def _set_decoder(self, decoder) -> None:
        self.w[DraftPanel].decoder = decoder

    # -- keys -------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        if action in REPLAY_ONLY and self.feed.live:
            return False
        if action in LIVE_ONLY and not self.feed.live:
            return False
        return True

    def action_toggle_pause(self) -> None:
        self.feed.paused = not self.feed.paused
        self.refresh_view(force=True)

    def action_step(self) -> None:
        """Replay: one more step. Live: pause, then advance the frozen view to the newest data."""
        if self.feed.live:
            self.feed.paused = True
            self._step_view = True
        else:
            self.feed.step()
        self.refresh_view(force=True)

    def action_panel(self, name: str) -> None:
        self.panel = name
        self.w[ContentSwitcher].current = name
        self.refresh_view(force=True)
        # the shown panel's table or log takes the keys, so arrows and Enter work without a Tab first
        target = self.main.query_one(PANEL_FOCUS[name])
        if target.display and self.screen is self.main:
            target.focus()

    def action_next_panel(self) -> None:
        self.action_panel(PANELS[(PANELS.index(self.panel) + 1) % len(PANELS)])

    def action_filter(self) -> None:
        def done(value: str | None) -> None:
            if value is not None:
                self.rid_filter = value.strip() or None
                self.w[DraftPanel].invalidate()
                self.action_panel("draft")

        self.push_screen(PromptScreen("Show only requests whose id contains (empty: all):", "request id", self.rid_filter or ""), done)

    def action_load_report(self) -> None:
        self.push_screen(LoadReportScreen(self.feed.read(views.load_reports)))

    def action_aux_control(self) -> None:
        self.push_screen(AuxScreen(self.aux_client))

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.key_help()))

    def key_help(self) -> list[tuple[str, str, str]]:
        """(keys, description, detail) for every key usable in this mode."""
        rows = []
        for binding in self.BINDINGS:
            if not self.check_action(binding.action.split("(")[0], ()):
                continue  # keys of the other mode (replay-only, live-only) are not listed
            keys = ", ".join(self.get_key_display(Binding(k, binding.action)) for k in binding.key.split(","))
            rows.append((keys, binding.description, binding.tooltip))
        rows.append(("enter", "Explain", "Violation under the cursor: full explanation and fix"))
        rows.append(("tab", "Focus", "Next table or log"))
        rows.append(("↑ ↓ pgup pgdn", "Move", "In tables and logs"))
        return rows

    def on_violations_panel_selected(self, event: ViolationsPanel.Selected) -> None:
        v = event.violation

        def done(result) -> None:
            if result == "seek":
                self.seek_violation(v)

        self.push_screen(ViolationScreen(v), done)

    def seek_violation(self, v) -> None:
        """Replay from the step where ``v`` was first seen, in its own run of its publisher."""
        began = self.feed.read(lambda s: next((p.began for p in s.runs() if p.src == v.src and p.run == v.run), None))
        if began is None:
            self.feed.seek_step(v.first_seq or 0)
        else:
            self.feed.seek_run_step(v.src, v.run, began, v.first_seq or 0)
        self._frames_shown = -1
        self.refresh_view(force=True)

    # -- replay keys ------------------------------------------------------------------------

    def action_faster(self) -> None:
        self._set_speed(+1)

    def action_slower(self) -> None:
        self._set_speed(-1)

    def _set_speed(self, direction: int) -> None:
        current = self.feed.speed
        index = min(range(len(SPEEDS)), key=lambda i: abs(SPEEDS[i] - current))
        self.feed.set_speed(SPEEDS[max(0, min(len(SPEEDS) - 1, index + direction))])
        self._show_timeline()

    def action_seek(self) -> None:
        def done(value: str | None) -> None:
            if value:
                try:
                    self.seek(value)
                except ValueError as exc:
                    self.notify(markup(exc), severity="error")

        self.push_screen(PromptScreen("Seek to step (1234) or time from the start (12.5s, 2m, 1:30):", "step or time"), done)

    def seek(self, target: str) -> None:
        """Seek a replay: a plain integer is a step ``seq``; ``12.5s``, ``2m``, ``1:30`` are times."""
        kind, value = parse_seek(target)
        if kind == "step":
            self.feed.seek_step(value)
        else:
            self.feed.seek_time(value)
        self._frames_shown = -1
        self.refresh_view(force=True)

    def action_seek_relative(self, delta: int) -> None:
        seq = self.feed.position().get("seq") or 0
        self.feed.seek_step(max(0, seq + delta))
        self.refresh_view(force=True)

    # -- themes -----------------------------------------------------------------------------

    def apply_theme(self, name: str, *, remember: bool = True, fallback: bool = False) -> None:
        """Register the theme file's colours, swap its rules in, and (optionally) remember it."""
        try:
            theme_file = load_theme(name)
        except KeyError:
            if not fallback:
                raise
            theme_file = load_theme(DEFAULT_THEME)
        self.register_theme(theme_file.to_textual())
        if self._theme_source is not None:
            self.stylesheet.source.pop(self._theme_source, None)
        self._theme_source = (str(theme_file.path), "")
        self.stylesheet.add_source(theme_file.rules, read_from=self._theme_source)
        self.theme_name = theme_file.name
        self.theme = f"e3s-{theme_file.name}"
        if remember and self._remember:
            remember_theme(theme_file.name)
        if self.is_running:  # drawn rows carry the old theme's colours
            self.call_after_refresh(self.w[DraftPanel].invalidate)
            self.call_after_refresh(self.refresh_view, True)
            for log in self.main.query(EventLog):
                self.call_after_refresh(log.invalidate)

    def action_cycle_theme(self) -> None:
        names = sorted(available_themes())
        index = names.index(self.theme_name) if self.theme_name in names else -1
        self.apply_theme(names[(index + 1) % len(names)])
        self.notify(f"theme: {markup(self.theme_name)}", timeout=2)


def run_watch(endpoints: list[str], theme: str | None = None, aux_client=None,
              max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, discover: bool = True) -> int:
    """Open the TUI on one or more live publishers (``aux_client``: a ControlClient for key ``c``);
    returns the app's exit status (non-zero after a crash)."""
    from eagle3scope.live.subscriber import Subscriber
    from eagle3scope.tui.feed import LiveFeed

    app = ScopeApp(LiveFeed(Subscriber(list(endpoints), max_frame_bytes=max_frame_bytes, discover=discover)), theme=theme)
    app.aux_client = aux_client
    return run_app(app)


def run_replay(path: str | Path, speed: float = 1.0, theme: str | None = None, from_step: int | None = None,
               from_time: float | None = None) -> int:
    """Open the TUI on a recording, playing at ``speed``, optionally from a step or a time (s);
    returns the app's exit status (non-zero after a crash). Raises StoreError for an unreadable file."""
    from eagle3scope.tui.feed import ReplayFeed

    feed = ReplayFeed(path, speed=speed)
    if from_step is not None:
        feed.seek_step(from_step)
    elif from_time is not None:
        feed.seek_time(from_time)
    return run_app(ScopeApp(feed, theme=theme))
