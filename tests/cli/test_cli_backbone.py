"""The backbone commands for real: record over ZeroMQ in a subprocess, kill it, replay and export."""

from __future__ import annotations

import csv
import io
import json
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from eagle3scope.store import SessionReader, SessionWriter
from eagle3scope.wire import decode_frame
from eagle3scope_shim.publisher import Publisher
from support.cli import CLI, invoke
from benchmarks.support.synthetic import hello_body, load_body, session_frames, step_body


class Recorder:
    """``eagle3scope record`` as a child process, its stderr read line by line on a thread."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([*CLI, "record", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stderr:
            self.lines.put(line)

    def wait_for(self, text: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                assert self.proc.poll() is None, f"recorder exited early: {self.seen}"
                continue
            self.seen.append(line)
            if text in line:
                return
        raise AssertionError(f"recorder never printed {text!r}: {self.seen}")

    def finish(self, timeout: float = 30.0) -> str:
        self.proc.wait(timeout=timeout)
        time.sleep(0.05)
        while not self.lines.empty():
            self.seen.append(self.lines.get())
        return "".join(self.seen)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def publisher():
    pub = Publisher("tcp://127.0.0.1:*", "dp0", queue_size=16384, sticky_interval_s=0.1)
    pub.set_sticky("hello", hello_body())
    pub.set_sticky("load", load_body())
    pub.start()
    yield pub
    pub.close()


@pytest.fixture
def recorder():
    started = []
    yield lambda *args: started.append(Recorder(*args)) or started[-1]
    for rec in started:
        rec.kill()


def test_help_lists_the_backbone_commands():
    out = invoke("--help", catch_exceptions=False).output
    for name in ("record", "replay", "export", "check"):
        assert name in out
    for name in ("record", "replay", "export"):
        assert invoke(name, "--help", catch_exceptions=False).exit_code == 0


def test_decode_steps_stop_where_check_counts_steps(tmp_path, publisher, recorder):
    """``record --decode-steps N`` (what ``demo --steps N`` uses) leaves exactly N steps for ``check``:
    prefill frames and verify steps that committed nothing are recorded but not counted."""
    n = 150
    out = tmp_path / "decode.e3s"
    rec = recorder("--connect", publisher.endpoint, "--out", str(out), "--decode-steps", str(n))
    rec.wait_for("receiving from dp0")
    for i in range(3 * n):
        mode = "prefill" if i % 5 == 0 else "decode"
        body = step_body(i, bs=2, mode=mode)
        if i % 7 == 0:
            body.update(accepted=[], bonus=[], accepted_ids=[])
        publisher.submit("step", body)
    log = rec.finish()
    assert rec.proc.returncode == 0, log
    assert f"stopped ({n} decode steps)" in log
    result = invoke("check", str(out), "--json", catch_exceptions=False)
    assert json.loads(result.output)["summary"]["steps"] == n


def test_published_steps_reach_export_exactly(tmp_path, publisher, recorder):
    n = 2000
    out = tmp_path / "e2e.e3s"
    rec = recorder("--connect", publisher.endpoint, "--out", str(out), "--steps", str(n))
    rec.wait_for("receiving from dp0")
    bodies = [step_body(i, bs=3) for i in range(n)]
    for body in bodies:
        publisher.submit("step", body)
    log = rec.finish()
    assert rec.proc.returncode == 0, log
    assert f"stopped ({n} steps)" in log and publisher.dropped == 0

    result = invoke("export", out, "--format", "jsonl", "--kind", "step", "--out", tmp_path / "s.jsonl",
                    catch_exceptions=False)
    assert result.exit_code == 0
    lines = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert [line["b"] for line in lines] == bodies
    assert all(line["k"] == "step" and line["src"] == "dp0" and line["v"][0] == 1 for line in lines)

    assert invoke("export", str(out), "--format", "csv", "--out", str(tmp_path / "s.csv"), catch_exceptions=False).exit_code == 0
    rows = list(csv.DictReader(io.StringIO((tmp_path / "s.csv").read_text())))
    assert len(rows) == 3 * n
    for row, (body, i) in zip(rows, ((b, i) for b in bodies for i in range(3))):
        assert int(row["seq"]) == body["seq"] and row["rid"] == body["rids"][i]
        assert int(row["accepted"]) == body["accepted"][i] and int(row["bonus"]) == body["bonus"][i]
        assert int(row["accept_len_incl_bonus"]) == body["accepted"][i] + body["bonus"][i]
        assert json.loads(row["draft_ids"]) == body["draft_ids"][i]
        assert json.loads(row["accepted_ids"]) == body["accepted_ids"][i]
        assert int(row["feature_width"]) == body["passes"][0]["width"] and row["feature_fc"] == "True"

    pq = pytest.importorskip("pyarrow.parquet")
    assert invoke("export", str(out), "--format", "parquet", catch_exceptions=False).exit_code == 0
    table = pq.read_table(out.with_suffix(".parquet")).to_pylist()
    assert [r["draft_ids"] for r in table] == [d for b in bodies for d in b["draft_ids"]]
    assert [r["accepted_ids"] for r in table] == [d for b in bodies for d in b["accepted_ids"]]
    assert [r["t_ns"] for r in table[::3]] == [b["t_ns"] for b in bodies]


def _publish_until(pub: Publisher, stop: threading.Event) -> None:
    seq = 0
    while not stop.is_set():
        for _ in range(200):
            pub.submit("step", step_body(seq))
            seq += 1
        time.sleep(0.01)


def _committed_steps(path) -> int:
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return con.execute("SELECT coalesce(sum(n_steps), 0) FROM batches").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0


def test_sigkill_leaves_every_committed_batch(tmp_path, publisher, recorder):
    out = tmp_path / "killed.e3s"
    rec = recorder("--connect", publisher.endpoint, "--out", str(out))
    rec.wait_for("receiving from dp0")
    stop = threading.Event()
    feeder = threading.Thread(target=_publish_until, args=(publisher, stop))
    feeder.start()
    try:
        deadline = time.monotonic() + 30
        while (committed := _committed_steps(out)) < 3000 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert committed >= 3000
        rec.proc.send_signal(signal.SIGKILL)
        rec.proc.wait(timeout=10)
    finally:
        stop.set()
        feeder.join()
    with SessionReader(out) as reader:
        assert not reader.complete
        steps = [f.body["seq"] for _, f in reader.frames() if f.kind == "step"]
        assert reader.errors == [] and len(steps) == reader.count("step") >= committed
        assert steps == sorted(steps) and len(set(steps)) == len(steps)
        assert reader.meta["sources"]["dp0"]["sglang_version"] == "0.5.23"


def test_sigterm_stops_cleanly_with_everything_counted(tmp_path, publisher, recorder):
    out = tmp_path / "term.e3s"
    rec = recorder("--connect", publisher.endpoint, "--out", str(out))
    rec.wait_for("receiving from dp0")
    for i in range(777):
        publisher.submit("step", step_body(i))
    deadline = time.monotonic() + 10
    while _committed_steps(out) < 777 and time.monotonic() < deadline:
        time.sleep(0.05)
    rec.proc.send_signal(signal.SIGTERM)
    log = rec.finish()
    assert rec.proc.returncode == 0 and "stopped (SIGTERM)" in log, log
    with SessionReader(out) as reader:
        assert reader.complete and reader.count("step") == 777


def test_duration_and_existing_file(tmp_path):
    out = tmp_path / "empty.e3s"
    done = subprocess.run([*CLI, "record", "--connect", "tcp://127.0.0.1:1", "--out", str(out), "--duration", "0.3"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    with SessionReader(out) as reader:
        assert reader.complete and reader.count() == 0
    again = subprocess.run([*CLI, "record", "--out", str(out), "--duration", "0.1"], capture_output=True, text=True,
                           timeout=30)
    assert again.returncode != 0 and "already exists" in again.stderr
    bogus = invoke("record", "--connect", "not-an-endpoint", "--out", str(tmp_path / "never.e3s"))
    assert bogus.exit_code == 1 and "cannot subscribe to not-an-endpoint" in bogus.output
    assert not (tmp_path / "never.e3s").exists()


@pytest.fixture
def recording(tmp_path):
    path = tmp_path / "rec.e3s"
    with SessionWriter(path, batch_frames=128) as writer:
        for raw in session_frames(600, bs=2, heartbeat_every=100):
            writer.add(raw, decode_frame(raw))
    return path


def test_replay_headless_seeks_and_summarises(recording):
    result = invoke("replay", recording, "--headless", "--no-pace", "--from-step", "250", "--steps", "5",
                    catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].lstrip().startswith("hello") and "sglang 0.5.23" in lines[0]
    load = load_body()
    assert lines[1].lstrip().startswith("load") and (
        f"draft LlamaForCausalLMEagle3 fc={load['fc']['in']}->{load['fc']['out']} "
        f"aux configured={load['aux']['configured']} captured={load['aux']['captured']} capture=on") in lines[1]
    steps = [line for line in lines if line.startswith("step")]
    assert [int(line.split()[1]) for line in steps] == [250, 251, 252, 253, 254]
    assert "draft_extend:12288+fc;decode:4096x2" in steps[0] and "capture=on" in steps[0]


def test_replay_json_lines_are_full_frames(recording):
    result = invoke("replay", str(recording), "--headless", "--json", "--speed", "64", "--steps", "3", catch_exceptions=False)
    frames = [json.loads(line) for line in result.output.splitlines()]
    assert [f["k"] for f in frames] == ["hello", "load", "step", "step", "step"]
    with SessionReader(recording) as reader:
        recorded = [f.to_dict() for _, f in reader.frames()][:5]
    assert frames == recorded


def test_export_reports_damage_and_exits_3(recording, tmp_path):
    with SessionReader(recording) as reader:
        total = reader.count()
    con = sqlite3.connect(recording)
    blob, first, n = con.execute("SELECT blob, first_idx, n_frames FROM batches WHERE id = 2").fetchone()
    con.close()
    data = bytearray(recording.read_bytes())
    at = data.find(blob[100:160]) + 20
    data[at] ^= 0xFF
    recording.write_bytes(bytes(data))
    result = invoke("export", recording, "--format", "jsonl", "--out", tmp_path / "x.jsonl")
    assert result.exit_code == 3
    assert f"batch 2 (records {first}..{first + n - 1}) is unreadable" in result.output
    assert len((tmp_path / "x.jsonl").read_text().splitlines()) == total - n


def test_viewer_side_needs_no_torch_textual_or_sglang(recording):
    code = textwrap.dedent(f"""
        import sys
        for name in ("torch", "sglang", "transformers", "textual"):
            sys.modules[name] = None
        from eagle3scope.cli import main
        import eagle3scope.commands.record, eagle3scope.commands.replay, eagle3scope.commands.export
        import eagle3scope.live.subscriber, eagle3scope.store.replayer
        main(["replay", {str(recording)!r}, "--no-pace", "--steps", "2"])
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr
    assert "replaying headless" in done.stderr and done.stdout.count("\nstep ") + done.stdout.startswith("step") == 2
