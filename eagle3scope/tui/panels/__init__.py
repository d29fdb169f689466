"""The panels, one a module: each draws a view from :mod:`eagle3scope.analysis.views` and nothing else.

Data goes down as reactive attributes the app sets on each throttled refresh; what the user picks
goes up as messages. Colours come from component classes (``app.tcss``), so themes restyle
everything without code.
"""

from eagle3scope.tui.panels.acceptance import AcceptancePanel, HistoryPlot  # noqa: F401
from eagle3scope.tui.panels.advisor import AdvisorPanel, advice_line  # noqa: F401
from eagle3scope.tui.panels.aux import AuxPanel  # noqa: F401
from eagle3scope.tui.panels.draft import DraftPanel  # noqa: F401
from eagle3scope.tui.panels.events import EventLog  # noqa: F401
from eagle3scope.tui.panels.header import PublisherBar, Timeline  # noqa: F401
from eagle3scope.tui.panels.load_report import LoadReportPanel  # noqa: F401
from eagle3scope.tui.panels.violations import ViolationsPanel  # noqa: F401
