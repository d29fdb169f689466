"""The session state, its statistics and contract rules, and the views the panels draw; shared by
the TUI, ``check``, ``gate``, the exporter and tests."""

from eagle3scope.analysis.rules import CONTRACT_RULES, RULE_IDS, Rule, Violation  # noqa: F401
from eagle3scope.analysis.facts import PublisherView  # noqa: F401
from eagle3scope.analysis.state import ConfigSegment, Event, PassStats, SessionState, analyse  # noqa: F401
from eagle3scope.analysis.stats import AcceptanceStats, Tally  # noqa: F401
