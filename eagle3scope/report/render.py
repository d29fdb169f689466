"""A shareable report of one recording: markdown for an issue, or one self-contained HTML file.

Content (:mod:`eagle3scope.report.build`): the summary ``check`` prints, the per-position table,
the aux-layer configurations the run went through, every violation with its evidence and fix, and
the plots of :mod:`eagle3scope.report.plots`. HTML embeds the plots as inline SVG (no script, no
network); markdown links PNG files written next to it, ready to drag into an issue. Every string
from the recording is escaped for the format it lands in (:mod:`eagle3scope.wire.untrusted`).
"""

from __future__ import annotations

import re
from pathlib import Path

from eagle3scope.report.build import AUX_CONFIG_HEADER, BASELINE_HEADER, POSITION_HEADER, SLICE_HEADER, Analysed, \
    analyse_file, aux_config_rows, baseline_intro, baseline_rows, position_rows, slice_rows, summary_rows, where
from eagle3scope.report.plots import NO_PLOTS, draw, plots_available, svg
from eagle3scope.wire import untrusted


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
    figures = draw(a)
    if figures:
        plots_dir.mkdir(parents=True, exist_ok=True)
    md = untrusted.markdown
    lines = [f"# {md(a.title)}", ""]
    lines += _md_table(["", ""], [list(r) for r in summary_rows(a)])
    if not plots_available():
        lines += ["", f"*{NO_PLOTS}*"]
    for name, fig in figures.items():
        fig.savefig(plots_dir / f"{name}.png", dpi=110)
    if "acceptance-over-time" in figures:
        lines += ["", f"![acceptance over time]({plots_dir.name}/acceptance-over-time.png)"]
    lines += ["", "## Per draft position", ""]
    lines += _md_table(POSITION_HEADER, position_rows(a))
    shown = [name for name in ("per-position", "accept-length-histogram") if name in figures]
    if shown:
        lines += [""] + [f"![{name}]({plots_dir.name}/{name}.png)" for name in shown]
    slices = slice_rows(a)
    if slices:
        lines += ["", "## Acceptance by slice", ""] + _md_table(SLICE_HEADER, slices)
    if "baseline" in a.result:
        lines += ["", "## Against the baseline", "", md(baseline_intro(a)), ""]
        lines += _md_table(BASELINE_HEADER, baseline_rows(a))
        lines += [f"- {md(note)}" for note in a.result["baseline"]["notes"]]
    if len(a.state.segments) > 1:
        lines += ["", "## Aux-layer configurations", ""]
        lines += _md_table(AUX_CONFIG_HEADER, aux_config_rows(a))
    lines += ["", "## Violations", ""]
    if not a.result["violations"]:
        lines.append("No contract rule fired.")
    for v in a.result["violations"]:
        lines += [f"### {md(v['severity'].upper())} {md(v['id'])}: {md(v['title'])}", "", f"*{md(where(v))}*", "",
                  md(v["explanation"], starts_line=True), "", "Evidence:", "",
                  *_md_fence(untrusted.json_line(v["evidence"], indent=1, sort_keys=True), "json"),
                  "", f"**Fix:** {md(v['fix'])}", ""]
    for err in a.result["read_errors"]:
        lines.append(f"- read error: {md(err)}")
    lines += ["", "*Made with `eagle3scope report`.*", ""]
    return "\n".join(lines)


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
    figures = {name: svg(fig) for name, fig in draw(a).items()}
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{e(a.title)}</title>",
             f"<style>{_CSS}</style></head><body>", f"<h1>{e(a.title)}</h1>",
             _html_table(None, [list(r) for r in summary_rows(a)])]
    if not plots_available():
        parts.append(f"<p><em>{e(NO_PLOTS)}</em></p>")
    if "acceptance-over-time" in figures:
        parts.append(f"<div class='plots'>{figures['acceptance-over-time']}</div>")
    parts += ["<h2>Per draft position</h2>",
              _html_table(POSITION_HEADER, position_rows(a)),
              "<div class='plots'>" + "".join(figures.get(n, "") for n in ("per-position", "accept-length-histogram"))
              + "</div>"]
    slices = slice_rows(a)
    if slices:
        parts += ["<h2>Acceptance by slice</h2>", _html_table(SLICE_HEADER, slices)]
    if "baseline" in a.result:
        parts += ["<h2>Against the baseline</h2>", f"<p>{e(baseline_intro(a))}</p>",
                  _html_table(BASELINE_HEADER, baseline_rows(a))]
        parts += [f"<p>{e(note)}</p>" for note in a.result["baseline"]["notes"]]
    if len(a.state.segments) > 1:
        parts += ["<h2>Aux-layer configurations</h2>",
                  _html_table(AUX_CONFIG_HEADER, aux_config_rows(a))]
    parts.append("<h2>Violations</h2>")
    if not a.result["violations"]:
        parts.append("<p>No contract rule fired.</p>")
    for v in a.result["violations"]:
        parts.append(
            f"<div class='violation'><h3><span class='{e(v['severity'])}'>{e(v['severity'].upper())}</span> "
            f"<code>{e(v['id'])}</code>: {e(v['title'])}</h3><p><em>{e(where(v))}</em></p>"
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
