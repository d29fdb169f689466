"""Files without races: token files (directory of ours, O_NOFOLLOW + fstat on the open descriptor),
recordings created 0600 and exclusively (two recorders on one path: exactly one writes), and
``salvage --out`` never one of its input's SQLite side files. Real files, real processes."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from benchmarks.support.analysis_streams import session
from eagle3scope.store import SessionReader, SessionWriter, StoreError
from eagle3scope.wire import encode_frame
from eagle3scope.wire.token import TokenError, create_token_file, read_token
from benchmarks.support.neighbour_support import as_neighbour, rename_race
from support.cli import CLI
from support.recordings import record



# -- token files ------------------------------------------------------------------------------------
def test_a_token_directory_of_another_user_is_refused(shared_tmp, neighbour):
    theirs = shared_tmp / "tokens"
    as_neighbour(neighbour, lambda p: os.mkdir(p, 0o755), str(theirs))
    with pytest.raises(TokenError, match=f"belongs to uid {neighbour[0]}"):
        create_token_file(theirs)
    done = subprocess.run([*CLI, "launch", "--control", "--token-dir", str(theirs), "--", sys.executable, "-c", "0"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and f"belongs to uid {neighbour[0]}" in done.stderr, done.stderr
    assert not os.listdir(theirs)


def test_a_token_directory_others_can_write_is_refused(tmp_path):
    loose = tmp_path / "loose"
    loose.mkdir()
    os.chmod(loose, 0o777)
    with pytest.raises(TokenError, match="not writable by group or other"):
        create_token_file(loose)
    good = create_token_file(tmp_path / "tokens")
    os.chmod(good.parent, 0o770)
    with pytest.raises(TokenError, match="token directory .* not writable by group or other"):
        read_token(good)


def test_a_token_link_is_refused_even_to_a_good_token(tmp_path):
    good = create_token_file(tmp_path / "tokens")
    link = good.parent / "link.token"
    link.symlink_to(good)
    with pytest.raises(TokenError, match="symbolic link"):
        read_token(link)


def test_read_token_never_returns_a_swapped_in_token(tmp_path, neighbour):
    """A rename race against the check: every call gives the good token or refuses (before this
    change, a check then a read by name, the attacker's token came back: RELIABILITY.md)."""
    directory = tmp_path / "tokens"
    good = create_token_file(directory)
    evil = directory / "evil.token"
    evil.write_text("A" * 43 + "\n")
    os.chmod(evil, 0o600)
    os.chown(evil, *neighbour)  # the neighbour's file, as if they could write here
    target = directory / "control.token"
    tally = rename_race(read_token, good, evil, target, 3000, min_seconds=1.0)
    assert tally["evil"] == 0 and tally["good"] > 0 and tally["refused"] > 0, tally


# -- recordings ---------------------------------------------------------------------------------------
def test_recordings_are_created_0600_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        path = tmp_path / "r.e3s"
        writer = SessionWriter(path)
        frames = session(40)
        for f in frames:
            writer.add(encode_frame(f.kind, f.body, src=f.src, n=f.n, t=f.t), f)
        writer.flush()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(Path(f"{path}-wal").stat().st_mode) == 0o600
        writer.close()
    finally:
        os.umask(old)
    empty = tmp_path / "mktemp.e3s"
    empty.touch(0o644)  # made by mktemp or a script: adopted, and made private
    record(empty, session(10))
    assert stat.S_IMODE(empty.stat().st_mode) == 0o600 and SessionReader(empty).complete


def test_two_writers_on_one_path_exactly_one_wins(tmp_path):
    for round_ in range(25):
        path = tmp_path / f"race{round_}.e3s"
        barrier = threading.Barrier(4)
        outcomes: list = []

        def start():
            barrier.wait()
            try:
                outcomes.append(SessionWriter(path))
            except StoreError as exc:
                outcomes.append(str(exc))

        threads = [threading.Thread(target=start) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        writers = [o for o in outcomes if isinstance(o, SessionWriter)]
        assert len(writers) == 1, outcomes
        assert all("another recorder" in o or "already exists" in o for o in outcomes if isinstance(o, str)), outcomes
        writers[0].close()


def test_two_record_commands_on_one_path_one_records_the_other_says_why(tmp_path):
    out = tmp_path / "same.e3s"
    endpoint = f"ipc://{tmp_path}/nobody.sock"
    procs = [subprocess.Popen([*CLI, "record", "--connect", endpoint, "--out", str(out), "--duration", "1.5"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(60), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 1], results
    loser = next(err for code, err in results if code == 1)
    assert "another recorder" in loser or "already exists" in loser, loser
    assert "UNIQUE" not in loser and "Traceback" not in loser
    assert SessionReader(out).complete


def test_a_stale_wal_beside_a_new_recording_is_refused(tmp_path):
    path = tmp_path / "new.e3s"
    Path(f"{path}-wal").write_bytes(b"left over")
    with pytest.raises(StoreError, match="-wal exists"):
        SessionWriter(path)
    assert not path.exists()


@pytest.mark.parametrize("side", ["-wal", "-shm", "-journal"])
def test_salvage_refuses_its_inputs_side_files_as_out(tmp_path, side):
    src = record(tmp_path / "in.e3s", session(50))
    before = src.read_bytes()
    done = subprocess.run([*CLI, "salvage", str(src), "--out", f"{src}{side}"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and f"SQLite {side[1:]} file" in done.stderr, done.stderr
    assert not Path(f"{src}{side}").exists() and src.read_bytes() == before
    link = tmp_path / "via-link.e3s"
    link.symlink_to(f"{src}{side}")  # a dangling link into the side file's name
    done = subprocess.run([*CLI, "salvage", str(src), "--out", str(link)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert not Path(f"{src}{side}").exists()
