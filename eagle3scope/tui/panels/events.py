"""The event log: publishers appearing, hooks, drops, aux-config changes, rules firing."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.reactive import reactive
from textual.widgets import RichLog

from eagle3scope.tui.panels.drawing import plain
from eagle3scope.wire.untrusted import terminal


class EventLog(RichLog):
    """The session's event log: publishers appearing, hooks, drops, config changes."""

    COMPONENT_CLASSES = {"event--info", "event--warning", "event--error", "event--stamp"}
    BORDER_TITLE = "Events"
    events: reactive[tuple] = reactive(tuple, always_update=True, init=False)  # analysis Event, oldest first

    def __init__(self, **kwargs) -> None:
        super().__init__(max_lines=2000, wrap=True, markup=False, min_width=1, **kwargs)  # wrap at the panel, not 78
        self._last = None
        self._t0: int | None = None

    def on_resize(self) -> None:
        self.invalidate()

    def invalidate(self) -> None:
        """Lines keep the width and colours they were written with: write them again (resize, theme)."""
        self.clear()
        self._last = None
        self.watch_events(self.events)

    def watch_events(self, events: tuple) -> None:
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
            stamp.append(f" {terminal(event.src)}", style="bold")
            line = Table.grid(padding=(0, 1))  # a hanging indent: wrapped text stays right of the stamp
            line.add_column(no_wrap=True)
            line.add_column()
            line.add_row(stamp, plain(event.text, self.get_component_rich_style(f"event--{event.level}") if event.level in ("info", "warning", "error") else ""))
            self.write(line)
        if events:
            self._last = events[-1]
