"""Draft vs target: per request and step, the proposed draft tokens against what the target accepted."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widgets import DataTable

from eagle3scope.tui.panels.drawing import plain
from eagle3scope.wire.untrusted import terminal


class DraftPanel(Vertical):
    """Recent steps per request (:class:`~eagle3scope.analysis.views.DraftRow`), tokens coloured by fate."""

    COMPONENT_CLASSES = {"draft--accepted", "draft--rejected", "draft--unreached", "draft--bonus", "draft--muted"}
    BORDER_TITLE = "Draft vs target"
    rows: reactive[tuple] = reactive(tuple, always_update=True, init=False)
    decoder = reactive(None, init=False)  # a tokens.Decoder once the target's tokenizer loads

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._shown: tuple | None = ()

    def compose(self) -> ComposeResult:
        table = DataTable(id="draft-table", cursor_type="row")
        table.add_columns("step", "src", "request", "acc", "draft proposed", "committed")
        yield table

    def on_mount(self) -> None:
        # the colour legend rides on the border, so the token columns stay narrow enough for 80 columns
        self.border_subtitle = "[$e3s-good]accepted[/] [reverse $e3s-bad]first rejected[/] [$e3s-muted]unreached[/] [underline $e3s-info]bonus[/]"

    def invalidate(self) -> None:
        """Draw the rows again even if they are the same steps (new decoder, filter or theme)."""
        self._shown = None
        self.watch_rows(self.rows)

    def watch_decoder(self) -> None:
        self.invalidate()

    def _tokens(self, ids: list) -> list[str]:
        if self.decoder is not None:
            return self.decoder.pieces(ids)
        return [str(i) for i in ids]

    def watch_rows(self, rows: tuple) -> None:
        key = tuple((r.seq, r.src, r.rid) for r in rows)
        if key == self._shown:
            return
        self._shown = key
        # partial styles: no background of their own, so the cursor row keeps one background
        acc_s, rej_s, unr_s, bonus_s, muted = (self.get_component_rich_style(f"draft--{n}", partial=True) for n in ("accepted", "rejected", "unreached", "bonus", "muted"))
        styles = {"accepted": acc_s, "rejected": rej_s, "unreached": unr_s, "off-path": unr_s}
        table = self.query_one(DataTable)
        table.clear()
        for r in rows:
            proposed = Text(no_wrap=True, overflow="ellipsis")
            for j, piece in enumerate(self._tokens(r.proposed)):
                proposed.append(terminal(piece), style=styles[r.fate(j)])
                proposed.append(" ")
            done = Text(no_wrap=True, overflow="ellipsis")
            pieces = self._tokens(r.committed)
            for j, piece in enumerate(pieces):
                done.append(terminal(piece), style=bonus_s if r.bonus and j == len(pieces) - 1 else acc_s)
                done.append(" ")
            acc = f"{r.accepted}+{r.bonus}" if r.mode == "decode" else r.mode
            table.add_row(str(r.seq), plain(_tail(r.label, 14)), plain(r.rid[-16:]), plain(acc), proposed, done)


def _tail(text: str, width: int) -> str:
    """The end of ``text``, where publisher names and request ids differ, in ``width`` cells."""
    return text if len(text) <= width else "…" + text[-(width - 1):]
