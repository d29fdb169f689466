"""Replay pacing and seeking as properties (README "Bounds": replay paces each frame by its gap to the
one before, 0 to 5 s; `+`/`-` speeds from 0.25x to 64x; seek lands on the first step at or after a
seq, the first frame at or after a time): any recorded gaps, any speed, any batch size, driven
through `Replayer` on a simulated clock."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from eagle3scope.store import SessionWriter
from eagle3scope.store.replayer import MAX_SPEED, MIN_SPEED, Replayer
from eagle3scope.wire import decode_frame, encode_frame
from benchmarks.support.synthetic import step_body

MAX_GAP_S = 5.0


def _record(path: Path, gaps_ns: list[int], batch: int) -> list:
    t, frames = 1_000_000_000, []
    with SessionWriter(path, batch_frames=batch) as writer:
        for seq, gap in enumerate(gaps_ns):
            t += gap
            raw = encode_frame("step", step_body(seq, t_ns=t), src="dp0", n=seq, t=t)
            frame = decode_frame(raw)
            writer.add(raw, frame)
            frames.append(frame)
    return frames


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gaps=st.lists(st.one_of(st.integers(0, 50_000_000), st.integers(4_000_000_000, 9_000_000_000)),
                     min_size=2, max_size=40),
       speed=st.sampled_from([0.1, 0.25, 0.5, 1.0, 3.0, 64.0, 500.0]), batch=st.integers(1, 7))
def test_each_frame_is_due_its_clamped_gap_over_the_speed(gaps, speed, batch):
    with tempfile.TemporaryDirectory() as tmp:
        frames = _record(Path(tmp) / "p.e3s", gaps, batch)
        now = [50.0]
        r = Replayer(Path(tmp) / "p.e3s", speed=speed, clock=lambda: now[0], max_gap_s=MAX_GAP_S)
        try:
            used = min(MAX_SPEED, max(MIN_SPEED, speed))
            assert r.speed == used
            got, at = [], []
            while not r.finished:
                wait = r.wait_s()
                now[0] += wait
                out = r.due()
                assert out, "a frame due after its wait"
                got += out
                at += [now[0]] * len(out)
            assert [f.n for f in got] == [f.n for f in frames]
            for i in range(1, len(frames)):
                gap_s = min((frames[i].t - frames[i - 1].t) / 1e9, MAX_GAP_S)
                assert at[i] - at[i - 1] == pytest.approx(gap_s / used, abs=1e-6), i
            assert r.t_ns == frames[-1].t and r.step_seq == len(frames) - 1
        finally:
            r.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gaps=st.lists(st.integers(0, 3_000_000), min_size=1, max_size=60), batch=st.integers(1, 9), data=st.data())
def test_seeks_land_where_the_readme_says(gaps, batch, data):
    with tempfile.TemporaryDirectory() as tmp:
        frames = _record(Path(tmp) / "s.e3s", gaps, batch)
        r = Replayer(Path(tmp) / "s.e3s", clock=lambda: 0.0)
        try:
            seq = data.draw(st.integers(-2, len(frames) + 2))
            idx = r.seek_step(seq)
            expected = next((i for i, f in enumerate(frames) if f.body["seq"] >= seq), len(frames))
            assert idx == expected == r.position
            t = data.draw(st.integers(frames[0].t - 5, frames[-1].t + 5))
            idx = r.seek_time(t)
            assert idx == next((i for i, f in enumerate(frames) if f.t >= t), len(frames))
            first = r.step_one()
            if idx < len(frames):
                assert [f.n for f in first] == [frames[idx].n] and r.step_seq == frames[idx].body["seq"]
            else:
                assert first == [] and r.finished
            assert r.seek_index(-10) == 0 and r.seek_index(10**9) == len(frames)
        finally:
            r.close()


def _record_at(path: Path, times: list[int]) -> None:
    """One step frame at each recorded time, in one batch."""
    with SessionWriter(path, batch_frames=10) as writer:
        for seq, t in enumerate(times):
            raw = encode_frame("step", step_body(seq, t_ns=t), src="dp0", n=seq, t=t)
            writer.add(raw, decode_frame(raw))


def _due_times(path: Path) -> list[float]:
    """When each frame is due, on a simulated clock from 50.0 that waits exactly as told."""
    now = [50.0]
    r = Replayer(path, clock=lambda: now[0], max_gap_s=MAX_GAP_S)
    try:
        at = []
        while not r.finished:
            now[0] += r.wait_s()
            at += [now[0]] * len(r.due(max_frames=1))
        return at
    finally:
        r.close()


def test_a_lone_outlier_is_due_exactly_with_the_frame_before_it(tmp_path):
    """A frame stamped far from both neighbours is due at once (no gap at all) and leaves the pace
    where it was: the frame after it is due its gap to the frame before the outlier."""
    t0 = 1_000_000_000
    _record_at(tmp_path / "o.e3s", [t0, t0 + 10_000_000, 1, t0 + 30_000_000])
    at = _due_times(tmp_path / "o.e3s")
    assert at[2] == at[1] and at[3] - at[1] == pytest.approx(0.02, abs=1e-9)


def test_headless_iteration_sleeps_until_each_frame_is_due_a_quarter_second_at_most(tmp_path, monkeypatch):
    """``for frame in replayer`` sleeps (in slices of at most 0.25 s) until the next frame is due,
    rather than polling: a 1 s gap at 1x is four 0.25 s sleeps, a 0.1 s gap one of 0.1 s."""
    import eagle3scope.store.replayer as replayer

    frames = _record(tmp_path / "i.e3s", [0, 1_000_000_000, 100_000_000], batch=2)
    now, slept = [50.0], []
    r = Replayer(tmp_path / "i.e3s", clock=lambda: now[0], max_gap_s=MAX_GAP_S)

    def sleep(s):
        slept.append(s)
        now[0] += s
        if r.paused:  # paused at the start: 50 ms naps until resumed
            r.resume()

    monkeypatch.setattr(replayer.time, "sleep", sleep)
    r.pause()
    try:
        got = [(f.n, now[0]) for f in r]
    finally:
        r.close()
    assert got == [(frames[0].n, 50.05), (frames[1].n, 51.05), (frames[2].n, pytest.approx(51.15))]
    assert slept == [0.05, 0.25, 0.25, 0.25, 0.25, pytest.approx(0.1)]


def test_an_empty_recording_replays_as_finished_at_once(tmp_path):
    SessionWriter(tmp_path / "e.e3s").close()
    r = Replayer(tmp_path / "e.e3s", clock=lambda: 0.0)
    try:
        assert r.finished and r.due() == [] and r.wait_s() is None and list(r) == []
        assert (r.position, r.step_seq, r.t_ns) == (0, None, None)
    finally:
        r.close()


def test_due_hands_out_at_most_max_frames_at_a_time(tmp_path):
    frames = _record(tmp_path / "m.e3s", [0] * 10, batch=4)
    r = Replayer(tmp_path / "m.e3s", clock=lambda: 0.0)
    try:
        assert r.step_seq is None  # before any step
        assert [f.n for f in r.due(max_frames=3)] == [f.n for f in frames[:3]] and r.step_seq == 2
        assert [f.n for f in r.due()] == [f.n for f in frames[3:]]
    finally:
        r.close()


def _replay_with_damaged_batch(path, batch_id: int):
    """15 frames in batches of 5, batch ``batch_id``'s checksum broken: (frames, a replayer on a fixed clock)."""
    import sqlite3

    frames = _record(path, [1_000_000] * 15, batch=5)
    con = sqlite3.connect(path)
    with con:
        con.execute("UPDATE batches SET crc = crc + 1 WHERE id = ?", (batch_id,))
    con.close()
    return frames, Replayer(path, clock=lambda: 0.0)


def _play_all(r) -> list:
    played = []
    while not r.finished:
        played += r.step_one()
    return played


def test_a_damaged_first_batch_is_skipped_and_the_next_plays_from_its_first_frame(tmp_path):
    """README "Bounds" (readers read the rest): a replay starting in, or seeking into, a damaged batch
    lists it and goes on from the first frame of the next readable one."""
    frames, r = _replay_with_damaged_batch(tmp_path / "d.e3s", 0)
    try:
        assert [f.n for f in _play_all(r)] == [f.n for f in frames[5:]] and len(r.errors) == 1
        assert r.seek_index(2) == 5 and [f.n for f in r.step_one()] == [frames[5].n]
    finally:
        r.close()


def test_an_outlier_is_lone_when_the_frame_after_it_is_exactly_the_largest_gap_on(tmp_path):
    """The frame after a far-future outlier comes exactly max_gap_s after the frame before it: still
    within the pace, so the outlier is lone (due at once, the pace kept) and that frame is due 5 s on."""
    t0 = 1_000_000_000
    _record_at(tmp_path / "f.e3s", [t0, t0 + 10 ** 18, t0 + int(MAX_GAP_S * 1e9)])
    assert _due_times(tmp_path / "f.e3s") == [50.0, 50.0, 55.0]


@contextlib.contextmanager
def _replaying(path: Path, gaps_ns: list[int]):
    """One step per gap recorded, and its replayer on a simulated clock from 50.0 (``now[0]``) that
    moves only when the test moves it."""
    frames = _record(path, gaps_ns, batch=4)
    now = [50.0]
    r = Replayer(path, clock=lambda: now[0], max_gap_s=MAX_GAP_S)
    try:
        yield frames, r, now
    finally:
        r.close()


def _play_to_the_end(r: Replayer, now: list) -> None:
    while not r.finished:
        now[0] += r.wait_s()
        r.due()


@pytest.mark.parametrize("to", [5, 18])
@pytest.mark.parametrize("sat_s", [0.0, 60.0])
@pytest.mark.parametrize("seek", ["index", "step", "time"])
def test_a_seek_back_after_the_clock_ran_paces_from_the_moment_of_the_seek(tmp_path, seek, sat_s, to):
    """The replay played to its end (1.9 s of a simulated clock) and sat there ``sat_s``; a seek
    back to step ``to`` (18: one before the last) hands out that step at once and the next one its
    100 ms gap after it, not every frame the old schedule (or the old pace) would let through by now;
    the replay's time is that step's again."""
    with _replaying(tmp_path / "b.e3s", [100_000_000] * 20) as (frames, r, now):
        _play_to_the_end(r, now)
        assert now[0] == pytest.approx(51.9) and r.t_ns == frames[-1].t
        now[0] += sat_s
        go = {"index": lambda: r.seek_index(to), "step": lambda: r.seek_step(to), "time": lambda: r.seek_time(frames[to].t)}
        assert go[seek]() == to
        sought = now[0]
        assert [f.n for f in r.due()] == [frames[to].n] and r.wait_s() == pytest.approx(0.1)
        assert r.t_ns == frames[to].t
        now[0] = sought + 0.099
        assert r.due() == []
        now[0] = sought + 0.1
        assert [f.n for f in r.due()] == [frames[to + 1].n]
        now[0] = sought + 0.35
        assert [f.n for f in r.due()] == [f.n for f in frames[to + 2:to + 4]]


def test_a_step_while_playing_paces_what_follows_from_the_step(tmp_path):
    """``step_one`` 3 s into a 5 s silence hands out the step waited for; playing on re-anchors at
    that moment (the next frame at once, as after a resume or a seek, then each its 100 ms gap), not
    at where the schedule stood before the silence, which would let the next 3 s of frames through."""
    with _replaying(tmp_path / "s.e3s", [0, 5_000_000_000] + [100_000_000] * 40) as (frames, r, now):
        assert [f.n for f in r.due()] == [frames[0].n]
        now[0] = 53.0
        assert [f.n for f in r.step_one()] == [frames[1].n]
        assert [f.n for f in r.due()] == [frames[2].n] and r.wait_s() == pytest.approx(0.1)
        now[0] = 53.1
        assert [f.n for f in r.due()] == [frames[3].n]


def test_a_speed_change_paces_from_the_moment_it_is_made(tmp_path):
    """Pressing ``+`` half-way through a 4 s gap at 1x: the frame waited for is due at once, and the
    ones after it at the new speed from then on (a 100 ms gap at 4x: 25 ms)."""
    with _replaying(tmp_path / "v.e3s", [0, 4_000_000_000] + [100_000_000] * 4) as (frames, r, now):
        assert [f.n for f in r.due()] == [frames[0].n]
        now[0] += 2.0
        assert r.due() == [] and r.wait_s() == pytest.approx(2.0)
        r.speed = 4.0
        assert [f.n for f in r.due()] == [frames[1].n] and r.wait_s() == pytest.approx(0.025)
        now[0] += 0.025
        assert [f.n for f in r.due()] == [frames[2].n]


def test_a_resume_after_a_long_pause_paces_from_the_moment_of_the_resume(tmp_path):
    """Paused for 10 s with no step taken in between: resuming hands out the next frame, and the ones
    after it their 100 ms gaps from then, not the 10 s of frames the schedule before the pause owed."""
    with _replaying(tmp_path / "p.e3s", [100_000_000] * 20) as (frames, r, now):
        assert [f.n for f in r.due()] == [frames[0].n]
        now[0] = 50.1
        assert [f.n for f in r.due()] == [frames[1].n]
        r.pause()
        now[0] = 60.0
        assert r.due() == [] and r.wait_s() is None
        r.resume()
        assert r.paused is False
        assert [f.n for f in r.due()] == [frames[2].n] and r.wait_s() == pytest.approx(0.1)
        now[0] = 60.1
        assert [f.n for f in r.due()] == [frames[3].n]


def test_a_frame_overdue_is_waited_for_zero_seconds_never_less(tmp_path):
    """A consumer that looks late (the clock 1 s past a frame's time) is told to wait 0 s, not -1 s
    (a negative wait is no sleep a caller can make)."""
    with _replaying(tmp_path / "w.e3s", [0, 100_000_000]) as (frames, r, now):
        assert [f.n for f in r.due()] == [frames[0].n] and r.wait_s() == pytest.approx(0.1)
        now[0] = 51.1
        assert r.wait_s() == 0.0 and [f.n for f in r.due()] == [frames[1].n]


def test_a_clock_stepped_back_costs_nothing_to_the_nanosecond(tmp_path):
    """Two frames stamped 1 s before the ones they follow (a clock stepped back, not a lone outlier):
    the first of them is due exactly with the frame before it, the second its 10 ms on from there."""
    t0 = 1_000_000_000
    _record_at(tmp_path / "c.e3s", [t0, t0 + 10_000_000, t0 - 1_000_000_000, t0 - 990_000_000])
    at = _due_times(tmp_path / "c.e3s")
    assert at[:3] == [50.0, at[1], at[1]] and at[3] - at[2] == pytest.approx(0.01, abs=1e-9)


def test_a_damaged_last_batch_ends_the_replay_after_the_frames_before_it(tmp_path):
    """README "Bounds" (readers read the rest): the batch at the end unreadable, the replay plays every
    frame before it, lists the damage once and is finished (no error past the last batch)."""
    frames, r = _replay_with_damaged_batch(tmp_path / "l.e3s", 2)
    try:
        assert [f.n for f in _play_all(r)] == [f.n for f in frames[:10]] and len(r.errors) == 1
        assert r.due() == [] and r.wait_s() is None
    finally:
        r.close()
