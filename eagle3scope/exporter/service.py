"""The exporter process: one SUB socket on every shim, the fleet state, an HTTP ``/metrics``.

The loop thread polls the subscriber and folds each batch into the :class:`Fleet`; the HTTP
server is prometheus-client's own (a daemon thread) serving a private registry that holds the
fleet collector and the exporter's own process metrics (CPU seconds, resident memory).
"""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server

from eagle3scope.exporter.fleet import MAX_PUBLISHERS, Fleet
from eagle3scope.exporter.metrics import FleetCollector
from eagle3scope.live.subscriber import Subscriber

DEFAULT_LISTEN = "127.0.0.1:9464"


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) -> (host, port); a bare port means loopback."""
    host, sep, port = listen.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", listen
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or int(port) > 65535:
        raise ValueError(f"--listen wants HOST:PORT, got {listen!r}")
    return host, int(port)


class Exporter:
    """``with Exporter([endpoint], "127.0.0.1:0") as ex: ex.run(stop)``; ``ex.port`` is the bound port."""

    def __init__(self, endpoints: list[str], listen: str = DEFAULT_LISTEN, *, forget_after_s: float | None = 600.0,
                 poll_ms: int = 100, max_publishers: int = MAX_PUBLISHERS, discover: bool = True) -> None:
        self.host, port = parse_listen(listen)
        self.fleet = Fleet(forget_after_s=forget_after_s, max_publishers=max_publishers)
        self.registry = CollectorRegistry()
        self.registry.register(FleetCollector(self.fleet))
        ProcessCollector(namespace="eagle3scope_exporter", registry=self.registry)
        self.subscriber = Subscriber(endpoints, discover=discover)
        self._poll_ms = poll_ms
        try:
            self._httpd, self._http_thread = start_http_server(port, addr=self.host, registry=self.registry)
        except OSError:
            self.subscriber.close()
            raise
        self.port = self._httpd.server_address[1]

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def poll_once(self) -> int:
        """Wait up to ``poll_ms`` for frames and fold them in; returns how many arrived."""
        frames = self.subscriber.poll(self._poll_ms)
        if frames:
            self.fleet.ingest(frames)
        if self.subscriber.bad_frames != self.fleet.bad_frames:
            with self.fleet.lock:
                self.fleet.bad_frames = self.subscriber.bad_frames
        return len(frames)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.poll_once()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self.subscriber.close()

    def __enter__(self) -> "Exporter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
