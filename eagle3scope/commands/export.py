"""``eagle3scope export``: a session file as jsonl (every frame, full fidelity), csv, parquet or a
perfetto timeline.

csv/parquet hold one row per request per step (columns: :data:`eagle3scope.store.rows.COLUMNS`);
list columns are JSON strings in csv and int lists in parquet. In csv, the text columns (``src``,
``mode``, ``rid``, ``pass_widths``) pass through :func:`~eagle3scope.wire.untrusted.csv_cell`: controls
escaped, a formula prefix (= + - @) neutralised with a leading ``'``; jsonl keeps every string as sent.
perfetto writes Chrome trace-event JSON (:mod:`eagle3scope.report.timeline`) for ui.perfetto.dev or ``chrome://tracing``. Damaged batches are reported on
stderr, the rest is exported, and the exit status is 3 so a pipeline notices.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import click

from eagle3scope.wire.untrusted import csv_cell, json_line, terminal

_SUFFIX = {"jsonl": ".jsonl", "csv": ".csv", "parquet": ".parquet", "perfetto": ".trace.json"}
_LIST_COLUMNS = ("draft_ids", "accepted_ids", "capture_layers")
_TEXT_COLUMNS = ("src", "mode", "rid", "pass_widths")
_PARQUET_ROW_GROUP = 65536


def _json_default(obj: object) -> object:
    return obj.hex() if isinstance(obj, (bytes, bytearray)) else repr(obj)


def _open_text(out: str):
    return sys.stdout if out == "-" else open(out, "w", newline="", encoding="utf-8")


def _jsonl(reader, out: str, kinds: set[str] | None) -> int:
    count = 0
    fh = _open_text(out)
    try:
        for _, frame in reader.frames():
            if kinds is None or frame.kind in kinds:
                fh.write(json_line(frame.to_dict(), separators=(",", ":"), default=_json_default) + "\n")
                count += 1
    finally:
        if fh is not sys.stdout:
            fh.close()
    return count


def _step_row_batches(reader):
    from eagle3scope.store.rows import step_rows

    rows = []
    for _, frame in reader.frames():
        if frame.kind == "step":
            rows.extend(step_rows(frame))
            if len(rows) >= _PARQUET_ROW_GROUP:
                yield rows
                rows = []
    if rows:
        yield rows


def _csv(reader, out: str) -> int:
    from eagle3scope.store.rows import COLUMNS

    count = 0
    fh = _open_text(out)
    try:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        for rows in _step_row_batches(reader):
            for row in rows:
                for key in _LIST_COLUMNS:
                    row[key] = json.dumps(row[key], separators=(",", ":"))
                for key in _TEXT_COLUMNS:
                    row[key] = csv_cell(row[key])
            writer.writerows(rows)
            count += len(rows)
    finally:
        if fh is not sys.stdout:
            fh.close()
    return count


def _parquet(reader, out: str) -> int:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise click.ClickException("parquet export needs pyarrow: pip install 'eagle3scope[export]'") from None
    from eagle3scope.store.rows import COLUMNS

    types = {
        "seq": pa.int64(), "t_ns": pa.int64(), "src": pa.string(), "mode": pa.string(), "bs": pa.int64(),
        "rid": pa.string(), "accepted": pa.int64(), "bonus": pa.int8(), "accept_len_incl_bonus": pa.int64(),
        "n_drafted": pa.int64(), "draft_ids": pa.list_(pa.int64()), "accepted_ids": pa.list_(pa.int64()),
        "pass_widths": pa.string(), "feature_width": pa.int64(), "feature_fc": pa.bool_(),
        "capture_on": pa.bool_(), "capture_layers": pa.list_(pa.int64()), "draft_ms": pa.float64(),
        "verify_ms": pa.float64(),
    }
    schema = pa.schema([(name, types[name]) for name in COLUMNS])
    count = 0
    with pq.ParquetWriter(out, schema, compression="zstd") as writer:
        for rows in _step_row_batches(reader):
            try:
                table = pa.Table.from_pylist(rows, schema=schema)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
                raise click.ClickException(terminal(f"a step does not fit the export schema: {exc}")) from None
            writer.write_table(table)
            count += len(rows)
    return count


def _perfetto(reader, out: str) -> int:
    from eagle3scope.report.timeline import write_trace

    fh = _open_text(out)
    try:
        return write_trace((frame for _, frame in reader.frames()), fh)
    finally:
        if fh is not sys.stdout:
            fh.close()


@click.command(name="export")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["jsonl", "csv", "parquet", "perfetto"]), required=True)
@click.option("--out", "out", default=None, help="Output path (default: FILE with the format's suffix; '-' = stdout).")
@click.option("--kind", type=click.Choice(["step", "all"]), default=None,
              help="jsonl: step frames only or every frame (default all). csv/parquet always hold steps.")
def command(file: str, fmt: str, out: str | None, kind: str | None) -> None:
    """Export a session file as jsonl, csv, parquet or a perfetto timeline.

    jsonl writes one frame per line exactly as recorded ({v, k, src, n, t, b}); csv and parquet
    write one row per request per step with the pass-width summary columns; perfetto writes a
    trace (rounds as draft/verify/extend spans, batch and accept-length counters, violations and
    aux-config changes as instants) that ui.perfetto.dev opens.
    """
    from eagle3scope.store import SessionReader, StoreError

    if fmt != "jsonl" and kind == "all":
        raise click.UsageError("csv/parquet/perfetto are built from steps; use --format jsonl for all kinds")
    out = out or str(Path(file).with_suffix(_SUFFIX[fmt]))
    if fmt == "parquet" and out == "-":
        raise click.UsageError("parquet cannot go to stdout; give --out PATH")
    if out != "-" and Path(out).resolve() == Path(file).resolve():
        raise click.UsageError("--out would overwrite the session file")
    try:
        reader = SessionReader(file)
    except StoreError as exc:
        raise click.ClickException(terminal(str(exc))) from None
    with reader:
        if fmt == "jsonl":
            count = _jsonl(reader, out, {"step"} if kind == "step" else None)
        elif fmt == "csv":
            count = _csv(reader, out)
        elif fmt == "perfetto":
            count = _perfetto(reader, out)
        else:
            count = _parquet(reader, out)
        errors = list(reader.errors)
    what = {"jsonl": "frames", "perfetto": "trace events"}.get(fmt, "rows")
    click.echo(terminal(f"exported {count} {what} to {out}"), err=True)
    if errors:
        for err in errors:
            click.echo(terminal(f"error: {err}"), err=True)
        click.echo(terminal(f"{len(errors)} damaged part(s) skipped; everything else was exported"), err=True)
        sys.exit(3)
