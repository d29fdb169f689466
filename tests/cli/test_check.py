"""``eagle3scope check`` on recordings written with the store's own writer."""

from __future__ import annotations

import json

import pytest

from benchmarks.support.analysis_streams import H, session
from eagle3scope.wire.schema import MAX_PUBLISHERS
from support.cli import invoke
from support.recordings import record


def test_healthy_recording_passes_with_summary(tmp_path):
    frames = session(800, bs=2, accept_p=0.7)
    result = invoke("check", record(tmp_path / "ok.e3s", frames), "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    steps = [f.body for f in frames if f.kind == "step"]
    lengths = [a + 1 for s in steps for a in s["accepted"]]
    assert out["summary"]["steps"] == 800
    assert out["summary"]["mean_accept_length"] == pytest.approx(sum(lengths) / len(lengths))
    assert len(out["summary"]["per_position"]) == 3 and all(0.5 < r < 0.9 for r in out["summary"]["per_position"])
    assert out["violations"] == [] and out["summary"]["complete"] is True


def test_broken_recording_exits_1_with_violations(tmp_path):
    frames = session(300, accept_p=0.0, algorithm="EAGLE",
                     step_kw={"feature_width": H, "fc": False, "capture": {"on": False, "layers": None}})
    result = invoke("check", record(tmp_path / "bad.e3s", frames), "--json")
    assert result.exit_code == 1
    out = json.loads(result.output)
    ids = {v["id"] for v in out["violations"]}
    assert {"aux-capture-off", "fc-bypassed", "zero-acceptance"} <= ids
    for v in out["violations"]:
        assert set(v) >= {"id", "severity", "title", "evidence"} and v["severity"] in ("error", "warning", "info")
    assert out["summary"]["mean_accept_length"] == 1.0
    text = invoke("check", str(tmp_path / "bad.e3s"))
    assert text.exit_code == 1 and "ERROR   fc-bypassed" in text.output and "fix:" in text.output


def test_warnings_fail_only_when_asked(tmp_path):
    frames = session(100)
    frames.insert(5, frames[4].__class__("hook", "r0", 10**6, frames[4].t, {"seam": "verify", "status": "failed",
                                                                           "detail": "boom"}))
    path = record(tmp_path / "warn.e3s", frames)
    assert invoke("check", path).exit_code == 0
    assert invoke("check", path, "--fail-on", "warning").exit_code == 1


def test_unreadable_file_exits_2(tmp_path):
    junk = tmp_path / "junk.e3s"
    junk.write_bytes(b"not a session")
    assert invoke("check", str(junk)).exit_code == 2
    assert invoke("check", str(tmp_path / "missing.e3s")).exit_code == 2


def test_list_rules_names_every_rule_once():
    from eagle3scope.analysis import RULE_IDS

    result = invoke("check", "--list-rules")
    listed = [line.split()[0] for line in result.output.splitlines()]
    assert result.exit_code == 0 and listed == list(RULE_IDS) and len(set(listed)) == len(listed)


def test_frames_from_publishers_past_the_cap_make_the_verdict_incomplete(tmp_path):
    heartbeat = {"steps": 1, "dropped": 0, "hook_failures": 0, "queued": 0}
    frames = session(200)
    last = frames[-1]
    strangers = [last.__class__("heartbeat", f"stranger{i}", 0, last.t + i, heartbeat) for i in range(MAX_PUBLISHERS + 9)]
    path = record(tmp_path / "crowd.e3s", frames + strangers)
    result = invoke("check", path, "--json")
    out = json.loads(result.output)
    # the first publisher's healthy run is still judged; ten strangers found no place and say so (exit 3)
    assert result.exit_code == 3 and out["violations"] == []
    assert out["summary"]["refused_frames"] == 10 and len(out["summary"]["publishers"]) == MAX_PUBLISHERS
    text = invoke("check", path)
    assert text.exit_code == 3 and "10 frame(s) from publishers past the first 256 were not analysed" in text.output
