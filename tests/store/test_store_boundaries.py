"""Seeks that land exactly on a batch's edge, and the recorder's loss count kept in the session file.

A batch row carries the running maxima ``seq_hi`` / ``t_hi`` of its frames; a seek to exactly
that value must find the batch's own last frame, not the next batch's first.
"""

from __future__ import annotations

import pytest

from eagle3scope.store import SessionReader, SessionWriter
from eagle3scope.wire import decode_frame
from support.synthetic import session_frames


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    raws = list(session_frames(1200, bs=2, heartbeat_every=50))
    frames = [decode_frame(r) for r in raws]
    path = tmp_path_factory.mktemp("edges") / "s.e3s"
    with SessionWriter(path, batch_frames=100) as writer:
        for raw, frame in zip(raws, frames):
            writer.add(raw, frame)
    return path, frames


def first_at_or_after_time(frames, t: int) -> int | None:
    return next((i for i, f in enumerate(frames) if f.t >= t), None)


def first_step_at_or_after(frames, seq: int) -> int | None:
    return next((i for i, f in enumerate(frames) if f.kind == "step" and f.body["seq"] >= seq), None)


def test_seek_time_to_each_batch_edge(recorded):
    path, frames = recorded
    with SessionReader(path) as reader:
        assert len(reader.batches) > 10
        for info in reader.batches:
            for t in (info.t_lo - 1, info.t_lo, info.t_hi - 1, info.t_hi, info.t_hi + 1):
                assert reader.seek_time(t) == first_at_or_after_time(frames, t), (info, t)
        assert reader.seek_time(frames[-1].t) == first_at_or_after_time(frames, frames[-1].t)


def test_seek_seq_to_each_batch_edge(recorded):
    path, frames = recorded
    with SessionReader(path) as reader:
        for info in reader.batches:
            for seq in (info.seq_hi - 1, info.seq_hi, info.seq_hi + 1):
                assert reader.seek_seq(seq) == first_step_at_or_after(frames, seq), (info, seq)



def test_a_seek_skips_a_damaged_batch_and_finds_the_frame_after_it(tmp_path):
    import sqlite3

    raws = list(session_frames(600, bs=1, heartbeat_every=0))
    frames = [decode_frame(r) for r in raws]
    path = tmp_path / "damaged.e3s"
    with SessionWriter(path, batch_frames=100) as writer:
        for raw, frame in zip(raws, frames):
            writer.add(raw, frame)
    with SessionReader(path) as reader:
        second, third = reader.batches[1], reader.batches[2]
    con = sqlite3.connect(path)
    con.execute("UPDATE batches SET blob = ? WHERE id = ?", (b"not zstd", second.id))
    con.commit()
    con.close()
    with SessionReader(path) as reader:
        t = frames[second.first_idx + 10].t  # inside the damaged batch: the next readable frame is in the third
        assert reader.seek_time(t) == third.first_idx and reader.errors


def test_a_pending_batch_is_committed_once_its_bytes_reach_the_cap(tmp_path):
    raws = list(session_frames(50, bs=1, heartbeat_every=0))
    cap = sum(len(r) for r in raws[:10])
    with SessionWriter(tmp_path / "s.e3s", batch_frames=10_000, max_pending_bytes=cap) as writer:
        for raw in raws:
            writer.add(raw, decode_frame(raw))
        assert writer.batches >= len(raws) // 11  # committed by size, long before 10,000 frames


def test_the_recorders_default_batch_is_512_frames_100_ms_or_4_mib(tmp_path, monkeypatch):
    """README "Bounds": a pending batch is committed at 512 frames, 100 ms or 4 MiB, whichever comes first
    (the writer's clock is driven here, so a loaded machine cannot commit early)."""
    import eagle3scope.store.writer as session

    now = [1000.0]
    monkeypatch.setattr(session.time, "monotonic", lambda: now[0])
    raws = list(session_frames(700, bs=1, heartbeat_every=0))
    with SessionWriter(tmp_path / "n.e3s") as writer:
        for raw in raws[:511]:
            writer.add(raw, decode_frame(raw))
        assert writer.batches == 0
        writer.add(raws[511], decode_frame(raws[511]))
        assert writer.batches == 1  # the 512th frame
        writer.add(raws[512], decode_frame(raws[512]))
        now[0] += 0.099
        writer.tick()
        assert writer.batches == 1
        now[0] += 0.001
        writer.tick()
        assert writer.batches == 2  # 100 ms after its first frame
    assert session.MAX_PENDING_BYTES == 4 << 20
    with SessionWriter(tmp_path / "b.e3s", max_pending_bytes=len(raws[0]) + len(raws[1])) as writer:
        writer.add(raws[0], decode_frame(raws[0]))
        assert writer.batches == 0
        writer.add(raws[1], decode_frame(raws[1]))
        assert writer.batches == 1  # its bytes reached the cap


def test_a_failed_commit_says_why_and_how_many_steps_stay_readable(tmp_path):
    """README "Bounds": on a failed write (disk full, I/O error) the recorder stops with one error
    naming the cause and the steps committed before it, which stay readable. Here the third batch's
    row id is taken by another connection, so its INSERT fails."""
    import sqlite3

    from eagle3scope.store import StoreError

    raws = list(session_frames(30, bs=1, heartbeat_every=0))
    frames = [decode_frame(r) for r in raws]
    path = tmp_path / "f.e3s"
    with SessionWriter(path, batch_frames=10 ** 6) as writer:  # closing after the failure raises nothing
        for chunk in (slice(0, 10), slice(10, 20)):
            for raw, frame in zip(raws[chunk], frames[chunk]):
                writer.add(raw, frame)
            writer.flush()
        committed = sum(1 for f in frames[:20] if f.kind == "step")
        assert writer.committed_steps == committed > 0
        other = sqlite3.connect(path)
        with other:
            other.execute("INSERT INTO batches VALUES (2, 999, 1, 0, 0, 0, 0, 0, x'00')")
        other.close()
        for raw, frame in zip(raws[20:], frames[20:]):
            writer.add(raw, frame)
        with pytest.raises(StoreError) as failed:
            writer.flush()
        assert str(failed.value) == (f"cannot write {path}: UNIQUE constraint failed: batches.id; the {committed} steps "
                                     "committed before stay readable")
