"""``eagle3scope advise FILE`` (or ``--connect E``): which ``--speculative-num-steps`` to run instead.

For each publisher: the predicted mean accept length and tokens/s of every chain setting up to the
recorded one (from the recorded per-request acceptance and a time model fitted to the rounds' device
times where they carry them, else host times, with bootstrap intervals widened by the model's error),
and a recommendation when one setting is clearly faster; acceptance only where host times cannot be
trusted (graphs or the overlap loop) or the model does not fit. Exit
status: 0 with a recommendation or a clear "keep", 3 when the evidence is too thin to advise (too
few request-steps, no timings, a tree draft), 2 when the file or the endpoint cannot be read.
"""

from __future__ import annotations

import time

import click

from eagle3scope.commands import connect_option, open_recording, subscribe
from eagle3scope.signals import stopping_on
from eagle3scope.wire.untrusted import json_line, lines

EXIT_ADVISED, EXIT_UNREADABLE, EXIT_THIN = 0, 2, 3


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _interval(ci: tuple[float, float] | None, spec: str) -> str:
    return "" if ci is None else f" ({format(ci[0], spec)}..{format(ci[1], spec)})"


def render_text(src: str, advice) -> str:
    from eagle3scope.analysis.advisor import Advice

    assert isinstance(advice, Advice)
    rows = [f"publisher {src!r}: recorded num_steps {advice.recorded_steps}, top-k {advice.topk or 1}, "
             f"{advice.rounds} rounds, {advice.request_steps} request-steps"]
    if advice.settings:
        clock = advice.model.clock if advice.model is not None else "host"
        rows.append(f"  {'steps':>5}  {'accept length':<22}  {f'tok/s ({clock})':>12}  {'vs recorded':<22}")
        for s in advice.settings:
            mark = " *" if s.num_steps == advice.recommended else ""
            rows.append(f"  {s.num_steps:>5}  {_fmt(s.accept_length, '.3f') + _interval(s.accept_length_ci, '.3f'):<22}"
                         f"  {_fmt(s.tokens_per_s, '.1f'):>12}  {_fmt(s.gain, '+.1%') + _interval(s.gain_ci, '+.1%'):<22}"
                         f"{mark}")
    if advice.model is not None:
        rows.append(f"  {advice.model.describe()}")
    for what in advice.not_predicted:
        rows.append(f"  not predicted: {what}")
    rows.append(f"  advice: {advice.headline()}")
    return lines(rows)


def _advise_all(logs: dict, as_json: bool) -> int:
    from eagle3scope.analysis.advisor import advise

    answers = {src: advise(log) for src, log in logs.items() if log.rounds or log.num_steps}
    if as_json:
        click.echo(json_line({"publishers": {src: a.to_dict() for src, a in answers.items()}}))
    else:
        click.echo("\n\n".join(render_text(src, a) for src, a in answers.items()) or "no publisher sent decode rounds")
    advised = answers and all(a.recommended is not None for a in answers.values())
    return EXIT_ADVISED if advised else EXIT_THIN


def _collect(logs: dict, frame) -> None:
    from eagle3scope.analysis.advisor import RoundLog
    from eagle3scope.wire.schema import MAX_PUBLISHERS

    log = logs.get(frame.src)
    if log is None:
        if len(logs) >= MAX_PUBLISHERS:
            return
        log = logs[frame.src] = RoundLog()
    log.add_frame(frame)


@click.command(name="advise", help=__doc__)
@click.argument("file", required=False, type=click.Path(dir_okay=False))
@connect_option("Advise from these live servers instead of a FILE.")
@click.option("--steps", type=click.IntRange(min=1), default=2000, show_default=True,
              help="Live: decode steps to collect before advising.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=600.0, show_default=True,
              metavar="S", help="Live: advise from what arrived after S seconds.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_context
def command(ctx: click.Context, file: str | None, endpoints: tuple[str, ...], steps: int, timeout: float,
            as_json: bool) -> None:
    if (file is None) == (not endpoints):
        raise click.UsageError("give a recording FILE or --connect ENDPOINT, not both")
    logs: dict = {}
    if file is not None:
        with open_recording(ctx, file, EXIT_UNREADABLE) as reader:
            for _, frame in reader.frames():
                _collect(logs, frame)
        ctx.exit(_advise_all(logs, as_json))
    sub = subscribe(ctx, list(endpoints), EXIT_UNREADABLE)
    stop: list[int] = []
    started = time.monotonic()
    try:
        with stopping_on(stop.append):
            while (not stop and time.monotonic() - started < timeout
                   and sum(log.seen for log in logs.values()) < steps):
                for frame in sub.poll(100):
                    _collect(logs, frame)
    finally:
        sub.close()
    ctx.exit(_advise_all(logs, as_json))
