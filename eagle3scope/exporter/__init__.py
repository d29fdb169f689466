"""Prometheus exporter: many shims in, one ``/metrics`` out (``eagle3scope exporter``)."""
