"""A shareable report of one recording: markdown for an issue, or one self-contained HTML file.

Content: the summary ``check`` prints, the per-position table, the aux-layer configurations the
run went through, every violation with its evidence and fix, and three plots made with matplotlib
(rolling acceptance over the run, acceptance per draft position, the accept-length histogram).
HTML embeds the plots as inline SVG (no script, no network); markdown links PNG files written
next to it, ready to drag into an issue.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path

from eagle3scope.analysis import SessionState
from eagle3scope.analysis.views import acceptance_view, segment_rows
from eagle3scope.gate import check_result, delta_verdict
from eagle3scope.wire import untrusted

#: Decode steps of rolling acceptance kept for the over-time plot (the newest ones when longer).
HISTORY_STEPS = 20_000


@dataclass
class Analysed:
    path: Path
    state: SessionState
    result: dict  # check's --json object

    @property
    def title(self) -> str:
        return f"eagle3scope report: {self.path.name}"


def analyse_file(path: str | Path, baseline: str | Path | None = None) -> Analysed:
    """``path`` analysed as ``check`` does; with ``baseline``, judged against that recording too."""
    from eagle3scope.gate.baseline import judged_against, read_reference
    from eagle3scope.store import SessionReader

    reference = read_reference(baseline) if baseline is not None else None
    with SessionReader(path) as reader:
        state = SessionState(history=HISTORY_STEPS, keep_rounds=reference is not None)
        for _, frame in reader.frames():
            state.ingest(frame)
        state.evaluate_rules()  # once more on the last frame, as check's analyse() does
        errors = [str(e) for e in reader.errors]
        complete = reader.complete
    result = check_result(state, state.violations(), errors, complete)
    if reference is not None:
        result["baseline"], short = judged_against(reference, state)
        if short:
            result["baseline"]["notes"].append(short)
    return Analysed(Path(path), state, result)


# -- plots ---------------------------------------------------------------------------------------


#: what the report says in place of its plots on an install without matplotlib (``[viewer]`` only)
NO_PLOTS = "Plots left out: matplotlib is not installed (pip install 'eagle3scope[report]')."


def plots_available() -> bool:
    """Whether matplotlib can be imported: the ``[report]`` extra; the report is written without plots else."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _figures(a: Analysed) -> dict[str, object]:
    """name -> matplotlib Figure (Agg backend: no display needed); {} without matplotlib."""
    if not plots_available():
        return {}
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure

    summary, acc = a.result["summary"], a.state.acceptance
    figures = {}
    history = list(acc.history)
    if history:
        fig = Figure(figsize=(7, 2.8), layout="constrained")
        ax = fig.add_subplot()
        t0 = history[0][1]
        seconds = [(t - t0) / 1e9 for _, t, _ in history]
        ax.plot(seconds, [m for _, _, m in history], lw=1.2, color="#1f77b4")
        for mark in acceptance_view(a.state).marks:  # where a later aux-layer configuration took over
            ax.axvline(seconds[mark], color="#888888", lw=0.8, ls="--")
        ax.set_xlabel("seconds into the recording")
        ax.set_ylabel("acceptance length")
        ax.set_ylim(bottom=min(1.0, min(m for _, _, m in history)) - 0.05, top=acc.k + 1.05 if acc.k else None)
        ax.set_title(f"Rolling mean acceptance length (last {acc.window_size} request-steps)", fontsize=10)
        ax.grid(alpha=0.3)
        figures["acceptance-over-time"] = fig
    rates = summary["per_position"]
    if rates:
        fig = Figure(figsize=(4.5, 2.8), layout="constrained")
        ax = fig.add_subplot()
        positions = list(range(1, len(rates) + 1))
        ax.bar(positions, [r or 0.0 for r in rates], color="#2ca02c")
        for x, r in zip(positions, rates):
            ax.annotate("-" if r is None else f"{r:.2f}", (x, r or 0.0), ha="center", va="bottom", fontsize=8)
        ax.set_xticks(positions)
        ax.set_ylim(0, 1.1)
        ax.set_xlabel("draft position")
        ax.set_ylabel("acceptance rate")
        ax.set_title("Acceptance per draft position", fontsize=10)
        figures["per-position"] = fig
    hist = summary["histogram"]
    if hist:
        fig = Figure(figsize=(4.5, 2.8), layout="constrained")
        ax = fig.add_subplot()
        lengths = [j + 1 for j in range(len(hist))]
        ax.bar(lengths, hist, color="#ff7f0e")
        ax.set_xticks(lengths)
        ax.set_xlabel("tokens committed per request-step (accepted drafts + 1)")
        ax.set_ylabel("request-steps")
        ax.set_title("Accept-length histogram", fontsize=10)
        figures["accept-length-histogram"] = fig
    return figures


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    text = buf.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog and DOCTYPE: inline in HTML


# -- content ---------------------------------------------------------------------------------------


def _fmt(value, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _summary_rows(a: Analysed) -> list[tuple[str, str]]:
    s, state = a.result["summary"], a.state
    hellos = [p.hello for p in state.publishers.values() if p.hello]
    args = hellos[0].args if hellos and hellos[0].args else None
    rows = [
        ("recording", a.path.name),
        ("publishers", ", ".join(s["publishers"]) or "-"),
        ("engine", ", ".join(sorted({h.engine_label for h in hellos})) or "-"),
        ("target", str(args.model_path or "-") if args else "-"),
        ("draft", str(args.draft_model_path or "-") if args else "-"),
        ("algorithm / steps / topk / draft tokens",
         f"{args.algorithm} / {args.num_steps} / {args.topk} / {args.num_draft_tokens}" if args else "-"),
        ("decode steps", str(s["steps"])),
        ("request-steps", str(s["request_steps"])),
        ("mean acceptance length (bonus included)", _fmt(s["mean_accept_length"])),
        ("violations", str(len(a.result["violations"]))),
    ]
    if not s["complete"]:
        rows.append(("note", "the recording was not closed by its recorder (killed or still running)"))
    return rows


def _position_rows(a: Analysed) -> list[list[str]]:
    """Per draft position over the whole run: request-steps that reached it, accepted it, and the rate."""
    s = a.result["summary"]
    hist = s["histogram"]
    rows = []
    for i, rate in enumerate(s["per_position"], start=1):
        reached, accepted = sum(hist[i - 1:]), sum(hist[i:])
        rows.append([str(i), str(reached), str(accepted), _fmt(rate)])
    return rows


def _segment_rows(a: Analysed) -> list[list[str]]:
    rows = []
    for seg in segment_rows(a.state):
        ids = "default" if seg.layers is None else ",".join(map(str, seg.layers))
        captured = "-" if seg.captured is None else ",".join(map(str, seg.captured))
        rows.append([ids, captured, seg.origin, _fmt(seg.start_seq), str(seg.steps), _fmt(seg.mean)])
    return rows


def _slice_rows(a: Analysed) -> list[list[str]]:
    """Acceptance per slice, for the dimensions with more than one label (one label is the whole run)."""
    rows = []
    for dim, entries in a.result["summary"]["slices"].items():
        if len(entries) > 1:
            for e in entries:
                rates = ", ".join(_fmt(r, 2) for r in e["per_position"])
                rows.append([dim.replace("_", " "), e["label"], str(e["request_steps"]),
                             _fmt(e["mean_accept_length"]), rates])
    return rows


SLICE_HEADER = ["by", "slice", "request-steps", "mean acceptance", "per position"]
BASELINE_HEADER = ["value", "baseline", "this run", "change", "95% interval", "lower in", "verdict"]


def _baseline_rows(a: Analysed) -> list[list[str]]:
    comparison = a.result["baseline"]
    rows = []
    for d in (*comparison["overall"], *comparison["slices"]):
        interval = "-" if not d["interval"] else f"{d['interval'][0]:+.3f}..{d['interval'][1]:+.3f}"
        change = "-" if d["change"] is None else f"{d['change']:+.3f}"
        lower = "-" if d["confidence"] is None else f"{d['confidence']:.0%}"
        rows.append([d["name"], _fmt(d["baseline"]), _fmt(d["current"]), change, interval, lower, delta_verdict(d)])
    return rows


def _baseline_intro(a: Analysed) -> str:
    comparison = a.result["baseline"]
    return (f"Against {comparison['path']} ({comparison.get('baseline_rounds', 0)} decode rounds; this run "
            f"{comparison.get('current_rounds', 0)}): block bootstrap over rounds, 95 % intervals.")


def _where(v: dict) -> str:
    where = "before the first step" if v["first_seq"] is None else f"from step {v['first_seq']}"
    return f"{v['src']}, {where}" + ("" if v["active"] else ", no longer active at the end")


# -- markdown ----------------------------------------------------------------------------------------


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    md = untrusted.markdown
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + [
        "| " + " | ".join(md(c) for c in row) + " |" for row in rows]


def _md_fence(text: str, info: str = "") -> list[str]:
    """``text`` in a code fence longer than any backtick run inside it, so it cannot close early."""
    fence = "`" * max(3, 1 + max(map(len, re.findall("`+", text)), default=0))
    return [fence + info, text, fence]


def markdown(a: Analysed, out: Path) -> str:
    """The report as markdown; plots are written as PNG files into ``<out stem>-plots/``."""
    plots_dir = out.parent / f"{out.stem}-plots"
    figures = _figures(a)
    if figures:
        plots_dir.mkdir(parents=True, exist_ok=True)
    md = untrusted.markdown
    lines = [f"# {md(a.title)}", ""]
    lines += _md_table(["", ""], [list(r) for r in _summary_rows(a)])
    if not plots_available():
        lines += ["", f"*{NO_PLOTS}*"]
    for name, fig in figures.items():
        fig.savefig(plots_dir / f"{name}.png", dpi=110)
    if "acceptance-over-time" in figures:
        lines += ["", f"![acceptance over time]({plots_dir.name}/acceptance-over-time.png)"]
    lines += ["", "## Per draft position", ""]
    lines += _md_table(["position", "reached", "accepted", "acceptance"], _position_rows(a))
    shown = [name for name in ("per-position", "accept-length-histogram") if name in figures]
    if shown:
        lines += [""] + [f"![{name}]({plots_dir.name}/{name}.png)" for name in shown]
    slices = _slice_rows(a)
    if slices:
        lines += ["", "## Acceptance by slice", ""] + _md_table(SLICE_HEADER, slices)
    if "baseline" in a.result:
        lines += ["", "## Against the baseline", "", md(_baseline_intro(a)), ""]
        lines += _md_table(BASELINE_HEADER, _baseline_rows(a))
        lines += [f"- {md(note)}" for note in a.result["baseline"]["notes"]]
    if len(a.state.segments) > 1:
        lines += ["", "## Aux-layer configurations", ""]
        lines += _md_table(["aux ids", "captured", "origin", "from step", "steps", "mean acceptance"],
                           _segment_rows(a))
    lines += ["", "## Violations", ""]
    if not a.result["violations"]:
        lines.append("No contract rule fired.")
    for v in a.result["violations"]:
        lines += [f"### {md(v['severity'].upper())} {md(v['id'])}: {md(v['title'])}", "", f"*{md(_where(v))}*", "",
                  md(v["explanation"], starts_line=True), "", "Evidence:", "",
                  *_md_fence(untrusted.json_line(v["evidence"], indent=1, sort_keys=True), "json"),
                  "", f"**Fix:** {md(v['fix'])}", ""]
    for err in a.result["read_errors"]:
        lines.append(f"- read error: {md(err)}")
    lines += ["", "*Made with `eagle3scope report`.*", ""]
    return "\n".join(lines)


# -- html ------------------------------------------------------------------------------------------

_CSS = """
body { font-family: system-ui, sans-serif; max-width: 960px; margin: 2em auto; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1em; } td, th { border: 1px solid #ccc; padding: 3px 8px; }
th { background: #f3f3f3; text-align: left; } pre { background: #f6f6f6; padding: 0.6em; overflow-x: auto; }
.plots { display: flex; flex-wrap: wrap; gap: 1em; } .plots svg { max-width: 100%; height: auto; }
.error { color: #b00020; } .warning { color: #a35a00; } .info { color: #0b5394; }
.violation { border-left: 4px solid #ccc; padding-left: 0.8em; margin: 1em 0; }
"""


def _html_table(header: list[str] | None, rows: list[list[str]]) -> str:
    e = untrusted.html
    head = "<tr>" + "".join(f"<th>{e(h)}</th>" for h in header) + "</tr>" if header else ""
    body = "".join("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table>{head}{body}</table>"


def html_page(a: Analysed) -> str:
    e = untrusted.html
    figures = {name: _svg(fig) for name, fig in _figures(a).items()}
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{e(a.title)}</title>",
             f"<style>{_CSS}</style></head><body>", f"<h1>{e(a.title)}</h1>",
             _html_table(None, [list(r) for r in _summary_rows(a)])]
    if not plots_available():
        parts.append(f"<p><em>{e(NO_PLOTS)}</em></p>")
    if "acceptance-over-time" in figures:
        parts.append(f"<div class='plots'>{figures['acceptance-over-time']}</div>")
    parts += ["<h2>Per draft position</h2>",
              _html_table(["position", "reached", "accepted", "acceptance"], _position_rows(a)),
              "<div class='plots'>" + "".join(figures.get(n, "") for n in ("per-position", "accept-length-histogram"))
              + "</div>"]
    slices = _slice_rows(a)
    if slices:
        parts += ["<h2>Acceptance by slice</h2>", _html_table(SLICE_HEADER, slices)]
    if "baseline" in a.result:
        parts += ["<h2>Against the baseline</h2>", f"<p>{e(_baseline_intro(a))}</p>",
                  _html_table(BASELINE_HEADER, _baseline_rows(a))]
        parts += [f"<p>{e(note)}</p>" for note in a.result["baseline"]["notes"]]
    if len(a.state.segments) > 1:
        parts += ["<h2>Aux-layer configurations</h2>",
                  _html_table(["aux ids", "captured", "origin", "from step", "steps", "mean acceptance"],
                              _segment_rows(a))]
    parts.append("<h2>Violations</h2>")
    if not a.result["violations"]:
        parts.append("<p>No contract rule fired.</p>")
    for v in a.result["violations"]:
        parts.append(
            f"<div class='violation'><h3><span class='{e(v['severity'])}'>{e(v['severity'].upper())}</span> "
            f"<code>{e(v['id'])}</code>: {e(v['title'])}</h3><p><em>{e(_where(v))}</em></p>"
            f"<p>{e(v['explanation'])}</p><p>Evidence:</p>"
            f"<pre>{e(untrusted.json_line(v['evidence'], indent=1, sort_keys=True))}</pre>"
            f"<p><strong>Fix:</strong> {e(v['fix'])}</p></div>")
    for err in a.result["read_errors"]:
        parts.append(f"<p>read error: {e(err)}</p>")
    parts.append("<p><em>Made with <code>eagle3scope report</code>.</em></p></body></html>\n")
    return "\n".join(parts)


def write_report(path: str | Path, fmt: str, out: str | Path | None = None, baseline: str | Path | None = None) -> Path:
    """Analyse ``path`` (against ``baseline`` when given) and write the report; returns where it went."""
    a = analyse_file(path, baseline)
    suffix = ".md" if fmt == "markdown" else ".html"
    out = Path(out) if out else Path(path).with_suffix(".report" + suffix)
    text = markdown(a, out) if fmt == "markdown" else html_page(a)
    out.write_text(text, encoding="utf-8")
    return out
