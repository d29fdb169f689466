"""The session file format: SQLite (WAL) holding zstd-compressed msgpack batches of raw wire frames.

Why this layout: one row per batch (512 frames or 100 ms) keeps inserts cheap enough for
>100k steps/s, each commit is durable against a killed recorder (WAL, one transaction per
batch), and a damaged batch costs only its own frames; a seek decodes one batch, which is why
batches stay at 512 frames. Rows carry the global record index of
their first frame and *running maxima* of step ``seq`` and time, so a seek is a bisect over a
catalog loaded at open. State frames (:data:`~eagle3scope.wire.schema.STATE_KINDS`: hello, load,
config, hook per seam, heartbeat) are also kept one per row in ``state`` so a seek can rebuild
what a viewer knew at any point.

This module holds what writer (``writer.py``), reader (``reader.py``) and ``salvage`` share: the
tables, the bounds, the errors, opening a file read-only and unpacking one batch row. A reader
opens the file read-only (never checkpointing or otherwise modifying it) and bounds every
decompression to :data:`MAX_BATCH_BYTES` whatever the zstd header declares.

Tables::

    meta(key, value)                   JSON values: store_format, wire_schema, created_ns,
                                       closed_ns (absent: the recorder died), endpoints, sources,
                                       loss (absent in files of older recorders: what the
                                       recorder lost, see wire.loss.StreamLoss)
    batches(id, first_idx, n_frames, n_steps, seq_hi, t_lo, t_hi, crc, blob)
    state(idx, src, kind, key, frame)  key is the hook seam, "" for the other kinds
"""

from __future__ import annotations

import sqlite3
import zlib
from dataclasses import dataclass
from pathlib import Path

import msgpack
import zstandard

from eagle3scope.wire.schema import MAX_FRAME_BYTES

STORE_FORMAT = 1
#: frames one batch may hold (writer's bound, reader's check)
MAX_BATCH_FRAMES = 1 << 16
#: decompressed size a reader accepts for one batch, whatever its zstd header declares
MAX_BATCH_BYTES = 64 << 20
_DECOMPRESS_CHUNK = 1 << 20
#: batch ids looked up past the last one found before a damaged catalog is taken to end
PROBE_PAST_LAST = 1024

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS batches(
    id INTEGER PRIMARY KEY, first_idx INTEGER NOT NULL, n_frames INTEGER NOT NULL,
    n_steps INTEGER NOT NULL, seq_hi INTEGER NOT NULL, t_lo INTEGER NOT NULL,
    t_hi INTEGER NOT NULL, crc INTEGER NOT NULL, blob BLOB NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS batches_by_idx ON batches(first_idx);
CREATE TABLE IF NOT EXISTS state(
    idx INTEGER PRIMARY KEY, src TEXT NOT NULL, kind TEXT NOT NULL, key TEXT NOT NULL, frame BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS state_by_src ON state(src, kind, key, idx);
"""


class StoreError(Exception):
    """The file is not a readable eagle3scope session."""


class CorruptBatchError(StoreError):
    """One batch cannot be read; the others can."""

    def __init__(self, batch: int, first_idx: int | None, n_frames: int | None, reason: str) -> None:
        self.batch, self.first_idx, self.n_frames, self.reason = batch, first_idx, n_frames, reason
        where = f"batch {batch}"
        if first_idx is not None and n_frames:
            where += f" (records {first_idx}..{first_idx + n_frames - 1})"
        super().__init__(f"{where} is unreadable: {reason}")



def connect_read_only(path: Path) -> sqlite3.Connection:
    """Open ``path`` for reading only: a reader never checkpoints, truncates or rewrites it.

    A file with a ``-wal`` (live, or its recorder was killed) opens ``mode=ro``, which follows the
    WAL (SQLite may add a ``-shm`` lock file beside it); where that cannot open (a read-only
    place without ``-shm``), and for a closed file, ``immutable=1`` reads the main file as it is
    and creates nothing.
    """
    uri = path.resolve().as_uri()
    last: Exception | None = None
    # no -wal: the recorder closed the file (or never opened it): read it as is, creating nothing
    attempts = ("mode=ro", "mode=ro&immutable=1") if Path(f"{path}-wal").exists() else ("mode=ro&immutable=1",)
    for flags in attempts:
        con = sqlite3.connect(f"{uri}?{flags}", uri=True, isolation_level=None, check_same_thread=False)
        try:
            con.execute("PRAGMA busy_timeout=5000")
            # lets SQLite open a truncated file (read-only: nothing can be written through it)
            con.execute("PRAGMA writable_schema=1")
            con.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return con
        except sqlite3.DatabaseError as exc:
            last = exc
            con.close()
    raise StoreError(f"{path} is not a readable eagle3scope session: {last}")


#: SQLite's side files of a database: another file's ``--out`` must never be one of them
SIDE_SUFFIXES = ("-wal", "-shm", "-journal")


def probe_batch_ids(con: sqlite3.Connection, after: int = -1) -> tuple[dict[int, int | None], int | None]:
    """Batch ids past ``after`` that a damaged file still shows, with their ``first_idx`` where known.

    Scans of the index and of the table keep the rows they yielded before a damaged page; then
    ids past the highest one are looked up one by one (the recorder numbers batches 0, 1, 2, ...)
    until :data:`PROBE_PAST_LAST` in a row are absent. Returns ``(found, beyond)``: ``beyond`` is
    the last id found when lookups past it failed on damaged pages (later batches may be lost).
    """
    found: dict[int, int | None] = {}
    for query in ("SELECT id, first_idx FROM batches INDEXED BY batches_by_idx WHERE id > ?",
                  "SELECT id, first_idx FROM batches WHERE id > ? ORDER BY id"):
        try:
            for bid, first_idx in con.execute(query, (after,)):
                if type(bid) is int:
                    found.setdefault(bid, first_idx if type(first_idx) is int else None)
        except sqlite3.DatabaseError:
            pass
    bid = last = max(found, default=after)
    damaged = False
    while bid - last < PROBE_PAST_LAST:
        bid += 1
        try:
            row = con.execute("SELECT first_idx FROM batches WHERE id = ?", (bid,)).fetchone()
        except sqlite3.DatabaseError:
            damaged = True
            continue
        if row is not None:
            found[bid] = row[0] if type(row[0]) is int else None
            last = bid
    return found, (last if damaged else None)


def decompressor() -> zstandard.ZstdDecompressor:
    return zstandard.ZstdDecompressor(max_window_size=1 << 27)


def unpack_blob(zstd: zstandard.ZstdDecompressor, crc: object, blob: object) -> list[bytes]:
    """The raw frames of one batch row, checked (CRC, zstd checksum, size bound, msgpack shape).

    Raises ValueError naming what is wrong. Decompression stops at :data:`MAX_BATCH_BYTES`
    whatever the zstd header declares (``decompress(max_output_size=...)`` trusts the header).
    """
    if not isinstance(blob, bytes) or zlib.crc32(blob) != crc:
        raise ValueError("checksum mismatch (damaged bytes)")
    out = bytearray()
    try:
        with zstd.stream_reader(blob, read_across_frames=True) as reader:
            while chunk := reader.read(_DECOMPRESS_CHUNK):
                out += chunk
                if len(out) > MAX_BATCH_BYTES:
                    raise ValueError(f"decompresses to more than {MAX_BATCH_BYTES} bytes")
        raws = msgpack.unpackb(bytes(out), raw=False, max_bin_len=MAX_FRAME_BYTES, max_array_len=MAX_BATCH_FRAMES,
                               max_str_len=0, max_map_len=0, max_ext_len=0)
    except ValueError as exc:
        raise ValueError(f"cannot unpack: {exc}") from None
    except Exception as exc:  # zstd and msgpack raise a zoo of types on garbage
        raise ValueError(f"cannot unpack: {type(exc).__name__}: {exc}") from None
    if not isinstance(raws, list) or not all(isinstance(raw, bytes) for raw in raws):
        raise ValueError("not a list of frames")
    return raws


@dataclass(slots=True, frozen=True)
class BatchInfo:
    id: int
    first_idx: int
    n_frames: int
    n_steps: int
    seq_hi: int
    t_lo: int
    t_hi: int

