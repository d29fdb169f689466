"""SessionState stays bounded on hostile streams, says so once, and keeps what the rules read.

Every frame here is valid on its own (built through the wire codec, so the validator ran); the
streams are hostile only in what they add up to: a new ``src`` on every frame, or one publisher
naming a new seam, forward mode, hidden width or aux config, or a higher draft id, on every frame.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.support.analysis_streams import H, TARGET_VOCAB, Stream, healthy_load, hello, session, step
from eagle3scope.analysis import SessionState, analyse, state as state_module
from eagle3scope.analysis.state import (MAX_DRAFT_MAX_RISES, MAX_PASS_MODES, MAX_SEAMS, MAX_SEGMENTS, MAX_WIDTHS,
                                        RULES_EVERY)
from eagle3scope.analysis.views import aux_view
from eagle3scope.wire import FEATURE_CARRYING_MODES, decode_frame, encode_frame
from eagle3scope.wire.schema import MAX_PUBLISHERS

N = 10_000
HEARTBEAT = {"steps": 1, "dropped": 0, "hook_failures": 0, "queued": 0}


def analysed(frames: list) -> SessionState:
    """``analyse`` with an event log long enough to keep every line the stream causes."""
    state = SessionState(events=4 * N)
    for frame in frames:
        state.ingest(frame)
    state.evaluate_rules()
    return state


def fired(state: SessionState) -> dict:
    state.evaluate_rules()
    return {(v.src, v.id): v for v in state.violations()}


def warnings_about(state: SessionState, words: str) -> list[str]:
    return [e.text for e in state.events if e.level == "warning" and words in e.text]


def strangers(n: int, kind: str = "heartbeat") -> list:
    """One frame from each of ``n`` new publishers."""
    return [decode_frame(encode_frame(kind, HEARTBEAT, src=f"stranger{i}", n=0, t=1 + i)) for i in range(n)]


def one_publisher(bodies: list[tuple[str, dict]], load: dict | None = None) -> list:
    s = Stream()
    return [s.frame("hello", hello()), s.frame("load", load or healthy_load())] + [s.frame(k, b) for k, b in bodies]


# -- publishers ------------------------------------------------------------------------------


def test_publishers_past_the_cap_are_counted_reported_once_and_ingest_stays_linear():
    frames = strangers(2 * N)
    state = SessionState()
    start = time.perf_counter()
    for frame in frames:
        state.ingest(frame)
    elapsed = time.perf_counter() - start
    assert len(state.publishers) == MAX_PUBLISHERS
    assert state.refused_frames == 2 * N - MAX_PUBLISHERS and state.frames == 2 * N
    assert warnings_about(state, "publishers") == [f"more than {MAX_PUBLISHERS} publishers: frames from new ones are "
                                                   "counted, not analysed"]
    assert elapsed < 3.0  # before the bound: a rule pass over every publisher per frame, about 30 min


def test_rules_fire_for_the_first_publishers_as_if_the_flood_never_came():
    """Two real publishers (one broken), then 10,000 strangers between their steps: the real ones'
    violations are the ones they have on their own, at the same steps."""
    broken = session(600, accept_p=0.0, algorithm="EAGLE",
                     step_kw={"feature_width": H, "fc": False, "capture": {"on": False, "layers": None}})
    healthy = session(600, seed=1)
    for frame in broken:
        frame.src = "broken"
    flood = strangers(N)
    stream = [*broken[:2], *healthy[:2], *flood[:MAX_PUBLISHERS]]
    rest = iter(flood[MAX_PUBLISHERS:])
    for b, h in zip(broken[2:], healthy[2:]):
        stream += [b, h, *(next(rest) for _ in range(10))]
    state = analysed(stream + list(rest))
    alone = analyse(broken)
    expected = {key: (v.severity, v.first_seq, v.evidence) for key, v in fired(alone).items()}
    got = {key: (v.severity, v.first_seq, v.evidence) for key, v in fired(state).items() if key[0] in ("broken", "r0")}
    assert {rule for _, rule in expected} >= {"aux-capture-off", "fc-bypassed", "zero-acceptance"}
    assert {key: value for key, value in got.items() if key[1] != "zero-acceptance"} == \
        {key: value for key, value in expected.items() if key[1] != "zero-acceptance"}
    assert ("broken", "zero-acceptance") in got and not any(src == "r0" for src, _ in got)
    assert state.refused_frames == N - MAX_PUBLISHERS + 2


def test_a_heartbeat_judges_its_sender_only_so_a_full_fleet_stays_cheap():
    """256 publishers heartbeating: each non-step frame runs the rules for its sender, not for all
    (a pass over all 256 took 3.6 ms per heartbeat, RELIABILITY.md)."""
    fleet = strangers(MAX_PUBLISHERS)
    beats = [decode_frame(encode_frame("heartbeat", HEARTBEAT, src=f"stranger{i % MAX_PUBLISHERS}", n=1 + i // MAX_PUBLISHERS,
                                       t=10**9 + i)) for i in range(20 * MAX_PUBLISHERS)]
    state = analysed(fleet)
    start = time.process_time()
    for frame in beats:
        state.ingest(frame)
    per_frame = (time.process_time() - start) / len(beats)
    assert state.frames == len(fleet) + len(beats) and state.refused_frames == 0
    assert per_frame < 0.5e-3, per_frame


def test_a_chatty_publisher_does_not_delay_a_slow_ones_break():
    """A slow broken server (a step every 100 ms) next to a healthy one heartbeating every 50 ms: the
    heartbeats judge their sender only and leave the stream-time schedule alone, so the broken one's
    break still fires within a quarter second of stream time, not after 64 of its steps."""
    broken, chatty = Stream("broken"), Stream("chatty")
    stream = [broken.frame("hello", hello("EAGLE")), broken.frame("load", healthy_load()),
              chatty.frame("hello", hello()), chatty.frame("load", healthy_load())]
    off = {"feature_width": H, "fc": False, "capture": {"on": False, "layers": None}}
    for seq in range(20):
        stream.append(broken.frame("step", step(seq, broken.t, [0, 0], **off), dt_ns=100_000_000))
        chatty.t = broken.t - 50_000_000
        stream += [chatty.frame("heartbeat", HEARTBEAT, dt_ns=0), chatty.frame("heartbeat", HEARTBEAT, dt_ns=50_000_000)]
    state = SessionState()
    for frame in stream:
        state.ingest(frame)
        if {("broken", "aux-capture-off"), ("broken", "fc-bypassed")} <= {(v.src, v.id) for v in state.violations()}:
            break
    assert state.publishers["broken"].last_seq == 2  # t0 + 300 ms, as for a server alone (test_rules_everywhere.py)


# -- one publisher's collections ---------------------------------------------------------------


def test_seams_past_the_cap_are_counted_and_failures_still_show():
    hooks = [("hook", {"seam": f"seam{i}", "status": "attached", "detail": None}) for i in range(N)]
    hooks += [("hook", {"seam": "seam0", "status": "failed", "detail": "boom"}),
              ("hook", {"seam": "late", "status": "missing", "detail": "gone"})]
    state = analysed(one_publisher(hooks))
    pub = state.publishers["r0"]
    assert len(pub.hooks) == MAX_SEAMS and pub.unlisted_hook_frames == N - MAX_SEAMS + 1
    assert len(warnings_about(state, "seams")) == 1
    assert warnings_about(state, "hook late missing") == ["hook late missing: gone"]
    assert fired(state)[("r0", "hook-failed")].evidence["seams"] == {"seam0": "failed"}


def test_forward_modes_past_the_cap_cannot_hide_fc_bypassed():
    bodies = []
    for seq in range(N):
        body = step(seq, 0, [1])
        body["passes"] = [{"mode": f"junk{seq}", "width": H, "fc": False, "n": 1}]
        bodies.append(("step", body))
    bodies += [("step", step(seq, 0, [1], feature_width=H, fc=False)) for seq in range(N, N + 5)]
    state = analysed(one_publisher(bodies))
    pub = state.publishers["r0"]
    assert len(pub.passes) <= MAX_PASS_MODES + len(FEATURE_CARRYING_MODES)
    assert "draft_extend_v2" in pub.passes and "decode" not in pub.passes  # decode came after 32 junk modes
    assert pub.unlisted_pass_calls == N - MAX_PASS_MODES + 5 * 2  # the junk, then decode's 2 calls a step
    assert len(warnings_about(state, "forward modes")) == 1
    bypassed = fired(state)[("r0", "fc-bypassed")]
    assert bypassed.first_seq == N and bypassed.evidence["skipped_calls"] == 5


def test_widths_past_the_cap_are_counted_as_other_and_the_first_bad_one_is_kept():
    bodies = []
    for seq in range(N):
        body = step(seq, 0, [1])
        body["passes"] = [{"mode": "decode", "width": H + 1 + seq, "fc": False, "n": 1}]
        bodies.append(("step", body))
    state = analysed(one_publisher(bodies))
    widths = state.publishers["r0"].passes["decode"]
    assert len(widths.widths) == len(widths.width_first_seq) == MAX_WIDTHS
    assert widths.unlisted_width_calls == N - MAX_WIDTHS and widths.calls == N
    assert len(warnings_about(state, "widths")) == 1
    mismatch = fired(state)[("r0", "hidden-width-mismatch")]
    assert mismatch.first_seq == 0 and len(mismatch.evidence["widths_by_mode"]["decode"]) == MAX_WIDTHS
    (row,) = aux_view(state).passes
    assert row.widths[-1] == ("other", N - MAX_WIDTHS) and len(row.widths) == MAX_WIDTHS + 1


def test_configs_keep_the_baseline_and_the_latest_segments_and_the_rules_read_the_last_one():
    bodies = [("step", step(0, 0, [3]))]
    for i in range(N):
        captured = [3, 5, 6] if i % 2 else [2, 4, 5]
        bodies.append(("config", {"layers": [c - 1 for c in captured], "captured": captured, "applied": True,
                                  "reason": "", "origin": "control", "request_id": i}))
    bodies.append(("step", step(1, 0, [1], capture={"on": True, "layers": [3, 5, 6]})))
    state = analysed(one_publisher(bodies))
    pub = state.publishers["r0"]
    assert len(state.segments) == MAX_SEGMENTS and state.dropped_segments == N + 1 - MAX_SEGMENTS
    assert state.segments[0].origin == "startup" and state.segments[0].steps == 1
    assert state.segments[-1].captured == [3, 5, 6] and state.segments[-1].steps == 1
    assert pub.applied_config.request_id == N - 1
    assert len(warnings_about(state, "aux configurations")) == 1
    assert ("r0", "aux-layers-mismatch") not in fired(state)  # captured what the last change asked for


@pytest.mark.parametrize("vocab", [TARGET_VOCAB, 5 * TARGET_VOCAB])
def test_rising_draft_ids_keep_the_first_rises_and_still_date_the_break(vocab):
    """Ids 0, 1, 2, ... one step each: the vocabulary is crossed at step ``vocab``, inside the rises
    kept (dated exactly) or past them (dated where the maximum stood at the first rule pass after
    the crossing: at most one pass late, as the event log warns)."""
    load = healthy_load()
    load["target_vocab_size"] = vocab
    state = analysed(one_publisher([("step", step(i, 0, [1], draft_ids=[[i, i, i]])) for i in range(N)], load))
    pub = state.publishers["r0"]
    assert len(pub.draft_max_rises) == MAX_DRAFT_MAX_RISES and pub.unkept_max_rises == N - MAX_DRAFT_MAX_RISES
    assert pub.draft_id_max == N - 1 and pub.draft_max_seq == N - 1
    assert len(warnings_about(state, "highest draft id")) == 1
    oov = fired(state)[("r0", "draft-token-out-of-vocab")]
    if vocab < MAX_DRAFT_MAX_RISES:
        assert oov.first_seq == vocab
    else:
        assert vocab <= oov.first_seq < vocab + RULES_EVERY


# -- any mix ---------------------------------------------------------------------------------

CAPS = {"MAX_PUBLISHERS": 3, "MAX_SEAMS": 2, "MAX_PASS_MODES": 2, "MAX_WIDTHS": 2, "MAX_DRAFT_MAX_RISES": 3,
        "MAX_SEGMENTS": 2}
KINDS_NOTED = ("publishers", "seams", "forward modes", "widths", "highest draft id", "aux configurations")

hostile_bodies = st.one_of(
    st.tuples(st.just("hook"), st.integers(0, 5).map(lambda i: {"seam": f"s{i}", "status": "attached", "detail": None})),
    st.tuples(st.just("config"), st.just({"layers": [1], "captured": [2], "applied": True, "reason": "",
                                          "origin": "control", "request_id": 0})),
    st.tuples(st.just("step"), st.tuples(st.sampled_from(["decode", "draft_extend", "a", "b", "c"]), st.integers(0, 5),
                                         st.integers(0, 20))),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["p0", "p1", "p2", "p3", "p4"]), hostile_bodies), max_size=80))
def test_any_mix_stays_within_the_caps_and_notes_each_kind_once(ops):
    """With the caps shrunk to a few entries, any mix of publishers, seams, modes, widths, configs
    and draft ids: every collection within its cap, every call counted listed or not, each kind
    noted at most once per publisher (publishers and segments once per session), and only if hit."""
    streams, sent = {}, {}
    frames = []
    for seq, (src, (kind, body)) in enumerate(ops):
        s = streams.setdefault(src, Stream(src))
        if kind == "step":
            mode, width, top = body
            body = step(seq, s.t, [1], draft_ids=[[0, top]])
            body["passes"] = [{"mode": mode, "width": width, "fc": True, "n": 2}]
            sent[src] = sent.get(src, 0) + 2
        frames.append(s.frame(kind, body))
    with pytest.MonkeyPatch.context() as mp:
        for name, cap in CAPS.items():
            mp.setattr(state_module, name, cap)
        state = analyse(frames)
    assert len(state.publishers) <= CAPS["MAX_PUBLISHERS"] and len(state.segments) <= CAPS["MAX_SEGMENTS"]
    assert state.refused_frames == sum(1 for src, _ in ops if src not in state.publishers)
    for src, pub in state.publishers.items():
        assert len(pub.hooks) <= CAPS["MAX_SEAMS"] and len(pub.draft_max_rises) <= CAPS["MAX_DRAFT_MAX_RISES"]
        assert len(pub.passes) <= CAPS["MAX_PASS_MODES"] + len(FEATURE_CARRYING_MODES)
        assert sum(ps.calls for ps in pub.passes.values()) + pub.unlisted_pass_calls == sent.get(src, 0)
        for ps in pub.passes.values():
            assert len(ps.widths) <= CAPS["MAX_WIDTHS"] and sum(ps.widths.values()) + ps.unlisted_width_calls == ps.calls
    hit = {"publishers": state.refused_frames, "aux configurations": state.dropped_segments}
    for kind in KINDS_NOTED:
        for src in state.publishers if kind not in hit else [None]:
            pub = state.publishers.get(src)
            count = hit[kind] if src is None else {
                "seams": pub.unlisted_hook_frames, "forward modes": pub.unlisted_pass_calls,
                "highest draft id": pub.unkept_max_rises,
                "widths": sum(ps.unlisted_width_calls for ps in pub.passes.values())}[kind]
            notes = [e for e in state.events if e.level == "warning" and kind in e.text and src in (None, e.src)]
            if kind == "widths":  # once per publisher and mode
                assert len(notes) == sum(1 for ps in pub.passes.values() if ps.unlisted_width_calls)
            else:
                assert len(notes) == (1 if count else 0)


def test_each_bound_says_exactly_what_it_keeps_once():
    """The event log's line for each bound (with the caps shrunk), the first time it is hit, and where."""
    s = Stream("p")
    config = {"layers": [1], "captured": [2], "applied": True, "origin": "control"}
    bodies = [("hello", {**hello(), "seams": {"a": "attached", "b": "attached", "c": "attached", "d": "failed"}}),
              *(("hook", {"seam": f"h{i}", "status": "attached", "detail": None}) for i in range(2)),
              *(("config", config) for _ in range(3))]
    for seq in range(5):
        body = step(seq, s.t, [1], draft_ids=[[0, 100 + seq]])
        body["passes"] = [{"mode": f"m{seq}", "width": 1, "fc": True, "n": 1},
                          {"mode": "draft_extend", "width": seq, "fc": True, "n": 1}]
        bodies.append(("step", body))
    frames = [s.frame(kind, body) for kind, body in bodies] + strangers(3, "hook")
    caps = {**CAPS, "MAX_PUBLISHERS": 2}
    with pytest.MonkeyPatch.context() as mp:
        for name, cap in caps.items():
            mp.setattr(state_module, name, cap)
        state = analysed(frames)
    notes = [(e.src, e.t_ns, e.text) for e in state.events if e.level == "warning" and "more than" in e.text]
    t = [f.t for f in frames]
    assert notes == [
        ("p", t[0], "the hello names more than 2 seams: the rest are counted, not listed"),
        ("p", t[1], "hooks on more than 2 seams: new seams are counted, not listed (a failure still shows here)"),
        ("p", t[5], "more than 2 aux configurations: the oldest after the first are dropped from the A/B view"),
        ("p", t[7], "draft forwards in more than 2 forward modes: new modes are counted, not listed"),
        ("p", t[8], "draft forwards in mode draft_extend came in more than 2 widths: the rest are counted as other"),
        ("p", t[9], "the highest draft id rose more than 3 times: later rises are counted, not kept "
                    "(draft-token-out-of-vocab may date its break up to a rule pass late)"),
        ("stranger1", t[12], "more than 2 publishers: frames from new ones are counted, not analysed")]
    pub = state.publishers["p"]
    assert (pub.unlisted_hello_seams, pub.unlisted_hook_frames, state.dropped_segments, pub.unlisted_pass_calls,
            pub.unkept_max_rises, state.refused_frames) == (2, 2, 1, 4, 2, 2)
    assert pub.passes["draft_extend"].unlisted_width_calls == 3 and list(pub.hooks) == ["a", "b"]
