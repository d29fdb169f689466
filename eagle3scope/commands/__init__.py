"""One module per CLI sub-command; each defines a click command named ``command``. Options that
several commands share are declared here once."""

from __future__ import annotations

import click

from eagle3scope.wire.endpoints import DEFAULT_ENDPOINT, EndpointError, default_endpoint
from eagle3scope.wire.untrusted import terminal

#: What ``--connect`` names, for every command that takes it.
CONNECT_HELP = ("A server shim's event endpoint (tcp://HOST:PORT or ipc://PATH); repeat for several, e.g. one per "
                "data-parallel rank.")


def connect_option(without: str = f"Default {DEFAULT_ENDPOINT}."):
    """``--connect/-c`` into the command's ``endpoints`` argument; ``without`` says what the
    command does when none is given."""
    return click.option("--connect", "-c", "endpoints", multiple=True, metavar="ENDPOINT",
                        help=f"{CONNECT_HELP} {without}")


#: shared by every command that subscribes (watch, record, gate, exporter)
discover_option = click.option(
    "--no-discover", "no_discover", is_flag=True,
    help="Subscribe only to the endpoints given; by default the other DP ranks a server's hello lists are found too.")


def open_recording(ctx: click.Context, file: str, status: int = 2):
    """``file`` as a :class:`~eagle3scope.store.SessionReader`; one ``Error:`` line and exit ``status``
    (2, "not a session", for ``check`` and ``advise``) when it cannot be read as one."""
    from eagle3scope.store import SessionReader, StoreError

    try:
        return SessionReader(file)
    except StoreError as exc:
        click.echo(terminal(f"Error: {exc}"), err=True)
        ctx.exit(status)


def subscribe(ctx: click.Context, endpoints: list[str], status: int = 2, **options):
    """A :class:`~eagle3scope.live.subscriber.Subscriber` on ``endpoints`` (none: the default one); one
    ``Error:`` line and exit ``status`` (2, "cannot subscribe", for ``gate`` and ``advise``) when it
    cannot be opened."""
    import zmq

    from eagle3scope.live.subscriber import Subscriber

    try:
        return Subscriber(list(endpoints) or [default_endpoint()], **options)
    except (zmq.ZMQError, EndpointError) as exc:
        click.echo(terminal(f"Error: cannot subscribe to {', '.join(endpoints) or 'the default endpoint'}: {exc}"),
                   err=True)
        ctx.exit(status)
