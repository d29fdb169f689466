"""Snapshot tests pinning the layout of the main screens at 80x24 and 160x48.

Always the same synthetic recording (never a clock on screen: replay mode, paused, seeked to a
fixed step), so a snapshot only changes when the layout does. Update after a deliberate layout
change with ``pytest tests/tui/test_tui_snapshots.py --snapshot-update`` and review the SVGs.
"""

from __future__ import annotations

import pytest

pytest.importorskip("pytest_textual_snapshot")

from benchmarks.support.synthetic import session_frames  # noqa: E402
from benchmarks.support.tui_support import write_recording  # noqa: E402

from eagle3scope.tui.app import ScopeApp  # noqa: E402
from eagle3scope.tui.feed import ReplayFeed  # noqa: E402

SMALL, LARGE = (80, 24), (160, 48)


@pytest.fixture(autouse=True)
def config_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    path = tmp_path_factory.mktemp("snap") / "session.e3s"
    return write_recording(path, session_frames(900, src="dp0", bs=2, seed=11), session_frames(300, src="dp1", aux_off=True, seed=12))


def make_app(recording, theme: str = "dark") -> ScopeApp:
    feed = ReplayFeed(recording)
    feed.paused = True
    return ScopeApp(feed, theme=theme, remember=False)


def at_step(seq: int, *keys: str):
    """Seek to ``seq``, replay from there step by step so the history has a shape, then press keys."""

    async def run_before(pilot) -> None:
        pilot.app.seek(str(seq))
        for _ in range(150):
            pilot.app.feed.step()
        pilot.app.refresh_view(force=True)
        if keys:
            await pilot.press(*keys)
        await pilot.pause()

    return run_before


@pytest.mark.parametrize("size", [SMALL, LARGE], ids=["80x24", "160x48"])
@pytest.mark.parametrize("keys", [(), ("2",), ("3",), ("4",), ("5",)], ids=["overview", "aux", "draft", "events", "advisor"])
def test_panels(snap_compare, recording, size, keys):
    assert snap_compare(make_app(recording), terminal_size=size, run_before=at_step(200, *keys))


@pytest.mark.parametrize("size", [SMALL, LARGE], ids=["80x24", "160x48"])
@pytest.mark.parametrize("keys", [("question_mark",), ("l",), ("enter",)], ids=["help", "load-report", "violation"])
def test_screens(snap_compare, recording, size, keys):
    assert snap_compare(make_app(recording), terminal_size=size, run_before=at_step(200, *keys))


@pytest.mark.parametrize("theme", ["light", "high-contrast"])
def test_themes(snap_compare, recording, theme):
    assert snap_compare(make_app(recording, theme), terminal_size=LARGE, run_before=at_step(200))


def test_no_two_snapshots_are_identical():
    """Each snapshot must pin its own screen: two equal SVGs mean a key press never took effect
    (the violation snapshot once pinned the overview, Enter having gone to an unfocused table)."""
    import hashlib
    from pathlib import Path

    svgs = sorted((Path(__file__).parent / "__snapshots__" / "test_tui_snapshots").glob("*.svg"))
    assert len(svgs) >= 16
    by_digest: dict[str, list[str]] = {}
    for svg in svgs:
        by_digest.setdefault(hashlib.sha256(svg.read_bytes()).hexdigest(), []).append(svg.name)
    assert [names for names in by_digest.values() if len(names) > 1] == []
