"""One module per CLI sub-command; each defines a click command named ``command``. Options that
several commands share are declared here once."""

from __future__ import annotations

import click

from eagle3scope.wire.endpoints import DEFAULT_ENDPOINT

#: ``--connect/-c``: the shim endpoints a command subscribes to (into its ``endpoints`` argument).
connect_option = click.option(
    "--connect", "-c", "endpoints", multiple=True, metavar="ENDPOINT",
    help=f"A server shim's event endpoint (tcp://HOST:PORT or ipc://PATH); repeat for several, e.g. one per "
         f"data-parallel rank. Default {DEFAULT_ENDPOINT}.")
