"""Damaged, truncated, tampered and bombed recordings through every reader, and the recorder's accidents.

Readers (``check``, ``export``, ``replay --headless``, ``salvage``) run through the real CLI on each
damaged copy: each ends with an exit status and at most one-line errors, never a traceback; ``check``
never reports fewer steps than the file holds without a read error and a non-zero exit (a silent
loss); nothing a reader opens is modified. ``salvage`` recovers the intact batches. The recorder
is killed (SIGKILL: at most ~100 ms lost), copied without its ``-wal`` while live (at most the
checkpoint bound stale), and run out of disk (one error line, committed steps readable).
"""

from __future__ import annotations

import hashlib
import io
import json
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import zstandard
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eagle3scope.cli import main
from eagle3scope.store import SessionReader, SessionWriter
from eagle3scope.store.salvage import salvage
from eagle3scope.store.format import MAX_BATCH_BYTES
from eagle3scope.store.writer import CHECKPOINT_S
from eagle3scope.wire import decode_frame
from support.hostile_support import Tally
from benchmarks.support.synthetic import session_frames, step_body
from benchmarks.support.tui_support import paused_app, play_to_end, run_async
from support.cli import invoke
from support.publisher import SyntheticPublisher

REPO = Path(__file__).resolve().parents[2]
STEPS = 600
OLD_FILE = Path(__file__).parents[1] / "data" / "session-format1.e3s"  # written by the release before this change
RECORDINGS = Tally("recordings", "damaged recordings through the readers")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A closed recording: hello, load, 600 steps (bs 2), heartbeats, in batches of 32 frames."""
    path = tmp_path_factory.mktemp("pristine") / "s.e3s"
    with SessionWriter(path, batch_frames=32) as writer:
        for raw in session_frames(STEPS, bs=2, seed=5, heartbeat_every=40):
            writer.add(raw, decode_frame(raw))
    return path


def _digest(path: Path) -> dict:
    """The bytes of the file and its -wal (the -shm is SQLite's lock table, not the recording)."""
    files = [Path(str(path) + suffix) for suffix in ("", "-wal")]
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in files if p.exists()}


def _read_all(path: Path, tally: Tally = RECORDINGS) -> dict:
    """Run every reader on ``path`` through the CLI; count tracebacks, crashes and silent losses."""
    runner = CliRunner()
    before = _digest(path)
    out = {}
    for name, args in (("check", ["check", str(path), "--json"]),
                       ("export", ["export", str(path), "--format", "jsonl", "--out", str(path) + ".jsonl"]),
                       ("replay", ["replay", str(path), "--headless", "--no-pace", "--json"]),
                       ("salvage", ["salvage", str(path), "--out", str(path) + ".salvaged"])):
        Path(str(path) + ".salvaged").unlink(missing_ok=True)
        result = runner.invoke(main, args)
        tally.add(cases=1)
        if "Traceback" in result.output or "Traceback" in (result.stderr or ""):
            tally.add(tracebacks=1)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            tally.add(crashes=1)
        out[name] = result
    assert _digest(path) == before, "a reader modified the file it read"
    check = out["check"]
    if check.exit_code in (0, 1, 3):
        summary = json.loads(check.stdout)
        lost = summary["summary"]["steps"] < STEPS
        if lost and (not summary["read_errors"] or check.exit_code == 0):
            tally.add(silent_losses=1)
    for name, result in out.items():
        errors = [line for line in (result.stderr or "").splitlines() if line.startswith("Error")]
        assert len(errors) <= 1, (name, result.stderr)
        assert result.exception is None or isinstance(result.exception, SystemExit), (name, result.exception)
        assert "Traceback" not in result.output, (name, result.output[-2000:])
    return out


def _copy(pristine: Path, tmp: Path) -> Path:
    path = tmp / "damaged.e3s"
    for suffix in ("", "-wal", "-shm", ".jsonl", ".salvaged"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    shutil.copyfile(pristine, path)
    return path


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)), min_size=1, max_size=8))
def test_byte_flips_anywhere(pristine, tmp_path, flips):
    path = _copy(pristine, tmp_path)
    data = bytearray(path.read_bytes())
    for where, xor in flips:
        data[int(where * len(data))] ^= xor
    path.write_bytes(bytes(data))
    _read_all(path)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keep=st.floats(0.02, 0.98))
def test_truncated_files_read_what_is_intact_and_salvage_recovers_it(pristine, tmp_path, keep):
    path = _copy(pristine, tmp_path)
    data = pristine.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    out = _read_all(path)
    salvaged = tmp_path / "salvaged.e3s"
    salvaged.unlink(missing_ok=True)
    try:
        report = salvage(path, salvaged)
    except Exception as exc:
        from eagle3scope.store import StoreError

        assert isinstance(exc, StoreError) and out["check"].exit_code == 2  # nothing readable at all
        return
    with SessionReader(salvaged) as reader:
        steps = sum(1 for _, f in reader.frames() if f.kind == "step")
        assert reader.errors == []
    assert steps == report.steps <= STEPS
    if out["check"].exit_code != 2:  # salvage gets at least what the reader got
        assert steps >= json.loads(out["check"].stdout)["summary"]["steps"]


CATALOG_COLUMNS = ("id", "first_idx", "n_frames", "n_steps", "seq_hi", "t_lo", "t_hi", "crc")
sql_values = (st.integers(-(2**63), 2**63 - 1) | st.sampled_from([0, -1, 1, 2**62, 10**6]) | st.floats(allow_nan=False)
              | st.text(max_size=6) | st.binary(max_size=6))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.sampled_from(["batches", "meta", "state"]), st.integers(0, 40),
                                st.sampled_from(CATALOG_COLUMNS), sql_values), min_size=1, max_size=4))
def test_catalog_meta_and_state_values_of_any_type(pristine, tmp_path, edits):
    """Values outside the CRC (the batch catalog, meta JSON, state frames) set to anything."""
    path = _copy(pristine, tmp_path)
    con = sqlite3.connect(path)
    for table, row, column, value in edits:
        try:
            if table == "batches":
                con.execute(f"UPDATE batches SET {column} = ? WHERE id = (SELECT id FROM batches LIMIT 1 OFFSET ?)",
                            (value, row))
            elif table == "meta":
                con.execute("UPDATE meta SET value = ? WHERE key = (SELECT key FROM meta LIMIT 1 OFFSET ?)",
                            (value, row % 7))
            else:
                con.execute("UPDATE state SET frame = ? WHERE idx = (SELECT idx FROM state LIMIT 1 OFFSET ?)",
                            (value, row % 5))
        except sqlite3.IntegrityError:  # a duplicate id or first_idx: SQLite itself refuses it
            pass
    con.commit()
    con.close()
    _read_all(path)


def _bomb(declared: int) -> bytes:
    """A tiny zstd frame whose header declares ``declared`` bytes of content (all zeros)."""
    out = zstandard.ZstdCompressor(level=1, write_content_size=True)
    sink = io.BytesIO()
    with out.stream_writer(sink, size=declared, closefd=False) as writer:
        chunk = bytes(1 << 20)
        for _ in range(declared // len(chunk)):
            writer.write(chunk)
    return sink.getvalue()


def test_zstd_bomb_is_refused_within_the_memory_bound(pristine, tmp_path):
    """A batch whose zstd frame declares 1.5 GiB (valid CRC): check refuses it, memory stays bounded."""
    import zlib

    path = _copy(pristine, tmp_path)
    blob = _bomb(1536 << 20)
    con = sqlite3.connect(path)
    con.execute("UPDATE batches SET blob = ?, crc = ? WHERE id = 3", (blob, zlib.crc32(blob)))
    con.commit()
    con.close()
    probe = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True);"
             " print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024); print(r.stdout)")
    done = subprocess.run([sys.executable, "-c", probe, sys.executable, "-m", "eagle3scope", "check", str(path),
                           "--json"], capture_output=True, text=True, timeout=120)
    code, peak = map(int, done.stdout.split("\n", 1)[0].split())
    result = json.loads(done.stdout.split("\n", 2)[1])
    bound = MAX_BATCH_BYTES + (200 << 20)  # one batch at the bound, plus the interpreter and libraries
    RECORDINGS.add(cases=1)
    RECORDINGS.peak(peak, bound)
    assert code == 3 and any("more than" in e for e in result["read_errors"]), done.stdout
    assert result["summary"]["steps"] > STEPS * 0.8
    assert peak < bound, f"check used {peak / 1e6:.0f} MB on an {len(blob) / 1e3:.0f} KB bomb"


def test_old_format_files_still_open():
    """tests/data/session-format1.e3s was written by the SessionWriter of the release before
    this change (store format 1): every reader takes it without an error."""
    with SessionReader(OLD_FILE) as reader:
        steps = sum(1 for _, f in reader.frames() if f.kind == "step")
        assert steps == 300 and reader.errors == [] and reader.complete
    result = invoke("check", str(OLD_FILE))
    assert result.exit_code == 0 and "steps: 300" in result.output


def test_readers_open_read_only_and_work_where_no_shm_can_be_made(pristine, tmp_path):
    """A live (unclosed) file with its -wal: reading leaves every byte as it was; and where the
    -shm cannot be created (read-only place), the reader falls back to reading the file as is."""
    path = tmp_path / "live.e3s"
    writer = SessionWriter(path, batch_frames=32, checkpoint_s=3600)
    for raw in session_frames(200, bs=1, seed=1):
        writer.add(raw, decode_frame(raw))
    writer.flush()
    before = _digest(path)
    assert any(name.endswith("-wal") for name in before)
    with SessionReader(path) as reader:
        assert sum(1 for _, f in reader.frames() if f.kind == "step") == 200
    assert _digest(path) == before
    writer.close()
    frozen = tmp_path / "frozen"
    frozen.mkdir()
    shutil.copyfile(path, frozen / "s.e3s")
    (frozen / "s.e3s-shm").mkdir()  # SQLite cannot create its shared-memory file here
    with SessionReader(frozen / "s.e3s") as reader:
        assert sum(1 for _, f in reader.frames() if f.kind == "step") == 200


def test_reader_on_a_read_only_mount(pristine, tmp_path):
    """A real read-only filesystem (a read-only bind mount; skipped where mounting is not allowed)."""
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    shutil.copyfile(pristine, src / "s.e3s")
    if subprocess.run(["mount", "--bind", str(src), str(mnt)], capture_output=True).returncode != 0:
        pytest.skip("cannot bind-mount here")
    try:
        if subprocess.run(["mount", "-o", "remount,ro,bind", str(mnt)], capture_output=True).returncode != 0:
            pytest.skip("cannot remount read-only here")
        result = invoke("check", str(mnt / "s.e3s"))
        assert result.exit_code == 0 and f"steps: {STEPS}" in result.output, result.output
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


# -- the recorder's accidents -----------------------------------------------------------------------
class _Publisher(SyntheticPublisher):
    """Step frames stamped with the wall clock at ``rate`` per second, from the start (no wait for a subscriber)."""

    def __init__(self, rate: float = 1000.0) -> None:
        super().__init__()
        self.rate, self.sent, self._stop = rate, [], threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        seq, t0 = 0, time.monotonic()
        while not self._stop.is_set():
            t = time.time_ns()
            self.send("step", step_body(seq, t_ns=t), src="dp0", n=seq, t=t)
            self.sent.append((seq, t))
            seq += 1
            delay = t0 + seq / self.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self.thread.join()
        self.close()


def _recorder(port: int, out: Path, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "eagle3scope", "record", "--connect", f"tcp://127.0.0.1:{port}",
                             "--out", str(out)], stderr=subprocess.PIPE, text=True, **popen)


def _wait_receiving(proc: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if "receiving from" in line:
            return
    raise AssertionError("the recorder never received a frame")


def _steps(path: Path) -> list[tuple[int, int]]:
    with SessionReader(path) as reader:
        return [(f.body["seq"], f.t) for _, f in reader.frames() if f.kind == "step"]


def test_sigkill_loses_at_most_the_last_100ms_and_a_copy_without_wal_is_at_most_the_checkpoint_bound_stale(
        tmp_path):
    out = tmp_path / "live.e3s"
    with _Publisher() as pub:
        proc = _recorder(pub.port, out)
        try:
            _wait_receiving(proc)
            time.sleep(CHECKPOINT_S * 2.5)
            copied_ns = time.time_ns()
            shutil.copyfile(out, tmp_path / "copy.e3s")  # the main file only, no -wal
            time.sleep(1.0)
            killed_ns = time.time_ns()
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.stderr.close()
    recorded = _steps(out)
    copy = _steps(tmp_path / "copy.e3s")
    first = recorded[0][0]
    sent = [(s, t) for s, t in pub.sent if s >= first]
    loss_ms = (killed_ns - recorded[-1][1]) / 1e6
    stale_s = (copied_ns - copy[-1][1]) / 1e9
    print(f"\nSIGKILL: last committed step {loss_ms:.0f} ms before the kill; copy without -wal {stale_s:.2f} s stale"
          f" (checkpoint bound {CHECKPOINT_S} s)")
    tally = Tally("recordings", "recorder SIGKILL and copy without -wal")
    tally.add(cases=2)
    before_kill = [x for x in sent if x[1] < killed_ns - 250_000_000]  # 100 ms bound + poll and load slack
    before_copy = [x for x in sent if x[1] < copied_ns - int((CHECKPOINT_S + 1.0) * 1e9)]
    if recorded[: len(before_kill)] != before_kill:
        tally.add(silent_losses=1)
    tally.emit()
    assert recorded[: len(before_kill)] == before_kill
    assert copy[: len(before_copy)] == before_copy and len(before_copy) > 500


def _ignore_sigxfsz_and_limit(limit: int):
    def setup():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return setup


def test_disk_full_is_one_error_line_and_the_committed_steps_stay_readable(tmp_path):
    out = tmp_path / "full.e3s"
    with _Publisher(rate=2000) as pub:
        proc = _recorder(pub.port, out, preexec_fn=_ignore_sigxfsz_and_limit(256 * 1024))
        try:
            _, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    tally = Tally("recordings", "recorder on a full disk")
    tally.add(cases=1)
    lines = [line for line in stderr.splitlines() if line.startswith("Error")]
    if "Traceback" in stderr:
        tally.add(tracebacks=1)
    tally.emit()
    assert proc.returncode == 1 and "Traceback" not in stderr and len(lines) == 1, stderr[-3000:]
    committed = int(lines[0].split("the ")[-1].split(" steps")[0])
    assert "cannot write" in lines[0] and committed > 0
    assert len(_steps(out)) == committed


# -- the replay TUI ---------------------------------------------------------------------------------
@run_async
async def test_replay_tui_lists_damaged_batches_in_its_event_log_and_plays_the_rest(pristine, tmp_path):
    """Two batches damaged (one CRC, one catalog row): the replay plays to the end, every other step
    is ingested, and the event log names both damaged parts."""
    path = _copy(pristine, tmp_path)
    con = sqlite3.connect(path)
    con.execute("UPDATE batches SET crc = crc + 1 WHERE id = 4")
    con.execute("UPDATE batches SET n_steps = 'x' WHERE id = 9")
    con.commit()
    con.close()
    with SessionReader(path) as reader:
        expected = sum(1 for _, f in reader.frames() if f.kind == "step")
    app = paused_app(path, speed=64.0)
    async with app.run_test(size=(120, 40)) as pilot:
        await play_to_end(app, pilot)
        await pilot.pause(0.3)
        steps = app.feed.read(lambda s: s.acceptance.n_steps)
        log = app.feed.read(lambda s: [e.text for e in s.events if e.level == "error"])
    RECORDINGS.add(cases=1)
    assert app.return_code in (None, 0)
    assert steps == expected < STEPS
    assert any("batch 4" in text and "checksum" in text for text in log), log
    assert any("batch 9" in text and "n_steps" in text for text in log), log


def test_an_unanticipated_error_is_one_line_and_exit_70(pristine, monkeypatch):
    """The CLI's last resort: a bug in a command prints one line, never a traceback (exit 70)."""
    import eagle3scope.commands.check as check

    def broken(*args, **kwargs):
        raise RuntimeError("rule exploded")

    monkeypatch.setattr(check, "analyse", broken)
    result = invoke("check", str(pristine))
    assert result.exit_code == 70 and "Traceback" not in result.output
    assert result.output.strip().splitlines() == [
        "Error: internal error: RuntimeError: rule exploded (set EAGLE3SCOPE_DEBUG=1 for the traceback)"]
    monkeypatch.setenv("EAGLE3SCOPE_DEBUG", "1")
    assert isinstance(invoke("check", str(pristine)).exception, RuntimeError)
