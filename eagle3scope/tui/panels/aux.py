"""Hidden states and aux layers: what enters the draft (width per forward mode, fc applied or
skipped), each publisher's load summary, and acceptance per aux-layer configuration."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.reactive import reactive
from textual.widgets import Static

from eagle3scope.analysis.views import AuxView
from eagle3scope.tui.panels.drawing import fmt, plain
from eagle3scope.wire.untrusted import terminal


class AuxPanel(VerticalScroll):
    """What enters the draft (width per forward mode, fc applied or skipped) and which layers feed it."""

    COMPONENT_CLASSES = {"aux--bad", "aux--ok", "aux--muted"}
    BORDER_TITLE = "Hidden states & aux layers"
    view: reactive[AuxView | None] = reactive(None, always_update=True, init=False)

    def compose(self) -> ComposeResult:
        yield Static(id="aux-body")

    def watch_view(self, view: AuxView | None) -> None:
        if view is None:
            return
        tones = {tone: self.get_component_rich_style(f"aux--{tone}") for tone in ("bad", "ok", "muted")}
        bad, muted = tones["bad"], tones["muted"]
        passes = Table(title="draft forwards per mode", title_justify="left", expand=False, box=None, padding=(0, 1))
        for col in ("mode", "calls", "widths entering the draft", "fc applied", "fc skipped"):
            passes.add_column(col, justify="left" if col in ("mode", "widths entering the draft") else "right")
        for p in view.passes:
            width_text = plain(", ".join(f"{w}×{n:,}" for w, n in p.widths))
            skipped = Text(f"{p.fc_skipped:,}", style=bad if p.fc_skipped and p.fc_applied == 0 else None)
            passes.add_row(plain(p.mode), f"{p.calls:,}", width_text, f"{p.fc_applied:,}", skipped)
        parts: list = [passes if view.passes else Text("no draft forwards seen yet", style=muted)]
        replayed = [f"{terminal(p.mode)} {p.replayed:,}" for p in view.passes if p.replayed]
        if replayed:
            parts.append(Text(f"of these, replayed from captured graphs: {', '.join(replayed)}", style=muted))
        for src, text, tone in view.seen:
            parts.append(Text(f"{terminal(src)}: {text}", style=tones.get(tone)))
        parts.append(_SideBySide([Group(Text(f"\n{terminal(src)}", style="bold"), _facts_table(facts, tones))
                                  for src, facts in view.publishers]))
        if view.segments:
            parts.append(Text())
            seg = Table(title="aux-layer configurations (segments)", title_justify="left", box=None, padding=(0, 1))
            for col in ("layers", "origin", "steps", "mean accept"):
                seg.add_column(col)
            for s in view.segments:
                seg.add_row(plain(s.layers), plain(s.origin), f"{s.steps:,}", fmt(s.mean))
            parts.append(seg)
        self.query_one("#aux-body", Static).update(Group(*parts))


class _SideBySide:
    """Publishers' summaries side by side when there is room (~70 columns each), decided at render
    time from the width the panel gives: one render and one layout per change of view or size (a
    width read from the widget before it is laid out gave a first layout for the wrong width)."""

    COLUMN = 70

    def __init__(self, summaries: list) -> None:
        self.summaries = summaries

    def __rich_console__(self, console, options):
        per_row = max(1, min(len(self.summaries), options.max_width // self.COLUMN))
        grid = Table.grid(padding=(0, 4))
        for _ in range(per_row):
            grid.add_column()
        for i in range(0, len(self.summaries), per_row):
            grid.add_row(*self.summaries[i : i + per_row])
        yield grid


def _facts_table(facts: list, tones: dict) -> Table:
    table = Table(show_header=False, box=None, padding=(0, 1))
    table.add_column(style=tones["muted"])
    table.add_column()
    for fact in facts:
        table.add_row(plain(fact.label), plain(fact.text, tones.get(fact.tone)))
    return table
