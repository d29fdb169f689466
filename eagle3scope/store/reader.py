"""Reading a session file (the format: ``format.py``): iterate, seek, rebuild what a viewer knew.

A reader validates the catalog: a damaged part is reported in :attr:`SessionReader.errors`, never
skipped silently.
"""

from __future__ import annotations

import bisect
import json
import sqlite3
from pathlib import Path
from typing import Iterator

from eagle3scope.store.format import (
    MAX_BATCH_FRAMES,
    STORE_FORMAT,
    BatchInfo,
    CorruptBatchError,
    StoreError,
    connect_read_only,
    decompressor,
    probe_batch_ids,
    unpack_blob,
)
from eagle3scope.wire import Frame, FrameError, decode_frame
from eagle3scope.wire.bodies import INT64_MAX, INT64_MIN

_MAX_STATE_SLOTS = 4096
#: damaged parts a reader lists (one more entry says the listing stopped)
MAX_ERRORS = 1000


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
        if type(bid) is not int or type(n_frames) is not int or not 1 <= n_frames <= MAX_BATCH_FRAMES:
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

    def _readable_batches(self, pos: int) -> Iterator[tuple[BatchInfo, list[Frame]]]:
        """``(batch, its frames)`` from position ``pos`` on; a damaged batch is noted and skipped."""
        for info in self.batches[pos:]:
            try:
                yield info, self.load_batch(info)
            except CorruptBatchError as exc:
                self.note_error(exc)

    def frames(self, start: int = 0) -> Iterator[tuple[int, Frame]]:
        """Yield ``(record index, frame)`` from record ``start`` on, skipping damaged batches."""
        for info, frames in self._readable_batches(self._batch_at(start)):
            skip = max(0, start - info.first_idx)
            for i in range(skip, len(frames)):
                yield info.first_idx + i, frames[i]

    # -- seeking --------------------------------------------------------------------------------
    def _first_matching(self, pos: int, pred) -> int | None:
        for info, frames in self._readable_batches(pos):
            for i, frame in enumerate(frames):
                if pred(frame):
                    return info.first_idx + i
        return None

    def seek_seq(self, seq: int) -> int | None:
        """Record index of the first step whose ``seq`` >= ``seq`` (None: past the end)."""
        pos = bisect.bisect_left(self._seq_keys, seq)
        return self._first_matching(pos, lambda f: f.kind == "step" and f.record.seq >= seq)

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
            if frame.src == src and frame.kind == "step" and frame.record.seq >= seq:
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
