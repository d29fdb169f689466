"""``eagle3scope check FILE``: the contract rules over a recording, for users' own CI.

Exit status: 0 when no violation at or above ``--fail-on`` (default: error) fired at any point of
the recording, 1 when one did, 2 when the file cannot be read as a session, 3 when no violation
fired but parts of the file were damaged (listed as read errors; the verdict covers the rest).
"""

from __future__ import annotations

import json

import click

from eagle3scope.analysis import SessionState, Violation, analyse
from eagle3scope.analysis.rules import SEVERITY_ORDER


def report(state: SessionState, violations: list[Violation], errors: list[str], complete: bool = True) -> dict:
    """The ``--json`` object: summary plus every violation that fired."""
    summary = state.acceptance.summary()
    summary["publishers"] = sorted(state.publishers)
    summary["frames"] = state.frames
    summary["complete"] = complete  # False: the recorder never closed the file (killed, or still running)
    return {"summary": summary, "violations": [v.to_dict() for v in violations], "read_errors": errors}


def _fmt(value: object) -> str:
    return json.dumps(value, separators=(",", ":")) if isinstance(value, (list, dict)) else str(value)


def render_text(result: dict) -> str:
    s = result["summary"]
    mean = s["mean_accept_length"]
    rates = ", ".join("-" if r is None else f"{r:.2f}" for r in s["per_position"])
    lines = [
        f"steps: {s['steps']}  request-steps: {s['request_steps']}  publishers: {', '.join(s['publishers']) or '-'}",
        f"mean acceptance length (bonus included): {'-' if mean is None else f'{mean:.3f}'}  per position: [{rates}]",
    ]
    violations = result["violations"]
    if not violations:
        lines.append("no violations")
    for v in violations:
        state = "" if v["active"] else " (no longer active)"
        where = "before the first step" if v["first_seq"] is None else f"from step {v['first_seq']}"
        lines.append("")
        lines.append(f"{v['severity'].upper():7} {v['id']}  [{v['src']} {where}]{state}")
        lines.append(f"        {v['title']}")
        lines.append("        evidence: " + ", ".join(f"{k}={_fmt(val)}" for k, val in v["evidence"].items()))
        lines.append(f"        fix: {v['fix']}")
    if not s["complete"]:
        lines.append("note: the recording was not closed by its recorder (killed or still running)")
    for err in result["read_errors"]:
        lines.append(f"read error: {err}")
    return "\n".join(lines)


def _list_rules(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from eagle3scope.analysis import RULES

    for rule in RULES:
        severity = rule.severity if isinstance(rule.severity, str) else "error|warning"
        click.echo(f"{rule.id:26} {severity:14} {rule.title}")
    ctx.exit(0)


@click.command(help=__doc__)
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the table.")
@click.option("--fail-on", type=click.Choice(["error", "warning", "info"]), default="error", show_default=True,
              help="Lowest severity that makes the exit status 1.")
@click.option("--list-rules", is_flag=True, expose_value=False, is_eager=True, callback=_list_rules,
              help="List every rule id with its severity and title, then exit.")
@click.pass_context
def command(ctx: click.Context, file: str, as_json: bool, fail_on: str) -> None:
    from eagle3scope.store import SessionReader, StoreError

    try:
        reader = SessionReader(file)
    except StoreError as exc:
        click.echo(f"Error: {exc}", err=True)
        ctx.exit(2)
    with reader:
        state = analyse(frame for _, frame in reader.frames())
        errors = [str(e) for e in reader.errors]
        complete = reader.complete
    violations = state.violations()
    result = report(state, violations, errors, complete)
    click.echo(json.dumps(result) if as_json else render_text(result))
    threshold = SEVERITY_ORDER[fail_on]
    if any(SEVERITY_ORDER[v.severity] <= threshold for v in violations):
        ctx.exit(1)
    ctx.exit(3 if errors else 0)
