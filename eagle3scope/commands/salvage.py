"""``eagle3scope salvage FILE --out NEW``: the intact batches of a damaged or truncated recording.

Exit status: 0 when every batch was recovered, 3 when some were lost (the summary says how many
steps were recovered), 2 when FILE cannot be opened at all or NEW cannot be written.
"""

from __future__ import annotations

import click
from eagle3scope.wire.untrusted import terminal


@click.command(name="salvage", help=__doc__)
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False), help="New session file to write.")
@click.option("--verbose", "-v", is_flag=True, help="List every lost batch with the reason.")
@click.pass_context
def command(ctx: click.Context, file: str, out: str, verbose: bool) -> None:
    from eagle3scope.store import StoreError
    from eagle3scope.store.salvage import salvage

    try:
        report = salvage(file, out)
    except StoreError as exc:
        click.echo(terminal(f"Error: {exc}"), err=True)
        ctx.exit(2)
    if verbose:
        for bid, why in report.batches_lost:
            click.echo(terminal(f"batch {bid} lost: {why}"), err=True)
    click.echo(terminal(f"{report.summary()} -> {out}"))
    ctx.exit(0 if report.complete else 3)
