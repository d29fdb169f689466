"""``eagle3scope fix DRAFT_DIR --out NEW_DIR``: write a corrected copy of a draft checkpoint.

Renames keys the chosen SGLang releases would skip, turns an absolute-id d2t into offsets, a
speculators config into SGLang's and aux ids into the ones that capture the trained layers; one
copy serves every release named in --for-sglang (default: the installed one, else 0.5.10 and
0.5.23) where that is possible. ``--for-vllm`` writes the copy for vLLM instead: aux ids renumbered
to vLLM's rule (ids as given) so the same target layers are captured, and the architecture name
and keys vLLM loads. The source is never touched; the copy is written atomically and
verified by reading it back. Refuses (exit 2, nothing written) when a repair would be a guess,
and says what to do instead.
"""

from __future__ import annotations

import click

from eagle3scope.commands.doctor import wrap
from eagle3scope.wire.untrusted import lines, terminal


def summarised(changes: list[str]) -> list[str]:
    """Key renames grouped by prefix (``10 tensors: layers.0.* -> midlayer.*``); other changes as they are."""
    renames: dict[tuple[str, str], int] = {}
    rest = []
    for change in changes:
        old, sep, new = change.partition(" -> ")
        if sep and " " not in old and not old.endswith(":"):
            common = 0
            while common < min(len(old), len(new)) and old[-1 - common] == new[-1 - common]:
                common += 1
            tail = old[len(old) - common:]
            cut = tail.find(".")
            key = (old[: len(old) - common + cut + 1] + "*", new[: len(new) - common + cut + 1] + "*") if cut >= 0 \
                else (old, new)
            renames[key] = renames.get(key, 0) + 1
        else:
            rest.append(change)
    return [f"{n} tensor(s): {a} -> {b}" if n > 1 else f"{a} -> {b}" for (a, b), n in renames.items()] + rest


@click.command(help=__doc__)
@click.argument("draft_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="New directory to create.")
@click.option("--for-sglang", "sglang_version", default=None,
              help="SGLang release(s) the copy is for, comma-separated (default: installed, else 0.5.10,0.5.23).")
@click.option("--for-vllm", "for_vllm", is_flag=True, help="Write the copy for vLLM (ids as vLLM numbers them).")
@click.option("--vllm-version", default=None, help="vLLM release the --for-vllm copy is for (default: 0.32.0).")
@click.option("--target", "target_dir", type=click.Path(exists=True, file_okay=False), default=None,
              help="Target model directory, for the checks that need it.")
@click.pass_context
def command(ctx: click.Context, draft_dir: str, out_dir: str, sglang_version: str | None, for_vllm: bool,
            vllm_version: str | None, target_dir: str | None) -> None:
    from eagle3scope.doctor import missing_extra

    if missing_extra():
        click.echo(terminal(f"Error: {missing_extra()}"), err=True)
        ctx.exit(2)
    from eagle3scope.doctor.repair import FixRefused, fix_checkpoint
    from eagle3scope.doctor.vllm_repair import fix_for_vllm

    if for_vllm and sglang_version:
        raise click.UsageError("--for-vllm and --for-sglang write different copies: choose one")
    try:
        if for_vllm:
            result = fix_for_vllm(draft_dir, out_dir, vllm_version=vllm_version, target_dir=target_dir)
        else:
            result = fix_checkpoint(draft_dir, out_dir, sglang_version=sglang_version, target_dir=target_dir)
    except FixRefused as exc:
        click.echo(lines(wrap(str(exc), "  ", "refused, nothing written: ")), err=True)
        ctx.exit(2)
    except ValueError as exc:
        raise click.BadParameter(terminal(str(exc)), param_hint="--vllm-version" if for_vllm else "--for-sglang") from None
    except OSError as exc:
        click.echo(terminal(f"Error: {exc}"), err=True)
        ctx.exit(2)
    for change in summarised(result.changes):
        click.echo(lines(wrap(change, "    ", "  ")))
    if not result.changes:
        click.echo("  no changes were needed (copied as is)")
    for note in result.notes:
        click.echo(lines(wrap(note, "    ", "  note: ")))
    for after in result.after:
        for f in after.findings:
            if f.severity == "warning":
                click.echo(lines(wrap(f"{f.id}: {f.title}", "    ", f"  still a warning on {after.sglang_version}: ")))
    versions = ", ".join(result.versions) if for_vllm else "SGLang " + ", ".join(result.versions)
    click.echo(lines(wrap(f"wrote {out_dir} (read back and checked against {versions})")))
