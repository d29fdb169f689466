"""The panels. Each one copies what it needs out of the :class:`SessionState` in ``capture`` (called
under the ingest lock, so it only copies) and draws it in ``show``/``render`` (lock released).

Colours come from component classes (``.tcss``), so themes restyle everything without code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.console import Group
from rich.segment import Segment
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import DataTable, RichLog, Static

from eagle3scope.analysis.state import SessionState
from eagle3scope.wire.aux_layers import RULE_SUMMARY

BLOCKS = " ▁▂▃▄▅▆▇█"


def fmt(value, spec: str = ".2f", none: str = "–") -> str:
    return none if value is None else format(value, spec)


def bar(fraction: float | None, width: int) -> str:
    if fraction is None or width <= 0:
        return " " * max(width, 0)
    eighths = round(max(0.0, min(1.0, fraction)) * width * 8)
    full, part = divmod(eighths, 8)
    return ("█" * full + (BLOCKS[part] if part else "")).ljust(width)


def evidence_text(evidence) -> str:
    """A rule's evidence map as one line: ``key=value`` pairs in the rule's own order."""
    if isinstance(evidence, dict):
        return "  ".join(f"{k}={v}" for k, v in evidence.items())
    return str(evidence)


# -- header --------------------------------------------------------------------------------------


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
    dropped: int
    gaps: int
    hook_failures: int
    hooks_ok: int
    hooks_total: int
    has_hello: bool
    model_path: str | None = None
    state: str = "live"  # "live" | "stale Ns" | "replay"


class PublisherBar(Widget):
    """One line per publisher: identity, configuration, rates and losses."""

    COMPONENT_CLASSES = {"pub--ok", "pub--warn", "pub--bad", "pub--muted"}
    rows: reactive[tuple] = reactive(tuple, layout=True)

    @staticmethod
    def capture(state: SessionState) -> list[PublisherRow]:
        rows = []
        for src, pub in state.publishers.items():
            hello = pub.hello or {}
            args = pub.server_args
            beat = pub.heartbeat or {}
            hooks = list(pub.hooks.values())
            rows.append(
                PublisherRow(
                    src=src,
                    version=hello.get("sglang_version"),
                    algorithm=args.get("algorithm"),
                    worker=hello.get("worker"),
                    steps=args.get("num_steps"),
                    topk=args.get("topk"),
                    draft_tokens=args.get("num_draft_tokens"),
                    cuda_graph=args.get("cuda_graph"),
                    tp_rank=hello.get("tp_rank"),
                    dp_rank=hello.get("dp_rank"),
                    steps_per_s=pub.acceptance.steps_per_s,
                    dropped=beat.get("dropped") or 0,
                    gaps=pub.gaps,
                    hook_failures=beat.get("hook_failures") or 0,
                    hooks_ok=sum(1 for h in hooks if h.get("status") == "attached"),
                    hooks_total=len(hooks),
                    has_hello=pub.hello is not None,
                    model_path=args.get("model_path"),
                )
            )
        return rows

    def get_content_height(self, container, viewport, width: int) -> int:
        return max(1, len(self.rows))

    def render(self) -> Text:
        styles = tuple(self.get_component_rich_style(f"pub--{n}") for n in ("ok", "warn", "bad", "muted"))
        if not self.rows:
            return Text("waiting for a publisher…", style=styles[3])
        lines = []
        for r in self.rows:
            line = self._line(r, False, *styles)  # the long form where it fits, else the short one
            if line.cell_len > self.size.width:
                line = self._line(r, True, *styles)
            line.truncate(self.size.width, overflow="ellipsis")
            lines.append(line)
        return Text("\n").join(lines)

    @staticmethod
    def _line(r: PublisherRow, narrow: bool, ok, warn, bad, muted) -> Text:
        line = Text(no_wrap=True, overflow="ellipsis")
        state_style = ok if r.state in ("live", "replay") else warn
        line.append("● ", style=state_style)
        line.append(r.src if not narrow else r.src[:12], style="bold")
        if r.state not in ("live", "replay"):
            line.append(f" {r.state}", style=warn)
        if not r.has_hello:
            line.append(" (no hello yet)", style=warn)
        else:
            line.append(f" {r.version or '?'}" if narrow else f" sglang {r.version or '?'}")
            line.append(f" {r.algorithm or '?'}")
            if r.worker and not narrow:
                line.append(f" {r.worker}")
            line.append(f" {r.steps}/{r.topk}/{r.draft_tokens}" if narrow else f" steps {r.steps} topk {r.topk} draft {r.draft_tokens}")
            graph = {True: "on", False: "off"}.get(r.cuda_graph, "?")
            line.append(f" cg:{graph}" if narrow else f" cuda-graph {graph}")
            if not narrow:
                line.append(f" rank tp{r.tp_rank}/dp{r.dp_rank}", style=muted)
        line.append(" │ ", style=muted)
        line.append(f"{fmt(r.steps_per_s, ',.1f')} steps/s")
        lost = r.dropped + r.gaps
        line.append(" │ ", style=muted)
        line.append(f"drop {lost:,}" if narrow else f"dropped {r.dropped:,} lost {r.gaps:,}", style=bad if lost else None)
        line.append(" │ ", style=muted)
        line.append(f"hookfail {r.hook_failures}" if narrow else f"hook failures {r.hook_failures}", style=bad if r.hook_failures else None)
        if r.hooks_total and not narrow:
            line.append(f" ({r.hooks_ok}/{r.hooks_total} seams)", style=warn if r.hooks_ok < r.hooks_total else muted)
        return line


class Timeline(Widget):
    """Where the screen is in the stream: live/paused, or replay position, speed and time."""

    COMPONENT_CLASSES = {"timeline--done", "timeline--todo", "timeline--paused", "timeline--muted"}
    info: reactive[dict] = reactive(dict)

    def render(self) -> Text:
        i = self.info
        done, todo, paused, muted = (self.get_component_rich_style(f"timeline--{n}") for n in ("done", "todo", "paused", "muted"))
        text = Text(no_wrap=True, overflow="ellipsis")
        # "‖", not "⏸": emoji fonts draw that one two cells wide and shift the line
        text.append("‖ PAUSED " if i.get("paused") else "▶ ", style=paused if i.get("paused") else None)
        if i.get("filter"):
            text.append(f"[filter {i['filter']}] ", style=paused)
        if i.get("error"):
            text.append(f"ingest stopped: {i['error']} ", style=paused)
        if not i.get("replay"):
            text.append(i.get("label", "LIVE"), style="bold")
            text.append(f"  {i.get('frames', 0):,} frames", style=muted)
            if i.get("refresh_ms") is not None:  # live only: replay screens stay clock-free
                text.append(f"  refresh {i['refresh_ms']:.1f} ms", style=muted)
            return text
        pos, total = i.get("index", 0), i.get("total", 0)
        text.append(f"REPLAY {i.get('speed', 1):g}× ", style="bold")
        text.append(f"step {i.get('seq') if i.get('seq') is not None else '–'}  ")
        text.append(f"{pos:,}/{total:,}  +{i.get('elapsed_s', 0.0):.1f}s/{i.get('duration_s', 0.0):.1f}s ", style=muted)
        width = max(0, self.size.width - text.cell_len - 1)
        if width >= 8 and total:
            filled = round(width * min(1.0, pos / total))
            text.append("━" * filled, style=done)
            text.append("─" * (width - filled), style=todo)
        return text


# -- acceptance ----------------------------------------------------------------------------------


@dataclass
class AcceptanceSnap:
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
    history: list = field(default_factory=list)
    segments: list = field(default_factory=list)  # (layers, origin, steps, mean, start_seq)


class HistoryPlot(Widget):
    """Rolling mean acceptance length over time, with the configured maximum as a reference line.

    Drawn with the line API (one :class:`Strip` of style runs per row, cached until the data or
    the size changes): a plot redrawn eight times a second must not cost a styled span per cell.
    """

    COMPONENT_CLASSES = {"history--bar", "history--ref", "history--axis", "history--segment"}
    points: reactive[tuple] = reactive(tuple)
    reference: reactive[float | None] = reactive(None)
    marks: reactive[tuple] = reactive(tuple)  # indexes into points where an aux-config segment starts
    LABEL_W = 5

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._strips: list[Strip] | None = None
        self._strips_for: tuple | None = None

    def columns(self, cols: int) -> tuple[list[float], set[int]]:
        """One value per column, newest at the right; buckets averaged when points outnumber columns."""
        points = self.points
        if len(points) <= cols:
            return list(points), set(self.marks)
        per = len(points) / cols
        values = []
        for c in range(cols):
            lo, hi = int(c * per), max(int(c * per) + 1, int((c + 1) * per))
            values.append(sum(points[lo:hi]) / (hi - lo))
        return values, {min(cols - 1, int(m / per)) for m in self.marks}

    def rows(self, width: int, height: int) -> list[list[tuple[str, str]]]:
        """The plot as rows (top first) of ``(characters, role)`` runs; roles name component classes."""
        cols = max(1, width - self.LABEL_W)
        if not self.points:
            return [[("no decode steps yet", "axis")]] + [[("", "axis")]] * (height - 1)
        values, marks = self.columns(cols)
        top = max([self.reference or 0.0, *values, 1.0])
        offset = cols - len(values)
        ref_row = None if self.reference is None else min(height - 1, int((self.reference / top) * height - 1e-9))
        # whole acceptance lengths on the axis where the plot is tall enough to tell them apart
        ticks = {int((v / top) * height - 1e-9): float(v) for v in range(1, int(top)) if height >= 4 * int(top)}
        out = []
        for r in range(height - 1, -1, -1):  # r counts rows from the bottom
            if r == height - 1:
                label = (f"{top:4.1f} ", "axis")
            elif r == 0:
                label = (f"{0.0:4.1f} ", "axis")
            elif r == ref_row:
                label = (f"{self.reference:4.1f} ", "ref")
            elif r in ticks:
                label = (f"{ticks[r]:4.1f} ", "axis")
            else:
                label = (" " * self.LABEL_W, "axis")
            runs = [label]
            empty = ("╌", "ref") if r == ref_row else (" ", "axis")
            for c in range(cols):
                i = c - offset
                level = (values[i] / top) * height - r if i >= 0 else 0.0
                if level >= 1:
                    cell = ("█", "bar")
                elif level > 0:
                    cell = (BLOCKS[max(1, round(level * 8))], "bar")
                elif i >= 0 and i in marks:
                    cell = ("┊", "segment")
                else:
                    cell = empty
                if runs[-1][1] == cell[1]:
                    runs[-1] = (runs[-1][0] + cell[0], cell[1])
                else:
                    runs.append(cell)
            out.append(runs)
        return out

    def watch_points(self) -> None:
        self._strips = None

    def watch_reference(self) -> None:
        self._strips = None

    def render_line(self, y: int) -> Strip:
        width, height = self.size.width, self.size.height
        key = (width, height, self.app.theme)
        if self._strips is None or self._strips_for != key:
            styles = {role: self.get_component_rich_style(f"history--{role}") for role in ("bar", "ref", "axis", "segment")}
            self._strips = [
                Strip([Segment(chars, styles[role]) for chars, role in row]).adjust_cell_length(width)
                for row in self.rows(width, height)
            ]
            self._strips_for = key
        return self._strips[y] if y < len(self._strips) else Strip.blank(width)


class AcceptancePanel(Vertical):
    """Rolling mean, history, per-position rates, histogram, accepted tokens/s."""

    COMPONENT_CLASSES = {"acc--value", "acc--muted", "acc--bar", "acc--low"}
    snap: reactive[AcceptanceSnap] = reactive(AcceptanceSnap, always_update=True)

    @staticmethod
    def capture(state: SessionState) -> AcceptanceSnap:
        acc = state.acceptance
        draft_tokens = next((p.server_args.get("num_draft_tokens") for p in state.publishers.values() if p.server_args), None)
        return AcceptanceSnap(
            mean=acc.mean_accept_length,
            cumulative=acc.cumulative_mean_accept_length,
            k=acc.k,
            draft_tokens=draft_tokens,
            steps=acc.n_steps,
            request_steps=acc.total.n,
            steps_per_s=acc.steps_per_s,
            tokens_per_s=acc.accepted_tokens_per_s,
            per_position=acc.per_position,
            histogram=acc.histogram,
            history=[h[2] for h in acc.history],
            segments=[(s.layers, s.origin, s.steps, s.mean_accept_length, s.start_seq) for s in state.segments],
        )

    def compose(self) -> ComposeResult:
        yield Static(id="acc-summary")
        yield HistoryPlot(id="acc-history")
        yield Static(id="acc-dist")

    def on_resize(self) -> None:
        self.watch_snap(self.snap)  # bars or one-line summaries depend on the room

    def watch_snap(self, snap: AcceptanceSnap) -> None:
        value, muted, bar_style, low = (self.get_component_rich_style(f"acc--{n}") for n in ("value", "muted", "bar", "low"))
        maximum = snap.k + 1 if snap.k else None
        head = Text(no_wrap=True, overflow="ellipsis")
        head.append("accept length ")
        head.append(fmt(snap.mean), style=value)
        head.append(f" / max {maximum if maximum else '–'}", style=muted)
        head.append(f"  cumulative {fmt(snap.cumulative)}")
        head.append(f"  segments {len(snap.segments)}" if len(snap.segments) > 1 else "", style=muted)
        rates = Text(no_wrap=True, overflow="ellipsis")
        rates.append(f"{snap.steps:,} steps  {fmt(snap.steps_per_s, ',.1f')} steps/s  ")
        rates.append(fmt(snap.tokens_per_s, ",.1f"), style=value)
        rates.append(" accepted tok/s")
        self.query_one("#acc-summary", Static).update(Text("\n").join([head, rates]))
        plot = self.query_one("#acc-history", HistoryPlot)
        plot.reference = float(maximum) if maximum else None
        plot.points = tuple(snap.history)
        plot.border_subtitle = f"╌ max {maximum} (steps {snap.k}, draft tokens {snap.draft_tokens})" if maximum else ""
        self.query_one("#acc-dist", Static).update(self._distribution(snap, muted, bar_style, low))

    def _distribution(self, snap: AcceptanceSnap, muted, bar_style, low) -> Text:
        """Per-position rates and the histogram: bars when there is room, one line each when not."""
        total = sum(snap.histogram)
        shares = [c / total if total else None for c in snap.histogram]
        dist = Text(no_wrap=True, overflow="ellipsis")
        if self.size.width < 60 or self.size.height < 24:
            dist.append("per pos ", style=muted)
            for i, rate in enumerate(snap.per_position, 1):
                dist.append(f"p{i} {fmt(rate)} ", style=low if rate is not None and rate < 0.2 else None)
            dist.append("\nhist    ", style=muted)
            for j, share in enumerate(shares):
                dist.append(f"{j}:{fmt(share and share * 100, '.0f')}% ")
        else:
            width = max(4, self.size.width - 22)
            dist.append("per position (rolling)\n", style=muted)
            for i, rate in enumerate(snap.per_position, 1):  # both label columns 12 wide: bars line up
                dist.append(f" p{i:<3}{fmt(rate, '.2f'):>6} ")
                dist.append(bar(rate, width), style=low if rate is not None and rate < 0.2 else bar_style)
                dist.append("\n")
            dist.append("accepted drafts per request-step\n", style=muted)
            for j, share in enumerate(shares):
                dist.append(f" {j:>3} {fmt(share and share * 100, '.1f'):>5}% ")
                dist.append(bar(share, width), style=bar_style)
                dist.append("\n")
        if len(snap.segments) > 1:
            dist.append("\naux-layer segments\n", style=muted)
            for layers, origin, steps, mean, _ in snap.segments:
                dist.append(f" {str(layers):<16} {origin:<8} {steps:>7,} steps  mean {fmt(mean)}\n")
        dist.rstrip()
        return dist


# -- violations ----------------------------------------------------------------------------------


class ViolationsPanel(Vertical):
    """Every rule that fired, worst first; Enter opens the explanation and the fix."""

    COMPONENT_CLASSES = {"sev--error", "sev--warning", "sev--info", "sev--healed"}
    BORDER_TITLE = "Violations"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.violations: list = []
        self._shown: tuple = ()

    @staticmethod
    def capture(state: SessionState) -> list:
        return state.violations()

    def compose(self) -> ComposeResult:
        yield DataTable(id="violations-table", cursor_type="row", zebra_stripes=False)
        yield Static("no violations: every contract holds so far", id="violations-none")

    def on_resize(self) -> None:
        self.show(self.violations, force=True)  # column widths and row heights follow the panel

    def show(self, violations: list, force: bool = False) -> None:
        key = tuple((v.id, v.src, v.severity, v.evidence, v.active) for v in violations)
        if key == self._shown and not force:
            return
        self._shown = key
        self.violations = list(violations)
        table = self.query_one(DataTable)
        row = table.cursor_row
        table.clear(columns=True)
        # the text column gets exactly the room left, so it ellipsizes or wraps instead of scrolling
        # sideways; a tall screen wraps the whole evidence, a short one keeps a line each. Under 70
        # columns (the side column of a 120-column screen) the rule id moves into the text column.
        pad = 2 * table.cell_padding
        rule_w = max([4, *(len(v.id) for v in violations)])
        compact = self.content_size.width < 70
        text_w = max(10, self.content_size.width - (4 + pad) - (0 if compact else rule_w + pad) - pad - table.styles.scrollbar_size_vertical)
        wrap = self.app.size.height >= 36
        table.add_column("sev", width=4)
        if not compact:
            table.add_column("rule", width=rule_w)
        table.add_column("rule / title / evidence" if compact else "title / evidence", width=text_w)
        muted = self.get_component_rich_style("sev--healed", partial=True)
        for i, v in enumerate(violations):
            # partial styles: no background of their own, so the cursor row keeps one background
            style = self.get_component_rich_style(f"sev--{v.severity}" if v.active else "sev--healed", partial=True)
            sev = Text({"error": "ERR", "warning": "WARN"}.get(v.severity, v.severity.upper()[:4]) if v.active else "was", style=style)
            detail = Text(no_wrap=not wrap, overflow="fold" if wrap else "ellipsis")
            if compact:
                detail.append(f"{v.id}\n", style=style)
            detail.append(v.title, style=style)
            detail.append(f"\n{v.src} · {evidence_text(v.evidence)}", style=muted)
            cells = (sev, detail) if compact else (sev, Text(v.id, style=style), detail)
            table.add_row(*cells, key=str(i), height=None if wrap else 3 if compact else 2)
        if violations:
            table.move_cursor(row=min(row, len(violations) - 1))
        self.query_one("#violations-none").display = not violations
        table.display = bool(violations)
        if violations and self.screen.focused is None and self.app.screen is self.screen:
            table.focus()  # the table was hidden when the screen picked a focus: Enter must work at once
        errors = sum(1 for v in violations if v.active and v.severity == "error")
        self.border_title = f"Violations {len(violations)}" + (f" ({errors} errors)" if errors else "")


# -- hidden state and aux ------------------------------------------------------------------------


@dataclass
class AuxSnap:
    passes: dict = field(default_factory=dict)  # mode -> (calls, {width: n}, fc applied, fc skipped)
    publishers: list = field(default_factory=list)  # (src, load, capture, family's aux id rule)
    segments: list = field(default_factory=list)


class AuxPanel(VerticalScroll):
    """What enters the draft (width per forward mode, fc applied or skipped) and which layers feed it."""

    COMPONENT_CLASSES = {"aux--bad", "aux--ok", "aux--muted"}
    BORDER_TITLE = "Hidden states & aux layers"
    _snap: AuxSnap | None = None

    @staticmethod
    def capture(state: SessionState) -> AuxSnap:
        return AuxSnap(
            passes={m: (p.calls, dict(p.widths), p.fc_applied, p.fc_skipped) for m, p in state.passes.items()},
            publishers=[(src, pub.load, pub.capture, pub.aux_rule) for src, pub in state.publishers.items()],
            segments=[(s.layers, s.origin, s.steps, s.mean_accept_length) for s in state.segments],
        )

    def compose(self) -> ComposeResult:
        yield Static(id="aux-body")

    def on_resize(self) -> None:
        if self._snap is not None:
            self.show(self._snap)

    def show(self, snap: AuxSnap) -> None:
        self._snap = snap
        bad, ok, muted = (self.get_component_rich_style(f"aux--{n}") for n in ("bad", "ok", "muted"))
        passes = Table(title="draft forwards per mode", title_justify="left", expand=False, box=None, padding=(0, 1))
        for col in ("mode", "calls", "widths entering the draft", "fc applied", "fc skipped"):
            passes.add_column(col, justify="left" if col in ("mode", "widths entering the draft") else "right")
        for mode, (calls, widths, applied, skipped) in sorted(snap.passes.items()):
            width_text = ", ".join(f"{w}×{n:,}" for w, n in sorted(widths.items(), key=lambda kv: str(kv[0])))
            passes.add_row(mode, f"{calls:,}", width_text, f"{applied:,}", Text(f"{skipped:,}", style=bad if skipped and applied == 0 else None))
        parts: list = [passes if snap.passes else Text("no draft forwards seen yet", style=muted)]
        # publishers side by side when the panel has room for more than one summary (~70 columns each)
        per_row = max(1, min(len(snap.publishers), self.size.width // 70))
        grid = Table.grid(padding=(0, 4))
        for _ in range(per_row):
            grid.add_column()
        summaries = [Group(Text(f"\n{src}", style="bold"), _load_summary(load, capture, rule, bad, ok, muted)) for src, load, capture, rule in snap.publishers]
        for i in range(0, len(summaries), per_row):
            grid.add_row(*summaries[i : i + per_row])
        parts.append(grid)
        if snap.segments:
            parts.append(Text())
            seg = Table(title="aux-layer configurations (segments)", title_justify="left", box=None, padding=(0, 1))
            for col in ("layers", "origin", "steps", "mean accept"):
                seg.add_column(col)
            for layers, origin, steps, mean in snap.segments:
                seg.add_row(str(layers), origin, f"{steps:,}", fmt(mean))
            parts.append(seg)
        self.query_one("#aux-body", Static).update(Group(*parts))


def _load_summary(load: dict | None, capture: dict | None, rule: str | None, bad, ok, muted) -> Table:
    table = Table(show_header=False, box=None, padding=(0, 1))
    table.add_column(style=muted)
    table.add_column()
    if not load:
        table.add_row("load report", Text("not received yet", style=muted))
        return table
    aux = load.get("aux") or {}
    table.add_row("draft / target", f"{load.get('draft_class')} / {load.get('target_class')}")
    fc = load.get("fc")
    table.add_row("fc", f"{fc.get('in')} → {fc.get('out')}" if fc else Text("none", style=bad))
    table.add_row("configured aux ids", str(aux.get("configured")))
    live = (capture or {}).get("layers")
    captured = aux.get("captured")
    match = captured is not None and aux.get("configured") is not None
    table.add_row("captured (load)", Text(str(captured), style=None if not match else ok))
    table.add_row("captured (live)", Text(f"{live} capture {'on' if (capture or {}).get('on') else 'off'}" if capture else "–", style=bad if capture and not capture.get("on") else None))
    table.add_row("use_aux / rule", f"{aux.get('use_aux')} / {aux.get('offset_rule')}")
    table.add_row("family id rule", Text(f"{rule}: {RULE_SUMMARY[rule]}" if rule else "unknown family", style=None if rule else muted))
    d2t = load.get("d2t")
    if d2t:
        flags = []
        if d2t.get("out_of_range"):
            flags.append(f"{d2t['out_of_range']} out of range")
        if d2t.get("injective") is False:
            flags.append("not injective")
        if d2t.get("looks_absolute"):
            flags.append("looks absolute")
        if d2t.get("t2d_consistent") is False:
            flags.append("t2d inconsistent")
        table.add_row("d2t", Text(f"size {d2t.get('size')} → target [{d2t.get('target_min')}, {d2t.get('target_max')}] " + ("; ".join(flags) or "ok"), style=bad if flags else ok))
    else:
        table.add_row("d2t", Text("absent (draft vocab = target vocab?)", style=muted))
    head = load.get("lm_head") or {}
    table.add_row("lm_head", Text(f"{head.get('source')} {head.get('shape')}", style=bad if head.get("source") == "init" else None))
    table.add_row("embed_tokens", str((load.get("embed_tokens") or {}).get("source")))
    weights = load.get("weights") or {}
    skipped, unwritten = weights.get("skipped") or [], weights.get("unwritten") or []
    table.add_row(
        "weights",
        Text(f"{len(weights.get('consumed') or [])} consumed, {len(skipped)} skipped, {len(unwritten)} never written" + (f": {', '.join(map(str, (skipped + unwritten)[:4]))}" if skipped or unwritten else ""), style=bad if skipped or unwritten else ok),
    )
    return table


# -- draft vs target -----------------------------------------------------------------------------


class DraftPanel(Vertical):
    """Recent steps per request: proposed draft tokens against what the target accepted."""

    COMPONENT_CLASSES = {"draft--accepted", "draft--rejected", "draft--unreached", "draft--bonus", "draft--muted"}
    BORDER_TITLE = "Draft vs target"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.decoder = None  # a tokens.Decoder once the target's tokenizer loads
        self._shown: tuple = ()

    @staticmethod
    def capture(state: SessionState, rid_filter: str | None, limit: int = 60) -> list:
        rows = []
        for src, body in reversed(state.recent):
            for i, rid in enumerate(body["rids"]):
                if rid_filter and rid_filter not in str(rid):
                    continue
                rows.append((body["seq"], src, str(rid), body["draft_ids"][i], body["accepted"][i], body["bonus"][i], body["accepted_ids"][i], body.get("mode", "decode")))
                if len(rows) >= limit:
                    return rows
        return rows

    def compose(self) -> ComposeResult:
        table = DataTable(id="draft-table", cursor_type="row")
        table.add_columns("step", "src", "request", "acc", "draft proposed", "committed")
        yield table

    def on_mount(self) -> None:
        # the colour legend rides on the border, so the token columns stay narrow enough for 80 columns
        self.border_subtitle = "[$e3s-good]accepted[/] [reverse $e3s-bad]first rejected[/] [$e3s-muted]unreached[/] [underline $e3s-info]bonus[/]"

    def _tokens(self, ids: list) -> list[str]:
        if self.decoder is not None:
            return self.decoder.pieces(ids)
        return [str(i) for i in ids]

    def show(self, rows: list) -> None:
        key = tuple(r[:3] for r in rows)
        if key == self._shown:
            return
        self._shown = key
        # partial styles: no background of their own, so the cursor row keeps one background
        acc_s, rej_s, unr_s, bonus_s, muted = (self.get_component_rich_style(f"draft--{n}", partial=True) for n in ("accepted", "rejected", "unreached", "bonus", "muted"))
        table = self.query_one(DataTable)
        table.clear()
        for seq, src, rid, draft, accepted, bonus, committed, mode in rows:
            proposed = Text(no_wrap=True, overflow="ellipsis")
            for j, piece in enumerate(self._tokens(draft)):
                style = acc_s if j < accepted else rej_s if j == accepted else unr_s
                proposed.append(piece, style=style)
                proposed.append(" ")
            done = Text(no_wrap=True, overflow="ellipsis")
            pieces = self._tokens(committed)
            for j, piece in enumerate(pieces):
                done.append(piece, style=bonus_s if bonus and j == len(pieces) - 1 else acc_s)
                done.append(" ")
            acc = f"{accepted}+{bonus}" if mode == "decode" else mode
            table.add_row(str(seq), src[:8], rid[-16:], acc, proposed, done)


class EventLog(RichLog):
    """The session's event log: publishers appearing, hooks, drops, config changes."""

    COMPONENT_CLASSES = {"event--info", "event--warning", "event--error", "event--stamp"}
    BORDER_TITLE = "Events"

    def __init__(self, **kwargs) -> None:
        super().__init__(max_lines=2000, wrap=True, markup=False, min_width=1, **kwargs)  # wrap at the panel, not 78
        self._last = None
        self._t0: int | None = None
        self._events: list = []

    @staticmethod
    def capture(state: SessionState) -> list:
        return list(state.events)

    def on_resize(self) -> None:
        self.redraw()

    def redraw(self) -> None:
        """Lines keep the width and colours they were written with: write them again (resize, theme)."""
        self.clear()
        self._last = None
        self.show(self._events)

    def show(self, events: list) -> None:
        self._events = events
        start = 0
        if self._last is not None:
            for i in range(len(events) - 1, -1, -1):
                if events[i] is self._last:
                    start = i + 1
                    break
        if events and self._t0 is None:
            self._t0 = events[0].t_ns
        for event in events[start:]:
            stamp = Text(f"{(event.t_ns - self._t0) / 1e9:8.3f}s", style=self.get_component_rich_style("event--stamp"))
            stamp.append(f" {event.src}", style="bold")
            line = Table.grid(padding=(0, 1))  # a hanging indent: wrapped text stays right of the stamp
            line.add_column(no_wrap=True)
            line.add_column()
            line.add_row(stamp, Text(event.text, style=self.get_component_rich_style(f"event--{event.level}") if event.level in ("info", "warning", "error") else ""))
            self.write(line)
        if events:
            self._last = events[-1]
