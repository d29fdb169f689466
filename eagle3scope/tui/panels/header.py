"""The header: one line per publisher (identity, configuration, rates, losses) and the timeline."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from eagle3scope.analysis.views import PublisherRow
from eagle3scope.tui.panels.drawing import fmt
from eagle3scope.wire.untrusted import terminal

#: the shim's share of round time from which the header shows it as a warning
SHIM_SHARE_WARN = 0.01


class PublisherBar(Widget):
    """One line per publisher: identity, configuration, rates and losses."""

    COMPONENT_CLASSES = {"pub--ok", "pub--warn", "pub--bad", "pub--muted"}
    rows: reactive[tuple] = reactive(tuple, layout=True)

    def get_content_height(self, container, viewport, width: int) -> int:
        return max(1, len(self.rows))

    def render(self) -> Text:
        styles = tuple(self.get_component_rich_style(f"pub--{n}") for n in ("ok", "warn", "bad", "muted"))
        if not self.rows:
            return Text("waiting for a publisher…", style=styles[3])
        lines = []
        for r in self.rows:
            for level in range(LEVELS):  # the fullest form that fits
                line = self._line(r, level, *styles)
                if line.cell_len <= self.size.width:
                    break
            line.truncate(self.size.width, overflow="ellipsis")
            lines.append(line)
        return Text("\n").join(lines)

    @staticmethod
    def _line(r: PublisherRow, level: int, ok, warn, bad, muted) -> Text:
        """The line at ``level`` (0: everything): each level leaves out or shortens one more piece,
        the least telling first (the release, which decides the seams, goes last), and every value shown keeps its label; warnings (an unobserved
        worker, losses, hook failures, seams not attached, the shim's share) are never left out."""
        line = Text(no_wrap=True, overflow="ellipsis")
        state_style = ok if r.state in ("live", "replay") else warn
        line.append("● ", style=state_style)
        src = r.src if level < 5 or len(r.src) <= 16 else "…" + r.src[-15:]  # the tail tells ranks apart
        line.append(terminal(src), style="bold")
        if r.run > 1:
            line.append(f" run {r.run}", style=warn)
        if r.state not in ("live", "replay"):
            line.append(f" {r.state}", style=warn)
        if not r.has_hello:
            line.append(" (no hello yet)", style=warn)
        else:
            if level < 9:  # the release decides which seams exist: the last piece to go
                line.append(terminal(f" {r.engine} {r.version or '?'}"))
            line.append(terminal(f" {r.algorithm or '?'}"))
            if r.worker and level < 2:
                line.append(terminal(f" {r.worker}"))
            if "worker" in r.unobserved:  # the shim sees no rounds: say so before anything else
                line.append(terminal(f" {r.worker_class or 'worker'} NOT OBSERVED"), style=bad)
            elif "draft_model" in r.unobserved:
                line.append(" draft passes not observed", style=warn)
            if level < 8:
                line.append(terminal(f" steps {r.steps} topk {r.topk} draft {r.draft_tokens}"))
            graph = {True: "on", False: "off"}.get(r.cuda_graph, "?")
            if level < 7:
                line.append(f" cuda-graph {graph}" if level < 4 else f" cg {graph}")
            if level < 1:
                line.append(terminal(f" rank tp{r.tp_rank}/dp{r.dp_rank}"), style=muted)
        line.append(" │ ", style=muted)
        line.append(f"{fmt(r.steps_per_s, ',.1f')} steps/s")
        lost = r.dropped + r.gaps
        line.append(" │ ", style=muted)
        line.append(f"dropped {r.dropped:,} lost {r.gaps:,}" if level < 6 else f"drop {lost:,}", style=bad if lost else None)
        line.append(" │ ", style=muted)
        line.append(f"hook failures {r.hook_failures}" if level < 6 else f"hookfail {r.hook_failures}",
                    style=bad if r.hook_failures else None)
        if r.hooks_total and (level < 3 or r.hooks_ok < r.hooks_total):
            line.append(f" ({r.hooks_ok}/{r.hooks_total} seams)", style=warn if r.hooks_ok < r.hooks_total else muted)
        if r.shim_share is not None:  # the shim's own time in the rounds, as the shim measured it
            line.append(" │ ", style=muted)
            line.append(f"shim {100 * r.shim_share:.1f} %", style=warn if r.shim_share >= SHIM_SHARE_WARN else muted)
        return line


#: forms of a publisher's line, fullest first (``PublisherBar._line``)
LEVELS = 10


class Timeline(Widget):
    """Where the screen is in the stream: live/paused, or replay position, speed and time."""

    COMPONENT_CLASSES = {"timeline--done", "timeline--todo", "timeline--paused", "timeline--muted"}
    info: reactive[dict] = reactive(dict)

    def render(self) -> Text:
        i = self.info
        done, todo, paused, muted = (self.get_component_rich_style(f"timeline--{n}") for n in ("done", "todo", "paused", "muted"))
        text = Text(no_wrap=True, overflow="ellipsis")
        # "‖", not "⏸": emoji fonts draw that one two cells wide and shift the line
        text.append("‖ PAUSED " if i.get("paused") else "▶ ", style=paused if i.get("paused") else None)
        if i.get("filter"):
            text.append(terminal(f"[filter {i['filter']}] "), style=paused)
        if i.get("error"):
            text.append(terminal(f"ingest stopped: {i['error']} "), style=paused)
        if not i.get("replay"):
            text.append(terminal(i.get("label", "LIVE")), style="bold")
            text.append(f"  {i.get('frames', 0):,} frames", style=muted)
            if i.get("refresh_ms") is not None:  # live only: replay screens stay clock-free
                text.append(f"  refresh {i['refresh_ms']:.1f} ms", style=muted)
            return text
        pos, total = i.get("index", 0), i.get("total", 0)
        text.append(f"REPLAY {i.get('speed', 1):g}× ", style="bold")
        text.append(f"step {i.get('seq') if i.get('seq') is not None else '–'}  ")
        text.append(f"{pos:,}/{total:,}  +{i.get('elapsed_s', 0.0):.1f}s/{i.get('duration_s', 0.0):.1f}s ", style=muted)
        width = max(0, self.size.width - text.cell_len - 1)
        if width >= 8 and total:
            filled = round(width * min(1.0, pos / total))
            text.append("━" * filled, style=done)
            text.append("─" * (width - filled), style=todo)
        return text
