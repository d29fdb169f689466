"""An exporter fed by synthetic publishers over real sockets, and its scrape read back by metric and labels."""

from __future__ import annotations

import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families
from support.publisher import SyntheticPublisher

from eagle3scope.exporter.metrics import PUBLISHER_LABELS
from eagle3scope.exporter.service import Exporter
from eagle3scope.wire import Frame


def renamed(frames: list[Frame], src: str) -> list[Frame]:
    """The frames as publisher ``src`` would have sent them."""
    return [Frame(f.kind, src, f.n, f.t, f.body) for f in frames]


def scrape(url: str) -> dict[str, list]:
    """metric family name -> samples (prometheus-client's parser; names without _total)."""
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    return {fam.name: fam.samples for fam in text_string_to_metric_families(text)}


def by(samples, name: str, **match) -> dict:
    """{labels-minus-publisher-labels: value} for the samples named ``name`` matching ``match``."""
    out = {}
    for s in samples:
        if s.name == name and all(s.labels.get(k) == v for k, v in match.items()):
            out[tuple(sorted((k, v) for k, v in s.labels.items() if k not in PUBLISHER_LABELS))] = s.value
    return out


def feed(streams: dict[str, list[Frame]], **kw) -> tuple[Exporter, dict]:
    """Publish each stream from its own synthetic publisher into one exporter; return it and a scrape."""
    pubs = {src: SyntheticPublisher() for src in streams}
    exporter = Exporter([p.endpoint for p in pubs.values()], "127.0.0.1:0", **kw)
    try:
        for src, frames in streams.items():
            pubs[src].wait_subscribed()
            pubs[src].send_frames(frames)
        expected = sum(len(frames) for frames in streams.values())
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            exporter.poll_once()
            with exporter.fleet.lock:
                got = sum(s.frames for s in exporter.fleet.states.values())
            if got >= expected:
                break
        return exporter, scrape(exporter.url)
    except BaseException:
        exporter.close()
        raise
    finally:
        for pub in pubs.values():
            pub.close()
