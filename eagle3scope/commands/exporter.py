"""``eagle3scope exporter``: serve Prometheus metrics for one or more shims (a fleet sidecar).

Subscribes to every ``--connect`` endpoint (one per server or data-parallel rank) and serves
``/metrics`` on ``--listen`` (loopback unless told otherwise). Stop with Ctrl-C, SIGTERM, SIGHUP or
SIGQUIT: it closes its sockets and exits 0.
"""

from __future__ import annotations

import gc
import sys
import threading

import click

from eagle3scope.commands import connect_option, discover_option
from eagle3scope.exporter.fleet import MAX_PUBLISHERS
from eagle3scope.signals import stopping_on
from eagle3scope.wire.endpoints import EndpointError, default_endpoint
from eagle3scope.wire.untrusted import terminal


@click.command(name="exporter", help=__doc__)
@connect_option()
@click.option("--listen", default="127.0.0.1:9464", show_default=True, metavar="HOST:PORT",
              help="Where to serve /metrics (port 0: any free port, printed at start).")
@click.option("--forget-after", type=click.FloatRange(min=0, min_open=True), default=600.0, show_default=True,
              metavar="S", help="Drop a publisher's series after S seconds without a frame from it.")
@click.option("--max-publishers", type=click.IntRange(min=1), default=MAX_PUBLISHERS, show_default=True, metavar="N",
              help="Track at most N publishers at once; frames from more are counted "
                   "(eagle3scope_exporter_refused_frames_total) until silent ones are forgotten.")
@click.option("--quiet", is_flag=True, help="Print nothing but errors.")
@discover_option
def command(endpoints: tuple[str, ...], listen: str, forget_after: float, max_publishers: int, quiet: bool,
            no_discover: bool) -> None:
    import zmq

    from eagle3scope.exporter.service import Exporter

    try:
        endpoints = endpoints or (default_endpoint(),)
        exporter = Exporter(list(endpoints), listen, forget_after_s=forget_after, max_publishers=max_publishers,
                            discover=not no_discover)
    except EndpointError as exc:
        raise click.ClickException(terminal(f"cannot subscribe to {', '.join(endpoints) or 'the default endpoint'}: {exc}")) from None
    except ValueError as exc:
        raise click.BadParameter(terminal(str(exc)), param_hint="--listen") from None
    except (OSError, zmq.ZMQError) as exc:
        raise click.ClickException(terminal(f"cannot start the exporter: {exc}")) from None
    stop = threading.Event()
    gc.freeze()  # start-up objects leave the GC's view, as in `record`
    with stopping_on(lambda _signum: stop.set()), exporter:
        if not quiet:
            sys.stderr.write(terminal(f"exporting {', '.join(endpoints)} on {exporter.url}") + "\n")
            sys.stderr.flush()
        exporter.run(stop)
