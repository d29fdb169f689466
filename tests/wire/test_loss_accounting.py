"""Frame-loss accounting (README "Bounds": frame order and time; wire/loss.py's contract), through
FrameLoss.observe only: holes are loss, impossible jumps are resets, an earlier n not later in time is
a duplicate, an earlier n later in time is a restart, and the heartbeat's counters are running totals
read from their own keys."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from eagle3scope.wire import decode_frame, encode_frame
from eagle3scope.wire.loss import DUPLICATE, FRESH, MAX_GAP, RESTART, FrameLoss


def frame(n: int, t: int | None = None, kind: str = "config", body: dict | None = None):
    body = {"layers": [1, 2]} if body is None else body
    return decode_frame(encode_frame(kind, body, src="x", n=n, t=n if t is None else t))


def beat(n: int, **body):
    return frame(n, kind="heartbeat", body=body)


@given(st.integers(0, 1 << 40), st.lists(st.integers(1, 1000), min_size=1, max_size=40))
def test_holes_in_a_rising_counter_are_exactly_the_frames_lost(first, steps):
    loss, n, notes = FrameLoss(), first, []
    notes.append(loss.observe(frame(n)))
    for step in steps:
        n += step
        notes.append(loss.observe(frame(n)))
        assert loss.verdict == FRESH
    assert loss.frames == len(steps) + 1
    assert loss.lost_in_transit == loss.lost == (n - first + 1) - loss.frames
    assert sum(1 for note in notes if note) == sum(1 for step in steps if step > 1)
    assert loss.duplicates == loss.restarts == loss.resets == 0


def test_a_jump_past_two_to_the_32_is_a_reset_and_one_at_it_is_loss():
    loss = FrameLoss()
    loss.observe(frame(10))
    note = loss.observe(frame(10 + MAX_GAP + 1))
    assert (loss.resets, loss.lost) == (1, 0) and "reset" in note[0]
    loss = FrameLoss()
    loss.observe(frame(10))
    loss.observe(frame(10 + MAX_GAP))
    assert (loss.resets, loss.lost) == (0, MAX_GAP - 1)


def test_duplicates_restarts_and_what_comes_after_them():
    loss = FrameLoss()
    loss.observe(frame(5, t=100))
    assert loss.observe(frame(5, t=200)) and loss.verdict == DUPLICATE  # the same n, whatever the time
    assert loss.observe(frame(3, t=100)) == () and loss.verdict == DUPLICATE  # earlier n, same time: reported once
    loss.observe(frame(2, t=50))
    assert loss.verdict == DUPLICATE and loss.duplicates == 3 and loss.frames == 1
    assert loss.observe(frame(6, t=120)) == () and loss.verdict == FRESH  # duplicates did not move the counter
    assert loss.lost == 0
    note = loss.observe(frame(0, t=121))  # earlier n, later time: a restart, counting starts again
    assert loss.verdict == RESTART and loss.restarts == 1 and "restarted" in note[0]
    assert loss.observe(frame(1, t=122)) == () and loss.verdict == FRESH and loss.lost == 0
    loss.resync()  # after a seek the next frame is taken without a gap check
    loss.observe(frame(90, t=200))
    assert loss.verdict == FRESH and loss.lost == 0


def test_heartbeat_counters_are_running_totals_each_read_from_its_own_key():
    loss = FrameLoss()
    notes = loss.observe(beat(0, steps=10, dropped=2, hook_failures=1, queued=7))
    assert (loss.shim_steps, loss.shim_dropped, loss.hook_failures, loss.queued) == (10, 2, 1, 7)
    assert notes == ("2 new frame(s) dropped by the shim (total 2)", "1 new hook failure(s) (total 1)")
    # a heartbeat without a counter (or with a value no shim sends) keeps the last total
    assert loss.observe(beat(1, steps=12)) == ()
    assert (loss.shim_steps, loss.shim_dropped, loss.hook_failures, loss.queued) == (12, 2, 1, 7)
    assert loss.observe(beat(2)) == () and (loss.shim_steps, loss.shim_dropped, loss.hook_failures, loss.queued) == (
        12, 2, 1, 7)  # none of them: every total kept
    assert loss.observe(beat(3, steps=13, queued=0, hook_failures=3, dropped=7)) == (
        "5 new frame(s) dropped by the shim (total 7)", "2 new hook failure(s) (total 3)")
    assert (loss.shim_steps, loss.queued, loss.hook_failures, loss.lost) == (13, 0, 3, 7)


def test_shim_cost_sums_per_seam_and_the_share_is_the_latest_heartbeats():
    loss = FrameLoss()
    loss.observe(beat(0, shim_us={"a": 30.0, "b": 10.0}, step_us=1000.0))
    loss.observe(beat(1, shim_us={"a": 5.0}, step_us=500.0))
    assert loss.shim_s == pytest.approx({"a": 35e-6, "b": 10e-6}) and loss.step_s == pytest.approx(1500e-6)
    assert loss.shim_share == pytest.approx(5.0 / 500.0)
    loss.observe(beat(2, shim_us={"a": 1.0}, step_us=0.0))
    assert loss.shim_share is None and loss.shim_s["a"] == pytest.approx(36e-6)
    loss.observe(beat(3))  # no cost fields: nothing changes
    assert loss.shim_share is None and loss.step_s == pytest.approx(1500e-6)
    exact = FrameLoss()  # microseconds to seconds exactly (values a binary float holds exactly)
    exact.observe(beat(0, shim_us={"a": 2_500_000.0}, step_us=5_000_000.0))
    assert (exact.shim_s, exact.step_s, exact.shim_share) == ({"a": 2.5}, 5.0, 0.5)


def test_what_each_verdict_says_in_the_event_log():
    loss = FrameLoss()
    assert loss.observe(frame(10, t=100)) == ()
    assert loss.observe(frame(13, t=101)) == ("2 frame(s) lost in transit (frame 10 -> 13)",)
    assert loss.observe(frame(13 + MAX_GAP + 1, t=102)) == (
        f"frame counter jumped 13 -> {14 + MAX_GAP}: counted as a reset, not as loss",)
    assert loss.observe(frame(0, t=103)) == (
        f"frame counter went back ({14 + MAX_GAP} -> 0) with time going on: publisher restarted",)
    assert loss.observe(frame(0, t=103)) == (
        "frame 0 arrived again (after 0): duplicates are dropped and counted, reported once",)
    assert (loss.frames, loss.lost, loss.resets, loss.restarts, loss.duplicates, loss.last_n, loss.last_t) == (
        4, 2, 1, 1, 1, 0, 103)
    loss.observe(frame(MAX_GAP + 1, t=104))  # a second reset, a second restart: each counted
    loss.observe(frame(1, t=105))
    assert (loss.resets, loss.restarts, loss.lost) == (2, 2, 2)


def test_the_rounds_share_counts_only_their_own_hooks_and_new_seams_past_the_bound_are_not_kept():
    from eagle3scope.wire.bodies import MAX_SEAMS

    loss = FrameLoss()
    loss.observe(beat(0, shim_us={"step": 30.0, "commit": 50.0}, step_us=200.0, round_shim_us=30.0))
    assert loss.shim_share == 30.0 / 200.0  # the commit seam runs outside the rounds
    loss.observe(beat(1, shim_us={f"s{i}": 1.0 for i in range(MAX_SEAMS)}))
    assert len(loss.shim_s) == MAX_SEAMS and f"s{MAX_SEAMS - 3}" in loss.shim_s and f"s{MAX_SEAMS - 2}" not in loss.shim_s
    assert loss.shim_s["step"] == 30e-6 and loss.shim_share is None


def test_the_recorders_loss_per_publisher_and_what_the_session_file_keeps():
    from eagle3scope.wire.loss import StreamLoss
    from eagle3scope.wire.schema import MAX_PUBLISHERS

    def at(src: str, n: int, kind: str = "config", body: dict | None = None):
        return decode_frame(encode_frame(kind, body or {"layers": [1]}, src=src, n=n, t=n))

    stream = StreamLoss()
    for f in (at("a", 0), at("a", 4), at("b", 7), at("b", 8, "heartbeat", {"dropped": 5})):
        stream.observe(f)
    assert stream.lost == 8
    assert stream.summary(2) == {"lost": 8, "bad_frames": 2, "sources": {
        "a": {"lost_in_transit": 3, "dropped_by_shim": 0, "frames": 2},
        "b": {"lost_in_transit": 0, "dropped_by_shim": 5, "frames": 2}}}
    for i in range(MAX_PUBLISHERS + 2):
        stream.observe(at(f"p{i}", 0))
    assert len(stream.sources) == MAX_PUBLISHERS and "p0" in stream.sources and f"p{MAX_PUBLISHERS}" not in stream.sources
    assert stream.observe(at(f"p{MAX_PUBLISHERS}", 5)) == ()
