"""The load report: every publisher's hello and load-time report, field by field, as sent."""

from __future__ import annotations

from rich.table import Table
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from eagle3scope.analysis.views import LoadReport
from eagle3scope.tui.panels.drawing import plain


class LoadReportPanel(VerticalScroll):
    """One section per publisher (:class:`~eagle3scope.analysis.views.LoadReport`)."""

    BORDER_TITLE = "Load report and hello, as each publisher sent them"

    def __init__(self, reports: list[LoadReport], **kwargs) -> None:
        super().__init__(**kwargs)
        self.reports = reports

    def compose(self) -> ComposeResult:
        if not self.reports:
            yield Static("no publisher has sent a load report yet")
        for report in self.reports:
            yield Static(plain(f"publisher {report.src}", "bold"), classes="load-title")
            yield Static(_fields_table("hello", report.hello))
            yield Static(_fields_table("load report", report.load))


def _fields_table(title: str, fields: tuple | None) -> Table:
    table = Table(title=title, title_justify="left", show_header=False, box=None, padding=(0, 1))
    table.add_column(style="dim", no_wrap=True)
    table.add_column()
    if not fields:
        table.add_row("", "not received")
        return table
    for key, text in fields:
        table.add_row(plain(key), plain(text))
    return table
