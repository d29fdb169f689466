"""The acceptance panel's slices: the cumulative mean per context-length and sampling label, read off
the screen and computed here from the recorded frames."""

from __future__ import annotations

import pytest

pytest.importorskip("textual")

from benchmarks.support.analysis_streams import sliced_session  # noqa: E402
from benchmarks.support.tui_support import paused_app, play_to_end, recorded_frames, run_async, steps_of, write_recording  # noqa: E402

from eagle3scope.wire import encode_frame  # noqa: E402


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    frames = sliced_session(300, long_rates=(0.4, 0.4, 0.4), seed=7)
    raw = [encode_frame(f.kind, f.body, src=f.src, n=f.n, t=f.t) for f in frames]
    return write_recording(tmp_path_factory.mktemp("slices") / "s.e3s", raw)


@run_async
async def test_the_acceptance_panel_shows_the_mean_per_slice(recording):
    steps = steps_of(recorded_frames(recording))
    greedy = sum(f.body["accepted"][0] + 1 for f in steps) / len(steps)  # request 0: greedy, context 100 + seq
    sampled = sum(f.body["accepted"][1] + 1 for f in steps) / len(steps)  # request 1: sampled, context 3000 + seq
    assert abs(greedy - sampled) > 0.3
    app = paused_app(recording, speed=64.0)
    async with app.run_test(size=(160, 48)) as pilot:
        text = await play_to_end(app, pilot)
    line = next(line for line in text.splitlines() if "sampling" in line)
    assert f"greedy {greedy:.2f} ({len(steps):,})" in line and f"sampled {sampled:.2f} ({len(steps):,})" in line
    context = next(line for line in text.splitlines() if "context length" in line)
    assert f"2K-8K {sampled:.2f} ({len(steps):,})" in context and "<128 " in context
