"""``eagle3scope record``: subscribe to live servers and write every frame to a session file.

Headless on purpose (long sessions, tmux, CI). SIGINT, SIGTERM, SIGHUP and SIGQUIT stop it
cleanly: the pending batch is committed and the file marked complete. The file is created 0600
(it holds every request's token ids) and exclusively: of two recorders started on one path at the
same moment exactly one records, the other says why. A SIGKILL loses at most the last uncommitted batch
(100 ms); the WAL is folded into the file every 2 s. Invalid frames are dropped and reported once
per publisher and kind; a write error (disk full) stops the recording with one line, exit 1, and
leaves the committed steps readable.
"""

from __future__ import annotations

import gc
import sys
import time

import click

from eagle3scope.commands import connect_option, discover_option
from eagle3scope.signals import name, stopping_on
from eagle3scope.wire.endpoints import EndpointError, default_endpoint
from eagle3scope.wire.schema import DEFAULT_MAX_FRAME_BYTES, MAX_FRAME_BYTES
from eagle3scope.wire.untrusted import terminal


def _progress(out, steps: int, frames: int, sources: int, lost: int, bad: int, nbytes: int, elapsed: float,
              tty: bool) -> None:
    line = (f"recording: {steps} steps, {frames} frames from {sources} source(s), {lost} lost, {bad} bad, "
            f"{nbytes / 1e6:.1f} MB, {elapsed:.1f} s")
    out.write(terminal(line) + ("\r" if tty else "\n"))
    out.flush()


@click.command(name="record")
@connect_option()
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False), help="Session file to create.")
@click.option("--duration", type=click.FloatRange(min=0, min_open=True), default=None, help="Stop after S seconds.")
@click.option("--steps", "max_steps", type=click.IntRange(min=1), default=None,
              help="Stop after N step frames (prefills included).")
@click.option("--decode-steps", "max_decode_steps", type=click.IntRange(min=1), default=None,
              help="Stop after N decode steps: verify steps that committed tokens, what `check` counts.")
@click.option("--quiet", is_flag=True, help="No progress line.")
@click.option("--max-frame-bytes", type=click.IntRange(1024, MAX_FRAME_BYTES), default=DEFAULT_MAX_FRAME_BYTES,
              show_default=True, help="Larger frames are refused before they are buffered.")
@discover_option
def command(endpoints: tuple[str, ...], out_path: str, duration: float | None, max_steps: int | None,
            max_decode_steps: int | None, quiet: bool, max_frame_bytes: int, no_discover: bool) -> None:
    """Record a live server's events to a session file (headless).

    Prints a progress line to stderr; stop with Ctrl-C (or SIGTERM, SIGHUP, SIGQUIT), --duration, --steps or
    --decode-steps.
    """
    import zmq

    from eagle3scope.live.subscriber import Subscriber
    from eagle3scope.store import SessionWriter, StoreError
    from eagle3scope.wire.loss import StreamLoss

    try:
        endpoints = endpoints or (default_endpoint(),)
        sub = Subscriber(list(endpoints), max_frame_bytes=max_frame_bytes, discover=not no_discover)
    except (zmq.ZMQError, EndpointError) as exc:
        raise click.ClickException(terminal(f"cannot subscribe to {', '.join(endpoints) or 'the default endpoint'}: {exc}")) from None
    stop = {"why": None}

    def on_signal(signum):
        stop["why"] = name(signum)

    with stopping_on(on_signal):  # from before the file exists to after it is closed
        try:
            writer = SessionWriter(out_path, endpoints=list(endpoints))
        except StoreError as exc:
            sub.close()
            raise click.ClickException(terminal(str(exc))) from None
        loss = StreamLoss()
        failed = _record(sub, writer, loss, stop, endpoints, out_path, duration, max_steps, max_decode_steps, quiet)
    if failed:
        raise click.ClickException(terminal(failed))
    if not quiet:
        err = sys.stderr
        _progress(err, writer.steps, writer.frames, len(sub.sources), loss.lost, sub.bad_frames, writer.bytes,
                  stop["elapsed"], False)
        err.write(terminal(f"stopped ({stop['why']}); {writer.batches} batches committed to {out_path}") + "\n")
        if sub.last_error:
            err.write(terminal(f"last bad frame: {sub.last_error}") + "\n")


def _record(sub, writer, loss, stop: dict, endpoints, out_path: str, duration: float | None, max_steps: int | None,
            max_decode_steps: int | None, quiet: bool) -> str | None:
    """The recording loop, until ``stop["why"]`` is set; closes the file. Returns the write error, if any.
    ``loss`` (a StreamLoss) counts what never reached the recorder: the file's ``loss`` metadata."""
    from eagle3scope.store import StoreError

    err = sys.stderr
    tty = err.isatty()
    gc.freeze()  # start-up objects leave the GC's view: full collections then scan only live frames
    started = time.monotonic()
    next_report = started + (1.0 if tty else 5.0)
    seen: set[str] = set()
    found: list[str] = []
    if not quiet:
        err.write(terminal(f"recording {', '.join(endpoints)} -> {out_path}") + "\n")
        err.flush()
    failed = None
    try:
        while stop["why"] is None:
            for src, kind, error in sub.take_reports():
                err.write(("\n" if tty else "") + terminal(f"bad {kind or 'frame'} from {src or '?'} dropped (further"
                                                        f" ones only counted): {error}") + "\n")
                err.flush()
            for endpoint in sub.discovered[len(found):]:
                found.append(endpoint)
                if not quiet:
                    err.write(("\n" if tty else "") + terminal(f"subscribed to {endpoint} too (a DP rank its server's hello lists)") + "\n")
                    err.flush()
            for raw, frame in sub.poll_raw(50):
                if frame.src not in seen:
                    seen.add(frame.src)
                    if not quiet:
                        err.write(("\n" if tty else "") + terminal(f"receiving from {frame.src}") + "\n")
                        err.flush()
                loss.observe(frame)
                writer.add(raw, frame)
                if max_steps is not None and writer.steps >= max_steps:
                    stop["why"] = f"{max_steps} steps"
                    break
                if max_decode_steps is not None and writer.decode_steps >= max_decode_steps:
                    stop["why"] = f"{max_decode_steps} decode steps"
                    break
            writer.tick()
            now = time.monotonic()
            if duration is not None and now - started >= duration:
                stop["why"] = f"{duration:g} s"
            if now >= next_report:
                writer.note_loss(loss.summary(sub.bad_frames))
                if not quiet:
                    _progress(err, writer.steps, writer.frames, len(sub.sources), loss.lost, sub.bad_frames,
                              writer.bytes, now - started, tty)
                next_report = now + (1.0 if tty else 5.0)
    except StoreError as exc:
        failed = str(exc)
    finally:
        try:
            writer.note_loss(loss.summary(sub.bad_frames))
            writer.close()
        except StoreError as exc:  # the last batch could not be written either
            failed = failed or str(exc)
        sub.close()
    stop["elapsed"] = time.monotonic() - started
    return failed
