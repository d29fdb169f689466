"""A draft that does not state its trained aux layers: one judgement (``wire.aux_layers``) in the
doctor, ``check`` and the TUI. A fact at info level while acceptance is healthy; a warning naming
``aux cycle`` once a full window of position-1 acceptance is low."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.support import draft_checkpoints as dc
from benchmarks.support.analysis_streams import healthy_load, session
from support.cli import invoke
from support.recordings import record
from benchmarks.support.tui_support import paused_app, play_to_end, run_async
from eagle3scope.wire.aux_layers import UNSTATED_SUSPECT_TITLE, UNSTATED_TITLE


def _unstated(path: Path, accept_p: float) -> Path:
    load = healthy_load()
    load["aux"].update(configured=None, captured=[2, 4, 5])
    return record(path, session(300, load=load, accept_p=accept_p))


def _aux_violation(recording: Path) -> dict:
    result = invoke("check", str(recording), "--json", "--fail-on", "warning")
    (v,) = [v for v in json.loads(result.output)["violations"] if v["id"] == "aux-layers-mismatch"]
    return {**v, "exit": result.exit_code}


def test_doctor_and_check_say_the_same_and_neither_warns_on_a_healthy_draft(tmp_path):
    draft, target = dc.producer_layout("sglang", tmp_path)
    report = json.loads(invoke("doctor", str(draft), "--target", str(target), "--json").output)
    (finding,) = [f for f in report["findings"] if f["id"] == "aux-layers-unstated"]
    assert (finding["severity"], finding["title"], report["verdict"]) == ("info", UNSTATED_TITLE, "clean")
    assert "`eagle3scope aux cycle`" in finding["fix"]
    live = _aux_violation(_unstated(tmp_path / "healthy.e3s", accept_p=0.9))
    assert (live["severity"], live["title"], live["exit"]) == ("info", UNSTATED_TITLE, 0)


def test_check_warns_and_names_aux_cycle_once_position_1_acceptance_is_low(tmp_path):
    live = _aux_violation(_unstated(tmp_path / "low.e3s", accept_p=0.4))
    assert (live["severity"], live["title"]) == ("warning", UNSTATED_SUSPECT_TITLE) and live["exit"] != 0
    assert "`eagle3scope aux cycle`" in live["fix"] and live["evidence"]["position_1_acceptance"] < 0.75


@run_async
async def test_tui_shows_the_same_title(tmp_path):
    for accept_p, title in ((0.9, UNSTATED_TITLE), (0.4, UNSTATED_SUSPECT_TITLE)):
        app = paused_app(_unstated(tmp_path / f"tui-{accept_p}.e3s", accept_p))
        async with app.run_test(size=(160, 48)) as pilot:
            await play_to_end(app, pilot)
            (v,) = [v for v in app.query_one("#violations").violations if v.id == "aux-layers-mismatch"]
            assert v.title == title and v.severity == ("info" if accept_p > 0.75 else "warning")
