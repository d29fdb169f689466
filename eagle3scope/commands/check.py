"""``eagle3scope check FILE``: the contract rules over a recording, for users' own CI.

Exit status: 0 when no violation at or above ``--fail-on`` (default: error) fired at any point of
the recording, every floor given (``--min-accept-length``, ``--min-per-position``) holds and nothing
regressed against ``--baseline``, 1 when not, 2 when the file (or the baseline) cannot be read as a
session, 3 when everything read passed but the evidence is short: no decode step at all (nothing
was published: whatever the flags), parts of the file damaged (listed as read errors), frames
from publishers past the 256th (counted as ``refused_frames``), or too few request-steps to
compare with the baseline; the verdict covers the rest. ``--junit FILE`` writes the same verdict
as JUnit XML.
"""

from __future__ import annotations

import json
import time

import click

from eagle3scope.analysis import analyse
from eagle3scope.commands import open_recording
from eagle3scope.gate.decide import EXIT_FAIL, EXIT_INCOMPLETE, EXIT_PASS, EXIT_UNREADABLE, Check, Thresholds, \
    describe, judge, parse_floors, verdict
from eagle3scope.gate.result import check_result, no_evidence
from eagle3scope.gate.junit import write_junit
from eagle3scope.wire.schema import MAX_PUBLISHERS
from eagle3scope.wire.severity import SEVERITIES
from eagle3scope.wire.untrusted import json_line, lines, terminal


def _fmt(value: object) -> str:
    return json.dumps(value, separators=(",", ":")) if isinstance(value, (list, dict)) else str(value)


_SEEN = {"eager": "seen eagerly", "graph": "replayed from graphs (width and fc read at its caller)",
         "unseen": "NOT SEEN (rules on widths and fc cannot judge it)", "unknown": "seen (shim predates this field)"}


def render_text(result: dict) -> str:
    s = result["summary"]
    mean = s["mean_accept_length"]
    rates = ", ".join("-" if r is None else f"{r:.2f}" for r in s["per_position"])
    rows = [
        f"steps: {s['steps']}  request-steps: {s['request_steps']}  publishers: {', '.join(s['publishers']) or '-'}",
        f"mean acceptance length (bonus included): {'-' if mean is None else f'{mean:.3f}'}  per position: [{rates}]",
    ]
    for src, seen in (s.get("draft_passes") or {}).items():
        if set(seen.values()) <= {"eager", "unknown"}:
            continue  # the ordinary case: every pass's own Python ran
        rows.append(f"draft passes of {src}: " + ", ".join(f"{name} {_SEEN[how]}" for name, how in seen.items()))
    violations = result["violations"]
    if not violations:
        rows.append("no violations" if s["steps"] else "no violations, and no decode step to judge")
    for v in violations:
        state = "" if v["active"] else " (no longer active)"
        where = "before the first step" if v["first_seq"] is None else f"from step {v['first_seq']}"
        run = f" run {v['run']}" if v.get("run", 1) > 1 else ""
        rows.append("")
        rows.append(f"{v['severity'].upper():7} {v['id']}  [{v['src']}{run} {where}]{state}")
        rows.append(f"        {v['title']}")
        rows.append("        evidence: " + ", ".join(f"{k}={_fmt(val)}" for k, val in v["evidence"].items()))
        rows.append(f"        fix: {v['fix']}")
    rows.extend(_slice_rows(s.get("slices") or {}))
    gate = result.get("gate")
    if gate is not None and any(c["group"] not in ("rules", "baseline") for c in gate["checks"]):
        rows.append("")
        for c in gate["checks"]:
            if c["group"] not in ("rules", "baseline"):  # the baseline's have their own section
                rows.append(f"{'PASS' if c['passed'] else 'FAIL':7} {c['name']}: {c['message']}")
    comparison = result.get("baseline")
    if comparison is not None:
        rows.extend(_baseline_rows(comparison))
    if not s["complete"]:
        rows.append("note: the recording was not closed by its recorder (killed or still running)")
    if s.get("restarts"):
        rows.append(f"note: {s['restarts']} publisher restart(s) under the same src: each run is judged on its own")
    if s.get("duplicate_frames") or s.get("counter_resets"):
        rows.append(f"note: {s.get('duplicate_frames', 0)} duplicate frame(s) dropped, {s.get('counter_resets', 0)} "
                    "impossible frame-counter jump(s) counted as resets, not as loss")
    for err in result["read_errors"]:
        rows.append(f"read error: {err}")
    return lines(rows)


def _fmt_mean(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _slice_rows(slices: dict) -> list[str]:
    """Acceptance per slice, one line per dimension that has more than one label (one label says nothing new)."""
    rows = []
    for dim, entries in slices.items():
        if len(entries) > 1:
            cells = ", ".join(f"{e['label']} {_fmt_mean(e['mean_accept_length'])} (n={e['request_steps']})" for e in entries)
            rows.append(f"mean acceptance length by {dim.replace('_', ' ')}: {cells}")
    return rows


def _baseline_rows(comparison: dict) -> list[str]:
    """The baseline comparison: every overall value, then the slices that were judged."""
    rows = ["", f"against the baseline {comparison['path']} ({comparison.get('baseline_rounds', 0)} rounds, this "
            f"recording {comparison.get('current_rounds', 0)}):"]
    for delta in comparison["overall"]:
        rows.append(f"{'FAIL' if delta['regressed'] else 'PASS' if delta['judged'] else '-':7} {describe(delta)}")
    for delta in comparison["slices"]:
        if delta["judged"]:
            rows.append(f"{'FAIL' if delta['regressed'] else 'PASS':7} {describe(delta)}")
    unjudged = [d["name"] for d in comparison["slices"] if not d["judged"]]
    if unjudged:
        rows.append(f"        slices with too few request-steps to judge: {', '.join(unjudged)}")
    rows.extend(f"note: {note}" for note in comparison["notes"])
    if comparison.get("regressed"):
        rows.append("REGRESSED: " + ", ".join(comparison["regressed"]))
    return rows


def _list_rules(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from eagle3scope.analysis import CONTRACT_RULES

    for rule in CONTRACT_RULES:
        severity = rule.severity if isinstance(rule.severity, str) else "error|warning"
        click.echo(terminal(f"{rule.id:26} {severity:14} {rule.title}"))
    ctx.exit(0)


def threshold_options(func):
    """--fail-on, --min-accept-length, --min-per-position, --junit, --baseline: shared by ``check`` and ``gate``."""
    options = [
        click.option("--fail-on", type=click.Choice(list(SEVERITIES)), default="error",
                     show_default=True, help="Lowest severity that makes the exit status 1."),
        click.option("--min-accept-length", type=click.FloatRange(min=0), default=None, metavar="X",
                     help="Fail when the mean acceptance length (bonus token included) is below X."),
        click.option("--min-per-position", "min_per_position", default=None, metavar="A,B,C",
                     help="Fail when the acceptance rate at draft position 1, 2, 3... is below A, B, C..."),
        click.option("--junit", "junit_path", type=click.Path(dir_okay=False), default=None, metavar="FILE",
                     help="Also write the verdict as JUnit XML (one test case per rule and per floor)."),
        click.option("--baseline", "baseline_path", type=click.Path(dir_okay=False), default=None, metavar="OLD",
                     help="Fail when acceptance (mean, per position, per slice) dropped against the recording OLD "
                          "of the same draft, outside the noise (block bootstrap over rounds, 95 %)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def thresholds_from(fail_on: str, min_accept_length: float | None, min_per_position: str | None) -> Thresholds:
    try:
        floors = parse_floors(min_per_position)
    except ValueError as exc:
        raise click.BadParameter(terminal(str(exc)), param_hint="--min-per-position") from None
    return Thresholds(min_accept_length, floors, fail_on)


def read_baseline(ctx: click.Context, path: str | None):
    """The ``--baseline`` recording as a :class:`~eagle3scope.gate.baseline.Reference` (None without one);
    one ``Error:`` line and exit 2 when it cannot be read as a session."""
    if path is None:
        return None
    from eagle3scope.gate.baseline import read_reference
    from eagle3scope.store import StoreError

    try:
        return read_reference(path)
    except StoreError as exc:
        click.echo(terminal(f"Error: baseline: {exc}"), err=True)
        ctx.exit(EXIT_UNREADABLE)


def conclude(ctx: click.Context, result: dict, thresholds: Thresholds, *, as_json: bool, junit_path: str | None,
             suite: str, elapsed_s: float, properties: dict, incomplete: str | None = None,
             reference=None, state=None) -> None:
    """Judge, print, write JUnit, exit: the shared tail of ``check`` and ``gate``.

    A failed check exits 1 even on incomplete evidence (what was seen is already wrong); only when
    nothing failed does ``incomplete`` (too few steps, damaged file parts, a comparison without
    enough request-steps) exit 3. No decode step at all is always incomplete: no evidence is no pass.
    ``reference`` (from :func:`read_baseline`) is judged against ``state``'s kept rounds.
    """
    gaps = [why for why in (no_evidence(result["summary"]), incomplete) if why]
    if reference is not None:
        from eagle3scope.gate.baseline import judged_against

        result["baseline"], short = judged_against(reference, state)
        gaps += [short] if short else []
    incomplete = "; ".join(gaps) or None
    checks = judge(result, thresholds)
    failed = not all(c.passed for c in checks)
    if incomplete:
        checks.append(Check("run", "complete", False, incomplete))
    result["gate"] = verdict(checks)
    click.echo(json_line(result) if as_json else render_text(result))
    if incomplete and not as_json:
        click.echo(terminal(f"INCOMPLETE: {incomplete}"), err=True)
    if junit_path:
        write_junit(junit_path, checks, suite=suite, elapsed_s=elapsed_s, properties=properties)
    ctx.exit(EXIT_FAIL if failed else EXIT_INCOMPLETE if incomplete else EXIT_PASS)


@click.command(help=__doc__)
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the table.")
@threshold_options
@click.option("--list-rules", is_flag=True, expose_value=False, is_eager=True, callback=_list_rules,
              help="List every rule id with its severity and title, then exit.")
@click.pass_context
def command(ctx: click.Context, file: str, as_json: bool, fail_on: str, min_accept_length: float | None,
            min_per_position: str | None, junit_path: str | None, baseline_path: str | None) -> None:
    thresholds = thresholds_from(fail_on, min_accept_length, min_per_position)
    started = time.monotonic()
    reference = read_baseline(ctx, baseline_path)
    with open_recording(ctx, file, EXIT_UNREADABLE) as reader:
        state = analyse((frame for _, frame in reader.frames()), keep_rounds=reference is not None)
        errors = [str(e) for e in reader.errors]
        complete = reader.complete
    result = check_result(state, state.violations(), errors, complete)
    gaps = [f"{len(errors)} damaged part(s) of the recording were skipped"] if errors else []
    if state.refused_frames:
        gaps.append(f"{state.refused_frames} frame(s) from publishers past the first {MAX_PUBLISHERS} were not analysed")
    damaged = "; ".join(gaps) or None
    properties = {"recording": file, **({"baseline": baseline_path} if baseline_path else {})}
    conclude(ctx, result, thresholds, as_json=as_json, junit_path=junit_path, suite=f"eagle3scope check {file}",
             elapsed_s=time.monotonic() - started, properties=properties, incomplete=damaged,
             reference=reference, state=state)
