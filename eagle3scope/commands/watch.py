"""``eagle3scope watch``: the live TUI on one or more publishers (one per data-parallel scheduler)."""

from __future__ import annotations

import importlib.util

import click

from eagle3scope.commands import connect_option, discover_option
from eagle3scope.wire.endpoints import EndpointError, default_endpoint
from eagle3scope.wire.schema import DEFAULT_MAX_FRAME_BYTES, MAX_FRAME_BYTES
from eagle3scope.wire.untrusted import terminal


@click.command(name="watch")
@connect_option()
@click.option("--theme", default=None, help="Theme name (dark, light, high-contrast, ...) or a .tcss path; remembered.")
@click.option("--control", metavar="ENDPOINT", default=None,
              help="The server's control channel (from `eagle3scope launch --control`): key c switches aux layers.")
@click.option("--token-file", metavar="PATH", default=None, help="The control channel's token file.")
@click.option("--max-frame-bytes", type=click.IntRange(1024, MAX_FRAME_BYTES), default=DEFAULT_MAX_FRAME_BYTES,
              show_default=True, help="Larger frames are refused before they are buffered.")
@discover_option
def command(endpoints: tuple[str, ...], theme: str | None, control: str | None, token_file: str | None,
            max_frame_bytes: int, no_discover: bool) -> None:
    """Open the live TUI on one or more running servers.

    Keys: space pause, s step, v/1-4 panels, f filter by request, l load report, c aux layers, t theme,
    ? help, q quit. Over SSH, forward a local socket to the server's (ssh -N -L
    LOCAL.sock:/run/user/UID/eagle3scope/events.sock gpu-box, then -c ipc://LOCAL.sock; README,
    "Watching a server over SSH") or run this inside tmux on the server.
    """
    if importlib.util.find_spec("textual") is None:
        raise click.ClickException("the TUI needs the viewer extra: pip install 'eagle3scope[viewer]'")
    from eagle3scope.tui.app import run_watch
    from eagle3scope.tui.themes import load_theme

    if theme is not None:
        try:
            load_theme(theme)
        except KeyError as exc:
            raise click.BadParameter(terminal(str(exc.args[0])), param_hint="--theme") from None
    client = None
    if control or token_file:
        from eagle3scope.control.client import ControlClient, ControlError
        from eagle3scope.wire.token import TokenError

        try:
            client = ControlClient.from_options(control, token_file)
        except (ControlError, TokenError) as exc:
            raise click.ClickException(terminal(str(exc))) from None
    import zmq

    try:
        status = run_watch(list(endpoints) or [default_endpoint()], theme=theme, aux_client=client,
                           max_frame_bytes=max_frame_bytes, discover=not no_discover)
    except (zmq.ZMQError, EndpointError) as exc:
        raise click.ClickException(terminal(f"cannot subscribe to {', '.join(endpoints) or 'the default endpoint'}: {exc}")) from None
    if status:
        raise SystemExit(status)
