"""Severities of findings and violations, most serious first: the live rules, ``check``/``gate``
thresholds and the checkpoint doctor rank them the same way."""

from __future__ import annotations

SEVERITIES = ("error", "warning", "info")
#: Rank of each severity (0 = most serious), for sorting and ``--fail-on`` thresholds.
SEVERITY_ORDER = {name: rank for rank, name in enumerate(SEVERITIES)}
