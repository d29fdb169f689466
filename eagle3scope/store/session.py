"""Session files: SQLite (WAL) holding zstd-compressed msgpack batches of raw wire frames.

Why this layout: one row per batch (512 frames or 100 ms) keeps inserts cheap enough for
>100k steps/s, each commit is durable against a killed recorder (WAL, one transaction per
batch), and a damaged batch costs only its own frames; a seek decodes one batch, which is why
batches stay at 512 frames. Rows carry the global record index of
their first frame and *running maxima* of step ``seq`` and time, so a seek is a bisect over a
catalog loaded at open. State frames (hello, load, config, hook per seam, heartbeat) are also
kept one per row in ``state`` so a seek can rebuild what a viewer knew at any point.

Bounds and accidents: a pending batch is committed at 512 frames, 100 ms or
:data:`MAX_PENDING_BYTES`; the WAL is checkpointed into the main file at most
``checkpoint_s`` (default 2 s) after a commit, so a copy made without its ``-wal`` is at most that
stale; a write error (disk full) is one :class:`StoreError` and leaves every committed batch
readable. Readers open the file read-only (never checkpointing or otherwise modifying it), bound
every decompression to :data:`MAX_BATCH_BYTES` whatever the zstd header declares, and validate
the catalog: a damaged part is reported in :attr:`SessionReader.errors`, never skipped silently.

Tables::

    meta(key, value)                   JSON values: store_format, wire_schema, created_ns,
                                       closed_ns (absent: the recorder died), endpoints, sources,
                                       loss (absent in files of older recorders: what the
                                       recorder lost, see wire.loss.StreamLoss)
    batches(id, first_idx, n_frames, n_steps, seq_hi, t_lo, t_hi, crc, blob)
    state(idx, src, kind, key, frame)  key is the hook seam, "" for the other kinds
"""

from __future__ import annotations

import bisect
import fcntl
import json
import os
import sqlite3
import stat
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import msgpack
import zstandard

from eagle3scope.wire import SCHEMA_MAJOR, SCHEMA_MINOR, Frame, FrameError, decode_frame, is_decode_step
from eagle3scope.wire.schema import MAX_FRAME_BYTES, RESENT_KINDS, STATE_KINDS
from eagle3scope.wire.validate import INT64_MAX, INT64_MIN

STORE_FORMAT = 1
_MAX_BATCH_FRAMES = 1 << 16
#: a batch is committed once its frames' bytes reach this (besides 512 frames / 100 ms)
MAX_PENDING_BYTES = 4 << 20
#: decompressed size a reader accepts for one batch, whatever its zstd header declares
MAX_BATCH_BYTES = 64 << 20
_DECOMPRESS_CHUNK = 1 << 20
#: seconds between WAL checkpoints while recording
CHECKPOINT_S = 2.0
_MAX_STATE_SLOTS = 4096
#: batch ids looked up past the last one found before a damaged catalog is taken to end
PROBE_PAST_LAST = 1024
#: damaged parts a reader lists (one more entry says the listing stopped)
MAX_ERRORS = 1000

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


def _claim(path: Path) -> int:
    """Create ``path`` for a new session: mode 0600 (a recording holds every request's token ids),
    exclusively (``O_EXCL``), or adopt an empty regular file of ours (``mktemp``); either way under
    an exclusive ``flock`` held until the writer closes, so of two recorders started on one path
    at the same moment exactly one writes, and the other is told why. Returns the locked descriptor."""
    flags = os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    created = False
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
        created = True
    except FileExistsError:
        try:
            fd = os.open(path, flags)
        except OSError as exc:
            raise StoreError(f"{path} already exists and cannot be opened ({exc}); choose another --out") from None
    except OSError as exc:
        raise StoreError(f"cannot create {path}: {exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            created = False  # the rival that holds the lock writes it now: never remove its file
            raise StoreError(f"{path} is being written by another recorder (started on the same --out);"
                             " choose another --out") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > 0:
            raise StoreError(f"{path} already exists; choose another --out or remove it")
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            raise StoreError(f"{path} belongs to uid {st.st_uid}, not to this user; choose another --out")
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.fchmod(fd, 0o600)  # an adopted empty file: the recording is private whatever made it
        for side in SIDE_SUFFIXES:  # under the lock: a rival recorder's own side files cannot exist yet
            if os.path.lexists(f"{path}{side}"):
                raise StoreError(f"{path}{side} exists (left by another database?): SQLite would read it as this"
                                 " file's; remove it or choose another --out")
    except BaseException:
        if created:
            os.unlink(path)
        os.close(fd)
        raise
    return fd


class SessionWriter:
    """Append frames to a new session file, one committed transaction per batch. The file is
    created 0600 and held under an exclusive lock while it is written (:func:`_claim`)."""

    def __init__(self, path: str | Path, *, batch_frames: int = 512, batch_ms: float = 100.0, level: int = 3,
                 endpoints: list[str] | None = None, checkpoint_s: float = CHECKPOINT_S,
                 max_pending_bytes: int = MAX_PENDING_BYTES) -> None:
        self.path = Path(path)
        self._con = None
        self._lock_fd = _claim(self.path)
        try:
            self._con = _connect(self.path)
            self._con.execute("PRAGMA journal_mode=WAL")
            self._con.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: every commit survives a killed process
            self._con.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            if self._con is not None:
                self._con.close()
            self._release()
            raise StoreError(f"cannot create {self.path}: {exc}") from None
        self._checkpoint_s = checkpoint_s
        self._max_pending_bytes = max(1, max_pending_bytes)
        self._pending_bytes = 0
        self._checkpointed = time.monotonic()
        self._uncheckpointed = False
        self.failed: str | None = None
        self.committed_steps = 0
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
        #: Verify steps that committed tokens (mode decode, acceptance present): what ``check`` counts.
        self.decode_steps = 0
        self.batches = 0
        self.bytes = 0
        try:
            self._put_meta(
                store_format=STORE_FORMAT,
                wire_schema=[SCHEMA_MAJOR, SCHEMA_MINOR],
                created_ns=time.time_ns(),
                endpoints=endpoints or [],
                sources={},
            )
        except sqlite3.Error as exc:
            self._con.close()
            self._con = None
            self._release()
            raise StoreError(f"cannot write {self.path}: {exc}") from None

    def _release(self) -> None:
        """Drop the lock, after SQLite closed: closing any descriptor of the file earlier would
        also drop SQLite's own POSIX locks on it."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

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
        self._pending_bytes += len(raw)
        self.frames += 1
        if frame.t > self._t_hi:
            self._t_hi = frame.t
        kind = frame.kind
        if kind == "step":
            self._n_steps += 1
            self.steps += 1
            body = frame.body
            if is_decode_step(body):
                self.decode_steps += 1
            seq = body["seq"]
            if seq > self._seq_hi:
                self._seq_hi = seq
        elif kind in STATE_KINDS:  # indexed apart, so a seek re-sends what was known
            self._note_state(idx, raw, frame)
        if (len(pending) >= self._batch_frames or self._pending_bytes >= self._max_pending_bytes
                or time.monotonic() - self._batch_started >= self._batch_s):
            self.flush()

    def _note_state(self, idx: int, raw: bytes, frame: Frame) -> None:
        key = str(frame.body.get("seam", "")) if frame.kind == "hook" else ""
        slot = (frame.src, frame.kind, key)
        if frame.kind in RESENT_KINDS and self._last_state.get(slot) == frame.body:
            return
        self._last_state[slot] = frame.body
        self._pending_state.append((idx, frame.src, frame.kind, key, raw))
        if frame.kind in ("hello", "load"):
            self._sources.setdefault(frame.src, {})[frame.kind] = frame.body
            self._sources_dirty = True

    def tick(self) -> None:
        """Commit a partial batch once it is ``batch_ms`` old and checkpoint the WAL once
        ``checkpoint_s`` passed (call when the input is idle)."""
        if self._pending and time.monotonic() - self._batch_started >= self._batch_s:
            self.flush()
        self._maybe_checkpoint()

    def _maybe_checkpoint(self) -> None:
        """Fold the WAL into the main file (PASSIVE: never waits for readers) on a time bound."""
        if self._uncheckpointed and time.monotonic() - self._checkpointed >= self._checkpoint_s:
            try:
                self._con.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            except sqlite3.Error as exc:
                self._fail(exc)
            self._checkpointed = time.monotonic()
            self._uncheckpointed = False

    def _fail(self, exc: Exception) -> None:
        """A write failed (disk full, I/O error): stop writing, keep what is committed."""
        con = self._con
        if con is not None and con.in_transaction:
            try:
                con.execute("ROLLBACK")
            except sqlite3.Error:
                pass
        self.failed = (f"cannot write {self.path}: {exc}; the {self.committed_steps} steps committed before"
                       " stay readable")
        raise StoreError(self.failed) from None

    def flush(self) -> None:
        """Compress and commit the pending frames as one batch (one transaction)."""
        if not self._pending:
            return
        if self.failed:
            raise StoreError(self.failed)
        n = len(self._pending)
        blob = self._zstd.compress(msgpack.packb(self._pending, use_bin_type=True))
        first_idx = self.frames - n
        con = self._con
        try:
            con.execute("BEGIN")
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
        except sqlite3.Error as exc:
            self._fail(exc)
        except BaseException:
            if con.in_transaction:
                con.execute("ROLLBACK")
            raise
        self.batches += 1
        self.bytes += len(blob)
        self.committed_steps += self._n_steps
        self._pending.clear()
        self._pending_state.clear()
        self._pending_bytes = 0
        self._n_steps = 0
        self._sources_dirty = False
        self._uncheckpointed = True
        self._maybe_checkpoint()

    def note_loss(self, loss: dict) -> None:
        """Keep the recorder's latest loss figures (frames that never reached it) in the metadata.

        A write error here is the recorder's write error (one StoreError); after one, nothing is written."""
        if self.failed or self._con is None:
            return
        try:
            self._put_meta(loss=loss)
        except sqlite3.Error as exc:
            self._fail(exc)

    def close(self) -> None:
        """Commit what is pending, mark the session complete and fold the WAL into the file.

        After a write error it only closes the connection (the committed batches stay) and
        raises nothing: the error was raised once already."""
        con = self._con
        if con is None:
            return
        try:
            if not self.failed:
                self.flush()
                try:
                    self._put_meta(closed_ns=time.time_ns(), frames=self.frames, steps=self.steps)
                    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                except sqlite3.Error as exc:
                    self._fail(exc)
        finally:
            self._con = None
            con.close()
            self._release()

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
        raws = msgpack.unpackb(bytes(out), raw=False, max_bin_len=MAX_FRAME_BYTES, max_array_len=_MAX_BATCH_FRAMES,
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


class SessionReader:
    """Read a session file: iterate, seek by step seq / time / record index, rebuild state.

    Damaged batches raise :class:`CorruptBatchError` from :meth:`load_batch`; the iterators skip
    them, append the error to :attr:`errors` and go on with the next batch.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise StoreError(f"{self.path}: no such session file")
        self._con = connect_read_only(self.path)
        self.errors: list[StoreError] = []
        self._error_texts: set[str] = set()
        self.invalid_frames = 0
        self._invalid_kinds: set[tuple[str | None, str | None]] = set()
        try:
            self._con.execute("PRAGMA query_only=1")
            tables = {name for (name,) in self._con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not {"meta", "batches", "state"} <= tables:
                raise StoreError(f"{self.path} is an SQLite file but not an eagle3scope session")
            rows = self._con.execute("SELECT key, value FROM meta").fetchall()
        except sqlite3.DatabaseError as exc:
            self.close()
            raise StoreError(f"{self.path} is not a readable eagle3scope session: {exc}") from None
        except StoreError:
            self.close()
            raise
        self.meta = self._parse_meta(rows)
        fmt = self.meta.get("store_format")
        if type(fmt) is not int:
            self.close()
            raise StoreError(f"{self.path} is an SQLite file but not an eagle3scope session (no valid store_format)")
        if fmt > STORE_FORMAT:
            self.close()
            raise StoreError(f"{self.path} uses session format {fmt}; this eagle3scope reads up to {STORE_FORMAT}: upgrade")
        self._zstd = decompressor()
        self.batches: list[BatchInfo] = []
        self._next_idx = 0
        self._cached: tuple[int, list[Frame]] | None = None
        try:
            self.refresh()
        except StoreError:
            self.close()
            raise

    def _parse_meta(self, rows: list) -> dict:
        """The meta table's JSON values; a damaged one is reported and left out."""
        meta = {}
        for key, value in rows:
            try:
                if type(key) is not str or type(value) not in (str, bytes):
                    raise ValueError("not a text key and JSON value")
                meta[key] = json.loads(value)
            except (ValueError, RecursionError) as exc:
                self.note_error(StoreError(f"meta value {str(key)[:40]!r} unreadable: {exc}"))
        closed = meta.get("closed_ns")
        if "closed_ns" in meta and type(closed) is not int:
            self.note_error(StoreError(f"meta value 'closed_ns' is not a time: {str(closed)[:40]!r}"))
            del meta["closed_ns"]
        return meta

    def note_error(self, error: StoreError) -> None:
        """Keep ``error`` in :attr:`errors` once, however often the damaged part is met; past
        :data:`MAX_ERRORS` one last entry says that the listing stopped."""
        text = str(error)
        if text in self._error_texts:
            return
        self._error_texts.add(text)
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(error)
        elif len(self.errors) == MAX_ERRORS:
            self.errors.append(StoreError(f"more than {MAX_ERRORS} damaged parts; listing stopped"))

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
        for row in rows:
            info = self._checked(row)
            if info is not None:
                self.batches.append(info)
        self._idx_keys = [b.first_idx for b in self.batches]
        self._seq_keys = [b.seq_hi for b in self.batches]
        self._t_keys = [b.t_hi for b in self.batches]

    def _checked(self, row: tuple) -> BatchInfo | None:
        """One catalog row, validated: a row without a usable id or frame count is reported and
        left out; record indices never go back (an overlap is renumbered, a gap reported) and
        ``seq_hi``/``t_hi`` stay running maxima, so a tampered value can never send a bisect past
        good batches."""
        bid, first_idx, n_frames, n_steps, seq_hi, t_lo, t_hi = row
        where = f"batch {bid}" if type(bid) is int else "a batch"
        if type(bid) is not int or type(n_frames) is not int or not 1 <= n_frames <= _MAX_BATCH_FRAMES:
            self.note_error(StoreError(f"{where}: catalog row unusable (id {bid!r}, frames {n_frames!r}); skipped"))
            return None
        bad = [name for name, value, lo, hi in (
            ("n_steps", n_steps, 0, n_frames), ("seq_hi", seq_hi, -1, INT64_MAX),
            ("t_lo", t_lo, INT64_MIN, INT64_MAX), ("t_hi", t_hi, INT64_MIN, INT64_MAX))
            if type(value) is not int or not lo <= value <= hi]
        if type(first_idx) is int and self._next_idx < first_idx <= INT64_MAX:
            self.note_error(StoreError(f"records {self._next_idx}..{first_idx - 1} are missing from the catalog"))
            self._next_idx = first_idx
        elif first_idx != self._next_idx:
            bad.append("first_idx")
        prev = self.batches[-1] if self.batches else None
        if not bad and prev is not None and (seq_hi < prev.seq_hi or t_hi < prev.t_hi):
            bad.append("running maxima")
        if bad:
            self.note_error(StoreError(f"{where}: catalog values {', '.join(bad)} damaged; read from its contents"))
            n_steps = n_steps if type(n_steps) is int and 0 <= n_steps <= n_frames else 0
            seq_hi = max(seq_hi if type(seq_hi) is int and -1 <= seq_hi <= INT64_MAX else -1,
                         prev.seq_hi if prev else -1)
            t_lo = t_lo if type(t_lo) is int and INT64_MIN <= t_lo <= INT64_MAX else (prev.t_hi if prev else 0)
            t_hi = max(t_hi if type(t_hi) is int and INT64_MIN <= t_hi <= INT64_MAX else t_lo,
                       prev.t_hi if prev else t_lo)
        info = BatchInfo(bid, self._next_idx, n_frames, n_steps, seq_hi, t_lo, t_hi)
        self._next_idx += n_frames
        return info

    def _catalog_from_index(self, after: int, exc: Exception) -> list[tuple]:
        """The table's pages are damaged: find batches through the index, what a scan yields before
        the damage and by probing ids, then read each row on its own."""
        self.note_error(StoreError(f"batch catalog partly unreadable ({exc}); probing batch by batch"))
        found, beyond = probe_batch_ids(self._con, after)
        if beyond is not None:
            self.note_error(StoreError(f"catalog damaged past batch {beyond}: later batches may be lost"))
        rows = []
        ids = sorted(found)
        for i, bid in enumerate(ids):
            try:
                row = self._con.execute(
                    "SELECT id, first_idx, n_frames, n_steps, seq_hi, t_lo, t_hi FROM batches WHERE id = ?", (bid,)
                ).fetchone()
            except sqlite3.DatabaseError as err:
                first, nxt = found[bid], found.get(ids[i + 1]) if i + 1 < len(ids) else None
                n = nxt - first if first is not None and nxt is not None and nxt > first else None
                self.note_error(CorruptBatchError(bid, first, n, f"its row cannot be read: {err}"))
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
        try:
            raws = unpack_blob(self._zstd, *row)
        except ValueError as exc:
            raise CorruptBatchError(info.id, info.first_idx, info.n_frames, str(exc)) from None
        if len(raws) != info.n_frames:
            raise CorruptBatchError(info.id, info.first_idx, info.n_frames, "frame count does not match the catalog")
        frames = []
        for i, raw in enumerate(raws):
            try:
                frames.append(decode_frame(raw))
            except FrameError as exc:  # one bad frame (an older recorder kept it): drop it, keep the batch
                self._invalid(info.first_idx + i, exc)
        steps = sum(1 for f in frames if f.kind == "step")
        if steps != info.n_steps:
            self.note_error(StoreError(f"batch {info.id}: holds {steps} steps, its catalog says {info.n_steps}"))
        return frames

    def _invalid(self, idx: int, exc: FrameError) -> None:
        """Count an invalid recorded frame; report the first one per publisher and kind."""
        self.invalid_frames += 1
        key = (exc.src, exc.kind)
        if key not in self._invalid_kinds and len(self._invalid_kinds) < _MAX_STATE_SLOTS:
            self._invalid_kinds.add(key)
            self.note_error(StoreError(f"record {idx} skipped: {exc}"))

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

    def seek_run_step(self, src: str, began: tuple[int, int], seq: int) -> int | None:
        """Record index of the first step of ``src`` with ``seq`` >= ``seq`` in the run whose first
        frame was ``began`` = (n, t): a publisher restarted under the same ``src`` counts its steps
        from 0 again, so the first such seq in the file may belong to an earlier run."""
        n, t = began
        pos = bisect.bisect_left(self._t_keys, t)  # running maxima: the frame is in this batch or later
        start = self._first_matching(pos, lambda f: f.src == src and f.n == n and f.t == t)
        if start is None:
            return None
        for idx, frame in self.frames(start):
            if frame.src == src and frame.kind == "step" and frame.body["seq"] >= seq:
                return idx
        return None

    def seek_time(self, t_ns: int) -> int | None:
        """Record index of the first frame stamped at or after ``t_ns`` (None: past the end)."""
        pos = bisect.bisect_left(self._t_keys, t_ns)
        return self._first_matching(pos, lambda f: f.t >= t_ns)

    def state_at(self, idx: int) -> list[Frame]:
        """The latest hello/load/config/heartbeat per src and hook per seam recorded before ``idx``."""
        try:
            slots = self._con.execute("SELECT DISTINCT src, kind, key FROM state LIMIT ?", (_MAX_STATE_SLOTS,)).fetchall()
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
