"""The num_steps advisor: predicted accept length and tok/s (from device times where the rounds carry
them, else host times) for every chain setting up to the served one, per publisher, with the advice
(key 5); :func:`advice_line` is the overview's line."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widgets import DataTable, Static

from eagle3scope.analysis.advisor import Advice
from eagle3scope.tui.panels.drawing import fmt, plain


def advice_line(advice: Advice) -> str:
    """``steps 5 → 2: +7 % tok/s, ±3 %`` (± half the gain's 95 % interval), a keep, or why not yet."""
    best, k = advice.recommendation(), advice.recorded_steps
    if best is None or k is None:
        return advice.reason
    if best.num_steps == k:
        return f"steps {k}: keep ({advice.reason})"
    lo, hi = best.gain_ci or (best.gain, best.gain)
    return f"steps {k} → {best.num_steps}: {best.gain * 100:+.0f} % tok/s, ±{(hi - lo) * 50:.0f} %"


def _plus_minus(value: float | None, ci: tuple[float, float] | None, spec: str, scale: float = 1.0) -> str:
    """``2.537 ±0.015``: the value and half its 95 % interval."""
    if value is None:
        return "–"
    half = "" if ci is None or ci[0] == ci[1] else f" ±{format((ci[1] - ci[0]) * scale / 2, spec.lstrip('+'))}"
    return format(value * scale, spec) + half


def tps_label(clocks) -> str:
    """The tok/s column's heading: which clock timed the rounds the predictions come from."""
    return f"tok/s ({', '.join(sorted(set(clocks))) or 'host'})"


class AdvisorPanel(Vertical):
    """Per publisher: the setting it serves, the advice, the time model; then one table row per setting."""

    DEFAULT_CSS = """
    AdvisorPanel #advisor-summary { height: auto; max-height: 50%; }
    AdvisorPanel #advisor-table { height: 1fr; }
    """
    COMPONENT_CLASSES = {"advisor--best", "advisor--muted"}
    BORDER_TITLE = "num_steps advisor"
    rows: reactive[tuple] = reactive(tuple, always_update=True, init=False)  # views.AdviceRow

    def compose(self) -> ComposeResult:
        yield Static(id="advisor-summary")
        table = DataTable(id="advisor-table", cursor_type="row")
        self._tps_column = table.add_columns("src", "steps", "accept length", tps_label(()), "vs served", "")[3]
        yield table

    def on_mount(self) -> None:
        self.border_subtitle = "chain drafts: shallower settings predicted from the served one's acceptance"
        self.watch_rows(())

    def _style(self, name: str):
        return self.get_component_rich_style(f"advisor--{name}", partial=True)

    def watch_rows(self, rows: tuple) -> None:
        best, muted = self._style("best"), self._style("muted")
        summary = []
        table = self.query_one(DataTable)
        table.clear()
        column = table.columns[self._tps_column]
        column.label = Text(tps_label(r.advice.model.clock for r in rows if r.advice.model))
        column.content_width = max(column.content_width, column.label.cell_len)
        for row in rows:
            a = row.advice
            advised = a.recommended not in (None, a.recorded_steps)
            head = Text(no_wrap=True, overflow="ellipsis")
            head.append(plain(row.label, "bold"))
            head.append(f" serves num_steps {fmt(a.recorded_steps, 'd')}, top-k {a.topk or 1}: {a.rounds:,} rounds, "
                        f"{a.request_steps:,} request-steps", style=muted)
            summary += [head, plain(f"  advice: {advice_line(a)}", best if advised else None)]
            if a.model is not None:
                summary.append(plain(f"  {a.model.describe()}", muted))
            summary += [plain(f"  not predicted: {what}", muted) for what in a.not_predicted]
            for s in a.settings:
                note = "advised" if advised and s.num_steps == a.recommended else \
                    "served" if s.num_steps == a.recorded_steps else ""
                style = best if note == "advised" else ""
                table.add_row(plain(row.label), Text(str(s.num_steps), style=style),
                              _plus_minus(s.accept_length, s.accept_length_ci, ".3f"), fmt(s.tokens_per_s, ",.1f"),
                              Text(_plus_minus(s.gain, s.gain_ci, "+.1f", 100) + (" %" if s.gain is not None else ""),
                                   style=style),
                              Text(note, style=style or muted))
        self.query_one("#advisor-summary", Static).update(
            Text("\n").join(summary) if summary else Text("no publisher yet", style=muted))
