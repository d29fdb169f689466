"""``eagle3scope report FILE --format markdown|html``: a report to paste into an issue or open offline.

Markdown goes to ``FILE.report.md`` with its plots as PNG files in ``FILE.report-plots/``; HTML to
one self-contained ``FILE.report.html`` (plots inline as SVG, no script, no network). ``--out``
picks another path. Without matplotlib (a ``[viewer]``-only install) the report is written without
plots, and says how to get them. ``--baseline OLD`` adds the comparison ``check --baseline`` judges.
Exit status 2 when the file (or OLD) cannot be read as a session.
"""

from __future__ import annotations

import click

from eagle3scope.wire.untrusted import terminal


@click.command(name="report", help=__doc__)
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["markdown", "html"]), default="html", show_default=True)
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Where to write the report.")
@click.option("--baseline", "baseline_path", type=click.Path(dir_okay=False), default=None, metavar="OLD",
              help="Add the comparison with the recording OLD of the same draft (as check --baseline judges it).")
@click.pass_context
def command(ctx: click.Context, file: str, fmt: str, out: str | None, baseline_path: str | None) -> None:
    from eagle3scope.report.plots import NO_PLOTS, plots_available
    from eagle3scope.report.render import write_report
    from eagle3scope.store import StoreError

    try:
        path = write_report(file, fmt, out, baseline_path)
    except StoreError as exc:
        click.echo(terminal(f"Error: {exc}"), err=True)
        ctx.exit(2)
    if not plots_available():
        click.echo(terminal(NO_PLOTS), err=True)
    click.echo(terminal(str(path)))
