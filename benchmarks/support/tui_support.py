"""Helpers for the TUI tests: record a synthetic session to a real session file, read the screen as text.

The TUI tests take their stream from the ``recording`` fixture (tests/tui/test_tui.py): synthetic
sessions here, a real-engine recording when ``EAGLE3SCOPE_TUI_RECORDING`` names one.
"""

from __future__ import annotations

import asyncio
import functools
import io
from pathlib import Path

from rich.console import Console

from eagle3scope.store import SessionReader, SessionWriter
from eagle3scope.tui.app import ScopeApp
from eagle3scope.tui.feed import ReplayFeed
from eagle3scope.wire import decode_frame


def write_recording(path: Path, *streams) -> Path:
    """Write the encoded frames of ``streams`` (iterables of bytes, interleaved by time) to ``path``."""
    frames = [(decode_frame(raw), raw) for stream in streams for raw in stream]
    frames.sort(key=lambda fr: fr[0].t)
    with SessionWriter(path) as writer:
        for frame, raw in frames:
            writer.add(raw, frame)
    return path


def screen_text(app) -> str:
    """The app's current screen as plain text, exactly as a terminal of its size would show it."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), record=True, color_system=None, legacy_windows=False, safe_box=False)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text()


def run_async(fn):
    """Run an ``async def`` test (Pilot needs a loop) without a pytest asyncio plugin."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(fn(*args, **kwargs))

    return wrapper


def recorded_frames(recording: Path) -> list:
    with SessionReader(recording) as reader:
        return [frame for _, frame in reader.frames()]


def steps_of(frames, src=None):
    return [f for f in frames if f.kind == "step" and (src is None or f.src == src)]


def cumulative_mean(steps) -> float:
    tokens = requests = 0
    for f in steps:
        if f.body.get("mode", "decode") == "decode":
            tokens += sum(f.body["accepted"]) + sum(f.body["bonus"])
            requests += len(f.body["accepted"])
    return tokens / requests


def paused_app(recording, **kwargs) -> ScopeApp:
    feed = ReplayFeed(recording, speed=kwargs.pop("speed", 1.0))
    feed.paused = True
    return ScopeApp(feed, theme=kwargs.pop("theme", "dark"), remember=kwargs.pop("remember", False), **kwargs)


async def play_to_end(app, pilot) -> str:
    """Resume a paused replay app, wait until the recording is played, return the final screen."""
    await pilot.press("space")
    for _ in range(400):
        await pilot.pause(0.05)
        if app.feed.position()["finished"]:
            break
    assert app.feed.position()["finished"]
    app.refresh_view(force=True)
    await pilot.pause()
    return screen_text(app)


#: The main panels and the key that shows each.
PANEL_KEYS = {"overview": "1", "aux": "2", "draft": "3", "events": "4", "advisor": "5"}


def rules_and_events(state) -> tuple[list, list]:
    """What fired (id, src, severity, first_seq, active) and the event log, as the state holds them."""
    return ([(v.id, v.src, v.severity, v.first_seq, v.active) for v in state.violations()],
            [(e.t_ns, e.src, e.level, e.text) for e in state.events])


async def replay_with_panel(recording, key: str, size=(120, 40)) -> tuple[list, list]:
    """Replay ``recording`` to its end with the panel of ``key`` on screen the whole time."""
    app = paused_app(recording, speed=64.0)
    async with app.run_test(size=size) as pilot:
        await pilot.press(key)
        await play_to_end(app, pilot)
        return app.feed.read(rules_and_events)
