"""``eagle3scope export --format perfetto``: the trace validates against the Trace Event Format's schema
(tests/data/trace-event-format.schema.json, written from Google's format document), and its spans,
counters and instants say what the recording says."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
from hypothesis import HealthCheck, given, settings, strategies as st

from eagle3scope.analysis import analyse
from eagle3scope.store import SessionWriter
from eagle3scope.wire import decode_frame, encode_frame
from benchmarks.support.synthetic import session_frames
from support.cli import invoke

SCHEMA = json.loads((Path(__file__).parents[1] / "data" / "trace-event-format.schema.json").read_text())


def record(path: Path, frames) -> Path:
    with SessionWriter(str(path)) as writer:
        for data in frames:
            writer.add(data, decode_frame(data))
    return path


def export(path: Path, out: Path) -> dict:
    result = invoke("export", str(path), "--format", "perfetto", "--out", str(out))
    assert result.exit_code == 0, result.output
    trace = json.loads(out.read_text())
    jsonschema.validate(trace, SCHEMA)
    return trace


def test_rounds_counters_and_violations_of_two_publishers(tmp_path):
    healthy = list(session_frames(200, src="dp0", bs=2))
    broken = list(session_frames(200, src="dp1", bs=2, aux_off=True, seed=1))
    frames = [f for pair in zip(healthy, broken) for f in pair]
    trace = export(record(tmp_path / "run.e3s", frames), tmp_path / "run.trace.json")
    events = trace["traceEvents"]
    names = {e["args"]["name"]: e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert set(names) == {"dp0", "dp1"} and names["dp0"] != names["dp1"]
    steps = [decode_frame(f) for f in healthy if decode_frame(f).kind == "step"]
    spans = [e for e in events if e["ph"] == "X" and e["pid"] == names["dp0"]]
    assert len([e for e in spans if e["name"] == "verify"]) == len(steps)
    first = steps[0].body
    draft, verify = (next(e for e in spans if e["name"] == n and e["args"]["seq"] == first["seq"])
                     for n in ("draft", "verify"))
    assert abs(draft["dur"] - first["draft_ms"] * 1e3) < 1e-6 and abs(verify["dur"] - first["verify_ms"] * 1e3) < 1e-6
    assert abs(draft["ts"] + draft["dur"] - verify["ts"]) < 1e-6  # laid end to end ...
    assert abs(verify["ts"] + verify["dur"] - first["t_ns"] / 1e3) < 1e-3  # ... ending at the step's time
    lengths = [e["args"]["mean"] for e in events if e["ph"] == "C" and e["name"] == "accept length"
               and e["pid"] == names["dp0"]]
    assert lengths[0] == (sum(first["accepted"]) + sum(first["bonus"])) / len(first["accepted"])
    state = analyse(decode_frame(f) for f in frames)
    fired = {(v.src, v.id) for v in state.violations()}
    drawn = {(pid, e["name"].split(": ", 1)[1]) for e in events if e.get("cat") == "violation" for pid in [e["pid"]]}
    assert fired and drawn == {(names[src], rule) for src, rule in fired}
    assert all(src == "dp1" for src, _ in fired)


def test_device_times_are_drawn_where_a_step_carries_them_and_say_their_clock(tmp_path):
    frames, device = [], {"draft_device_ms": 4.0, "verify_device_ms": 6.5}  # the extend was not marked
    for data in session_frames(5, src="gpu"):
        f = decode_frame(data)
        if f.kind == "step" and f.body["seq"] % 2:
            f.body.update(device)
        frames.append(encode_frame(f.kind, f.body, src=f.src, n=f.n, t=f.t))
    trace = export(record(tmp_path / "gpu.e3s", frames), tmp_path / "gpu.trace.json")
    steps = {f.body["seq"]: f.body for f in map(decode_frame, frames) if f.kind == "step"}
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert spans and {e["args"]["seq"] for e in spans} == set(steps)
    for e in spans:
        body, name = steps[e["args"]["seq"]], e["name"]
        timed = body["seq"] % 2 and name in ("draft", "verify")
        assert e["args"]["clock"] == ("device" if timed else "host")
        assert abs(e["dur"] - (body[f"{name}_device_ms"] if timed else body[f"{name}_ms"]) * 1e3) < 1e-6


def test_config_changes_become_instants(tmp_path):
    frames = list(session_frames(10))
    frames.append(encode_frame("config", {"layers": [1, 2, 3], "captured": [2, 3, 4], "applied": True, "reason": None,
                                          "origin": "control", "request_id": "x"}, src="dp0", n=999, t=frames and 5))
    trace = export(record(tmp_path / "c.e3s", frames), tmp_path / "c.json")
    configs = [e for e in trace["traceEvents"] if e.get("cat") == "config"]
    assert len(configs) == 1 and configs[0]["args"]["captured"] == [2, 3, 4] and "applied" in configs[0]["name"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=40), st.lists(st.one_of(st.none(), st.floats(0, 1e4), st.integers(-5, 10**9)),
                                      min_size=3, max_size=3))
def test_any_src_and_timing_still_validates(tmp_path, src, times):
    frames = []
    for i, data in enumerate(session_frames(5, src=src or "x")):
        f = decode_frame(data)
        if f.kind == "step":
            f.body.update(draft_ms=times[0], verify_ms=times[1], extend_ms=times[2])
        frames.append(encode_frame(f.kind, f.body, src=f.src, n=f.n, t=f.t))
    path = tmp_path / f"h{abs(hash((src, tuple(map(str, times)))))}.e3s"
    trace = export(record(path, frames), path.with_suffix(".json"))
    assert all(e["dur"] >= 0 for e in trace["traceEvents"] if e["ph"] == "X")
