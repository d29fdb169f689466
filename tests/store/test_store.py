"""Session files: exact round trip, seeking, state rebuild, replay pacing, damage confined to its batch."""

from __future__ import annotations

import sqlite3

import pytest

from eagle3scope.store import CorruptBatchError, SessionReader, SessionWriter, StoreError
from eagle3scope.store.replayer import Replayer
from eagle3scope.wire import decode_frame, encode_frame
from benchmarks.support.synthetic import T0_NS, hello_body, load_body, session_frames, step_body


def write(path, raws, **kw) -> list:
    frames = [decode_frame(r) for r in raws]
    with SessionWriter(path, **kw) as writer:
        for raw, frame in zip(raws, frames):
            writer.add(raw, frame)
    return frames


@pytest.fixture
def session(tmp_path):
    raws = list(session_frames(5000, bs=2, heartbeat_every=100))
    # a config change in the middle, so the state depends on where one seeks
    cfg = encode_frame("config", {"layers": [1, 2, 3], "captured": [1, 2, 3], "applied": True, "reason": None,
                                  "origin": "control", "request_id": "r1"}, src="dp0", n=99999, t=T0_NS + 2500 * 20_000_000)
    raws.insert(2600, cfg)
    path = tmp_path / "s.e3s"
    frames = write(path, raws, batch_frames=256)
    return path, frames


def test_round_trip_is_exact_and_metadata_comes_from_hello(session):
    path, frames = session
    with SessionReader(path) as reader:
        got = list(reader.frames())
        assert [i for i, _ in got] == list(range(len(frames)))
        assert [f for _, f in got] == frames
        assert reader.count() == len(frames) and reader.count("step") == 5000 and reader.count("config") == 1
        assert reader.complete and reader.errors == []
        assert len(reader.batches) == -(-len(frames) // 256)
        src = reader.meta["sources"]["dp0"]
        assert src["sglang_version"] == "0.5.23" and src["server_args"]["topk"] == 1
        assert src["models"]["draft_class"] == "LlamaForCausalLMEagle3"
        assert src["models"]["draft"] == hello_body()["server_args"]["draft_model_path"]


def test_frames_from_a_start_index(session):
    path, frames = session
    with SessionReader(path) as reader:
        assert [f for _, f in reader.frames(start=1000)] == frames[1000:]


@pytest.mark.parametrize("seq", [0, 1, 255, 256, 2499, 2500, 4999])
def test_seek_by_seq_and_time_match_a_linear_scan(session, seq):
    path, frames = session
    with SessionReader(path) as reader:
        idx = reader.seek_seq(seq)
        assert idx == next(i for i, f in enumerate(frames) if f.kind == "step" and f.body["seq"] >= seq)
        t = frames[idx].t - 1
        assert reader.seek_time(t) == next(i for i, f in enumerate(frames) if f.t >= t)
        assert reader.seek_seq(10**9) is None and reader.seek_time(frames[-1].t + 1) is None


def test_state_at_rebuilds_what_a_viewer_knew(session):
    path, frames = session
    with SessionReader(path) as reader:
        before = {f.kind: f.body for f in reader.state_at(reader.seek_seq(1000))}
        after = {f.kind: f.body for f in reader.state_at(reader.seek_seq(4000))}
    assert before["hello"] == hello_body() and before["load"] == load_body() and "config" not in before
    assert before["heartbeat"]["steps"] == 1000
    assert after["config"]["layers"] == [1, 2, 3] and after["heartbeat"]["steps"] == 4000


def test_sticky_repeats_are_not_duplicated_in_state(tmp_path):
    raws = [encode_frame("hello", hello_body(), src="dp0", n=i, t=T0_NS + i) for i in range(50)]
    raws.append(encode_frame("hello", hello_body(worker="v1"), src="dp0", n=50, t=T0_NS + 50))
    write(tmp_path / "h.e3s", raws)
    con = sqlite3.connect(tmp_path / "h.e3s")
    assert con.execute("SELECT count(*) FROM state").fetchone()[0] == 2


def test_partial_batch_commits_on_tick(tmp_path):
    path = tmp_path / "t.e3s"
    writer = SessionWriter(path, batch_ms=0)
    raw = encode_frame("step", step_body(0), src="dp0", n=0)
    writer.add(raw, decode_frame(raw))
    writer.tick()
    with SessionReader(path) as reader:  # readable while the writer is still open
        assert reader.count("step") == 1 and not reader.complete
    writer.close()


def test_refuses_existing_and_foreign_files(tmp_path, session):
    path, _ = session
    with pytest.raises(StoreError, match="already exists"):
        SessionWriter(path)
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE x(y)")
    with pytest.raises(StoreError, match="not an eagle3scope session"):
        SessionReader(other)
    (tmp_path / "junk").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError):
        SessionReader(tmp_path / "junk")


# -- damage ---------------------------------------------------------------------------------------
def _page_of(path, needle: bytes) -> tuple[int, int]:
    data = path.read_bytes()
    offset = data.find(needle)
    assert offset > 0
    page_size = sqlite3.connect(path).execute("PRAGMA page_size").fetchone()[0]
    return offset, page_size


def _blob(path, batch: int) -> bytes:
    return sqlite3.connect(path).execute("SELECT blob FROM batches WHERE id = ?", (batch,)).fetchone()[0]


def _flip_blob_byte(path):
    blob = _blob(path, 5)
    offset, _ = _page_of(path, blob[len(blob) // 2 : len(blob) // 2 + 64])
    with open(path, "r+b") as fh:
        fh.seek(offset + 10)
        byte = fh.read(1)
        fh.seek(offset + 10)
        fh.write(bytes([byte[0] ^ 0xFF]))


def _trash_overflow_page(path):
    blob = _blob(path, 7)
    offset, page_size = _page_of(path, blob[-200:-100])
    with open(path, "r+b") as fh:
        fh.seek(offset // page_size * page_size)
        fh.write(b"\xa5" * page_size)


def _trash_table_leaf(path):
    con = sqlite3.connect(path)
    leaves = [p for (p,) in con.execute("SELECT pageno FROM dbstat WHERE name = 'batches' AND pagetype = 'leaf'")]
    page_size = con.execute("PRAGMA page_size").fetchone()[0]
    con.close()
    with open(path, "r+b") as fh:
        fh.seek((leaves[len(leaves) // 2] - 1) * page_size)
        fh.write(b"\x5a" * page_size)


@pytest.mark.parametrize("damage", [_flip_blob_byte, _trash_overflow_page, _trash_table_leaf])
def test_damage_is_reported_by_batch_and_the_rest_reads(session, damage):
    path, frames = session
    damage(path)
    with SessionReader(path) as reader:
        got = dict(reader.frames())
        errors = list(reader.errors)
    lost = [e for e in errors if isinstance(e, CorruptBatchError)]
    assert lost, errors
    lost_idx = set()
    for err in lost:
        assert f"batch {err.batch}" in str(err) and f"records {err.first_idx}.." in str(err)
        lost_idx.update(range(err.first_idx, err.first_idx + err.n_frames))
    assert len(lost_idx) < len(frames) // 4
    assert set(got) == set(range(len(frames))) - lost_idx
    assert all(got[i] == frames[i] for i in got)


def test_damaged_batch_error_names_the_cause(session):
    path, _ = session
    _flip_blob_byte(path)
    with SessionReader(path) as reader:
        with pytest.raises(CorruptBatchError, match=r"batch 5 \(records 1280\.\.1535\) is unreadable: checksum"):
            reader.load_batch(reader.batches[5])


# -- replayer -------------------------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def replay(tmp_path):
    raws = list(session_frames(300, heartbeat_every=50, step_ns=20_000_000))
    gap_t = T0_NS + 301 * 20_000_000 + 60 * 10**9  # a minute of silence before the last step
    raws.append(encode_frame("step", step_body(300, t_ns=gap_t), src="dp0", n=10**6, t=gap_t))
    path = tmp_path / "r.e3s"
    frames = write(path, raws, batch_frames=64)
    clock = Clock()
    r = Replayer(path, speed=2.0, clock=clock, max_gap_s=5.0)
    yield r, clock, frames
    r.close()


def test_replayer_paces_by_recorded_time_over_speed(replay):
    r, clock, frames = replay
    assert [f.kind for f in r.due()] == ["hello", "load"]  # both stamped t0; the first step is 20 ms later
    clock.now += 0.009
    assert r.due() == [] and r.wait_s() == pytest.approx(0.001)
    clock.now += 0.001
    assert [f.body["seq"] for f in r.due()] == [0]  # 20 ms recorded / speed 2
    clock.now += 0.105  # 210 ms recorded: ten more steps, not eleven
    assert [f.body["seq"] for f in r.due() if f.kind == "step"] == list(range(1, 11))
    r.speed = 1000
    assert r.speed == 64.0


def test_replayer_pause_resume_and_step_one(replay):
    r, clock, _ = replay
    r.due()
    r.pause()
    clock.now += 10
    assert r.due() == [] and r.wait_s() is None
    one = r.step_one()
    assert [f.kind for f in one] == ["step"] and one[0].body["seq"] == 0 and r.step_seq == 0
    r.resume()
    assert [f.body["seq"] for f in r.due()] == [1]  # re-anchored at resume: no burst of 10 s of frames
    assert r.toggle() is True and r.paused


def test_replayer_seek_rebuilds_state_first(replay):
    r, clock, frames = replay
    idx = r.seek_step(120)
    assert frames[idx].body["seq"] == 120 and r.position == idx
    out = r.due()
    kinds = [f.kind for f in out]
    assert kinds[:3] == ["hello", "load", "heartbeat"] and out[2].body["steps"] == 100
    assert out[3].kind == "step" and out[3].body["seq"] == 120
    r.seek_time(frames[-1].t + 1)
    assert r.finished or [f.kind for f in r.due()] == ["hello", "load", "heartbeat"]


def test_replayer_shortens_long_silences(replay):
    r, clock, frames = replay
    r.seek_step(299)
    r.due()
    assert r.step_seq == 299
    wait = r.wait_s()
    assert wait == pytest.approx(5.0 / 2.0)  # 60 s recorded, capped at max_gap_s=5, at speed 2
    clock.now += wait
    assert [f.body["seq"] for f in r.due()] == [300] and r.finished
    assert list(r) == []


def test_two_publishers_interleaved_keep_their_own_state(tmp_path):
    streams = [list(session_frames(400, src=src, seed=i, heartbeat_every=100)) for i, src in enumerate(("dp0", "dp1"))]
    raws = [raw for pair in zip(*streams) for raw in pair]
    frames = write(tmp_path / "dp.e3s", raws, batch_frames=64)
    with SessionReader(tmp_path / "dp.e3s") as reader:
        idx = reader.seek_seq(250)
        assert frames[idx].kind == "step" and frames[idx].body["seq"] == 250 and frames[idx].src == "dp0"
        state = {(f.src, f.kind): f.body for f in reader.state_at(idx)}
        assert set(state) == {(s, k) for s in ("dp0", "dp1") for k in ("hello", "load", "heartbeat")}
        assert state[("dp1", "heartbeat")]["steps"] == 200
        assert set(reader.meta["sources"]) == {"dp0", "dp1"}
