"""The num_steps advisor (eagle3scope/analysis/advisor.py, ``eagle3scope advise``) on rounds whose truth
is known: accept lengths by truncation, a time model with known coefficients, the recommendation."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner
from hypothesis import given, settings, strategies as st

from eagle3scope.analysis import analyse
from eagle3scope.analysis.advisor import BLOCKS, MAX_FIT_ERROR, MIN_REQUEST_STEPS, RoundLog, advise
from eagle3scope.cli import main
from eagle3scope.store import SessionWriter
from eagle3scope.wire import decode_frame, encode_frame
from benchmarks.support.advisor_rounds import DRAFT, EXTEND, VERIFY, chain_frames
from benchmarks.support.synthetic import hello_body
from support.cli import invoke

def log_of(frames) -> RoundLog:
    log = RoundLog()
    for data in frames:
        log.add_frame(decode_frame(data))
    return log


def true_round_ms(k: int, bs: int) -> float:
    tokens = bs * (k + 1)
    return k * (DRAFT[0] + DRAFT[1] * bs) + VERIFY[0] + VERIFY[1] * tokens + EXTEND[0] + EXTEND[1] * tokens


def test_accept_length_at_the_recorded_depth_is_checks_mean_and_shallower_ones_truncate():
    frames = chain_frames(600)
    advice = advise(log_of(frames))
    state = analyse(decode_frame(f) for f in frames)
    assert advice.settings[-1].num_steps == 5
    assert abs(advice.settings[-1].accept_length - state.acceptance.total.mean_accept_length) < 1e-12
    rounds = [r.accepted for r in log_of(frames).rounds]
    for s in advice.settings:
        n = sum(map(len, rounds))
        expected = sum(min(a, s.num_steps) + 1 for accepted in rounds for a in accepted) / n
        assert abs(s.accept_length - expected) < 1e-12
        lo, hi = s.accept_length_ci
        assert lo <= s.accept_length <= hi
    lengths = [s.accept_length for s in advice.settings]
    assert lengths == sorted(lengths)  # deeper never commits fewer


def test_time_model_recovers_the_machine_and_the_best_setting():
    advice = advise(log_of(chain_frames(3000)))
    model = advice.model
    assert abs(model.draft_per_step.a - DRAFT[0]) < 0.05 and abs(model.draft_per_step.b - DRAFT[1]) < 0.01
    assert abs(model.verify.a - VERIFY[0]) < 0.1 and abs(model.verify.b - VERIFY[1]) < 0.003
    assert abs(model.extend.a - EXTEND[0]) < 0.05 and abs(model.extend.b - EXTEND[1]) < 0.002
    assert model.rel_error < 0.03
    # The true best: expected committed tokens over expected round time (batches uniform in 1..8).
    rates, truth = (0.9, 0.7, 0.5, 0.35, 0.2), {}
    for k in range(1, 6):
        reach, length = 1.0, 1.0
        for i in range(k):
            reach *= rates[i]
            length += reach
        truth[k] = sum(length * bs for bs in range(1, 9)) / sum(true_round_ms(k, bs) for bs in range(1, 9))
    best = max(truth, key=truth.get)
    assert advice.recommended == best
    for s in advice.settings:  # predicted relative throughput within 2 % of the truth
        assert abs((1 + s.gain) - truth[s.num_steps] / truth[5]) < 0.02
    if best != 5:
        assert advice.headline().startswith(f"steps 5 -> {best}: +")


def test_too_few_request_steps_gives_no_advice_and_says_how_many_more():
    log = log_of(chain_frames(20))
    advice = advise(log)
    have = sum(len(r.accepted) for r in log.rounds)
    assert advice.recommended is None
    assert advice.needs_request_steps == MIN_REQUEST_STEPS - have
    assert f"needs {MIN_REQUEST_STEPS - have} more request-steps" in advice.headline()
    assert advice.settings  # the table is still shown


def test_trees_and_untimed_rounds_are_refused_with_the_reason():
    tree = advise(log_of(chain_frames(600, topk=4)))
    assert tree.recommended is None and not tree.settings and "tree" in tree.reason
    frames = []
    for data in chain_frames(600):
        f = decode_frame(data)
        if f.kind == "step":
            f.body["verify_ms"] = None
        frames.append(encode_frame(f.kind, f.body, src=f.src, n=f.n, t=f.t))
    untimed = advise(log_of(frames))
    assert untimed.recommended is None and "verify" in untimed.reason
    adaptive = []  # --speculative-adaptive: some rounds drafted fewer steps than the configured 5
    for data in chain_frames(600):
        f = decode_frame(data)
        if f.kind == "step":
            f.body["num_steps"] = 5 if f.body["seq"] % 2 or max(f.body["accepted"]) > 3 else 3
        adaptive.append(encode_frame(f.kind, f.body, src=f.src, n=f.n, t=f.t))
    refused = advise(log_of(adaptive))
    assert refused.recommended is None and not refused.settings and "adaptive" in refused.reason
    steady = []
    for data in chain_frames(600):  # every round at the configured budget: predicted as before
        f = decode_frame(data)
        if f.kind == "step":
            f.body["num_steps"] = 5
        steady.append(encode_frame(f.kind, f.body, src=f.src, n=f.n, t=f.t))
    assert advise(log_of(steady)).settings == advise(log_of(chain_frames(600))).settings
    assert untimed.settings[0].accept_length is not None and untimed.settings[0].tokens_per_s is None


GRAPHS_HOST_ONLY = {"server": {"cuda_graph": True}, "observable": {"device_timings": False}}


def test_a_graph_or_overlap_server_with_host_times_only_gets_acceptance_advice_only():
    clean = advise(log_of(chain_frames(3000)))
    assert clean.recommended not in (None, 5)  # the same rounds on a CPU server: throughput advice
    for hello in (GRAPHS_HOST_ONLY, {"server": {"cuda_graph": False, "overlap_schedule": True}},
                  {"server": {"cuda_graph": True}}):  # an older shim's hello, which names no device timings
        advice = advise(log_of(chain_frames(3000, launches=True, **hello)))
        assert advice.recommended is None
        assert all(s.tokens_per_s is None and s.gain is None and s.gain_ci is None for s in advice.settings)
        assert [s.accept_length for s in advice.settings] == [s.accept_length for s in clean.settings]
        assert "acceptance only" in advice.reason and "host times only" in advice.reason
        assert ("CUDA graphs" if hello["server"]["cuda_graph"] else "overlap loop") in advice.reason
        assert advice.to_dict()["throughput_predicted"] is False


def test_device_times_are_fitted_where_the_rounds_carry_them():
    advice = advise(log_of(chain_frames(3000, device=True, launches=True, server={"cuda_graph": True},
                                        observable={"device_timings": True})))
    assert advice.model.clock == "device" and "(device ms)" in advice.model.describe()
    assert abs(advice.model.verify.a - VERIFY[0]) < 0.1 and abs(advice.model.verify.b - VERIFY[1]) < 0.003
    assert advice.recommended == advise(log_of(chain_frames(3000))).recommended
    assert advice.to_dict()["time_model"]["clock"] == "device"


def _burst(rng, seq, bs):
    """Rounds that do not follow the model: every so often a chunked prefill or a long prompt rides
    along (10-40x), and bursts of large batches run slow."""
    if rng.random() < 0.08:
        return rng.uniform(10, 40)
    return 3.0 if (seq // 50) % 4 == 0 and bs > 4 else 1.0


def test_a_model_that_does_not_fit_gives_no_throughput_advice_and_says_its_error():
    advice = advise(log_of(chain_frames(3000, disturb=_burst)))
    assert advice.model.rel_error > MAX_FIT_ERROR
    assert advice.recommended is None and all(s.tokens_per_s is None for s in advice.settings)
    assert f"fit error is {advice.model.rel_error:.0%}" in advice.reason
    assert advice.settings[0].accept_length is not None
    out = advice.to_dict()
    assert out["throughput_predicted"] is False and out["time_model"]["rel_error"] > out["time_model"]["max_rel_error"]


def test_the_gain_interval_carries_the_model_error_and_widens_with_it():
    widths, errors = [], []
    for noise in (0.02, 0.3, 0.9):
        advice = advise(log_of(chain_frames(3000, noise=noise)))
        best = advice.recommendation()
        fit = advice.model.rel_error
        assert fit <= MAX_FIT_ERROR and advice.prediction_error == pytest.approx(fit / BLOCKS ** 0.5)
        lo, hi = best.gain_ci
        error = advice.prediction_error
        # at least the model's own error on either side of the gain, beside the bootstrap's
        assert lo <= (1 + best.gain) / (1 + error) - 1 and hi >= (1 + best.gain) * (1 + error) - 1
        widths.append(hi - lo)
        errors.append(fit)
    assert errors == sorted(errors) and widths == sorted(widths)
    assert advise(log_of(chain_frames(3000))).recommended not in (None, 5)


def test_advice_is_deterministic_for_a_file():
    frames = chain_frames(800, seed=3)
    assert advise(log_of(frames)).to_dict() == advise(log_of(frames)).to_dict()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 6), st.lists(st.integers(0, 4), min_size=1, max_size=6)),
                min_size=1, max_size=60),
       st.one_of(st.none(), st.floats(0, 50)))
def test_any_rounds_give_an_answer_with_monotone_lengths(rounds, ms):
    log = RoundLog(num_steps=4, topk=1)
    for i, (_, accepted) in enumerate(rounds):
        body = {"seq": i, "mode": "decode", "accepted": accepted, "bonus": [1] * len(accepted),
                "draft_ms": ms, "verify_ms": ms, "extend_ms": ms}
        log.add_frame(decode_frame(encode_frame("step", {**_step_defaults(len(accepted)), **body}, src="x", n=i, t=i)))
    advice = advise(log, bootstrap=20)
    lengths = [s.accept_length for s in advice.settings]
    assert lengths == sorted(lengths) and all(1 <= x <= 5 for x in lengths)
    json.dumps(advice.to_dict())


def _step_defaults(bs: int) -> dict:
    return {"t_ns": 1, "bs": bs, "rids": ["r"] * bs, "draft_ids": [[1, 2, 3, 4]] * bs,
            "accepted_ids": [[1]] * bs, "passes": [], "capture": None}


def test_advise_command_on_a_recording_prints_the_table_and_json(tmp_path):
    path = tmp_path / "run.e3s"
    with SessionWriter(str(path)) as writer:
        for data in chain_frames(1500):
            writer.add(data, decode_frame(data))
    runner = CliRunner()
    text = runner.invoke(main, ["advise", str(path)])
    assert text.exit_code == 0, text.output
    assert "accept length" in text.output and "advice: " in text.output
    assert len([line for line in text.output.splitlines() if line.strip()[:1].isdigit()]) == 5
    out = runner.invoke(main, ["advise", str(path), "--json"])
    data = json.loads(out.output)["publishers"]["dp0"]
    assert data["recorded_num_steps"] == 5 and data["recommended_num_steps"] in range(1, 6)
    assert [s["num_steps"] for s in data["settings"]] == [1, 2, 3, 4, 5]
    thin = tmp_path / "thin.e3s"
    with SessionWriter(str(thin)) as writer:
        for data in chain_frames(10):
            writer.add(data, decode_frame(data))
    assert runner.invoke(main, ["advise", str(thin)]).exit_code == 3
    assert runner.invoke(main, ["advise", str(tmp_path / "missing.e3s")]).exit_code == 2
    assert runner.invoke(main, ["advise"]).exit_code == 2  # usage: neither a file nor --connect


# -- the TUI's advisor line and panel ------------------------------------------------------------


def _recording(tmp_path, frames) -> str:
    from benchmarks.support.tui_support import write_recording

    return str(write_recording(tmp_path / "run.e3s", frames))


def test_the_state_feeds_each_publisher_the_log_advise_reads_from_a_file():
    frames = chain_frames(900, seed=5)
    state = analyse(decode_frame(f) for f in frames)
    (pub,) = state.publishers.values()
    assert advise(pub.rounds).to_dict() == advise(log_of(frames)).to_dict()  # 900 rounds: under both bounds


def test_the_state_keeps_the_newest_rounds_and_forgets_an_ended_runs():
    from eagle3scope.analysis.state import ADVISOR_ROUNDS

    frames = chain_frames(ADVISOR_ROUNDS + 100)
    state = analyse(decode_frame(f) for f in frames)
    log = state.publishers["dp0"].rounds
    assert len(log.rounds) == ADVISOR_ROUNDS and log.seen == ADVISOR_ROUNDS + 100
    newest = decode_frame(frames[-1]).body
    assert (log.rounds[-1].accepted, log.rounds[-1].bonus) == (newest["accepted"], newest["bonus"])
    restarted = hello_body(pid=4343, server_args=dict(hello_body()["server_args"], num_steps=5, topk=1))
    state.ingest(decode_frame(encode_frame("hello", restarted, src="dp0", n=len(frames), t=10 ** 6)))
    assert state.publishers["dp0"].run == 2 and state.publishers["dp0"].rounds.seen == 0
    assert not state.ended_runs[-1].rounds.rounds


def test_tui_overview_shows_the_advice_and_the_panel_its_table(tmp_path):
    from benchmarks.support.tui_support import paused_app, play_to_end, run_async, screen_text

    frames = chain_frames(1500)
    cli = json.loads(invoke("advise", _recording(tmp_path, frames), "--json").output)
    expected = cli["publishers"]["dp0"]
    rec = expected["recommended_num_steps"]
    assert rec not in (None, 5)  # the known machine is faster at fewer steps

    @run_async
    async def drive():
        app = paused_app(tmp_path / "run.e3s", speed=64.0)
        async with app.run_test(size=(120, 40)) as pilot:
            text = await play_to_end(app, pilot)
            (line,) = [row for row in text.splitlines() if "advisor " in row]
            assert re.search(rf"advisor steps 5 → {rec}: \+\d+ % tok/s, ±\d+ %", line), line
            await pilot.press("5")
            assert app.query_one("#panels").current == "advisor" and app.focused.id == "advisor-table"
            table = app.query_one("#advisor-table")
            rows = [[str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)]
            assert [int(r[1]) for r in rows] == [1, 2, 3, 4, 5]
            assert [r[5] for r in rows] == ["advised" if k == rec else "served" if k == 5 else "" for k in range(1, 6)]
            for r, s in zip(rows, expected["settings"]):
                assert r[2].startswith(f"{s['accept_length']:.3f}")  # lengths need no bootstrap: the CLI's
            text = screen_text(app)
            assert "time model (host ms): draft" in text and "not predicted: num_steps > 5" in text

    drive()


def test_tui_advises_from_device_times_and_gives_acceptance_only_on_a_graph_server_timed_on_the_host(tmp_path):
    from benchmarks.support.tui_support import paused_app, play_to_end, run_async, screen_text

    timed = chain_frames(1500, device=True, launches=True, server={"cuda_graph": True},
                         observable={"device_timings": True}, src="gpu0")
    launched = chain_frames(1500, launches=True, src="gpu1", seed=1, **GRAPHS_HOST_ONLY)
    frames = [f for pair in zip(timed, launched) for f in pair]

    @run_async
    async def drive():
        app = paused_app(_recording(tmp_path, frames), speed=64.0)
        async with app.run_test(size=(200, 50)) as pilot:
            await play_to_end(app, pilot)
            await pilot.press("5")
            table = app.query_one("#advisor-table")
            heading = [str(c.label) for c in table.columns.values()][3]
            assert heading == "tok/s (device, host)"
            rows = [[str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)]
            gpu1 = [r for r in rows if r[0] == "gpu1"]
            assert gpu1 and all(r[3] == "–" for r in gpu1)  # no throughput predicted from launch times
            assert any(r[5] == "advised" for r in rows if r[0] == "gpu0")
            text = screen_text(app)
            assert "time model (device ms): draft" in text
            assert "acceptance only: the server replays CUDA graphs" in text

    drive()


def test_tui_says_how_many_more_request_steps_a_short_recording_needs(tmp_path):
    from benchmarks.support.tui_support import paused_app, play_to_end, run_async

    frames = chain_frames(20)
    have = sum(len(decode_frame(f).body["accepted"]) for f in frames if decode_frame(f).kind == "step")

    @run_async
    async def drive():
        app = paused_app(_recording(tmp_path, frames), speed=64.0)
        async with app.run_test(size=(120, 40)) as pilot:
            text = await play_to_end(app, pilot)
            assert f"advisor needs {MIN_REQUEST_STEPS - have} more request-steps before advising" in text
            await pilot.press("5")
            assert app.query_one("#advisor-table").row_count == 5  # the table shows what can be told already

    drive()


def test_check_advise_and_gate_say_one_error_line_and_exit_2_on_what_they_cannot_read(tmp_path):
    """commands/__init__.py's open_recording and subscribe, shared by the three commands."""
    junk = tmp_path / "junk.e3s"
    junk.write_bytes(b"not a session file")
    runner = CliRunner()
    for args in (["check", str(junk)], ["advise", str(junk)], ["advise", str(tmp_path / "missing.e3s")]):
        done = runner.invoke(main, args)
        assert done.exit_code == 2 and done.output.startswith("Error: ") and done.output.count("\n") == 1, (args, done.output)
    for args in (["advise", "--connect", "not-an-endpoint"], ["gate", "--connect", "not-an-endpoint", "--steps", "1"]):
        done = runner.invoke(main, args)
        assert done.exit_code == 2 and done.output.startswith("Error: cannot subscribe to not-an-endpoint"), done.output
