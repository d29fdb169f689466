"""Acceptance: rolling mean, its history (aux-config changes marked), per-position rates, histogram;
per rank and the rank skew when a server has several publishers (DP ranks); the cumulative mean per
slice (context length, batch size, sampling, constraint) where a dimension has more than one label."""

from __future__ import annotations

from rich.segment import Segment
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Static

from eagle3scope.analysis.views import AcceptanceView
from eagle3scope.tui.panels.drawing import BLOCKS, bar, fmt, plain
from eagle3scope.wire.untrusted import markup, terminal


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

    def watch_marks(self) -> None:
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
    view: reactive[AcceptanceView] = reactive(AcceptanceView, always_update=True)
    advisor: reactive[str] = reactive("", init=False)  # the advisor's line (advisor.advice_line), set every few seconds

    def compose(self) -> ComposeResult:
        yield Static(id="acc-summary")
        yield HistoryPlot(id="acc-history")
        yield Static(id="acc-dist")

    def on_resize(self) -> None:
        self.watch_view(self.view)  # bars or one-line summaries depend on the room

    def watch_advisor(self) -> None:
        self.watch_view(self.view)

    def watch_view(self, view: AcceptanceView) -> None:
        value, muted, bar_style, low = (self.get_component_rich_style(f"acc--{n}") for n in ("value", "muted", "bar", "low"))
        maximum = view.k + 1 if view.k else None
        head = Text(no_wrap=True, overflow="ellipsis")
        head.append("accept length ")
        head.append(fmt(view.mean), style=value)
        head.append(f" / max {maximum if maximum else '–'}", style=muted)
        head.append(f"  cumulative {fmt(view.cumulative)}")
        head.append(f"  segments {len(view.segments)}" if len(view.segments) > 1 else "", style=muted)
        rates = Text(no_wrap=True, overflow="ellipsis")
        rates.append(f"{view.steps:,} steps  {fmt(view.steps_per_s, ',.1f')} steps/s  ")
        rates.append(fmt(view.tokens_per_s, ",.1f"), style=value)
        rates.append(" accepted tok/s")
        lines = [head, rates]
        if self.advisor:
            advice = Text(no_wrap=True, overflow="ellipsis")
            advice.append("advisor ", style=muted)
            advice.append(plain(self.advisor))
            advice.append("  (key 5)", style=muted)
            lines.append(advice)
        if view.ranks:
            lines += self._ranks(view, value, muted, low)
        summary = self.query_one("#acc-summary", Static)
        summary.update(Text("\n").join(lines))
        if summary.styles.height is None or summary.styles.height.value != len(lines):
            summary.styles.height = len(lines)  # 2 lines, + the advisor's, + 2 with several ranks
        plot = self.query_one("#acc-history", HistoryPlot)
        plot.reference = float(maximum) if maximum else None
        plot.points = tuple(view.history)
        plot.marks = tuple(view.marks)
        plot.border_subtitle = f"╌ max {maximum} (steps {view.k}, draft tokens {markup(view.draft_tokens)})" if maximum else ""
        self.query_one("#acc-dist", Static).update(self._distribution(view, muted, bar_style, low))

    @staticmethod
    def _ranks(view: AcceptanceView, value, muted, low) -> list[Text]:
        """``ranks dp0 3.05 dp1 2.10`` and ``rank skew 0.95: worst dp1 2.10 (best dp0 3.05)``."""
        ranks = Text(no_wrap=True, overflow="ellipsis")
        ranks.append("ranks", style=muted)
        worst = view.skew.worst if view.skew is not None else None
        for row in view.ranks:
            ranks.append(f"  {row.label} ")
            ranks.append(fmt(row.mean), style=low if row.label == worst else value)
        if view.skew is None:
            return [ranks]
        skew = Text(no_wrap=True, overflow="ellipsis")
        skew.append("rank skew ", style=muted)
        skew.append(fmt(view.skew.spread), style=low if view.skew.spread >= 0.5 else value)
        skew.append(f": worst {view.skew.worst} {fmt(view.skew.worst_mean)} (best {view.skew.best} {fmt(view.skew.best_mean)})")
        return [ranks, skew]

    def _distribution(self, view: AcceptanceView, muted, bar_style, low) -> Text:
        """Per-position rates and the histogram: bars when there is room, one line each when not."""
        total = sum(view.histogram)
        shares = [c / total if total else None for c in view.histogram]
        dist = Text(no_wrap=True, overflow="ellipsis")
        if self.size.width < 60 or self.size.height < 24:
            dist.append("per pos ", style=muted)
            for i, rate in enumerate(view.per_position, 1):
                dist.append(f"p{i} {fmt(rate)} ", style=low if rate is not None and rate < 0.2 else None)
            dist.append("\nhist    ", style=muted)
            for j, share in enumerate(shares):
                dist.append(f"{j}:{fmt(share and share * 100, '.0f')}% ")
        else:
            width = max(4, self.size.width - 22)
            dist.append("per position (rolling)\n", style=muted)
            for i, rate in enumerate(view.per_position, 1):  # both label columns 12 wide: bars line up
                dist.append(f" p{i:<3}{fmt(rate, '.2f'):>6} ")
                dist.append(bar(rate, width), style=low if rate is not None and rate < 0.2 else bar_style)
                dist.append("\n")
            dist.append("accepted drafts per request-step\n", style=muted)
            for j, share in enumerate(shares):
                dist.append(f" {j:>3} {fmt(share and share * 100, '.1f'):>5}% ")
                dist.append(bar(share, width), style=bar_style)
                dist.append("\n")
        if view.slices:
            dist.append("\nmean accept length by slice (cumulative)\n", style=muted)
            for row in view.slices:
                dist.append(f" {row.dimension.replace('_', ' '):<15}", style=muted)
                for label, mean, n in row.cells:
                    dist.append(f" {label} ")
                    dist.append(fmt(mean))
                    dist.append(f" ({n:,})", style=muted)
                dist.append("\n")
        if len(view.segments) > 1:
            dist.append("\naux-layer segments\n", style=muted)
            for s in view.segments:
                dist.append(f" {terminal(s.layers):<16} {terminal(s.origin):<8} {s.steps:>7,} steps  mean {fmt(s.mean)}\n")
        dist.rstrip()
        return dist
