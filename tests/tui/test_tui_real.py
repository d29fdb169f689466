"""The TUI over recordings of the real SGLang 0.5.23 CPU engine (the session's scenario servers,
conftest ``scenario_result``): the numbers on screen are the stream's, and a real break is on screen
with its explanation and fix."""

from __future__ import annotations

import pytest

pytest.importorskip("textual")

from benchmarks.support.tui_support import (  # noqa: E402
    PANEL_KEYS, cumulative_mean, paused_app, play_to_end, recorded_frames, replay_with_panel, run_async, screen_text,
    steps_of,
)

from eagle3scope.tui.screens import ViolationScreen  # noqa: E402
from support.cli import invoke

pytestmark = pytest.mark.engine


@run_async
async def test_healthy_recording_shows_the_streams_acceptance(scenario_result):
    recording = scenario_result("healthy")["recording"]
    steps = [s for s in steps_of(recorded_frames(recording)) if s.body.get("mode", "decode") == "decode"]
    app = paused_app(recording, speed=64.0)
    async with app.run_test(size=(160, 48)) as pilot:
        text = await play_to_end(app, pilot)
        assert f"cumulative {cumulative_mean(steps):.2f}" in text
        assert f"{len(steps):,} steps" in text
        assert "sglang 0.5.23" in text
        assert not app.query_one("#violations").violations  # a healthy real run fires nothing


@run_async
async def test_aux_off_recording_names_the_break_with_a_fix(scenario_result):
    app = paused_app(scenario_result("aux-off")["recording"], speed=64.0)
    async with app.run_test(size=(160, 48)) as pilot:
        text = await play_to_end(app, pilot)
        ids = {v.id for v in app.query_one("#violations").violations}
        assert ids & {"aux-capture-off", "fc-bypassed"}, ids
        assert any(rule in text for rule in ids & {"aux-capture-off", "fc-bypassed"}), text
        first = app.query_one("#violations").violations[0]
        await pilot.press("enter")  # no focus given: Enter must reach the table by itself
        assert isinstance(app.screen, ViolationScreen)
        shown = screen_text(app)
        # the dialog of the violation under the cursor, not the overview's evidence line
        assert f"{first.severity.upper()}  {first.id}" in shown and first.title in shown
        assert "Why it matters" in shown and first.fix[:40] in shown.replace("\n", " ")
        assert f"first seen at step {first.first_seq}" in shown


def test_aux_off_recording_fires_the_same_rules_whatever_panel_and_as_check(scenario_result):
    """The real break is found with any panel on screen, at the first_seq ``check`` reports."""
    import asyncio
    import json

    recording = scenario_result("aux-off")["recording"]
    seen = {name: asyncio.run(replay_with_panel(recording, key)) for name, key in PANEL_KEYS.items()}
    violations, events = seen["overview"]
    assert {"aux-capture-off", "fc-bypassed"} & {v[0] for v in violations}, violations
    for name, other in seen.items():
        assert other == (violations, events), name
    result = invoke("check", str(recording), "--json")
    checked = {(v["id"], v["src"], v["severity"], v["first_seq"], v["active"]) for v in json.loads(result.output)["violations"]}
    assert set(violations) == checked
