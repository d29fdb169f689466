"""Screens pushed over the main view: violation detail, load report, help, and one-line prompts."""

from __future__ import annotations

import json

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Input, Static

CLOSE = [Binding("escape,q,enter", "dismiss", "Close")]


class ViolationScreen(ModalScreen):
    """One violation in full: what fired, the evidence, why it matters, how to fix it."""

    BINDINGS = CLOSE

    def __init__(self, violation) -> None:
        super().__init__()
        self.violation = violation

    def compose(self) -> ComposeResult:
        v = self.violation
        body = Text()
        body.append(f"{v.severity.upper()}  {v.id}\n", style="bold")
        body.append(f"{v.title}\n\n", style="bold")
        body.append("publisher ", style="dim")
        body.append(f"{v.src}   first seen at step {v.first_seq}   {'still firing' if v.active else 'no longer firing'}\n\n")
        body.append("Evidence\n", style="bold underline")
        evidence = v.evidence if isinstance(v.evidence, dict) else {"": v.evidence}
        for key, value in evidence.items():
            body.append(f"  {key}: " if key else "  ", style="dim")
            body.append(f"{json.dumps(value, default=str) if isinstance(value, (dict, list)) else value}\n")
        body.append("\n")
        body.append("Why it matters\n", style="bold underline")
        body.append(f"{v.explanation}\n\n")
        body.append("Fix\n", style="bold underline")
        body.append(v.fix)
        with VerticalScroll(id="violation-dialog", classes=f"dialog sev-{v.severity}"):
            yield Static(body, id="violation-body")
            yield Static("Esc / Enter / q: close", classes="dialog-hint")


class LoadReportScreen(Screen):
    """The load-time report and server arguments of every publisher, as sent."""

    BINDINGS = [Binding("escape,q,l", "app.pop_screen", "Back")]

    def __init__(self, publishers: list) -> None:
        super().__init__()
        self.publishers = publishers  # (src, hello, load)

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="load-report", classes="panel") as report:
            report.border_title = "Load report and hello, as each publisher sent them"
            if not self.publishers:
                yield Static("no publisher has sent a load report yet")
            for src, hello, load in self.publishers:
                yield Static(Text(f"publisher {src}", style="bold"), classes="load-title")
                yield Static(_kv_table("hello", hello))
                yield Static(_kv_table("load report", load))
        yield Footer()


def _kv_table(title: str, body: dict | None) -> Table:
    table = Table(title=title, title_justify="left", show_header=False, box=None, padding=(0, 1))
    table.add_column(style="dim", no_wrap=True)
    table.add_column()
    if not body:
        table.add_row("", "not received")
        return table
    for key, value in body.items():
        table.add_row(key, json.dumps(value, default=str) if isinstance(value, (dict, list)) else str(value))
    return table


class HelpScreen(ModalScreen):
    """Every key, generated from the bindings so the list cannot go stale."""

    BINDINGS = CLOSE

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


class PromptScreen(ModalScreen[str | None]):
    """A one-line question (request filter, seek target); dismisses with the text or None."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, prompt: str, placeholder: str = "", value: str = "") -> None:
        super().__init__()
        self.prompt = prompt
        self.placeholder = placeholder
        self.value = value

    def compose(self) -> ComposeResult:
        with Vertical(id="prompt-dialog", classes="dialog"):
            yield Static(self.prompt)
            yield Input(value=self.value, placeholder=self.placeholder, id="prompt-input")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)
