"""Violations: every contract rule that fired, worst first; Enter asks for the explanation and fix."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import DataTable, Static

from eagle3scope.analysis.rules import Violation
from eagle3scope.tui.panels.drawing import evidence_text, plain
from eagle3scope.wire.untrusted import terminal


class ViolationsPanel(Vertical):
    """Every rule that fired, worst first; Enter opens the explanation and the fix."""

    COMPONENT_CLASSES = {"sev--error", "sev--warning", "sev--info", "sev--healed"}
    BORDER_TITLE = "Violations"

    violations: reactive[tuple] = reactive(tuple, init=False)

    class Selected(Message):
        """The user picked a violation (Enter on its row): the app opens its explanation."""

        def __init__(self, violation: Violation) -> None:
            super().__init__()
            self.violation = violation

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._shown: tuple = ()

    def compose(self) -> ComposeResult:
        yield DataTable(id="violations-table", cursor_type="row", zebra_stripes=False)
        yield Static("no violations: every contract holds so far", id="violations-none")

    def on_mount(self) -> None:
        self.invalidate()

    def on_resize(self) -> None:
        self.invalidate()  # column widths and row heights follow the panel

    def invalidate(self) -> None:
        """Draw the table again even if no violation changed (size, terminal height)."""
        self._shown = None
        self.watch_violations(self.violations)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        index = int(event.row_key.value)
        if 0 <= index < len(self.violations):
            self.post_message(self.Selected(self.violations[index]))

    def watch_violations(self, violations: tuple) -> None:
        key = tuple((v.id, v.src, v.run, v.severity, v.evidence, v.active) for v in violations)
        if key == self._shown:
            return
        self._shown = key
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
                detail.append(f"{terminal(v.id)}\n", style=style)
            detail.append(terminal(v.title), style=style)
            run = f" run {v.run}" if v.run > 1 else ""
            detail.append(f"\n{terminal(v.src)}{run} · {evidence_text(v.evidence)}", style=muted)
            cells = (sev, detail) if compact else (sev, plain(v.id, style), detail)
            table.add_row(*cells, key=str(i), height=None if wrap else 3 if compact else 2)
        if violations:
            table.move_cursor(row=min(row, len(violations) - 1))
        self.query_one("#violations-none").display = not violations
        table.display = bool(violations)
        focused = self.screen.focused
        if violations and (focused is None or not focused.display) and self.app.screen is self.screen:
            # the table was hidden when the screen picked a focus (none, or a panel the switcher has
            # hidden since): Enter must work at once
            table.focus()
        errors = sum(1 for v in violations if v.active and v.severity == "error")
        self.border_title = f"Violations {len(violations)}" + (f" ({errors} errors)" if errors else "")
