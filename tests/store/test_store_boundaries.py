"""Seeks that land exactly on a batch's edge, and the recorder's loss count kept in the session file.

A batch row carries the running maxima ``seq_hi`` / ``t_hi`` of its frames; a seek to exactly
that value must find the batch's own last frame, not the next batch's first.
"""

from __future__ import annotations

import pytest

from eagle3scope.store import SessionReader, SessionWriter
from eagle3scope.wire import decode_frame
from benchmarks.support.synthetic import session_frames


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



def _write(path, raws: list, batch_frames: int) -> list:
    """Record ``raws`` in batches of ``batch_frames``; their decoded frames."""
    frames = [decode_frame(r) for r in raws]
    with SessionWriter(path, batch_frames=batch_frames) as writer:
        for raw, frame in zip(raws, frames):
            writer.add(raw, frame)
    return frames


def test_a_seek_skips_a_damaged_batch_and_finds_the_frame_after_it(tmp_path):
    import sqlite3

    path = tmp_path / "damaged.e3s"
    frames = _write(path, list(session_frames(600, bs=1, heartbeat_every=0)), 100)
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
        message = (f"cannot write {path}: UNIQUE constraint failed: batches.id; the {committed} steps committed before "
                   "stay readable")
        with pytest.raises(StoreError) as failed:
            writer.flush()
        assert str(failed.value) == message
        with pytest.raises(StoreError) as again:  # a later batch is refused with the same reason
            writer.flush()
        assert str(again.value) == message


def _sql(path, statement: str, *args) -> None:
    import sqlite3

    con = sqlite3.connect(path)
    with con:
        con.execute(statement, args)
    con.close()


def test_a_seek_decodes_from_the_batch_its_bisect_names_not_before(tmp_path):
    """A seek (by seq, by time, or frames from a record) bisects the catalog and decodes from the
    batch holding its answer on: the batch just before it is never read, so its damage is not met
    (and a seek costs one batch, not a scan from the start)."""
    path = tmp_path / "s.e3s"
    frames = _write(path, list(session_frames(400, bs=2, heartbeat_every=50)), 50)
    with SessionReader(path) as reader:
        target = reader.batches[6]
    _sql(path, "UPDATE batches SET crc = crc + 1 WHERE id = ?", target.id - 1)
    idx = target.first_idx + 3
    with SessionReader(path) as reader:
        assert reader.seek_time(frames[idx].t) == first_at_or_after_time(frames, frames[idx].t)
        step = first_step_at_or_after(frames, frames[target.first_idx].body.get("seq", 0) + 1)
        assert target.first_idx <= step < target.first_idx + target.n_frames
        assert reader.seek_seq(frames[step].body["seq"]) == step
        assert next(reader.frames(idx)) == (idx, frames[idx])
        assert reader.errors == []


def test_refresh_follows_a_file_being_recorded_adding_each_new_batch_once(tmp_path):
    raws = list(session_frames(300, bs=2, heartbeat_every=50))
    frames = [decode_frame(r) for r in raws]
    path = tmp_path / "live.e3s"
    with SessionWriter(path, batch_frames=50) as writer:
        for raw, frame in zip(raws[:100], frames[:100]):
            writer.add(raw, frame)
        writer.flush()
        with SessionReader(path) as reader:
            assert [b.first_idx for b in reader.batches] == [0, 50]
            for raw, frame in zip(raws[100:], frames[100:]):
                writer.add(raw, frame)
            writer.flush()
            reader.refresh()
            reader.refresh()
            assert [b.first_idx for b in reader.batches] == list(range(0, len(raws), 50))
            assert [f for _, f in reader.frames()] == frames and reader.errors == []


def _blob(frames) -> tuple[int, bytes]:
    import zlib

    import msgpack
    import zstandard

    blob = zstandard.ZstdCompressor(write_checksum=True).compress(msgpack.packb(frames, use_bin_type=True))
    return zlib.crc32(blob), blob


@pytest.mark.parametrize("content, error", [
    ([b"one", "two"], "cannot unpack: 3 exceeds max_str_len(0)"),  # a text string where frames are bytes
    ([b"one", {"k": b"v"}], "cannot unpack: 1 exceeds max_map_len(0)"),
    ([b"one", ""], "not a list of frames"),
    ({}, "not a list of frames"),
    ([b"x" * (8 * 1024 * 1024 + 1)], f"cannot unpack: {8 * 1024 * 1024 + 1} exceeds max_bin_len({8 * 1024 * 1024})"),
    ([b""] * 65537, "cannot unpack: 65537 exceeds max_array_len(65536)"),  # MAX_BATCH_FRAMES + 1
])
def test_a_batch_that_is_not_a_list_of_frame_bytes_is_refused_saying_why(content, error):
    """A batch row decodes to a list of byte strings (each at most one frame's 8 MiB) or is refused:
    the reason is what a reader lists with the damaged batch."""
    from eagle3scope.store.format import decompressor, unpack_blob

    with pytest.raises(ValueError) as refused:
        unpack_blob(decompressor(), *_blob(content))
    assert str(refused.value) == error
    assert unpack_blob(decompressor(), *_blob([b"one", b""])) == [b"one", b""]


def test_a_batch_decompressing_past_64_mib_is_refused_saying_so():
    import zlib

    import zstandard

    from eagle3scope.store.format import MAX_BATCH_BYTES, decompressor, unpack_blob

    blob = zstandard.ZstdCompressor(level=1).compress(bytes(MAX_BATCH_BYTES + 1))
    with pytest.raises(ValueError) as refused:
        unpack_blob(decompressor(), zlib.crc32(blob), blob)
    assert str(refused.value) == f"cannot unpack: decompresses to more than {MAX_BATCH_BYTES} bytes"


class _Catalog:
    """A connection whose scans of the batches table fail (damaged pages) and whose lookups by id
    find ``rows`` (id -> first_idx) and fail on ``damaged`` ids."""

    def __init__(self, rows: dict, damaged=()) -> None:
        import sqlite3

        self.rows, self.damaged, self.error = rows, set(damaged), sqlite3.DatabaseError

    def execute(self, query: str, args: tuple):
        if "id = ?" not in query:
            raise self.error("database disk image is malformed")
        (bid,) = args
        if bid in self.damaged:
            raise self.error("database disk image is malformed")
        found = [(self.rows[bid],)] if bid in self.rows else []
        return type("Cursor", (), {"fetchone": lambda self: found[0] if found else None})()


def test_probing_finds_ids_until_1024_in_a_row_are_absent_and_says_where_damage_began():
    """README "Bounds" (readers read the rest): where no scan of the catalog works, batch ids are
    looked up one by one past the last one found, until PROBE_PAST_LAST (1,024) in a row are absent;
    a lookup that fails on a damaged page means later batches may be lost past the last id found."""
    from eagle3scope.store.format import PROBE_PAST_LAST, probe_batch_ids

    rows = {0: 0, 1: 50, 2: "x", 2 + PROBE_PAST_LAST: 150, 3 + 2 * PROBE_PAST_LAST: 200}
    assert probe_batch_ids(_Catalog(rows)) == ({0: 0, 1: 50, 2: None, 2 + PROBE_PAST_LAST: 150}, None)
    assert probe_batch_ids(_Catalog(rows, damaged={5})) == ({0: 0, 1: 50, 2: None, 2 + PROBE_PAST_LAST: 150},
                                                           2 + PROBE_PAST_LAST)
    assert probe_batch_ids(_Catalog(rows), after=1) == ({2: None, 2 + PROBE_PAST_LAST: 150}, None)


def test_probing_falls_back_to_a_table_scan_without_the_index(tmp_path):
    """The index gone: a scan of the table still finds a batch far past the others."""
    import sqlite3

    from eagle3scope.store.format import probe_batch_ids

    path = tmp_path / "s.e3s"
    _write(path, list(session_frames(40, bs=1, heartbeat_every=0)), 10)
    _sql(path, "UPDATE batches SET id = 5000 WHERE id = 1")
    _sql(path, "DROP INDEX batches_by_idx")
    con = sqlite3.connect(path)
    try:
        found, beyond = probe_batch_ids(con)
    finally:
        con.close()
    assert 5000 in found and 1 not in found and beyond is None


@pytest.mark.parametrize("window_log, refused", [(27, False), (28, True)])
def test_a_batch_whose_zstd_window_passes_128_mib_is_refused(window_log, refused):
    """Decompression memory is bounded by the window too: a frame declaring a window past 128 MiB is
    refused before any output, one at 128 MiB decodes."""
    import zlib

    import msgpack
    import zstandard

    from eagle3scope.store.format import decompressor, unpack_blob

    params = zstandard.ZstdCompressionParameters(window_log=window_log)
    stream = zstandard.ZstdCompressor(compression_params=params).compressobj()  # size unknown: the window stays
    blob = stream.compress(msgpack.packb([b"abc"], use_bin_type=True)) + stream.flush()
    assert zstandard.get_frame_parameters(blob).window_size == 1 << window_log
    if refused:
        with pytest.raises(ValueError, match="^cannot unpack: ZstdError: .*too much memory"):
            unpack_blob(decompressor(), zlib.crc32(blob), blob)
    else:
        assert unpack_blob(decompressor(), zlib.crc32(blob), blob) == [b"abc"]



def test_an_unreadable_state_frame_is_listed_and_the_others_rebuild_the_state(tmp_path):
    path = tmp_path / "s.e3s"
    frames = _write(path, list(session_frames(40, bs=1, heartbeat_every=10)), 10)
    _sql(path, "UPDATE state SET frame = x'c1' WHERE kind = 'hello'")
    with SessionReader(path) as reader:
        rebuilt = reader.state_at(len(frames))
        assert "hello" not in {f.kind for f in rebuilt} and "heartbeat" in {f.kind for f in rebuilt}
        assert [str(e) for e in reader.errors] == [
            "state frame unreadable: not a msgpack frame: FormatError: "]


def test_the_writer_counts_decode_steps_apart_for_record_decode_steps(tmp_path):
    """`record --decode-steps N` stops on the writer's count of decode steps (not every step)."""
    from eagle3scope.wire import encode_frame
    from benchmarks.support.synthetic import step_body

    path = tmp_path / "d.e3s"
    with SessionWriter(path, batch_frames=4) as writer:
        for seq, mode in enumerate(("decode", "extend", "decode", "decode", "extend", "decode")):
            raw = encode_frame("step", {**step_body(seq, t_ns=1000 + seq), "mode": mode}, src="dp0", n=seq, t=1000 + seq)
            writer.add(raw, decode_frame(raw))
        assert (writer.steps, writer.decode_steps) == (6, 4)


def test_a_committed_batch_reaches_the_main_file_once_the_checkpoint_interval_passed(tmp_path):
    """README "Bounds": a copy of a live recording without its -wal holds everything committed more
    than checkpoint_s (2 s) before: a flush after the interval folds the WAL into the main file."""
    import shutil

    path = tmp_path / "live.e3s"
    raws = list(session_frames(20, bs=1, heartbeat_every=0))
    with SessionWriter(path, batch_frames=10 ** 6, checkpoint_s=0.0) as writer:
        for raw in raws:
            writer.add(raw, decode_frame(raw))
        writer.flush()
        shutil.copy(path, tmp_path / "copy.e3s")  # the main file alone, as a backup tool copies it
        with SessionReader(tmp_path / "copy.e3s") as copy:
            assert copy.count() == len(raws) and copy.errors == []


def test_a_reader_of_a_killed_recorders_file_leaves_its_wal_as_it_found_it(tmp_path):
    """README "Bounds": readers never modify a file. A recorder killed leaves its -wal; a reader
    opens read-only through it, so closing (the last connection) checkpoints nothing: the main file
    and the -wal stay byte for byte as they were."""
    import shutil

    live, dead = tmp_path / "live.e3s", tmp_path / "dead.e3s"
    raws = list(session_frames(30, bs=1, heartbeat_every=0))
    with SessionWriter(live, batch_frames=10 ** 6) as writer:
        for raw in raws:
            writer.add(raw, decode_frame(raw))
        writer.flush()
        for suffix in ("", "-wal"):  # what a SIGKILL leaves, copied while the recorder still runs
            shutil.copy(f"{live}{suffix}", f"{dead}{suffix}")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("dead")}
    assert set(before) == {"dead.e3s", "dead.e3s-wal"}
    with SessionReader(dead) as reader:
        assert reader.count() == len(raws) and not reader.complete
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name in before}
    assert after == before


def test_an_interrupted_commit_is_rolled_back_and_its_frames_commit_with_the_next_flush(tmp_path, monkeypatch):
    """A signal's exception (KeyboardInterrupt) in the middle of a batch's transaction rolls it back
    and propagates as it is; the frames stay pending, so `record`'s clean stop commits them."""
    import eagle3scope.store.writer as writer_module

    def interrupted(latest):
        raise KeyboardInterrupt

    raws = list(session_frames(10, bs=1, heartbeat_every=0))  # starts with a hello: the sources get written
    path = tmp_path / "i.e3s"
    with SessionWriter(path, batch_frames=10 ** 6) as writer:
        for raw in raws:
            writer.add(raw, decode_frame(raw))
        with monkeypatch.context() as patch:
            patch.setattr(writer_module, "session_sources", interrupted)
            with pytest.raises(KeyboardInterrupt):
                writer.flush()
        assert writer.batches == 0
        writer.flush()
        assert writer.batches == 1
    with SessionReader(path) as reader:
        assert [f for _, f in reader.frames()] == [decode_frame(r) for r in raws] and reader.errors == []


def test_the_writers_byte_count_is_what_its_batches_hold(tmp_path):
    """`record` reports the bytes written: the compressed batches, summed."""
    import sqlite3

    path = tmp_path / "b.e3s"
    with SessionWriter(path, batch_frames=7) as writer:
        for raw in session_frames(30, bs=2, heartbeat_every=0):
            writer.add(raw, decode_frame(raw))
        writer.flush()
        written = writer.bytes
    con = sqlite3.connect(path)
    try:
        assert written == con.execute("SELECT sum(length(blob)) FROM batches").fetchone()[0] > 0
    finally:
        con.close()


def test_a_catalog_that_cannot_be_scanned_is_said_so_and_probed(tmp_path):
    """The catalog's scan fails (here a column gone, as a damaged page would fail it): the reader
    lists why, probes the batches one by one and lists each row it cannot read, instead of failing
    to open."""
    path = tmp_path / "c.e3s"
    _write(path, list(session_frames(20, bs=1, heartbeat_every=0)), 10)
    _sql(path, "ALTER TABLE batches DROP COLUMN t_hi")
    with SessionReader(path) as reader:
        errors = [str(e) for e in reader.errors]
        assert reader.batches == [] and errors[0] == (
            "batch catalog partly unreadable (no such column: t_hi); probing batch by batch")
        assert errors[1].startswith("batch 0 (records 0..") and errors[1].endswith(
            "is unreadable: its row cannot be read: no such column: t_hi")
