"""One module per CLI sub-command; each defines a click command named ``command``. Options that
several commands share are declared here once."""

from __future__ import annotations

import click

from eagle3scope.wire.endpoints import DEFAULT_ENDPOINT

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
