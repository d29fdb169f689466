"""``eagle3scope fix DRAFT_DIR --out NEW_DIR``: write a corrected copy of a draft checkpoint.

Renames keys the chosen SGLang release would skip, turns an absolute-id d2t into offsets and a
speculators config into SGLang's; the source is never touched; the copy is written atomically and
verified by reading it back. Refuses (exit 2, nothing written) when a repair would be a guess.
"""

from __future__ import annotations

import click


@click.command(help=__doc__)
@click.argument("draft_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="New directory to create.")
@click.option("--for-sglang", "sglang_version", default=None,
              help="SGLang release the copy is for (default: installed, else 0.5.23).")
@click.option("--target", "target_dir", type=click.Path(exists=True, file_okay=False), default=None,
              help="Target model directory, for the checks that need it.")
@click.pass_context
def command(ctx: click.Context, draft_dir: str, out_dir: str, sglang_version: str | None, target_dir: str | None) -> None:
    from eagle3scope.doctor import missing_extra

    if missing_extra():
        click.echo(f"Error: {missing_extra()}", err=True)
        ctx.exit(2)
    from eagle3scope.doctor.repair import FixRefused, fix_checkpoint

    try:
        result = fix_checkpoint(draft_dir, out_dir, sglang_version=sglang_version, target_dir=target_dir)
    except FixRefused as exc:
        click.echo(f"refused, nothing written: {exc}", err=True)
        ctx.exit(2)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    for change in result.changes:
        click.echo(f"  {change}")
    if not result.changes:
        click.echo("  no changes were needed (copied as is)")
    warnings = [f for f in result.after.findings if f.severity == "warning"]
    for f in warnings:
        click.echo(f"  still a warning: {f.id}: {f.title}")
    click.echo(f"wrote {result.out} (read back and checked against SGLang {result.after.sglang_version})")
