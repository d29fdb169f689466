"""Facts derived once (analysis/facts.py) and release knowledge in one place (wire/releases.py,
wire/aux_layers.CaptureRule): the three bugs that came from a concept defined twice,
and the definitions every consumer now shares."""

from __future__ import annotations

import random

import pytest

from benchmarks.support.analysis_streams import Stream, healthy_load, hello, step
from benchmarks.support.synthetic import T0_NS, encode_frame, hello_body, load_body, step_body

from eagle3scope.analysis import SessionState, analyse, facts
from eagle3scope.analysis.views import aux_view, publisher_rows
from eagle3scope.exporter.fleet import Fleet
from eagle3scope.wire import decode_frame
from eagle3scope.wire.bodies import Parallel
from eagle3scope.wire.aux_layers import CaptureRule, family_rule
from eagle3scope.wire.releases import before, parse_version, release

T0 = 1_000_000_000
#: 15 seams attached and one failed, as a 0.5.23 server whose draft-extend seam raised at attach.
SEAMS = {**{f"seam{i}": "attached" for i in range(15)}, "v2.draft_extend": "failed"}


def _frames(*bodies, start: int = 0) -> list:
    return [decode_frame(encode_frame(kind, body, src="dp0", n=n, t=T0_NS + n)) for n, (kind, body) in enumerate(bodies, start)]


def _state(*bodies) -> SessionState:
    state = SessionState()
    for frame in _frames(*bodies):
        state.ingest(frame)
    return state


# -- (a) every capture rule has a summary; the aux panel shows GPT-OSS's -----------------------


def test_every_capture_rule_has_a_summary():
    assert {str(rule) for rule in CaptureRule} == {"+1", "+1-if-first-1", "+1-unless-final", "+1-always", "none"}
    for rule in CaptureRule:
        assert rule.summary.strip(), rule
        assert CaptureRule(str(rule)) is rule  # the name sent on the wire reads back as the member


@pytest.mark.parametrize("version", ["0.5.10", "0.5.12", "0.5.13", "0.5.16", "0.5.17", "0.5.23", None, "junk"])
def test_family_rule_returns_a_member_for_every_known_family(version):
    for cls in ("LlamaForCausalLM", "Qwen3MoeForCausalLM", "GptOssForCausalLM", "DeepseekV3ForCausalLM",
                "Glm4MoeLiteForCausalLM", "KimiK25ForConditionalGeneration"):
        assert isinstance(family_rule(cls, version), CaptureRule), (cls, version)


@pytest.mark.parametrize("version, rule", [("0.5.16", "+1"), ("0.5.17", "+1-unless-final"), ("0.5.23", "+1-unless-final")])
def test_aux_view_names_the_gpt_oss_rule(version, rule):
    """The bug: from 0.5.17 family_rule says "+1-unless-final", which RULE_SUMMARY lacked (KeyError)."""
    state = _state(("hello", hello_body(sglang_version=version)), ("load", load_body(target_class="GptOssForCausalLM")))
    ((_, lines),) = aux_view(state).publishers
    (line,) = [f.text for f in lines if f.label == "family id rule"]
    assert line == f"{rule}: {CaptureRule(rule).summary}"


def test_tui_aux_panel_of_a_gpt_oss_recording(tmp_path):
    """Replaying a GPT-OSS recording on SGLang 0.5.23 and pressing 2 showed a traceback (exit 1)."""
    pytest.importorskip("textual")
    from benchmarks.support.tui_support import paused_app, play_to_end, run_async, screen_text, write_recording

    def frames():
        n = 0
        for kind, body in (("hello", hello_body(sglang_version="0.5.23", seams=SEAMS)),
                           ("load", load_body(target_class="GptOssForCausalLM"))):
            yield encode_frame(kind, body, src="dp0", n=n, t=T0_NS)
            n += 1
        for seq in range(40):
            yield encode_frame("step", step_body(seq, t_ns=T0_NS + (seq + 1) * 20_000_000), src="dp0", n=n,
                               t=T0_NS + (seq + 1) * 20_000_000)
            n += 1

    recording = write_recording(tmp_path / "gpt-oss.e3s", frames())

    @run_async
    async def replay():
        app = paused_app(recording, speed=64.0)
        async with app.run_test(size=(240, 44)) as pilot:
            await play_to_end(app, pilot)
            await pilot.press("2")
            await pilot.pause(0.2)
            app.refresh_view(force=True)
            await pilot.pause()
            return screen_text(app), app.return_code

    text, code = replay()
    assert code in (None, 0)
    assert "+1-unless-final" in text
    assert "(15/16 seams)" in text  # (b) on screen: the hello's seams count, not only the hook events


# -- (b) the header counts seams as rules and the exporter do ---------------------------------


def test_header_counts_the_hello_seams_and_later_hook_events():
    """The bug: 15 attached in the hello + 1 failed hook event showed 0/1 (only the hook events)."""
    state = _state(("hello", hello_body(seams=SEAMS)), ("load", load_body()),
                   ("hook", {"seam": "v2.draft_extend", "status": "failed", "detail": "AttributeError: x"}))
    (row,) = publisher_rows(state)
    assert (row.hooks_ok, row.hooks_total) == (15, 16)
    pub = state.publishers["dp0"]
    assert facts.failed_seams(pub) == {"v2.draft_extend": "failed"}
    hook = next(v for v in state.violations() if v.id == "hook-failed")
    assert hook.evidence["seams"] == {"v2.draft_extend": "failed"}


def test_a_later_hook_event_overrides_the_hello():
    state = _state(("hello", hello_body(seams=SEAMS)),
                   ("hook", {"seam": "v2.draft_extend", "status": "attached", "detail": None}))
    (row,) = publisher_rows(state)
    assert (row.hooks_ok, row.hooks_total) == (16, 16)
    assert not facts.failed_seams(state.publishers["dp0"])


# -- (c) every consumer dates a violation at the same first_seq --------------------------------


def _two_publishers() -> list:
    """A healthy publisher and one whose drafts are never accepted (bs 2: 64 request-steps after
    32 steps), interleaved 1:1, 1 ms a step, so the 64-step schedule decides when rules run; each
    ends on a heartbeat."""
    rng = random.Random(5)
    healthy, broken = Stream("dp0", T0), Stream("dp1", T0 + 500_000)
    frames = [healthy.frame("hello", hello()), healthy.frame("load", healthy_load()),
              broken.frame("hello", hello()), broken.frame("load", healthy_load())]
    for seq in range(200):
        frames.append(healthy.frame("step", step(seq, healthy.t, [rng.randint(0, 3), rng.randint(0, 3)], rng=rng)))
        frames.append(broken.frame("step", step(seq, broken.t, [0, 0], rng=rng)))
    frames += [s.frame("heartbeat", {"steps": 200, "dropped": 0, "hook_failures": 0, "queued": 0}) for s in (healthy, broken)]
    return sorted(frames, key=lambda f: (f.t, f.src))


def test_check_and_the_exporter_date_violations_alike():
    """The bug: check judged every publisher every 64 steps of all publishers, the exporter (one
    state per publisher) every 64 of each one's own, so zero-acceptance dated 31 vs 63."""
    frames = _two_publishers()
    checked = {(v.id, v.src): (v.first_seq, v.severity) for v in analyse(frames).violations()}
    assert checked[("zero-acceptance", "dp1")][0] == 63  # the first pass after 64 of its steps, as alone
    fleet = Fleet(forget_after_s=None)
    rng = random.Random(0)
    i = 0
    while i < len(frames):  # batches as the exporter's poll hands them over
        n = rng.randint(1, 50)
        fleet.ingest(frames[i:i + n])
        i += n
    exported = {(v.id, v.src): (v.first_seq, v.severity) for state in fleet.states.values() for v in state.violations()}
    assert exported == checked


def test_a_publishers_violations_do_not_depend_on_its_neighbours():
    frames = _two_publishers()
    alone = analyse(f for f in frames if f.src == "dp1").violations()
    together = [v for v in analyse(frames).violations() if v.src == "dp1"]
    assert [(v.id, v.first_seq) for v in together] == [(v.id, v.first_seq) for v in alone]


# -- the facts themselves ----------------------------------------------------------------------


def test_parallel_layout_read_defensively():
    parallel = {"tp_size": 2, "dp_size": 2, "pp_size": 1, "attn_tp_size": 1, "attn_dp_size": 2, "ep_size": None}
    pub = _state(("hello", hello_body(parallel=parallel))).publishers["dp0"]
    assert facts.parallel(pub) == Parallel(2, 2, 1, 1, 2, None)
    assert facts.parallel(_state(("hello", hello_body())).publishers["dp0"]) is None  # an older shim
    assert facts.parallel(_state(("hello", hello_body(parallel=None))).publishers["dp0"]) is None  # a wrong type: refused by wire/bodies.py (tests/shim/test_topology.py)


def test_aux_layers_in_effect_follow_a_live_change():
    state = _state(("hello", hello_body()), ("load", load_body()))
    pub = state.publishers["dp0"]
    before_change = facts.aux_layers(pub)
    assert (before_change.configured, before_change.captured, before_change.applied) == ([1, 15, 28], [2, 16, 29], False)
    assert before_change.expected == [2, 16, 29]
    for frame in _frames(("config", {"layers": [3, 4, 5], "captured": [4, 5, 6], "applied": True, "origin": "control"}), start=2):
        state.ingest(frame)
    after = facts.aux_layers(pub)
    assert (after.configured, after.expected, after.captured, after.live, after.applied) == ([3, 4, 5], [4, 5, 6], [4, 5, 6], False, True)


def test_capture_on_is_the_latest_step_else_the_load_report():
    state = _state(("hello", hello_body()), ("load", load_body(aux={"capture_on": False})))
    pub = state.publishers["dp0"]
    assert facts.capture_on(pub) is False
    for frame in _frames(("step", step_body(0)), start=2):
        state.ingest(frame)
    assert facts.capture_on(pub) is True


def test_one_version_parser():
    assert parse_version("0.4.4.post2") > parse_version("0.4.4") > parse_version("0.4.4rc1")
    assert release("junk") is None and release(None) is None
    assert before("0.5.16", "0.5.17") and not before("0.5.17", "0.5.17") and not before(None, "0.5.17")
    assert not before("not-a-version", "0.5.17")  # unknown counts as newest
