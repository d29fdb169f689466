"""``eagle3scope doctor DRAFT_DIR``: check a draft checkpoint against an SGLang release before serving it.

Reads safetensors headers only (no full load, no torch). Exit status: 0 clean, 1 warnings,
2 errors.
"""

from __future__ import annotations

import json

import click


def _fmt(value: object) -> str:
    return json.dumps(value, separators=(",", ":")) if isinstance(value, (list, dict)) else str(value)


def render(report: dict) -> str:
    lines = [f"draft: {report['draft']}", f"SGLang {report['sglang_version']}, loader {report['loader']}",
             f"tensors: {report['tensors']}"]
    if not report["findings"]:
        lines.append("no problems found")
    for f in report["findings"]:
        lines += ["", f"{f['severity'].upper():7} {f['id']}: {f['title']}",
                  "        evidence: " + ", ".join(f"{k}={_fmt(v)}" for k, v in f["evidence"].items())]
        if f["fix"]:
            lines.append(f"        fix: {f['fix']}")
    fixable = report["fixable"]
    repairs = [f"{len(fixable['renames'])} key rename(s)"] if fixable["renames"] else []
    repairs += ["d2t absolute ids -> offsets"] if fixable["d2t_to_offsets"] else []
    repairs += [f"config.json: {edit}" for edit in fixable["config_edits"]]
    if repairs:
        lines += ["", "`eagle3scope fix` can repair: " + "; ".join(repairs)]
    for why in report["refusals"]:
        lines.append(f"fix would refuse: {why}")
    return "\n".join(lines)


@click.command(help=__doc__)
@click.argument("draft_dir", type=click.Path(file_okay=False))
@click.option("--target", "target_dir", type=click.Path(file_okay=False), default=None,
              help="Target model directory (its config.json): layer count, hidden size, vocabulary.")
@click.option("--sglang-version", default=None, help="SGLang release to check against (default: installed, else 0.5.23).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_context
def command(ctx: click.Context, draft_dir: str, target_dir: str | None, sglang_version: str | None, as_json: bool) -> None:
    from eagle3scope.doctor import missing_extra

    if missing_extra():
        click.echo(f"Error: {missing_extra()}", err=True)
        ctx.exit(2)
    from eagle3scope.doctor.diagnose import diagnose

    try:
        dx = diagnose(draft_dir, sglang_version=sglang_version, target_dir=target_dir)
    except (ValueError, OSError) as exc:
        raise click.UsageError(str(exc)) from None
    report = dx.to_dict()
    click.echo(json.dumps(report) if as_json else render(report))
    ctx.exit(dx.exit_code)
