"""Screens pushed over the main view: violation detail, load report, help, prompts, aux control."""

from eagle3scope.tui.screens.aux_control import AuxScreen  # noqa: F401
from eagle3scope.tui.screens.help import HelpScreen  # noqa: F401
from eagle3scope.tui.screens.load_report import LoadReportScreen  # noqa: F401
from eagle3scope.tui.screens.prompt import PromptScreen  # noqa: F401
from eagle3scope.tui.screens.violation import ViolationScreen  # noqa: F401
