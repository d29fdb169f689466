"""Writing a session file (the format: ``format.py``): one committed transaction per batch.

Bounds and accidents: a pending batch is committed at 512 frames, 100 ms or
:data:`MAX_PENDING_BYTES`; the WAL is checkpointed into the main file at most
``checkpoint_s`` (default 2 s) after a commit, so a copy made without its ``-wal`` is at most that
stale; a write error (disk full) is one :class:`StoreError` and leaves every committed batch
readable.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import stat
import time
import zlib
from pathlib import Path

import msgpack
import zstandard

from eagle3scope.store.format import MAX_BATCH_FRAMES, SCHEMA, SIDE_SUFFIXES, STORE_FORMAT, StoreError
from eagle3scope.wire import SCHEMA_MAJOR, SCHEMA_MINOR, Frame
from eagle3scope.wire.bodies import Hello, Load
from eagle3scope.wire.schema import STATE_KINDS

#: a batch is committed once its frames' bytes reach this (besides 512 frames / 100 ms)
MAX_PENDING_BYTES = 4 << 20
#: seconds between WAL checkpoints while recording
CHECKPOINT_S = 2.0


def _json(value: object) -> str:
    return json.dumps(value, default=lambda o: o.hex() if isinstance(o, (bytes, bytearray)) else repr(o))


def _connect(path: str | Path) -> sqlite3.Connection:
    con = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    con.execute("PRAGMA busy_timeout=5000")
    return con



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
            self._con.executescript(SCHEMA)
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
        self._batch_frames = max(1, min(batch_frames, MAX_BATCH_FRAMES))
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
            step = frame.record
            if step.is_decode_step:
                self.decode_steps += 1
            seq = step.seq
            if seq > self._seq_hi:
                self._seq_hi = seq
        elif kind in STATE_KINDS:  # indexed apart, so a seek re-sends what was known
            self._note_state(idx, raw, frame)
        if (len(pending) >= self._batch_frames or self._pending_bytes >= self._max_pending_bytes
                or time.monotonic() - self._batch_started >= self._batch_s):
            self.flush()

    def _note_state(self, idx: int, raw: bytes, frame: Frame) -> None:
        key = (frame.record.seam or "") if frame.kind == "hook" else ""
        slot = (frame.src, frame.kind, key)
        # re-sent unchanged (hello and load are sticky): one row until it changes; heartbeats all kept
        if frame.kind != "heartbeat" and self._last_state.get(slot) == frame.body:
            return
        self._last_state[slot] = frame.body
        self._pending_state.append((idx, frame.src, frame.kind, key, raw))
        if frame.kind in ("hello", "load"):
            self._sources.setdefault(frame.src, {})[frame.kind] = frame.record
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
    """Session metadata per publisher from its latest hello/load records: engine version, args, models."""
    out = {}
    for src, kinds in latest.items():
        hello, load = kinds.get("hello") or Hello(), kinds.get("load") or Load()
        out[src] = {
            "engine": hello.engine_id,
            "sglang_version": hello.sglang_release,
            "engine_version": hello.engine_release,
            "shim_version": hello.shim_version,
            "worker": hello.worker,
            "server_args": hello.server_args_sent,
            "models": {
                "target": hello.args.model_path,
                "draft": hello.args.draft_model_path,
                "target_class": load.target_class,
                "draft_class": load.draft_class,
            },
        }
    return out


