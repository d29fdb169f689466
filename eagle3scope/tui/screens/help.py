"""Every key of the current mode, generated from the app's bindings so the list cannot go stale."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


class HelpScreen(ModalScreen):
    """Every key, generated from the bindings so the list cannot go stale."""

    BINDINGS = [Binding("escape,q,enter", "dismiss", "Close")]

    def __init__(self, bindings: list[tuple[str, str, str]]) -> None:
        super().__init__()
        self.bindings = bindings  # (keys, description, detail)

    def compose(self) -> ComposeResult:
        wide = self.app.size.width >= 100  # the detail sentences only where they fit on one line
        table = Table(show_header=False, box=None, padding=(0, 1))
        table.add_column(style="bold", no_wrap=True)
        table.add_column(no_wrap=True)
        if wide:
            table.add_column(style="dim")
        for keys, description, detail in self.bindings:
            table.add_row(keys, description, *([detail] if wide else []))
        with VerticalScroll(id="help-dialog", classes="dialog"):
            yield Static(Text("eagle3scope keys", style="bold"))
            yield Static(table)
            yield Static("Esc / Enter / q: close", classes="dialog-hint")
