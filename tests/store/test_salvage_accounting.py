"""`salvage`'s accounting (README: "the intact batches of a truncated or damaged recording, into a new
file; says how many steps it recovered"), through `salvage()` on real session files damaged with
SQLite itself: each batch is either copied whole or listed lost with its id, frames that do not
validate are dropped and counted, and the figures equal what the new file holds."""

from __future__ import annotations

import sqlite3

import pytest

from eagle3scope.store import SessionReader, SessionWriter, StoreError
from eagle3scope.store.salvage import salvage
from eagle3scope.wire import decode_frame
from benchmarks.support.synthetic import session_frames

BATCH = 40


@pytest.fixture
def recording(tmp_path):
    raws = list(session_frames(300, bs=2, heartbeat_every=50))
    path = tmp_path / "r.e3s"
    with SessionWriter(path, batch_frames=BATCH, endpoints=["ipc:///tmp/x.sock", "tcp://127.0.0.1:1"]) as writer:
        for raw in raws:
            writer.add(raw, decode_frame(raw))
    with SessionReader(path) as reader:
        batches = [(b.id, b.first_idx, b.n_frames, b.n_steps) for b in reader.batches]
        frames = [f for _, f in reader.frames()]
    return path, batches, frames


def _sql(path, statement: str, *args) -> None:
    con = sqlite3.connect(path)
    with con:
        con.execute(statement, args)
    con.close()


def _frames(path) -> list:
    with SessionReader(path) as reader:
        assert reader.errors == []
        return [f for _, f in reader.frames()]


def test_an_intact_file_is_copied_whole_and_complete(recording, tmp_path):
    path, batches, frames = recording
    report = salvage(path, tmp_path / "out.e3s")
    assert report.complete and report.batches_lost == [] and report.invalid_frames == 0
    assert (report.batches_read, report.frames) == (len(batches), len(frames))
    assert report.steps == sum(1 for f in frames if f.kind == "step")
    assert _frames(tmp_path / "out.e3s") == frames
    with SessionReader(tmp_path / "out.e3s") as reader:
        assert reader.meta["endpoints"] == ["ipc:///tmp/x.sock", "tcp://127.0.0.1:1"]
        assert len(reader.batches) == len(batches)  # one batch out per batch in
    assert report.summary() == (f"recovered {report.steps} steps ({len(frames)} frames) from {len(batches)} of "
                                f"{len(batches)} batches found; 0 damaged batch(es) lost")


def test_damaged_and_missing_batches_are_listed_by_id_and_the_rest_is_exact(recording, tmp_path):
    path, batches, frames = recording
    damaged, missing = batches[2], batches[4]
    _sql(path, "UPDATE batches SET crc = crc + 1 WHERE id = ?", damaged[0])
    _sql(path, "DELETE FROM batches WHERE id = ?", missing[0])
    report = salvage(path, tmp_path / "out.e3s")
    assert sorted(bid for bid, _ in report.batches_lost) == sorted([damaged[0], missing[0]])
    assert all(why for _, why in report.batches_lost)
    assert report.batches_read == len(batches) - 2 and not report.complete
    gone = {i for _, first, n, _ in (damaged, missing) for i in range(first, first + n)}
    kept = [f for i, f in enumerate(frames) if i not in gone]
    assert _frames(tmp_path / "out.e3s") == kept
    assert (report.frames, report.steps) == (len(kept), sum(1 for f in kept if f.kind == "step"))
    assert f"from {len(batches) - 2} of {len(batches)} batches found; 2 damaged batch(es) lost" in report.summary()


def test_frames_that_do_not_validate_are_dropped_and_counted(tmp_path):
    raws = list(session_frames(20, bs=1, heartbeat_every=0))
    path = tmp_path / "r.e3s"
    with SessionWriter(path, batch_frames=BATCH) as writer:
        for i, raw in enumerate(raws):
            writer.add(b"\x93not a frame" if i in (3, 7) else raw, decode_frame(raw))
    report = salvage(path, tmp_path / "out.e3s")
    assert report.invalid_frames == 2 and report.frames == len(raws) - 2 and not report.complete
    assert report.summary().endswith(", 2 invalid frame(s) dropped")
    assert [f.n for f in _frames(tmp_path / "out.e3s")] == [decode_frame(r).n for i, r in enumerate(raws)
                                                          if i not in (3, 7)]


def test_salvage_never_writes_over_its_input_and_needs_one(recording, tmp_path):
    path, *_ = recording
    with pytest.raises(StoreError) as refused:
        salvage(path, path)
    assert str(refused.value) == "--out would overwrite the damaged file"
    for side in ("-wal", "-shm", "-journal"):
        with pytest.raises(StoreError) as refused:
            salvage(path, f"{path}{side}")
        assert str(refused.value) == f"--out {path}{side} is {path}'s SQLite {side[1:]} file; choose another name"
    with pytest.raises(StoreError, match="no such session file"):
        salvage(tmp_path / "absent.e3s", tmp_path / "out.e3s")


def test_each_lost_batch_says_why(recording, tmp_path):
    """The reason listed with each lost batch id is what was wrong with it (a CRC that does not match
    the bytes, a row gone from the table)."""
    path, batches, _ = recording
    _sql(path, "UPDATE batches SET crc = crc + 1 WHERE id = ?", batches[1][0])
    _sql(path, "DELETE FROM batches WHERE id = ?", batches[3][0])
    report = salvage(path, tmp_path / "out.e3s")
    assert report.batches_lost == [(batches[1][0], "checksum mismatch (damaged bytes)"),
                                   (batches[3][0], "its row is missing")]


@pytest.mark.parametrize("jump, counted", [(0, True), (1, False)])
def test_missing_ids_count_as_lost_up_to_a_jump_of_the_probe_range(recording, tmp_path, jump, counted):
    """Batch ids run 0, 1, 2, ...: the ids missing before the next one found are lost batches, unless
    the next id is more than PROBE_PAST_LAST (1,024) past the expected one (a damaged id, not a
    thousand lost batches)."""
    from eagle3scope.store.format import PROBE_PAST_LAST

    path, batches, frames = recording
    last = batches[-1][0]
    moved = last + PROBE_PAST_LAST + jump
    _sql(path, "UPDATE batches SET id = ? WHERE id = ?", moved, last)
    report = salvage(path, tmp_path / "out.e3s")
    holes = list(range(last, moved)) if counted else []
    assert report.batches_lost == [(bid, "its row is missing") for bid in holes]
    assert report.batches_read == len(batches) and _frames(tmp_path / "out.e3s") == frames


def test_the_summary_says_every_loss_it_counted():
    """`salvage`'s last line: recovered steps and frames, batches read of found, lost ones, invalid
    frames dropped and where the file is damaged past, each said when it happened."""
    from eagle3scope.store.salvage import SalvageReport

    report = SalvageReport(batches_read=3, batches_lost=[(1, "x"), (4, "y")], frames=30, steps=12, invalid_frames=2,
                           damaged_past=7)
    assert report.summary() == ("recovered 12 steps (30 frames) from 3 of 5 batches found; 2 damaged batch(es) lost, "
                                "2 invalid frame(s) dropped; the file is damaged past batch 7 (truncated?): later "
                                "batches are lost")
    assert not report.complete
