"""Session files: SQLite (WAL) holding zstd-compressed msgpack batches of raw wire frames.

Why this layout: one row per batch (512 frames or 100 ms) keeps inserts cheap enough for
>100k steps/s, each commit is durable against a killed recorder (WAL, one transaction per
batch), and a damaged batch costs only its own frames; a seek decodes one batch, which is why
batches stay at 512 frames. Rows carry the global record index of
their first frame and *running maxima* of step ``seq`` and time, so a seek is a bisect over a
catalog loaded at open. State frames (hello, load, config, hook per seam, heartbeat) are also
kept one per row in ``state`` so a seek can rebuild what a viewer knew at any point.

Tables::

    meta(key, value)                   JSON values: store_format, wire_schema, created_ns,
                                       closed_ns (absent: the recorder died), endpoints, sources
    batches(id, first_idx, n_frames, n_steps, seq_hi, t_lo, t_hi, crc, blob)
    state(idx, src, kind, key, frame)  key is the hook seam, "" for the other kinds
"""

from __future__ import annotations

import bisect
import json
import sqlite3
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import msgpack
import zstandard

from eagle3scope.wire import SCHEMA_MAJOR, SCHEMA_MINOR, Frame, FrameError, decode_frame
from eagle3scope.wire.schema import MAX_FRAME_BYTES

STORE_FORMAT = 1
#: kinds indexed apart from the batches, so a seek can re-send what was known before its target
SEEK_STATE_KINDS = ("hello", "load", "config", "hook", "heartbeat")
_DEDUP_KINDS = ("hello", "load", "config", "hook")  # re-sent unchanged: keep a row only on change
_MAX_BATCH_FRAMES = 1 << 16
_MAX_BATCH_BYTES = 1 << 30

_SCHEMA = """
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


def _json(value: object) -> str:
    return json.dumps(value, default=lambda o: o.hex() if isinstance(o, (bytes, bytearray)) else repr(o))


def _connect(path: str | Path) -> sqlite3.Connection:
    con = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    con.execute("PRAGMA busy_timeout=5000")
    return con


class SessionWriter:
    """Append frames to a new session file, one committed transaction per batch."""

    def __init__(self, path: str | Path, *, batch_frames: int = 512, batch_ms: float = 100.0, level: int = 3,
                 endpoints: list[str] | None = None) -> None:
        self.path = Path(path)
        if self.path.exists() and self.path.stat().st_size > 0:
            raise StoreError(f"{self.path} already exists; choose another --out or remove it")
        self._con = _connect(self.path)
        self._con.execute("PRAGMA journal_mode=WAL")
        self._con.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: every commit survives a killed process
        self._con.executescript(_SCHEMA)
        self._zstd = zstandard.ZstdCompressor(level=level, write_checksum=True)
        self._batch_frames = max(1, min(batch_frames, _MAX_BATCH_FRAMES))
        self._batch_s = batch_ms / 1000.0
        self._pending: list[bytes] = []
        self._pending_state: list[tuple[int, str, str, str, bytes]] = []
        self._batch_started = 0.0
        self._n_steps = 0
        self._seq_hi = -1
        self._t_lo = self._t_hi = 0
        self._last_state: dict[tuple[str, str, str], dict] = {}
        self._sources: dict[str, dict] = {}
        self._sources_dirty = False
        self.frames = 0
        self.steps = 0
        self.batches = 0
        self.bytes = 0
        self._put_meta(
            store_format=STORE_FORMAT,
            wire_schema=[SCHEMA_MAJOR, SCHEMA_MINOR],
            created_ns=time.time_ns(),
            endpoints=endpoints or [],
            sources={},
        )

    def _put_meta(self, **items: object) -> None:
        self._con.executemany(
            "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", [(k, _json(v)) for k, v in items.items()]
        )

    def add(self, raw: bytes, frame: Frame) -> None:
        """Queue one frame (its original bytes and their decoding); commits when a batch is full."""
        pending = self._pending
        if not pending:
            self._batch_started = time.monotonic()
            self._t_lo = frame.t
        idx = self.frames
        pending.append(raw)
        self.frames += 1
        if frame.t > self._t_hi:
            self._t_hi = frame.t
        kind = frame.kind
        if kind == "step":
            self._n_steps += 1
            self.steps += 1
            seq = frame.body["seq"]
            if seq > self._seq_hi:
                self._seq_hi = seq
        elif kind in SEEK_STATE_KINDS:
            self._note_state(idx, raw, frame)
        if len(pending) >= self._batch_frames or time.monotonic() - self._batch_started >= self._batch_s:
            self.flush()

    def _note_state(self, idx: int, raw: bytes, frame: Frame) -> None:
        key = str(frame.body.get("seam", "")) if frame.kind == "hook" else ""
        slot = (frame.src, frame.kind, key)
        if frame.kind in _DEDUP_KINDS and self._last_state.get(slot) == frame.body:
            return
        self._last_state[slot] = frame.body
        self._pending_state.append((idx, frame.src, frame.kind, key, raw))
        if frame.kind in ("hello", "load"):
            self._sources.setdefault(frame.src, {})[frame.kind] = frame.body
            self._sources_dirty = True

    def tick(self) -> None:
        """Commit a partial batch once it is ``batch_ms`` old (call when the input is idle)."""
        if self._pending and time.monotonic() - self._batch_started >= self._batch_s:
            self.flush()

    def flush(self) -> None:
        """Compress and commit the pending frames as one batch (one transaction)."""
        if not self._pending:
            return
        n = len(self._pending)
        blob = self._zstd.compress(msgpack.packb(self._pending, use_bin_type=True))
        first_idx = self.frames - n
        con = self._con
        con.execute("BEGIN")
        try:
            con.execute(
                "INSERT INTO batches(id, first_idx, n_frames, n_steps, seq_hi, t_lo, t_hi, crc, blob)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (self.batches, first_idx, n, self._n_steps, self._seq_hi, self._t_lo, self._t_hi,
                 zlib.crc32(blob), blob),
            )
            if self._pending_state:
                con.executemany("INSERT INTO state(idx, src, kind, key, frame) VALUES (?, ?, ?, ?, ?)",
                                self._pending_state)
            if self._sources_dirty:
                self._put_meta(sources=session_sources(self._sources))
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        self.batches += 1
        self.bytes += len(blob)
        self._pending.clear()
        self._pending_state.clear()
        self._n_steps = 0
        self._sources_dirty = False

    def close(self) -> None:
        """Commit what is pending, mark the session complete and fold the WAL into the file."""
        if self._con is None:
            return
        self.flush()
        self._put_meta(closed_ns=time.time_ns(), frames=self.frames, steps=self.steps)
        self._con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self._con.close()
        self._con = None

    def __enter__(self) -> SessionWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def session_sources(latest: dict[str, dict]) -> dict[str, dict]:
    """Session metadata per publisher from its latest hello/load: SGLang version, args, models."""
    out = {}
    for src, kinds in latest.items():
        hello, load = kinds.get("hello") or {}, kinds.get("load") or {}
        args = hello.get("server_args") or {}
        out[src] = {
            "sglang_version": hello.get("sglang_version"),
            "shim_version": hello.get("shim_version"),
            "worker": hello.get("worker"),
            "server_args": args,
            "models": {
                "target": args.get("model_path"),
                "draft": args.get("draft_model_path"),
                "target_class": load.get("target_class"),
                "draft_class": load.get("draft_class"),
            },
        }
    return out


@dataclass(slots=True, frozen=True)
class BatchInfo:
    id: int
    first_idx: int
    n_frames: int
    n_steps: int
    seq_hi: int
    t_lo: int
    t_hi: int


class SessionReader:
    """Read a session file: iterate, seek by step seq / time / record index, rebuild state.

    Damaged batches raise :class:`CorruptBatchError` from :meth:`load_batch`; the iterators skip
    them, append the error to :attr:`errors` and go on with the next batch.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise StoreError(f"{self.path}: no such session file")
        try:
            self._con = _connect(self.path)
            self._con.execute("PRAGMA query_only=1")
            tables = {name for (name,) in self._con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not {"meta", "batches", "state"} <= tables:
                raise StoreError(f"{self.path} is an SQLite file but not an eagle3scope session")
            rows = self._con.execute("SELECT key, value FROM meta").fetchall()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path} is not a readable eagle3scope session: {exc}") from None
        self.meta = {k: json.loads(v) for k, v in rows}
        fmt = self.meta.get("store_format")
        if fmt is None:
            raise StoreError(f"{self.path} is an SQLite file but not an eagle3scope session")
        if fmt > STORE_FORMAT:
            raise StoreError(f"{self.path} uses session format {fmt}; this eagle3scope reads up to {STORE_FORMAT}: upgrade")
        self._zstd = zstandard.ZstdDecompressor()
        self.errors: list[StoreError] = []
        self.batches: list[BatchInfo] = []
        self._cached: tuple[int, list[Frame]] | None = None
        self.refresh()

    def note_error(self, error: StoreError) -> None:
        """Keep ``error`` in :attr:`errors` once, however often the damaged part is met."""
        if all(str(e) != str(error) for e in self.errors):
            self.errors.append(error)

    # -- catalog --------------------------------------------------------------------------------
    def refresh(self) -> None:
        """(Re)load the batch catalog, e.g. to follow a file that is still being recorded."""
        after = self.batches[-1].id if self.batches else -1
        try:
            rows = self._con.execute(
                "SELECT id, first_idx, n_frames, n_steps, seq_hi, t_lo, t_hi FROM batches WHERE id > ? ORDER BY id",
                (after,),
            ).fetchall()
        except sqlite3.DatabaseError as exc:
            rows = self._catalog_from_index(after, exc)
        self.batches.extend(BatchInfo(*row) for row in rows)
        self._idx_keys = [b.first_idx for b in self.batches]
        self._seq_keys = [b.seq_hi for b in self.batches]
        self._t_keys = [b.t_hi for b in self.batches]

    def _catalog_from_index(self, after: int, exc: Exception) -> list[tuple]:
        """The table's pages are damaged: list batches through the index and probe each row."""
        self.note_error(StoreError(f"batch catalog partly unreadable ({exc}); probing batch by batch"))
        try:
            ids = self._con.execute(
                "SELECT id, first_idx FROM batches INDEXED BY batches_by_idx WHERE id > ? ORDER BY first_idx", (after,)
            ).fetchall()
        except sqlite3.DatabaseError as exc2:
            raise StoreError(f"{self.path}: the batch table and its index are both damaged: {exc2}") from None
        rows = []
        for i, (bid, first_idx) in enumerate(ids):
            try:
                row = self._con.execute(
                    "SELECT id, first_idx, n_frames, n_steps, seq_hi, t_lo, t_hi FROM batches WHERE id = ?", (bid,)
                ).fetchone()
            except sqlite3.DatabaseError as err:
                n = ids[i + 1][1] - first_idx if i + 1 < len(ids) else None
                self.note_error(CorruptBatchError(bid, first_idx, n, f"its row cannot be read: {err}"))
                continue
            if row is not None:
                rows.append(row)
        return rows

    @property
    def complete(self) -> bool:
        """False when the recorder never closed the file (killed, crashed or still running)."""
        return "closed_ns" in self.meta

    def count(self, kind: str | None = None) -> int:
        """Frames in the catalog (``kind="step"``: step frames only)."""
        if kind == "step":
            return sum(b.n_steps for b in self.batches)
        if kind is None:
            return sum(b.n_frames for b in self.batches)
        return sum(1 for f in self.frames() if f[1].kind == kind)

    @property
    def t_first(self) -> int | None:
        return self.batches[0].t_lo if self.batches else None

    @property
    def t_last(self) -> int | None:
        return self.batches[-1].t_hi if self.batches else None

    # -- batches --------------------------------------------------------------------------------
    def load_batch(self, info: BatchInfo) -> list[Frame]:
        """Decode one batch, checked end to end (CRC, zstd checksum, msgpack, each frame).

        The last batch decoded is cached (a seek decodes it, then the replay reads it again);
        treat the returned list as read-only.
        """
        if self._cached is not None and self._cached[0] == info.id:
            return self._cached[1]
        frames = self._decode_batch(info)
        self._cached = (info.id, frames)
        return frames

    def _decode_batch(self, info: BatchInfo) -> list[Frame]:
        try:
            row = self._con.execute("SELECT crc, blob FROM batches WHERE id = ?", (info.id,)).fetchone()
        except sqlite3.DatabaseError as exc:
            raise CorruptBatchError(info.id, info.first_idx, info.n_frames, f"SQLite cannot read its row: {exc}") from None
        if row is None:
            raise CorruptBatchError(info.id, info.first_idx, info.n_frames, "its row is missing")
        crc, blob = row
        if not isinstance(blob, bytes) or zlib.crc32(blob) != crc:
            raise CorruptBatchError(info.id, info.first_idx, info.n_frames, "checksum mismatch (damaged bytes)")
        try:
            packed = self._zstd.decompress(blob, max_output_size=_MAX_BATCH_BYTES)
            raws = msgpack.unpackb(packed, raw=False, max_bin_len=MAX_FRAME_BYTES, max_array_len=_MAX_BATCH_FRAMES,
                                   max_str_len=0, max_map_len=0, max_ext_len=0)
        except Exception as exc:
            raise CorruptBatchError(info.id, info.first_idx, info.n_frames, f"cannot unpack: {exc}") from None
        if not isinstance(raws, list) or len(raws) != info.n_frames:
            raise CorruptBatchError(info.id, info.first_idx, info.n_frames, "frame count does not match the catalog")
        frames = []
        for i, raw in enumerate(raws):
            try:
                frames.append(decode_frame(raw))
            except FrameError as exc:
                raise CorruptBatchError(info.id, info.first_idx, info.n_frames,
                                        f"record {info.first_idx + i}: {exc}") from None
        return frames

    def _batch_at(self, idx: int) -> int:
        """Position in :attr:`batches` of the batch holding record ``idx`` (or the next one)."""
        pos = bisect.bisect_right(self._idx_keys, idx) - 1
        return max(pos, 0)

    def frames(self, start: int = 0) -> Iterator[tuple[int, Frame]]:
        """Yield ``(record index, frame)`` from record ``start`` on, skipping damaged batches."""
        for pos in range(self._batch_at(start), len(self.batches)):
            info = self.batches[pos]
            try:
                frames = self.load_batch(info)
            except CorruptBatchError as exc:
                self.note_error(exc)
                continue
            skip = max(0, start - info.first_idx)
            for i in range(skip, len(frames)):
                yield info.first_idx + i, frames[i]

    # -- seeking --------------------------------------------------------------------------------
    def _first_matching(self, pos: int, pred) -> int | None:
        for p in range(pos, len(self.batches)):
            info = self.batches[p]
            try:
                frames = self.load_batch(info)
            except CorruptBatchError as exc:
                self.note_error(exc)
                continue
            for i, frame in enumerate(frames):
                if pred(frame):
                    return info.first_idx + i
        return None

    def seek_seq(self, seq: int) -> int | None:
        """Record index of the first step whose ``seq`` >= ``seq`` (None: past the end)."""
        pos = bisect.bisect_left(self._seq_keys, seq)
        return self._first_matching(pos, lambda f: f.kind == "step" and f.body["seq"] >= seq)

    def seek_time(self, t_ns: int) -> int | None:
        """Record index of the first frame stamped at or after ``t_ns`` (None: past the end)."""
        pos = bisect.bisect_left(self._t_keys, t_ns)
        return self._first_matching(pos, lambda f: f.t >= t_ns)

    def state_at(self, idx: int) -> list[Frame]:
        """The latest hello/load/config/heartbeat per src and hook per seam recorded before ``idx``."""
        try:
            slots = self._con.execute("SELECT DISTINCT src, kind, key FROM state").fetchall()
            rows = []
            for src, kind, key in slots:
                row = self._con.execute(
                    "SELECT idx, frame FROM state WHERE src = ? AND kind = ? AND key = ? AND idx < ?"
                    " ORDER BY idx DESC LIMIT 1",
                    (src, kind, key, idx),
                ).fetchone()
                if row is not None:
                    rows.append(row)
        except sqlite3.DatabaseError as exc:
            self.note_error(StoreError(f"state table unreadable: {exc}"))
            return []
        out = []
        for _, raw in sorted(rows):
            try:
                out.append(decode_frame(raw))
            except FrameError as exc:
                self.note_error(StoreError(f"state frame unreadable: {exc}"))
        return out

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    def __enter__(self) -> SessionReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
