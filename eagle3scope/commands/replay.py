"""``eagle3scope replay``: play a session file in the TUI, or headless as text or JSON lines.

Exit status 3 when damaged parts of the file were skipped (listed on stderr). Both go through
:class:`eagle3scope.store.replayer.Replayer`, the engine the TUI also uses, so a
headless run paces, seeks and rebuilds state exactly as the screen would. Without the viewer
extra (Textual) the command falls back to headless and says so.
"""

from __future__ import annotations

import importlib.util
import os
import sys

import click

from eagle3scope.store.replayer import MAX_SPEED, MIN_SPEED
from eagle3scope.wire.untrusted import json_line, terminal


def _fmt_step(frame, t0: int) -> str:
    from eagle3scope.store.rows import pass_summary

    step = frame.record
    n = len(step.accepted)
    accepted = sum(step.accepted)
    drafted = sum(map(len, step.draft_ids))
    mean_len = step.committed / n if n else 0.0
    s = pass_summary(step)
    capture = "" if s["capture_on"] is None else f" capture={'on' if s['capture_on'] else 'OFF'}"
    return (f"step {step.seq:>8} +{(frame.t - t0) / 1e9:9.3f}s {frame.src} {step.mode} bs={step.bs}"
            f" accepted {accepted}/{drafted} len={mean_len:.2f} passes {s['pass_widths'] or '-'}{capture}")


def _fmt_other(frame, t0: int, last_dropped: dict) -> str | None:
    record = frame.record
    head = f"{frame.kind:>8}          +{(frame.t - t0) / 1e9:9.3f}s {frame.src}"
    if frame.kind == "hello":
        hello = record
        args = hello.args
        return (f"{head} {hello.engine_id} {hello.engine_release} worker {hello.worker} {args.algorithm}"
                f" steps={args.num_steps} topk={args.topk} draft={args.draft_model_path}")
    if frame.kind == "load":
        load = record
        aux = load.aux
        fc = f"{load.fc_in}->{load.fc_out}" if load.has_fc else "none"
        capture = "?" if aux.capture_on is None else "on" if aux.capture_on else "OFF"
        return (f"{head} draft {load.draft_class} fc={fc} aux configured={aux.configured} captured={aux.captured}"
                f" capture={capture}")
    if frame.kind == "config":
        return f"{head} aux layers {record.layers} applied={record.applied} {record.reason or ''}".rstrip()
    if frame.kind == "hook":
        return f"{head} {record.seam}: {record.status} {record.detail or ''}".rstrip()
    if frame.kind == "heartbeat":
        dropped = record.dropped
        if dropped != last_dropped.get(frame.src, 0):
            last_dropped[frame.src] = dropped
            return f"{head} shim dropped {dropped} frames so far"
        return None
    return f"{head} (unknown kind {frame.kind!r})"


def _headless(replayer, as_json: bool, pace: bool, max_steps: int | None) -> None:
    out = sys.stdout
    t0 = replayer.reader.t_first or 0
    last_dropped: dict[str, int] = {}
    steps = 0
    source = iter(replayer) if pace else _unpaced(replayer)
    for frame in source:
        if as_json:
            line = json_line(frame.to_dict(), separators=(",", ":"), default=repr)
        elif frame.kind == "step":
            line = terminal(_fmt_step(frame, t0))
        else:
            other = _fmt_other(frame, t0, last_dropped)
            line = None if other is None else terminal(other)
        if line is not None:
            out.write(line + "\n")
        if frame.kind == "step":
            steps += 1
            if max_steps is not None and steps >= max_steps:
                break
    out.flush()


def _unpaced(replayer):
    while batch := replayer.step_one():
        yield from batch


def _open_tui(path: str, speed: float, theme: str | None, from_step: int | None, from_time: float | None) -> bool:
    """Open the TUI if the viewer extra is installed; False when it is not. Exits non-zero when
    the file cannot be read or the app ended on an error."""
    if importlib.util.find_spec("textual") is None or importlib.util.find_spec("eagle3scope.tui.app") is None:
        return False
    from eagle3scope.store import StoreError
    from eagle3scope.tui.app import run_replay

    try:
        status = run_replay(path, speed=speed, theme=theme, from_step=from_step, from_time=from_time)
    except StoreError as exc:
        raise click.ClickException(terminal(str(exc))) from None
    if status:
        sys.exit(status)
    return True


@click.command(name="replay")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--headless", is_flag=True, help="No TUI: print a line per step (or --json lines) to stdout.")
@click.option("--json", "as_json", is_flag=True, help="Headless: one JSON frame per line instead of text.")
@click.option("--speed", type=click.FloatRange(MIN_SPEED, MAX_SPEED), default=1.0, show_default=True,
              help="Playback speed relative to the recording.")
@click.option("--no-pace", is_flag=True, help="Headless: print as fast as possible, ignoring recorded time.")
@click.option("--from-step", type=int, default=None, help="Start at the first step with this seq.")
@click.option("--from-time", type=float, default=None, help="Start this many seconds after the recording began.")
@click.option("--steps", "max_steps", type=click.IntRange(min=1), default=None, help="Headless: stop after N steps.")
@click.option("--theme", default=None, help="TUI theme name or .tcss path.")
def command(file: str, headless: bool, as_json: bool, speed: float, no_pace: bool, from_step: int | None,
            from_time: float | None, max_steps: int | None, theme: str | None) -> None:
    """Replay a session file in the TUI or headless.

    Frames are paced by their recorded time divided by --speed; --from-step / --from-time seek
    first and rebuild the state (hello, load, config, hooks) recorded before that point.
    """
    from eagle3scope.store import StoreError
    from eagle3scope.store.replayer import Replayer

    if from_step is not None and from_time is not None:
        raise click.UsageError("give --from-step or --from-time, not both")
    if not headless:
        if _open_tui(file, speed, theme, from_step, from_time):
            return
        click.echo("note: the TUI needs the viewer extra (pip install 'eagle3scope[viewer]'); replaying headless",
                   err=True)
    try:
        replayer = Replayer(file, speed=speed)
    except StoreError as exc:
        raise click.ClickException(terminal(str(exc))) from None
    with_errors = replayer.errors
    try:
        if from_step is not None:
            replayer.seek_step(from_step)
        elif from_time is not None:
            replayer.seek_time((replayer.reader.t_first or 0) + int(from_time * 1e9))
        _headless(replayer, as_json, not no_pace, max_steps)
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:  # `replay ... | head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    finally:
        replayer.close()
    for err in with_errors:
        click.echo(terminal(f"error: {err}"), err=True)
    if not replayer.reader.complete:
        click.echo("note: the recorder did not close this file (killed or still running); showing what was committed",
                   err=True)
    if with_errors:
        sys.exit(3)  # like export and check: damaged parts were skipped
