"""Clock and order. One bad ``t`` does not unpace a replay, duplicated ``n`` is not
counted twice, an impossible jump of ``n`` is a reset and not 4.6e18 frames lost, and a publisher
restarted under the same ``src`` is a new run that statistics, rules and seek keep apart."""

from __future__ import annotations

import json

import pytest


from benchmarks.support.analysis_streams import H, session
from eagle3scope.analysis import SessionState, analyse
from eagle3scope.store.replayer import Replayer
from eagle3scope.tui.feed import ReplayFeed
from eagle3scope.wire import Frame
from eagle3scope.wire.bodies import INT64_MAX, Capture
from support.recordings import record
from support.cli import invoke

BROKEN = dict(accept_p=0.0, algorithm="EAGLE", step_kw={"feature_width": H, "fc": False,
                                                         "capture": {"on": False, "layers": None}})


def _shifted(frames, dt: int, **hello) -> list[Frame]:
    out = []
    for f in frames:
        body = {**f.body, **hello} if f.kind == "hello" else f.body
        out.append(Frame(f.kind, f.src, f.n, f.t + dt, body))
    return out


def _check(path) -> dict:
    done = invoke("check", path, "--json")
    return json.loads(done.stdout)


# -- pacing ----------------------------------------------------------------------------------------

def _bursts(path, speed: float = 1.0) -> tuple[list[int], float]:
    """Replay on a simulated clock in 5 ms ticks: steps per tick, and the simulated seconds it took."""
    now = [0.0]
    r = Replayer(path, speed=speed, clock=lambda: now[0])
    per_tick = []
    try:
        while not r.finished and now[0] < 600:
            per_tick.append(sum(f.kind == "step" for f in r.due()))
            now[0] += 0.005
    finally:
        r.close()
    return per_tick, now[0]


def test_one_bad_time_does_not_unpace_the_rest(tmp_path):
    frames = _shifted(session(400, bs=1), 10**13)  # a step every 1 ms of stream time
    steps = [i for i, f in enumerate(frames) if f.kind == "step"]
    bad = list(frames)
    for at, t in ((steps[50], INT64_MAX), (steps[150], 0)):  # one frame to the end of time, one to 0
        f = bad[at]
        bad[at] = Frame(f.kind, f.src, f.n, t, f.body)
    back = steps[250]  # and from here on the publisher's clock stepped back one hour
    bad[back:] = [Frame(f.kind, f.src, f.n, f.t - 3600 * 10**9, f.body) for f in bad[back:]]
    per_tick, took = _bursts(record(tmp_path / "bad.e3s", bad))
    # paced: about 5 steps per 5 ms tick everywhere; before, everything after the INT64_MAX frame came at once
    assert max(per_tick) <= 8, max(per_tick)
    _, clean = _bursts(record(tmp_path / "ok.e3s", frames))
    # a lone bad time costs nothing (the frame is due at once, the view stays), nor does the hour back
    assert took - clean <= 0.05, (took, clean)


# -- duplicates and resets ------------------------------------------------------------------------

def test_duplicated_frames_are_counted_once_and_reported_once(tmp_path):
    frames = session(300, bs=2)
    doubled = [f for f in frames for _ in range(2)]
    once, twice = _check(record(tmp_path / "a.e3s", frames)), _check(record(tmp_path / "b.e3s", doubled))
    for key in ("steps", "request_steps", "mean_accept_length", "per_position"):
        assert twice["summary"][key] == once["summary"][key], key
    assert twice["summary"]["duplicate_frames"] == len(frames)
    state = analyse(doubled)
    assert sum("arrived again" in e.text for e in state.events) == 1
    text = invoke("check", record(tmp_path / "c.e3s", doubled)).stdout
    assert f"{len(frames)} duplicate frame(s) dropped" in text


def test_an_impossible_counter_jump_is_a_reset_not_loss():
    frames = session(100, bs=1)
    jumped = frames[:50] + [Frame(f.kind, f.src, f.n + (1 << 62), f.t, f.body) for f in frames[50:]]
    state = analyse(jumped)
    loss = state.publishers["r0"].loss
    assert (loss.lost_in_transit, loss.resets, loss.lost) == (0, 1, 0)
    assert state.acceptance.n_steps == 100
    honest = frames[:50] + [Frame(f.kind, f.src, f.n + 7, f.t, f.body) for f in frames[50:]]
    assert analyse(honest).publishers["r0"].loss.lost_in_transit == 7  # a real hole is still loss


# -- restarts --------------------------------------------------------------------------------------

def _restarted(**hello2) -> list[Frame]:
    first = session(300, bs=2, accept_p=0.8)
    second = _shifted(session(300, bs=2, **BROKEN), 60 * 10**9, **hello2)  # n and seq from 0 again, a minute on
    return first + second


def test_a_restart_under_the_same_src_is_a_new_run_with_its_own_figures_and_violations(tmp_path):
    path = record(tmp_path / "r.e3s", _restarted(started=2))
    result = _check(path)
    fired = {(v["id"], v["run"]) for v in result["violations"]}
    assert ("aux-capture-off", 2) in fired and not any(run == 1 for _, run in fired)  # run 1 stayed healthy
    assert result["summary"]["restarts"] == 1 and result["summary"]["steps"] == 600
    state = analyse(_restarted(started=2))
    old, new = state.ended_runs[0], state.publishers["r0"]
    assert (old.run, new.run, old.decode_steps, new.decode_steps) == (1, 2, 300, 300)
    assert old.acceptance.mean_accept_length > 2.5 > 1.05 >= new.acceptance.mean_accept_length
    text = invoke("check", path).stdout
    assert "[r0 run 2 from step" in text and "1 publisher restart(s)" in text


def test_a_hello_with_another_start_time_starts_a_run_even_when_n_goes_on(shim):
    frames = session(100, bs=1)
    last = frames[-1]
    hello = {**frames[0].body, "started": 99}
    more = [Frame("hello", "r0", last.n + 1, last.t + 1, hello)]
    more += [Frame(f.kind, "r0", last.n + 2 + i, last.t + 2 + f.t, f.body) for i, f in enumerate(frames[1:])]
    state = analyse(frames + more)
    assert state.publishers["r0"].run == 2 and len(state.ended_runs) == 1
    state = SessionState()
    for f in frames + [Frame("hello", "r0", last.n + 1, last.t + 1, frames[0].body)]:  # re-sent, no "started"
        state.ingest(f)
    assert state.publishers["r0"].run == 1 and not state.ended_runs
    state.ingest(Frame("hello", "r0", last.n + 2, last.t + 2, {**frames[0].body, "pid": 1}))  # an old shim restarted
    assert state.publishers["r0"].run == 2


def test_seek_to_a_violation_lands_in_its_own_run(tmp_path):
    path = record(tmp_path / "r.e3s", _restarted(started=2))
    feed = ReplayFeed(path)
    try:
        feed.paused = True
        while not feed.replayer.finished:
            feed.ingest(feed.replayer.step_one())
        with feed.lock:
            feed.state.evaluate_rules()
            v = next(v for v in feed.state.violations() if v.id == "aux-capture-off")
            began = next(p.began for p in feed.state.runs() if p.run == v.run)
        assert v.run == 2
        seq = v.first_seq or 100
        feed.seek_step(seq)  # a plain step number: the first such step in the file, run 1's
        with feed.lock:
            assert feed.state.publishers["r0"].capture.on is True
        first_run_index = feed.replayer.position
        feed.seek_run_step("r0", v.run, began, seq)
        assert feed.replayer.position > first_run_index
        with feed.lock:
            pub = feed.state.publishers["r0"]
            assert pub.run == 2 and pub.began == began
            assert pub.capture == Capture(on=False, layers=None)  # the broken run's step, not the healthy one
    finally:
        feed.stop()


def test_g_on_a_violation_replays_from_where_it_fired_in_its_run(tmp_path):
    pytest.importorskip("textual")
    from benchmarks.support.tui_support import paused_app, play_to_end, run_async
    from eagle3scope.tui.screens import ViolationScreen

    path = record(tmp_path / "r.e3s", _restarted(started=2))

    @run_async
    async def scenario():
        app = paused_app(path, speed=64.0)
        async with app.run_test(size=(140, 44)) as pilot:
            await play_to_end(app, pilot)
            app.query_one("#violations-table").focus()
            await pilot.press("enter")
            assert isinstance(app.screen, ViolationScreen) and app.screen.violation.run == 2
            await pilot.press("g")
            await pilot.pause()
            assert not isinstance(app.screen, ViolationScreen)
            with app.feed.lock:
                pub = app.feed.state.publishers["r0"]
                assert pub.run == 2 and pub.capture == Capture(on=False, layers=None)

    scenario()


def test_the_recorders_counter_counts_a_duplicate_once():
    from eagle3scope.wire.loss import StreamLoss

    loss = StreamLoss()
    for f in session(20, bs=1):
        loss.observe(f)
        loss.observe(f)
    stats = loss.sources["r0"]
    assert (stats.frames, stats.duplicates, stats.lost_in_transit) == (22, 22, 0)


def test_the_exporter_shows_the_current_run_once_and_counts_its_firing():
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from eagle3scope.exporter.fleet import Fleet
    from eagle3scope.exporter.metrics import FleetCollector

    fleet = Fleet(forget_after_s=None)
    frames = session(300, bs=2, **BROKEN) + _shifted(session(300, bs=2, **BROKEN), 60 * 10**9, started=2)
    for i in range(0, len(frames), 64):
        fleet.ingest(frames[i:i + 64])
    registry = CollectorRegistry()
    registry.register(FleetCollector(fleet))
    samples = [s for fam in text_string_to_metric_families(generate_latest(registry).decode()) for s in fam.samples]
    keys = [(s.name, tuple(sorted(s.labels.items()))) for s in samples]
    assert len(keys) == len(set(keys))  # one series per label set: the ended run's are gone
    active = [s for s in samples if s.name == "eagle3scope_violation_active" and s.labels["rule"] == "aux-capture-off"]
    assert [s.value for s in active] == [1.0]
    steps = [s.value for s in samples if s.name == "eagle3scope_steps_total"]
    assert steps == [300.0]  # the run now serving (a counter reset for Prometheus, as after any restart)
    fired = [s.value for s in samples if s.name == "eagle3scope_violations_fired_total" and s.labels["rule"] == "aux-capture-off"]
    assert fired == [2.0]  # once per run


def test_started_is_an_optional_int_in_the_hello():
    from benchmarks.support.analysis_streams import hello
    from eagle3scope.wire.bodies import BodyError, read as validate_body

    validate_body("hello", hello())  # old shims: no "started"
    validate_body("hello", {**hello(), "started": 1_764_000_000_000_000_000})
    with pytest.raises(BodyError):
        validate_body("hello", {**hello(), "started": "yesterday"})


def test_the_shims_hello_names_its_start_time(shim):
    from eagle3scope_shim.loadreport import hello_body
    from eagle3scope.wire.bodies import read as validate_body

    body = hello_body(shim, object())  # a scheduler without server_args: the facts that need none
    validate_body("hello", body)
    assert body["started"] == shim.started_ns and 0 < body["started"] <= __import__("time").time_ns()


def test_at_most_64_ended_runs_are_kept_and_the_oldest_go_first():
    """README "Bounds": a restarted publisher's ended runs are kept as they ended, 64 at most."""
    from eagle3scope.analysis.state import MAX_ENDED_RUNS

    assert MAX_ENDED_RUNS == 64
    base = session(3, bs=1)
    frames, t = [], 0
    for run in range(1, MAX_ENDED_RUNS + 4):  # 67 runs: 66 ended, the 2 oldest forgotten
        hello = {**base[0].body, "started": run}
        for f in base:
            t += 1
            frames.append(Frame(f.kind, "r0", f.n, t, hello if f.kind == "hello" else f.body))
    state = analyse(frames)
    assert state.publishers["r0"].run == MAX_ENDED_RUNS + 3
    assert [r.run for r in state.ended_runs] == list(range(3, MAX_ENDED_RUNS + 3))
    assert state.forgotten_runs == 2
    notes = [e for e in state.events if "restarted runs" in str(e)]
    assert len(notes) == 1
