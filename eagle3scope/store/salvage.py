"""Recover the intact batches of a truncated or damaged session file into a new one.

SQLite refuses a query as soon as it meets a damaged page, so a reader that scans the catalog
loses everything behind the first bad page. Salvage instead asks for every batch by id (the
recorder numbers them 0, 1, 2, ...), a lookup that only touches the pages on that row's path:
rows whose pages survived are read, checked end to end (CRC, zstd checksum, every frame
validated) and written to a fresh session, which rebuilds the catalog and the state table.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from eagle3scope.store.format import (
    PROBE_PAST_LAST,
    SIDE_SUFFIXES,
    StoreError,
    connect_read_only,
    decompressor,
    probe_batch_ids,
    unpack_blob,
)
from eagle3scope.store.writer import SessionWriter
from eagle3scope.wire import FrameError, decode_frame


@dataclass
class SalvageReport:
    batches_read: int = 0
    batches_lost: list[tuple[int, str]] = field(default_factory=list)  # (batch id, why)
    frames: int = 0
    steps: int = 0
    invalid_frames: int = 0
    damaged_past: int | None = None  # the catalog is unreadable after this batch id

    def summary(self) -> str:
        lost = len(self.batches_lost)
        text = (f"recovered {self.steps} steps ({self.frames} frames) from {self.batches_read} of"
                f" {self.batches_read + lost} batches found; {lost} damaged batch(es) lost")
        if self.invalid_frames:
            text += f", {self.invalid_frames} invalid frame(s) dropped"
        if self.damaged_past is not None:
            text += f"; the file is damaged past batch {self.damaged_past} (truncated?): later batches are lost"
        return text

    @property
    def complete(self) -> bool:
        return not self.batches_lost and not self.invalid_frames and self.damaged_past is None


def salvage(src: str | Path, out: str | Path) -> SalvageReport:
    """Copy every readable batch of ``src`` into a new session ``out``; raise StoreError if
    ``src`` cannot be opened at all or ``out`` cannot be written."""
    src, out = Path(src), Path(out)
    if not src.is_file():
        raise StoreError(f"{src}: no such session file")
    if out.exists() and out.resolve() == src.resolve():
        raise StoreError("--out would overwrite the damaged file")
    target = out.resolve()
    for side in SIDE_SUFFIXES:  # SQLite would take it for the input's own and later delete it
        if target == Path(f"{src.resolve()}{side}") or target == src.absolute().with_name(src.name + side).resolve():
            raise StoreError(f"--out {out} is {src}'s SQLite {side[1:]} file; choose another name")
    con = connect_read_only(src)
    report = SalvageReport()
    try:
        found, beyond = probe_batch_ids(con)
        report.damaged_past = beyond
        zstd = decompressor()
        with SessionWriter(out, endpoints=_endpoints(con)) as writer:
            for bid in _ids_with_holes(sorted(found), report):
                try:
                    row = con.execute("SELECT crc, blob FROM batches WHERE id = ?", (bid,)).fetchone()
                    if row is None:
                        raise ValueError("its row is missing")
                    raws = unpack_blob(zstd, *row)
                except (sqlite3.DatabaseError, ValueError) as exc:
                    report.batches_lost.append((bid, str(exc)))
                    continue
                report.batches_read += 1
                for raw in raws:
                    try:
                        frame = decode_frame(raw)
                    except FrameError:
                        report.invalid_frames += 1
                        continue
                    writer.add(raw, frame)
                writer.flush()  # one batch out per batch in: the salvaged file keeps the same grain
            report.frames, report.steps = writer.frames, writer.steps
    finally:
        con.close()
    return report


def _ids_with_holes(ids: list[int], report: SalvageReport) -> list[int]:
    """The recorder numbers batches 0, 1, 2, ...: every id up to the last one found, so a missing
    row counts as a lost batch, except across a jump wider than the probe range (a damaged id)."""
    out, expected = [], 0
    for bid in ids:
        if bid < 0:
            report.batches_lost.append((bid, "negative batch id"))
            continue
        if bid - expected <= PROBE_PAST_LAST:  # wider: a damaged id, not that many lost batches
            out.extend(range(expected, bid))
        out.append(bid)
        expected = bid + 1
    return out


def _endpoints(con: sqlite3.Connection) -> list[str]:
    try:
        row = con.execute("SELECT value FROM meta WHERE key = 'endpoints'").fetchone()
        value = json.loads(row[0]) if row else []
    except (sqlite3.DatabaseError, ValueError, TypeError):
        return []
    return [e for e in value if isinstance(e, str)] if isinstance(value, list) else []
