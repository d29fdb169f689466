"""One rule schedule for every consumer: the state runs the contract rules as frames arrive, so
what fires, and at which ``first_seq``, does not depend on the panel on screen or on the command
(``check``, ``replay``, ``watch``) that reads the stream."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

pytest.importorskip("textual")

from benchmarks.support.synthetic import session_frames  # noqa: E402
from benchmarks.support.tui_support import PANEL_KEYS, recorded_frames, replay_with_panel, rules_and_events, write_recording  # noqa: E402

from eagle3scope.cli import main  # noqa: E402
from eagle3scope.live.subscriber import Subscriber  # noqa: E402
from eagle3scope.tui.feed import LiveFeed  # noqa: E402
from support.cli import invoke
from support.publisher import SyntheticPublisher

BREAKS = {"aux-capture-off", "fc-bypassed"}


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    """A healthy publisher beside one with aux capture off (both end on a heartbeat)."""
    path = tmp_path_factory.mktemp("walk") / "aux-off.e3s"
    return write_recording(path, session_frames(600, src="dp0", bs=2, seed=3), session_frames(300, src="dp1", aux_off=True, seed=4))


def test_every_panel_sees_the_same_rules_fire(recording):
    """The bug this guards: rules ran only while the overview was drawn, so with the event log
    (panel 4) on screen no rule fired and the log said nothing."""
    seen = {name: asyncio.run(replay_with_panel(recording, key)) for name, key in PANEL_KEYS.items()}
    violations, events = seen["overview"]
    assert BREAKS <= {v[0] for v in violations}
    for name, other in seen.items():
        assert other == (violations, events), name
    logged = [text.split(":")[0] for _, src, level, text in events if src == "dp1" and level == "error"]
    assert sorted(logged) == sorted(v[0] for v in violations if v[1] == "dp1")  # each once, when it fired


def live_state(recording, frames):
    """Send the recorded frames, in order, through a synthetic publisher's socket to a live feed."""
    with SyntheticPublisher() as pub:
        feed = LiveFeed(Subscriber([pub.endpoint]))
        feed.start()
        try:
            pub.wait_subscribed(5)
            pub.send_frames(frames)
            deadline = time.monotonic() + 60
            while feed.read(lambda s: s.frames) < len(frames) and time.monotonic() < deadline:
                time.sleep(0.05)
            return feed.read(rules_and_events)
        finally:
            feed.stop()


def test_check_watch_and_replay_report_the_same_first_seq(recording):
    frames = recorded_frames(recording)
    result = invoke("check", str(recording), "--json")
    assert result.exit_code == 1, result.output
    checked = {(v["id"], v["src"], v["severity"], v["first_seq"], v["active"]) for v in json.loads(result.output)["violations"]}
    assert BREAKS <= {v[0] for v in checked}
    replayed, _ = asyncio.run(replay_with_panel(recording, PANEL_KEYS["events"]))
    watched, _ = live_state(recording, frames)
    assert set(replayed) == checked
    assert set(watched) == checked


def test_a_slow_server_break_fires_within_a_quarter_second_of_stream_time():
    """At 10 steps/s with no heartbeat, 64 steps would be 6.4 s: the stream-time bound fires the rules
    after 250 ms of frame time instead, on frame contents alone (so every consumer agrees)."""
    from eagle3scope.analysis import SessionState
    from eagle3scope.wire import decode_frame

    state = SessionState()
    steps = 0
    for data in session_frames(20, aux_off=True, step_ns=100_000_000, heartbeat_every=0):
        frame = decode_frame(data)
        state.ingest(frame)
        steps += frame.kind == "step"
        if BREAKS <= {v.id for v in state.violations()}:
            break
    assert steps == 3  # t0 + 300 ms: the first step a quarter second past the load frame's pass
