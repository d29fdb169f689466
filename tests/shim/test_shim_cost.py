"""The shim measures itself: each seam's hook time on the calling thread and the rounds'
time, carried by the heartbeat as deltas (``shim_us``, ``step_us``), validated on the wire, summed
by the reader, shown in the TUI header as a share and exported as a counter."""

from __future__ import annotations

import time

import pytest
import zmq

from benchmarks.support.analysis_streams import Stream, hello, session
from eagle3scope.analysis import analyse
from eagle3scope.analysis.views import publisher_rows
from eagle3scope.wire import Frame, decode_frame
from eagle3scope.wire.endpoints import fresh_ipc_endpoint
from eagle3scope.wire.loss import FrameLoss
from eagle3scope.wire.bodies import MAX_NAME, MAX_SEAMS, BodyError, read as validate_body
from eagle3scope_shim.publisher import Publisher
from eagle3scope_shim.guard import around

BURN_MS = 3.0
ROUND_MS = 20.0


def _burn(ms: float) -> None:
    end = time.perf_counter_ns() + int(ms * 1e6)
    while time.perf_counter_ns() < end:
        pass


def _heartbeats(sub, until, timeout_s: float = 10.0) -> dict:
    """The first heartbeat body for which ``until(body)`` holds."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if sub.poll(100):
            frame = decode_frame(sub.recv())
            if frame.kind == "heartbeat" and until(frame.body):
                return frame.body
    raise AssertionError("no such heartbeat")


def test_a_hook_that_burns_a_known_time_shows_up_in_the_next_heartbeat_as_a_delta(shim):
    burn_seam, step_seam = "cost.burn", "cost.step"
    burn = around(shim, burn_seam, lambda *a: _burn(BURN_MS), None, hot=True, in_step=True)
    outside = around(shim, "cost.outside", lambda *a: _burn(BURN_MS), None)  # e.g. the commit seam: not in the round
    step = around(shim, step_seam, None, None, hot=True, step=True)

    def one_round():
        burn(lambda: None)
        time.sleep(ROUND_MS / 1000)

    endpoint = fresh_ipc_endpoint("cost")
    pub = Publisher(endpoint, "t", heartbeat_interval_s=0.2)
    pub.self_time = (shim.self_ns, shim.step_ns, shim.round_seams)
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    pub.start()
    try:
        sub.connect(endpoint)
        _heartbeats(sub, lambda b: True)  # connected; what came before is behind us
        _heartbeats(sub, lambda b: True)  # one full interval after the connection
        step(one_round)
        outside(lambda: None)
        first = _heartbeats(sub, lambda b: burn_seam in b.get("shim_us", {}))
        # the burn is the seam's own time, the sleep is the round's (SGLang's call), not the shim's
        assert BURN_MS * 1000 <= first["shim_us"][burn_seam] < ROUND_MS * 1000
        assert first["step_us"] >= ROUND_MS * 1000 + first["shim_us"][burn_seam]
        assert first["shim_us"].get(step_seam, 0) < BURN_MS * 1000
        # the rounds' share counts the hooks within the round (the step's and the burn), not the one outside
        assert first["shim_us"]["cost.outside"] >= BURN_MS * 1000
        assert first["round_shim_us"] == pytest.approx(first["shim_us"][burn_seam] + first["shim_us"].get(step_seam, 0))
        assert first["round_shim_us"] < first["step_us"]
        assert first["publisher_us"] == 0  # nothing was submitted: the publisher thread had no frames to make
        pub.submit("hook", {"seam": "x", "status": "ok", "detail": ""})
        assert _heartbeats(sub, lambda b: b["publisher_us"] > 0)["publisher_us"] < 1e6
        quiet = _heartbeats(sub, lambda b: True)
        assert burn_seam not in quiet["shim_us"] and quiet["step_us"] == 0  # deltas, not totals
        step(one_round)
        step(one_round)
        again = _heartbeats(sub, lambda b: burn_seam in b.get("shim_us", {}))
        got = again["shim_us"][burn_seam]
        if again["step_us"] < 2 * ROUND_MS * 1000:  # the two rounds straddled a heartbeat
            again2 = _heartbeats(sub, lambda b: burn_seam in b.get("shim_us", {}))
            got += again2["shim_us"][burn_seam]
        assert 2 * BURN_MS * 1000 <= got < 3 * BURN_MS * 1000 + 2 * ROUND_MS * 1000 - 1  # two burns, not three
    finally:
        sub.close(0)
        pub.close()


def test_a_publisher_without_cells_sends_the_heartbeat_as_before():
    pub = Publisher(fresh_ipc_endpoint("cost"), "t")
    sent = []
    pub._send = lambda kind, body, t=None: sent.append(body)
    pub._heartbeat()
    assert sent == [{"steps": 0, "dropped": 0, "hook_failures": 0, "queued": 0}]


def _beat(**extra) -> dict:
    return {"steps": 1, "dropped": 0, "hook_failures": 0, "queued": 0, **extra}


@pytest.mark.parametrize("extra", [
    {"shim_us": {"v2.step": 12.5, "v2.draft": 3}, "step_us": 5400.0, "round_shim_us": 15.5, "publisher_us": 80.5},
    {"shim_us": {}, "step_us": 0},
    {"shim_us": {f"s{i}": 1.0 for i in range(MAX_SEAMS)}},
    {"shim_us": None, "step_us": None},
], ids=["typical", "idle", "max-seams", "null"])
def test_valid_cost_fields(extra):
    validate_body("heartbeat", _beat(**extra))


@pytest.mark.parametrize("extra", [
    {"shim_us": {f"s{i}": 1.0 for i in range(MAX_SEAMS + 1)}},
    {"shim_us": {"x" * (MAX_NAME + 1): 1.0}},
    {"shim_us": {"v2.step": -1.0}},
    {"shim_us": {"v2.step": float("nan")}},
    {"shim_us": {"v2.step": float("inf")}},
    {"shim_us": {"v2.step": True}},
    {"shim_us": {"v2.step": "1"}},
    {"shim_us": [1.0]},
    {"step_us": -5},
    {"step_us": 1e16},
    {"step_us": False},
    {"publisher_us": -1.0},
    {"round_shim_us": float("nan")},
], ids=["too-many-seams", "long-name", "negative", "nan", "inf", "bool", "text", "list", "neg-step", "huge-step",
        "bool-step", "neg-publisher", "nan-round"])
def test_invalid_cost_fields_are_refused(extra):
    with pytest.raises(BodyError):
        validate_body("heartbeat", _beat(**extra))


def _cost_stream(shim, beats: list[tuple[dict, float]], src: str = "h:1:dp0"):
    s = Stream(src)
    return [s.frame("hello", hello())] + [s.frame("heartbeat", _beat(shim_us=shim, step_us=step)) for shim, step in beats]


BEATS = [({"v2.step": 20.0, "v2.draft": 10.0}, 10_000.0), ({}, 0.0), ({"v2.step": 30.0, "llama_eagle3.forward": 4.0}, 8_500.0)]


def test_the_reader_sums_the_deltas_and_keeps_the_latest_share(shim):
    pub = analyse(_cost_stream(shim, BEATS)).publishers["h:1:dp0"]
    assert pub.loss.shim_s == pytest.approx({"v2.step": 50e-6, "v2.draft": 10e-6, "llama_eagle3.forward": 4e-6})
    assert pub.loss.step_s == pytest.approx(18_500e-6)
    assert pub.loss.shim_share == pytest.approx(34.0 / 8_500.0)
    idle = analyse(_cost_stream(shim, BEATS[:2])).publishers["h:1:dp0"]
    assert idle.loss.shim_share is None  # no rounds in the latest heartbeat: no share to show


def test_the_share_is_the_rounds_own_hooks_over_the_rounds(shim):
    """A shim that says which hook time lies within the rounds (round_shim_us) is read by it: the
    commit seam and load-time hooks run outside the rounds and do not inflate the share."""
    s = Stream("h:1:dp0")
    beat = _beat(shim_us={"v2.step": 20.0, "commit.resolve": 5.0, "draft_load": 50_000.0}, step_us=4_000.0,
                 round_shim_us=20.0)
    pub = analyse([s.frame("hello", hello()), s.frame("heartbeat", beat)]).publishers["h:1:dp0"]
    assert pub.loss.shim_share == pytest.approx(20.0 / 4_000.0)
    assert pub.loss.shim_s["draft_load"] == pytest.approx(0.05)  # still counted, per seam


def test_the_reader_keeps_at_most_max_seams_names(shim):
    loss = FrameLoss()
    for frame in _cost_stream(shim, [({f"s{i}-{j}": 1.0 for j in range(100)}, 10.0) for i in range(5)]):
        loss.observe(frame)
    assert len(loss.shim_s) == MAX_SEAMS


def test_the_tui_header_shows_the_share_of_round_time(shim):
    from rich.text import Text

    from eagle3scope.tui.panels.header import LEVELS, PublisherBar

    row = publisher_rows(analyse(_cost_stream(shim, BEATS)))[0]
    for level in range(LEVELS):
        line: Text = PublisherBar._line(row, level, None, None, None, None)
        assert "shim 0.4 %" in line.plain
    row.shim_share = None
    assert "shim" not in PublisherBar._line(row, False, None, None, None, None).plain


def test_the_exporter_counts_the_seconds_per_seam(shim):
    from support.exporter_support import by, feed

    frames = session(20)
    last = frames[-1]  # the heartbeats continue the session's own counter and clock (else they are duplicates)
    frames += [Frame(f.kind, last.src, last.n + 1 + i, last.t + 1 + i, f.body)
               for i, f in enumerate(_cost_stream(shim, BEATS, src=last.src)[1:])]
    exporter, fams = feed({"r0": frames})
    exporter.close()
    shim = by(fams["eagle3scope_shim_seconds"], "eagle3scope_shim_seconds_total")
    assert shim == pytest.approx({(("seam", "v2.step"),): 50e-6, (("seam", "v2.draft"),): 10e-6,
                                  (("seam", "llama_eagle3.forward"),): 4e-6})
    rounds = by(fams["eagle3scope_shim_round_seconds"], "eagle3scope_shim_round_seconds_total")
    assert rounds == {(): pytest.approx(18_500e-6)}


@pytest.mark.parametrize("width", [80, 100, 120, 140, 160, 200])  # 80: the narrowest screen supported
def test_the_header_fits_its_width_and_keeps_every_label(shim, width):
    """The fullest line that fits is shown; what does not fit is left out piece by piece, never a
    value without its label (it once showed "0.5.23" for "sglang 0.5.23" at 160 columns), and the
    shim's share and the failure counts stay to the narrowest form."""
    from textual.app import App

    from eagle3scope.tui.panels.header import PublisherBar
    from benchmarks.support.tui_support import run_async, screen_text

    row = publisher_rows(analyse(_cost_stream(shim, BEATS, src="vm:4012345:dp0")))[0]

    class Bar(App):
        def compose(self):
            yield PublisherBar()

    @run_async
    async def shown() -> str:
        app = Bar()
        async with app.run_test(size=(width, 3)) as pilot:
            app.query_one(PublisherBar).rows = (row,)
            await pilot.pause()
            return screen_text(app).splitlines()[0].rstrip()

    line = shown()
    assert "…" not in line and "shim 0.4 %" in line and "hook" in line, line
    assert "0.5.23" not in line or "sglang 0.5.23" in line, line
    assert (f"steps {row.steps} topk" in line) or "/" not in line.split("│")[0], line
    if width >= 160:
        assert "sglang 0.5.23" in line and "vm:4012345:dp0" in line, line
