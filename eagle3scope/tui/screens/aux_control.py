"""The aux-layer control screen (key ``c``): presets of the live server, applied through the control channel.

The list comes from the shim's ``list`` reply (presets computed by
:func:`eagle3scope.wire.aux_layers.presets`, the same function ``aux cycle`` uses); Enter applies
the preset under the cursor, ``i`` asks for a custom id list, ``g`` lets a change recapture the
server's CUDA graphs (off by default: it pauses serving; the pause is shown). Requests run in worker threads with
the client's timeout, so a silent server never freezes the UI. Below the presets, one row per
aux-config segment of the session (mean acceptance length and step count side by side) shows
which set wins.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from eagle3scope.analysis.views import segment_rows
from eagle3scope.control.client import ControlError
from eagle3scope.control.offer import offered
from eagle3scope.tui.panels.drawing import plain
from eagle3scope.tui.screens.prompt import PromptScreen
from eagle3scope.wire.aux_layers import LayerError, Preset, parse_ids
from eagle3scope.wire.untrusted import lines


def _ids(value) -> str:
    return "default" if value is None else "[" + ", ".join(map(str, value)) + "]"


class AuxScreen(ModalScreen):
    """Presets + segments; needs ``app.aux_client`` (a ControlClient) to apply anything."""

    DEFAULT_CSS = """
    AuxScreen { align: center middle; }
    #aux-dialog { height: auto; max-height: 90%; }
    #aux-presets, #aux-segments { height: auto; max-height: 12; margin-top: 1; }
    """
    BINDINGS = [
        Binding("escape,q", "dismiss", "Close"),
        Binding("r", "reload", "Reload"),
        Binding("i", "custom", "Custom ids"),
        Binding("g", "recapture", "Recapture graphs"),
    ]

    def __init__(self, client) -> None:
        super().__init__()
        self.client = client
        self.info: dict | None = None
        self.presets: list[dict] = []
        self.recapture = False  # changes may recapture the server's CUDA graphs (pausing it)

    def compose(self) -> ComposeResult:
        with Vertical(id="aux-dialog", classes="dialog"):
            yield Static(Text("aux layers", style="bold"), id="aux-title")
            yield Static("", id="aux-status")
            presets = DataTable(id="aux-presets", cursor_type="row", zebra_stripes=True)
            presets.add_columns("preset", "ids", "captures", "note")
            yield presets
            segments = DataTable(id="aux-segments", cursor_type="none")
            segments.add_columns("segment ids", "captured", "origin", "steps", "mean accept length")
            yield segments
            yield Static("Enter: apply the preset   i: custom ids   g: allow graph recapture   r: reload   Esc: close",
                         classes="dialog-hint")

    def on_mount(self) -> None:
        self.show_segments()
        self.set_interval(1.0, self.show_segments)
        if self.client is None:
            self.status("no control channel: start `eagle3scope watch` with --control ENDPOINT --token-file PATH "
                        "(printed by `eagle3scope launch --control`)", "warning")
        else:
            self.action_reload()

    def status(self, text: str, level: str = "info") -> None:
        """The status line; its colour is the theme's (``#aux-status.-warning``/``.-error`` in app.tcss)."""
        line = self.query_one("#aux-status", Static)
        line.update(Text(lines(text.split("\n"))))  # Text: ids in [brackets] are not markup; no control reaches the screen
        line.set_class(level == "warning", "-warning")
        line.set_class(level == "error", "-error")

    def show_segments(self) -> None:
        rows = self.app.feed.read(segment_rows)
        best = max((r.mean for r in rows if r.mean is not None), default=None)
        table = self.query_one("#aux-segments", DataTable)
        table.clear()
        for r in rows:
            mark = " best" if r.mean is not None and r.mean == best and len(rows) > 1 else ""
            table.add_row(plain(_ids(r.layers)), plain(r.captured or "-"), plain(r.origin), str(r.steps),
                          "-" if r.mean is None else f"{r.mean:.3f}{mark}")

    # -- talking to the server (worker threads) ---------------------------------------------------
    def action_reload(self) -> None:
        if self.client is not None:
            self.status("asking the server ...")
            self.run_worker(self._fetch, thread=True, exclusive=True, group="aux-control")

    def _fetch(self) -> None:
        try:
            info = self.client.list()
        except ControlError as exc:
            self.app.call_from_thread(self.status, f"control channel: {exc}", "error")
            return
        self.app.call_from_thread(self._show_info, info)

    def _show_info(self, info: dict) -> None:
        presets = offered([Preset.from_dict(p) for p in info["presets"]], info, recapture=self.recapture)
        self.info, self.presets = info, [p.to_dict() for p in presets]
        text = (f"{info['family']}, {info['num_layers']} layers, rule {info['rule']}, fc takes {info['expected']}; "
                f"in effect {_ids(info['current'])} -> captures {info['captured']}")
        graphs = info.get("graphs") or {}
        if not info["changeable"]:
            text += f"\nlive changes refused: {info['why_not']}"
        elif graphs.get("captured"):
            last = graphs.get("last_pause_ms")
            text += ("\nCUDA graphs captured: changes recapture them, pausing serving (g: "
                     + ("allowed)" if self.recapture else "not allowed yet)")
                     + ("" if last is None else f"; last recapture paused {last:.0f} ms"))
        self.status(text, "info" if info["changeable"] else "warning")
        table = self.query_one("#aux-presets", DataTable)
        row = table.cursor_row  # a refresh keeps the cursor where the user left it
        table.clear()
        for p in self.presets:
            if not p["available"]:
                note = f"unavailable: {p['reason']}"
            else:
                note = f"= {p['same_as']}" if p.get("same_as") else ""
            if p["layers"] == info["current"]:
                note = ("in effect " + note).strip()
            table.add_row(plain(p["name"]), plain(_ids(p["layers"])), plain(p["captured"] or "-"), plain(note))
        if 0 < row < table.row_count:
            table.move_cursor(row=row)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id != "aux-presets" or not self.presets:
            return
        preset = self.presets[event.cursor_row]
        if not preset["available"]:
            self.status(f"{preset['name']} is unavailable: {preset['reason']}", "warning")
            return
        self.apply(preset["layers"], preset["name"])

    def action_recapture(self) -> None:
        self.recapture = not self.recapture
        if self.info is not None:
            self._show_info(self.info)
        else:
            self.status(f"graph recapture {'allowed' if self.recapture else 'not allowed'} for the next change")

    def action_custom(self) -> None:
        def done(value: str | None) -> None:
            if not value:
                return
            try:
                self.apply(parse_ids(value), "custom")
            except LayerError as exc:
                self.status(str(exc), "error")

        self.app.push_screen(PromptScreen("Aux layer ids to apply (draft-config numbering, e.g. 1,3,4):", "ids"), done)

    def apply(self, layers: list[int], name: str) -> None:
        if self.client is None:
            self.status("no control channel to apply through", "warning")
            return
        self.status(f"applying {name} {_ids(layers)} ...")
        self.run_worker(lambda: self._apply(layers, name), thread=True, exclusive=True, group="aux-control")

    def _apply(self, layers: list[int], name: str) -> None:
        try:
            reply = self.client.set(layers, recapture=self.recapture, wait_s=120.0 if self.recapture else 2.0)
            info = self.client.list()
        except ControlError as exc:
            self.app.call_from_thread(self.status, f"refused: {exc}", "error")
            return
        if reply["status"] == "applied":
            text = f"{name} {_ids(layers)} applied: captures {reply['captured']}; a new segment starts"
            if reply.get("pause_ms") is not None:
                text += f"; graphs recaptured, serving paused {reply['pause_ms']:.0f} ms"
        else:
            text = f"{name} {_ids(layers)} queued: applies at the server's next step"
        self.app.call_from_thread(self._show_info, info)
        self.app.call_from_thread(self.status, text)
