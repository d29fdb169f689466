"""``eagle3scope gate --connect E --steps N``: a deployment canary for a running server.

Collects N decode steps from the shim(s), then judges them as ``check`` judges a recording: the
contract rules at or above ``--fail-on``, the acceptance floors and, with ``--baseline OLD``, the
acceptance of an earlier recording of the same draft. Exit status: 0 pass, 1 fail (also when fewer
steps arrived: what was seen is already wrong), 2 cannot subscribe (or read OLD), 3 nothing failed
but fewer than N steps arrived within ``--timeout``, none at all included (inconclusive). ``--junit FILE`` writes the verdict for CI; ``--record FILE`` keeps the frames
for ``check`` / ``report`` later. A publisher that cannot be authenticated as the server asked for
(a squatter on the port, another server's key) is exit 2 at once: its frames are never judged.
SIGINT, SIGTERM, SIGHUP and SIGQUIT end the collection early; the verdict is still printed.
"""

from __future__ import annotations

import time

import click

from eagle3scope.commands import connect_option, discover_option, subscribe
from eagle3scope.commands.check import conclude, read_baseline, threshold_options, thresholds_from
from eagle3scope.gate.decide import EXIT_UNREADABLE
from eagle3scope.gate.result import check_result
from eagle3scope.signals import stopping_on
from eagle3scope.wire.untrusted import terminal


@click.command(name="gate", help=__doc__)
@connect_option()
@click.option("--steps", type=click.IntRange(min=1), default=200, show_default=True,
              help="Decode steps to collect before judging.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=300.0, show_default=True,
              metavar="S", help="Give up after S seconds (exit 3) if fewer steps arrived.")
@click.option("--record", "record_path", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Also write the collected frames to a session file.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (check's, plus 'gate').")
@threshold_options
@discover_option
@click.pass_context
def command(ctx: click.Context, endpoints: tuple[str, ...], steps: int, timeout: float, record_path: str | None,
            as_json: bool, fail_on: str, min_accept_length: float | None, min_per_position: str | None,
            junit_path: str | None, baseline_path: str | None, no_discover: bool) -> None:
    from eagle3scope.analysis import SessionState
    from eagle3scope.store import SessionWriter, StoreError

    thresholds = thresholds_from(fail_on, min_accept_length, min_per_position)
    reference = read_baseline(ctx, baseline_path)
    sub = subscribe(ctx, list(endpoints), EXIT_UNREADABLE, discover=not no_discover)
    endpoints = list(sub.endpoints)  # as given, or the default one (discovered ranks are added later)
    try:
        writer = SessionWriter(record_path, endpoints=list(endpoints)) if record_path else None
    except StoreError as exc:
        sub.close()
        raise click.ClickException(terminal(str(exc))) from None
    state = SessionState(keep_rounds=reference is not None)
    interrupted = []
    started = time.monotonic()
    with stopping_on(interrupted.append):
        try:
            while state.acceptance.n_steps < steps and not interrupted and time.monotonic() - started < timeout:
                for raw, frame in sub.poll_raw(100):
                    state.ingest(frame)
                    if writer is not None:
                        writer.add(raw, frame)
                if sub.unauthenticated:
                    break
                if writer is not None:
                    writer.tick()
        finally:
            if writer is not None:
                writer.close()
            sub.close()
    if sub.unauthenticated:
        for _, kind, error in sub.take_reports():
            if kind == "handshake":
                click.echo(terminal(f"Error: {error}"), err=True)
        ctx.exit(EXIT_UNREADABLE)
    state.evaluate_rules()  # the rules ran on ingest's schedule; once more on the last frame, as check does
    elapsed = time.monotonic() - started
    got = state.acceptance.n_steps
    incomplete = None
    if got < steps:
        why = "interrupted" if interrupted else f"within {timeout:g} s"
        incomplete = f"only {got} of {steps} decode steps arrived {why} from {', '.join(endpoints)}"
    result = check_result(state, state.violations(), [f"{sub.bad_frames} bad frame(s): {sub.last_error}"] if sub.bad_frames else [])
    conclude(ctx, result, thresholds, as_json=as_json, junit_path=junit_path,
             suite=f"eagle3scope gate {' '.join(endpoints)}", elapsed_s=elapsed,
             properties={"endpoints": " ".join(endpoints), "steps": got, "record": record_path or "",
                         "baseline": baseline_path or ""},
             incomplete=incomplete, reference=reference, state=state)
