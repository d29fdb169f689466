"""The acceptance panel's histogram and per-position rates, read off the screen as text.

Expected values are computed here from the recorded frames: the rolling window is the last 512
request-steps (bs 2: the last 256 steps); histogram share j = request-steps with j drafts accepted;
per-position rate i = request-steps that accepted >= i drafts over those that accepted >= i - 1.
"""

from __future__ import annotations

import pytest

pytest.importorskip("textual")

from benchmarks.support.synthetic import session_frames  # noqa: E402
from benchmarks.support.tui_support import paused_app, play_to_end, recorded_frames, run_async, steps_of, write_recording  # noqa: E402

K, WINDOW = 3, 512


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    return write_recording(tmp_path_factory.mktemp("hist") / "one.e3s", session_frames(700, src="dp0", bs=2, seed=5))


def window_accepted(recording) -> list[int]:
    accepted = [a for f in steps_of(recorded_frames(recording)) for a in f.body["accepted"]]
    return accepted[-WINDOW:]


@pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["bars", "one-line"])
@run_async
async def test_histogram_and_per_position_rates_on_screen(recording, size):
    accepted = window_accepted(recording)
    shares = [accepted.count(j) / len(accepted) for j in range(K + 1)]
    assert len(set(shares)) > 1  # a flat histogram could not tell a wrong bucket from a right one
    rates = [sum(a >= i for a in accepted) / sum(a >= i - 1 for a in accepted) for i in range(1, K + 1)]
    app = paused_app(recording, speed=64.0)
    async with app.run_test(size=size) as pilot:
        text = await play_to_end(app, pilot)
    if size == (120, 40):
        for j, share in enumerate(shares):
            assert f" {j:>3} {share * 100:>5.1f}% " in text, (j, share)
        for i, rate in enumerate(rates, 1):
            assert f" p{i:<3}{rate:>6.2f} " in text, (i, rate)
    else:
        hist = next(line for line in text.splitlines() if "hist " in line)
        assert all(f"{j}:{share * 100:.0f}%" in hist for j, share in enumerate(shares)), hist
        per_pos = next(line for line in text.splitlines() if "per pos " in line)
        assert all(f"p{i} {rate:.2f}" in per_pos for i, rate in enumerate(rates, 1)), per_pos
