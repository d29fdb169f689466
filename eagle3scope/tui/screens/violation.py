"""One violation in full: what fired, the evidence, why it matters, how to fix it."""

from __future__ import annotations

import json

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from eagle3scope.wire.untrusted import terminal


class ViolationScreen(ModalScreen):
    """One violation in full: what fired, the evidence, why it matters, how to fix it. In a replay,
    ``g`` dismisses with ``"seek"``: the app goes to where it fired, in its own run."""

    BINDINGS = [Binding("escape,q,enter", "dismiss", "Close"), Binding("g", "seek_here", "Seek to it")]

    def __init__(self, violation) -> None:
        super().__init__()
        self.violation = violation

    def compose(self) -> ComposeResult:
        v = self.violation
        body = Text()
        body.append(f"{terminal(v.severity.upper())}  {terminal(v.id)}\n", style="bold")
        body.append(f"{terminal(v.title)}\n\n", style="bold")
        body.append("publisher ", style="dim")
        run = f" (run {v.run}: restarted under the same src)" if v.run > 1 else ""
        body.append(f"{terminal(v.src)}{run}   first seen at step {v.first_seq}   {'still firing' if v.active else 'no longer firing'}\n\n")
        body.append("Evidence\n", style="bold underline")
        evidence = v.evidence if isinstance(v.evidence, dict) else {"": v.evidence}
        for key, value in evidence.items():
            body.append(f"  {terminal(key)}: " if key else "  ", style="dim")
            body.append(f"{terminal(json.dumps(value, default=str) if isinstance(value, (dict, list)) else value)}\n")
        body.append("\n")
        body.append("Why it matters\n", style="bold underline")
        body.append(f"{terminal(v.explanation)}\n\n")
        body.append("Fix\n", style="bold underline")
        body.append(terminal(v.fix))
        with VerticalScroll(id="violation-dialog", classes=f"dialog sev-{v.severity}"):
            yield Static(body, id="violation-body")
            hint = "Esc / Enter / q: close" + ("" if self.app.feed.live else "   g: replay from where it fired")
            yield Static(hint, classes="dialog-hint")

    def action_seek_here(self) -> None:
        if not self.app.feed.live:
            self.dismiss("seek")
