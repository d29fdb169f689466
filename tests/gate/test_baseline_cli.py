"""``check``/``gate``/``report`` ``--baseline OLD`` and the sliced acceptance, on synthetic recordings
(real-engine recordings: tests/analysis/test_baseline_engine.py)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.support.analysis_streams import K, Stream, session, sliced_session
from support.cli import invoke
from support.recordings import record
from support.gating import Publisher, failed, gate, junit_cases

OLD_FILE = Path(__file__).parents[1] / "data" / "session-format1.e3s"


def check_json(*args) -> tuple[int, dict]:
    done = invoke("check", *map(str, args), "--json")
    return done.exit_code, json.loads(done.output)


def test_check_against_a_baseline_fails_naming_what_dropped_and_passes_the_same_draft(tmp_path):
    base = record(tmp_path / "base.e3s", sliced_session(600, seed=1))
    same = record(tmp_path / "same.e3s", sliced_session(600, seed=2))
    worse = record(tmp_path / "worse.e3s", sliced_session(600, long_rates=(0.8, 0.3, 0.6), seed=3))

    code, out = check_json(same, "--baseline", base)
    assert code == 0, out["baseline"]
    assert out["baseline"]["regressed"] == [] and out["baseline"]["path"] == str(base)
    assert out["baseline"]["baseline_rounds"] == out["baseline"]["current_rounds"] == 600

    junit = tmp_path / "j.xml"
    done = invoke("check", worse, "--baseline", base, "--junit", str(junit))
    assert done.exit_code == 1, done.output
    assert "REGRESSED: mean accept length, position 2, context_length=2K-8K, sampling=sampled" in done.output
    assert "FAIL    position 2: " in done.output and "lower in 100% of resamples" in done.output
    cases = junit_cases(junit)
    assert failed(cases) == {"baseline[mean accept length]", "baseline[position 2]",
                             "baseline[context_length=2K-8K]", "baseline[sampling=sampled]"}
    assert {"baseline[position 1]", "baseline[context_length=128-511]", "baseline[sampling=greedy]"} <= set(cases)
    assert "baseline[context_length=<128]" not in cases  # 28 request-steps a side: too few to judge
    assert "too few request-steps to judge: context_length=<128" in done.output
    code, out = check_json(worse, "--baseline", base)
    p2 = next(d for d in out["baseline"]["overall"] if d["name"] == "position 2")
    assert p2["regressed"] and p2["interval"][1] < -p2["tolerance"] and p2["change"] < -0.15
    assert set(p2) >= {"baseline", "current", "change", "interval", "confidence", "judged", "reason"}


def test_a_baseline_that_cannot_judge_is_no_pass(tmp_path):
    run = record(tmp_path / "run.e3s", session(300))
    not_a_session = tmp_path / "junk.e3s"
    not_a_session.write_bytes(b"not a session")
    done = invoke("check", run, "--baseline", not_a_session)
    assert done.exit_code == 2 and "baseline" in done.output
    empty = record(tmp_path / "empty.e3s", session(0))
    done = invoke("check", run, "--baseline", empty)
    assert done.exit_code == 3 and "has no decode step to compare with" in done.output
    short = record(tmp_path / "short.e3s", session(20))  # 40 request-steps
    done = invoke("check", run, "--baseline", short, "--junit", str(tmp_path / "j.xml"))
    assert done.exit_code == 3 and "needed on each side" in done.output
    assert failed(junit_cases(tmp_path / "j.xml")) == {"complete"}


def test_gate_judges_a_live_stream_against_a_baseline(tmp_path):
    base = record(tmp_path / "base.e3s", sliced_session(400, seed=1))
    with Publisher(sliced_session(400, long_rates=(0.8, 0.3, 0.6), seed=4)) as pub:
        done = gate("--connect", pub.endpoint, "--steps", "300", "--timeout", "30", "--baseline", str(base), "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    out = json.loads(done.stdout)
    assert "position 2" in out["baseline"]["regressed"] and "baseline[position 2]" in out["gate"]["failed"]


def test_check_slices_acceptance_by_context_batch_sampling_and_constraint(tmp_path):
    frames = sliced_session(500, long_rates=(0.5, 0.5, 0.5))
    code, out = check_json(record(tmp_path / "s.e3s", frames))
    assert code == 0
    slices = out["summary"]["slices"]
    steps = [f.body for f in frames if f.kind == "step"]

    def expected(i: int) -> tuple[int, float]:  # request i of every step: its request-steps and mean accept length
        return len(steps), sum(b["accepted"][i] + 1 for b in steps) / len(steps)

    # the short request's context runs 100..599 (28 below 128, 384 up to 511, 88 from 512), the long one's 3000..3499
    assert [(e["label"], e["request_steps"]) for e in slices["context_length"]] == \
        [("<128", 28), ("128-511", 384), ("512-2K", 88), ("2K-8K", 500)]
    assert slices["context_length"][-1]["mean_accept_length"] == expected(1)[1]
    sampling = {e["label"]: e for e in slices["sampling"]}
    assert (sampling["greedy"]["request_steps"], sampling["greedy"]["mean_accept_length"]) == expected(0)
    assert (sampling["sampled"]["request_steps"], sampling["sampled"]["mean_accept_length"]) == expected(1)
    assert len(sampling["sampled"]["per_position"]) == K
    assert slices["batch_size"] == [{"label": "2-4", "request_steps": 1000, "mean_accept_length": out["summary"][
        "mean_accept_length"], "per_position": out["summary"]["per_position"]}]
    assert [e["label"] for e in slices["constraint"]] == ["unknown"]  # no step says (the grammar field)
    text = invoke("check", record(tmp_path / "s2.e3s", frames)).output
    assert "mean acceptance length by sampling: greedy " in text and "sampled " in text


def test_a_constrained_flag_slices_where_a_step_carries_it(tmp_path):
    frames = sliced_session(50)
    s = Stream()
    relabelled = []
    for f in frames:
        body = dict(f.body)
        if f.kind == "step":
            body["constrained"] = [True, False]
        relabelled.append(s.frame(f.kind, body))
    code, out = check_json(record(tmp_path / "c.e3s", relabelled))
    assert {e["label"]: e["request_steps"] for e in out["summary"]["slices"]["constraint"]} == \
        {"constrained": 50, "free": 50}


def test_an_old_recording_still_reads_and_slices_as_unknown():
    code, out = check_json(OLD_FILE)
    slices = out["summary"]["slices"]
    n = out["summary"]["request_steps"]
    assert n > 0
    for dim in ("context_length", "sampling", "constraint"):
        assert [(e["label"], e["request_steps"]) for e in slices[dim]] == [("unknown", n)]


def test_report_carries_the_slices_and_the_baseline(tmp_path):
    base = record(tmp_path / "base.e3s", sliced_session(600, seed=1))
    worse = record(tmp_path / "worse.e3s", sliced_session(600, long_rates=(0.8, 0.3, 0.6), seed=3))
    out = tmp_path / "r.md"
    done = invoke("report", worse, "--format", "markdown", "--out", str(out), "--baseline", str(base))
    assert done.exit_code == 0, done.output
    md = out.read_text()
    assert "## Acceptance by slice" in md and "## Against the baseline" in md
    row = next(line for line in md.splitlines() if line.startswith("| position 2 |"))
    assert "REGRESSED" in row
    html = tmp_path / "r.html"
    assert invoke("report", worse, "--out", str(html), "--baseline", str(base)).exit_code == 0
    assert "Against the baseline" in html.read_text() and "REGRESSED" in html.read_text()
