"""The load report screen (key ``l``): :class:`~eagle3scope.tui.panels.load_report.LoadReportPanel` full screen."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer

from eagle3scope.analysis.views import LoadReport
from eagle3scope.tui.panels.load_report import LoadReportPanel


class LoadReportScreen(Screen):
    """The load-time report and server arguments of every publisher, as sent."""

    BINDINGS = [Binding("escape,q,l", "app.pop_screen", "Back")]

    def __init__(self, reports: list[LoadReport]) -> None:
        super().__init__()
        self.reports = reports

    def compose(self) -> ComposeResult:
        yield LoadReportPanel(self.reports, id="load-report", classes="panel")
        yield Footer()
