"""Graph evidence without an engine: the shim's graph ledger (capture recorded once, replays padded to
the captured batch size as SGLang's ``_pad_to_bucket`` does, base_cuda_graph_runner.py of 0.5.23), the
wire form of replayed passes, and the rules that read them: graph-aux-reset (SGLang <= 0.5.10 resets
aux capture to the default before the target's graph capture: cuda_graph_runner.py:643-653 of 0.5.10,
then model_runner.py:667 applies the configured ids) and passes-unobserved.
"""

from __future__ import annotations

import pytest
from benchmarks.support.analysis_streams import LAYERS, Stream, healthy_load, hello, step

from eagle3scope.analysis import analyse
from eagle3scope.analysis.facts import pass_visibility
from eagle3scope.wire import decode_frame, encode_frame
from eagle3scope.wire.bodies import read
from eagle3scope.wire.aux_layers import default_capture
from eagle3scope_shim import detach_plan, graph_capture, hooks, seams, step_body
from eagle3scope_shim.shim_state import Step
from support.shim_state import ended


def _decided(shim, step) -> list[list]:
    """The step's passes as appended, with fc decided where a caller read the width (as the publisher does)."""
    return [[mode, width, step_body.fc_of(shim.load, width) if fc is None else fc, n, graph] for mode, width, fc, n, graph in step.passes]


def test_a_graph_is_recorded_once_and_replays_go_to_the_bucket_they_pad_to(shim):
    for bs in (1, 2, 4, 8):
        assert graph_capture.record_capture(shim.load, "decode", bs, 128, False)
    assert not graph_capture.record_capture(shim.load, "decode", 4, 128, False)  # warm-ups and the capture run: one graph
    assert graph_capture.record_capture(shim.load, "draft_extend_v2", 8, 384, True)
    assert [graph_capture.graph_bs(shim.load, "decode", raw) for raw in (1, 3, 4, 5, 8, 9)] == [1, 4, 4, 8, 8, 0]
    assert graph_capture.graph_bs(shim.load, "draft_extend_v2", 2) == 8 and graph_capture.graph_bs(shim.load, "extend", 1) == 0
    assert graph_capture.captured(shim.load)[0] == {"mode": "decode", "bs": 1, "width": 128, "fc": False}
    graph_capture.record_capture(shim.load, "decode", 16, 128, False)  # a later capture (a recapture) re-resolves
    assert graph_capture.graph_bs(shim.load, "decode", 9) == 16


def test_the_ledger_is_bounded(shim):
    for bs in range(graph_capture.MAX_GRAPHS + 10):
        graph_capture.record_capture(shim.load, "decode", bs, 128, False)
    assert len(shim.load.graphs) == graph_capture.MAX_GRAPHS


def test_replayed_passes_fold_apart_from_eager_ones_and_reach_the_wire(shim):
    step_ = Step()
    step_.passes += [("decode", 128, False, 2, 4), ("decode", 128, False, 2, 4),
                     ("decode", 128, False, 1, None),  # an eager pass of the same shape is its own entry
                     ("draft_extend_v2", 384, True, 1, 0)]
    body = step_body.finalize_step(shim, ended(step_, rids=["a"]))
    assert body["passes"] == [
        {"mode": "decode", "width": 128, "fc": False, "n": 4, "replayed": True, "graph_bs": 4},
        {"mode": "decode", "width": 128, "fc": False, "n": 1},
        {"mode": "draft_extend_v2", "width": 384, "fc": True, "n": 1, "replayed": True, "graph_bs": 0},
    ]
    assert decode_frame(encode_frame("step", body, src="t", n=0)).body == body


def _graphed_hello(**observable) -> dict:
    body = hello()
    body["observable"] = {"passes_prefill": True, "passes_draft_decode": True, "passes_draft_extend": True,
                          "graph_prefill": False, "graph_draft_decode": True, "graph_draft_extend": True, **observable}
    body["graphs"] = {"captured": [{"mode": "decode", "bs": 1, "width": 64, "fc": False}], "target_aux": None}
    return body


def _run(hello_body, load=None, steps=8, **step_args):
    stream = Stream()
    frames = [stream.frame("hello", hello_body), stream.frame("load", load or healthy_load())]
    frames += [stream.frame("step", step(i, 0, [1, 2], **step_args)) for i in range(steps)]
    return {v.id: v for v in analyse(frames).violations()}


def test_graph_aux_reset_fires_when_the_targets_graphs_hold_the_default_set():
    load = healthy_load()
    load["aux"]["configured"], load["aux"]["captured"] = [1, 3, 5], [2, 4, 6]  # trained on other than the default
    shown = load["aux"]["captured"]
    default = default_capture(LAYERS)
    assert sorted(default) != sorted(shown)
    body = _graphed_hello()
    body["graphs"]["target_aux"] = {"on": True, "layers": default}
    fired = _run(body, load, capture={"on": True, "layers": shown})
    v = fired["graph-aux-reset"]
    assert v.severity == "error" and v.evidence["graph_layers"] == default and v.evidence["shown_layers"] == shown
    assert v.evidence["configured"] == load["aux"]["configured"] and "0.5.11" in v.fix


def test_graph_aux_reset_stays_quiet_when_the_graphs_hold_what_is_shown():
    load = healthy_load()
    body = _graphed_hello()
    body["graphs"]["target_aux"] = {"on": True, "layers": list(reversed(load["aux"]["captured"]))}
    fired = _run(body, load, capture={"on": True, "layers": load["aux"]["captured"]})
    assert "graph-aux-reset" not in fired
    assert "graph-aux-reset" not in _run(hello(), load)  # no graph facts at all: nothing to judge


def test_passes_unobserved_names_what_could_not_be_seen():
    fired = _run(_graphed_hello(passes_draft_extend=False))
    v = fired["passes-unobserved"]
    assert v.severity == "info" and v.evidence["unobserved"] == ["draft extend"]
    assert v.evidence["replay_graphs"] == ["draft decode", "draft extend"]
    assert "passes-unobserved" not in _run(_graphed_hello())


def test_pass_visibility_reads_old_and_new_hellos(shim):
    assert pass_visibility(read("hello", _graphed_hello())) == {"prefill": "eager", "draft decode": "graph",
                                                             "draft extend": "graph"}
    assert set(pass_visibility(read("hello", hello())).values()) == {"unknown"}  # an older shim's observable
    assert pass_visibility(None) == {"prefill": "unknown", "draft decode": "unknown", "draft extend": "unknown"}


def test_fc_bypassed_evidence_counts_the_passes_read_at_their_caller():
    stream = Stream()
    frames = [stream.frame("hello", _graphed_hello()), stream.frame("load", healthy_load())]
    for i in range(6):
        body = step(i, 0, [0, 0], feature_width=64, fc=False)
        body["passes"] = [{**p, "replayed": True, "graph_bs": 2} for p in body["passes"]]
        frames.append(stream.frame("step", body))
    v = {v.id: v for v in analyse(frames).violations()}["fc-bypassed"]
    assert v.evidence["width_seen"] == [64] and v.evidence["replayed_by_mode"] == {"draft_extend_v2": 6}


class _NS:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def test_the_target_capture_hook_records_the_layers_its_graphs_hold(shim, monkeypatch):
    """The hook around CudaGraphRunner.capture (<= 0.5.12) / DecodeCudaGraphRunner.capture reads the
    target's capture state at that moment; a runner of a model without aux capture (the draft's) is
    ignored. (A CUDA graph capture cannot run here: the runner is a stand-in, the hook is the shim's.)"""
    shim.load.target_graph_aux = None
    shim.publisher = None
    hook = hooks.FACTORIES["target_graph_capture"](shim, "graph_capture.target_capture")
    target = _NS(capture_aux_hidden_states=True, model=_NS(layers_to_capture=[2, 4, 5]))
    ran = []
    hook(lambda runner: ran.append(runner), _NS(model_runner=_NS(model=target)))
    assert shim.load.target_graph_aux == {"on": True, "layers": [2, 4, 5]} and len(ran) == 1
    target.model.layers_to_capture = [3, 5, 6]  # 0.5.10's model_runner applies the configured ids after capture
    hook(lambda runner: None, _NS(model_runner=_NS(model=_NS(model=_NS()))))  # the draft's runner
    assert shim.load.target_graph_aux == {"on": True, "layers": [2, 4, 5]}  # what the graphs hold, not what is shown


def test_the_aux_view_says_which_passes_replay_graphs_and_which_are_not_seen():
    from eagle3scope.analysis.views import aux_view

    stream = Stream()
    frames = [stream.frame("hello", _graphed_hello(passes_prefill=False)), stream.frame("load", healthy_load())]
    for i in range(3):
        body = step(i, 0, [1])
        body["passes"] = [{**p, "replayed": True, "graph_bs": 1} for p in body["passes"]]
        frames.append(stream.frame("step", body))
    view = aux_view(analyse(frames))
    assert {row.mode: row.replayed for row in view.passes} == {"decode": 6, "draft_extend_v2": 3}
    lines = {text.split(":")[0]: (text, tone) for _, text, tone in view.seen}
    assert set(lines) == {"prefill", "draft decode", "draft extend"}
    assert "not seen" in lines["prefill"][0] and lines["prefill"][1] == "bad"
    assert "batch sizes 1" in lines["draft decode"][0] and "capture not seen" in lines["draft extend"][0]
    assert aux_view(analyse([Stream().frame("hello", hello())])).seen == []  # an eager server: nothing to say


def test_the_aux_panel_prints_them(tmp_path):
    """The real app over a recording of a graphed server: the aux panel names the replayed passes and
    the one it could not see, instead of staying silent."""
    pytest.importorskip("textual")
    from benchmarks.support.tui_support import paused_app, play_to_end, run_async, write_recording

    raws = [encode_frame("hello", _graphed_hello(passes_prefill=False), src="r0", n=0, t=1_000_000_000),
            encode_frame("load", healthy_load(), src="r0", n=1, t=1_000_000_001)]
    for i in range(4):
        body = step(i, 0, [1, 2])
        body["passes"] = [{**p, "replayed": True, "graph_bs": 2} for p in body["passes"]]
        raws.append(encode_frame("step", body, src="r0", n=2 + i, t=1_000_000_002 + i * 1_000_000))
    recording = write_recording(tmp_path / "graphed.e3s", raws)

    @run_async
    async def shown():
        app = paused_app(recording, speed=64.0)
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.press("2")
            return await play_to_end(app, pilot)

    text = " ".join(shown().split())
    assert "replayed from captured graphs: decode 8, draft_extend_v2 4" in text
    assert "prefill: not seen on this server" in text and "draft decode: replayed from graphs" in text


# -- which caller reads count as replays, and what fc means there (the EAGLE-1 regression) -----------
@pytest.fixture
def caller(shim, monkeypatch):
    shim.load.draft_embed_width = 128
    shim.step = Step()
    hook = hooks.FACTORIES["draft_extend"](shim, "v2.draft_extend")  # reads batch_result.logits_output.hidden_states

    def call(width, forward_runs=False):
        def original(worker, batch, batch_result):
            if forward_runs:  # the hooked draft forward ran eagerly inside the call
                shim.step.forwards += 1
        result = _NS(logits_output=_NS(hidden_states=_NS(shape=(1, width))))
        hook(original, _NS(speculative_num_steps=3), _NS(seq_lens=[5]), result)
        passes, shim.step.passes = shim.step.passes, []
        return [list(p.values()) for p in step_body.merged_passes(shim.load, passes)]  # fc decided as the publisher does

    return call


def test_a_caller_read_counts_as_a_replay_only_when_the_hooked_forward_did_not_run(caller):
    assert caller(384) == [["draft_extend_v2", 384, True, 1, True, 0]]  # EAGLE-3: fc iff width != embedding width
    assert caller(128) == [["draft_extend_v2", 128, False, 1, True, 0]]
    assert caller(384, forward_runs=True) == []  # the forward hook counted it, eagerly


def test_a_draft_whose_forward_is_unhooked_says_nothing_at_its_caller(shim, caller):
    """SGLang ran the forward, unseen: the caller read is no replay (it read as fc-bypassed on EAGLE-1)."""
    shim.unobserved["draft_model"] = "the draft model is X, whose forward the shim does not hook"
    assert caller(128) == []


def test_an_eagle1_draft_applies_fc_on_every_pass(shim, caller, monkeypatch):
    """llama_eagle.LlamaModel.forward: fc over cat(embeds, hidden), H-wide states in (llama_eagle.py of 0.5.23)."""
    shim.load.draft_fc_always = True
    assert caller(128) == [["draft_extend_v2", 128, True, 1, True, 0]]


def test_the_draft_forward_hook_reads_fc_per_draft_family(shim, monkeypatch):
    shim.step = Step()
    inner = _NS(embed_tokens=_NS(weight=_NS(shape=(1024, 128))))
    batch = _NS(spec_info=_NS(hidden_states=_NS(shape=(3, 128))), forward_mode=_NS(name="DECODE"), batch_size=3)
    families = [(seam, seam in seams.FC_ALWAYS) for seam in seams.OBSERVING_SEAMS["draft_model"]]
    assert {fc for _, fc in families} == {True, False} and len(families) == 6
    for seam, fc in families:
        hooks.FACTORIES["draft_forward"](shim, seam)(lambda *a: None, inner, None, None, batch)
        assert shim.step.passes[-1][:3] == ("decode", 128, fc), seam
    assert shim.step.forwards == len(families)
    wide = _NS(spec_info=_NS(hidden_states=_NS(shape=(3, 384))), forward_mode=_NS(name="DECODE"), batch_size=3)
    hooks.FACTORIES["draft_forward"](shim, "llama_eagle3.forward")(lambda *a, **k: None, inner, None, None, forward_batch=wide)
    assert shim.step.passes[-1][:3] == ("decode", 384, True) and shim.seams.disabled == set()  # passed by name, read alike


class _Untouchable:
    """A draft model or forward batch the counting forward hook must not read (its reads,
    three times a round, were the shim's dearest seam)."""

    def __getattr__(self, name):
        pytest.fail(f"the forward hook read {name} inside a caller that had read the width")


def test_eager_forwards_inside_a_caller_are_counted_there_with_the_callers_width(shim, monkeypatch):
    """The draft-forward hook only counts inside a caller; the caller adds the eager passes with the
    width it read and the fc it implies, once, not as replays; the step's forward count is kept."""
    shim.load.draft_embed_width = 128
    shim.step = Step()
    forward = hooks.FACTORIES["draft_forward"](shim, "llama_eagle3.forward")
    caller = hooks.FACTORIES["draft_extend"](shim, "v2.draft_extend")

    def original(worker, batch, batch_result, runs):
        assert shim.step.feed is not None
        for _ in range(runs):
            forward(lambda *a: None, _Untouchable(), None, None, _Untouchable())

    for width, runs, fc in ((384, 2, True), (128, 1, False)):
        result = _NS(logits_output=_NS(hidden_states=_NS(shape=(1, width))))
        caller(original, _NS(speculative_num_steps=3), _NS(seq_lens=[5]), result, runs)
        assert shim.step.feed is None
    assert shim.step.passes == [("draft_extend_v2", 384, None, 2, None), ("draft_extend_v2", 128, None, 1, None)]
    assert [(p["width"], p["fc"], p["n"]) for p in step_body.merged_passes(shim.load, shim.step.passes)] == [(384, True, 2), (128, False, 1)]
    assert shim.step.forwards == 3 and shim.seams.disabled == set()


def test_without_the_embedding_width_the_forward_hook_reads_width_and_fc_itself(shim, monkeypatch):
    """The worker-init hook did not learn the draft's embedding width: the caller cannot tell fc, so
    each forward reads its own input and the embedding, as at a forward outside any caller."""
    shim.step = Step()
    forward = hooks.FACTORIES["draft_forward"](shim, "llama_eagle3.forward")
    inner = _NS(embed_tokens=_NS(weight=_NS(shape=(1024, 128))))
    fb = _NS(spec_info=_NS(hidden_states=_NS(shape=(3, 384))), forward_mode=_NS(name="DRAFT_EXTEND_V2"), batch_size=3)

    def original(worker, batch, batch_result):
        assert shim.step.feed is None
        forward(lambda *a: None, inner, None, None, fb)

    result = _NS(logits_output=_NS(hidden_states=_NS(shape=(3, 384))))
    hooks.FACTORIES["draft_extend"](shim, "v2.draft_extend")(original, _NS(speculative_num_steps=3), _NS(seq_lens=[5]), result)
    assert shim.step.passes == [("draft_extend_v2", 384, True, 1, None)] and shim.step.forwards == 1


def test_observable_claims_no_passes_for_a_draft_whose_forward_is_unhooked(shim, monkeypatch):
    """hello.observable: caller reads stand for a replayed pass only on a draft the hooks see."""
    from eagle3scope_shim import loadreport

    shim.load.workers = [("v2", _NS(), None, None)]
    shim.seams.status.update({"llama_eagle3.forward": "attached", "v2.draft": "attached",
                                               "v2.draft_extend": "attached", "v2.draft_extend_prefill": "attached"})
    shim.unobserved = {}
    seen = ("passes_prefill", "passes_draft_decode", "passes_draft_extend")
    assert [loadreport._observable(shim, _NS())[k] for k in seen] == [True, True, True]
    shim.unobserved["draft_model"] = "the draft model is LlamaForCausalLM, whose forward the shim does not hook"
    assert [loadreport._observable(shim, _NS())[k] for k in seen] == [False, False, False]


def test_a_replayed_draft_decode_counts_the_workers_steps_less_one(shim, monkeypatch):
    """v2 ``draft`` runs speculative_num_steps - 1 decode forwards (eagle_worker_v2.py 0.5.23): a call in
    which none ran replayed that many, at the width the caller read."""
    shim.load.draft_embed_width = 128
    shim.step = Step()
    graph_capture.record_capture(shim.load, "decode", 4, 128, False)
    verify_input = _NS(draft_token=_NS(is_cpu=True, tolist=lambda: [1, 2, 3, 4]))
    batch = _NS(spec_info=_NS(hidden_states=_NS(shape=(2, 128))), seq_lens=[7, 9])
    hooks.FACTORIES["draft"](shim, "v2.draft")(lambda worker, b: verify_input, _NS(speculative_num_steps=4), batch)
    assert _decided(shim, shim.step) == [["decode", 128, False, 3, 4]] and shim.step.draft == [1, 2, 3, 4]


# -- graph-free servers: the counting forward hook taken out, the callers add eager passes -----------
class _Draft:
    def forward(self, *args):
        return "ran"


@pytest.fixture
def graph_free(shim, monkeypatch):
    """A v2 worker whose draft has no graph runner (SGLang's slots hold None on a CPU or without graphs),
    the draft forward wrapped by the shim's own patcher shape (functools.wraps), its detacher registered."""
    from eagle3scope_shim.patching import _wrap

    shim.unobserved = {}
    shim.seams.disabled.clear()
    shim.load.draft_embed_width = 128
    shim.load.draft_fc_always = False
    shim.plan.forwards_at_callers = False
    worker = _NS(draft_worker=_NS(cuda_graph_runner=None, cuda_graph_runner_for_draft_extend=None,
                                  draft_runner=_NS(prefill_cuda_graph_runner=None)))
    shim.load.workers = [("v2", worker, None, None)]
    original = _Draft.__dict__["forward"]
    hook = hooks.FACTORIES["draft_forward"](shim, "llama_eagle3.forward")
    monkeypatch.setattr(_Draft, "forward", _wrap(original, hook))

    def undo():
        if _Draft.__dict__["forward"] is original:
            return False
        _Draft.forward = original
        return True

    shim.seams.detachers["llama_eagle3.forward"] = undo
    return worker, original


def test_a_graph_free_server_takes_the_counting_forward_hook_out(shim, graph_free):
    worker, original = graph_free
    detach_plan._detach_counting_forwards(shim, worker)
    assert _Draft.__dict__["forward"] is original and shim.plan.forwards_at_callers is True


@pytest.mark.parametrize("why", ["decode graph", "extend graph", "prefill graph", "adaptive", "no embedding width",
                                 "unhooked draft"])
def test_the_counting_forward_hook_stays_wherever_it_is_needed(shim, graph_free, monkeypatch, why):
    """A draft graph runner in any slot (its replays must be told from eager passes, its captures
    recorded), adaptive steps (which swap runners in later), no embedding width (the forward reads fc
    itself) or a draft whose forward the shim does not hook: nothing is taken out."""
    worker, original = graph_free
    runner = type("EAGLEDraftCudaGraphRunner", (), {})()
    if why == "decode graph":
        worker.draft_worker.cuda_graph_runner = runner
    elif why == "extend graph":
        worker.draft_worker.cuda_graph_runner_for_draft_extend = runner
    elif why == "prefill graph":
        worker.draft_worker.draft_runner.prefill_cuda_graph_runner = runner
    elif why == "adaptive":
        worker.adaptive_controller = object()
    elif why == "no embedding width":
        shim.load.draft_embed_width = None
    else:
        shim.unobserved["draft_model"] = "the draft model is X, whose forward the shim does not hook"
    detach_plan._detach_counting_forwards(shim, worker)
    assert _Draft.__dict__["forward"] is not original and shim.plan.forwards_at_callers is False


def test_callers_add_eager_passes_once_the_forward_hook_is_out(shim, graph_free, monkeypatch):
    """Same passes as the counting hook gave on the real engine (test_shim_engine: decode H x (steps - 1)
    without fc, draft_extend_v2 3H x 1 with fc, prefill extend 3H x 1), none marked replayed."""
    worker, _ = graph_free
    detach_plan._detach_counting_forwards(shim, worker)
    shim.step = Step()
    verify_input = _NS(draft_token=_NS(is_cpu=True, tolist=lambda: [1, 2, 3, 4]))
    batch = _NS(spec_info=_NS(hidden_states=_NS(shape=(2, 128))), seq_lens=[7, 9])

    def draft(self, b):  # SGLang's eager draft: its forwards run, unhooked now
        for _ in range(self.speculative_num_steps - 1):
            assert _Draft().forward() == "ran"
        return verify_input

    hooks.FACTORIES["draft"](shim, "v2.draft")(draft, _NS(speculative_num_steps=4), batch)
    result = _NS(logits_output=_NS(hidden_states=_NS(shape=(8, 384))))
    hooks.FACTORIES["draft_extend"](shim, "v2.draft_extend")(lambda *a: _Draft().forward(), _NS(speculative_num_steps=4),
                                                      batch, result)
    hooks.FACTORIES["draft_extend_prefill"](shim, "v2.draft_extend_prefill")(
        lambda *a: _Draft().forward(), _NS(speculative_num_steps=4), batch, _NS(shape=(5, 384)))
    assert _decided(shim, shim.step) == [["decode", 128, False, 3, None], ["draft_extend_v2", 384, True, 1, None],
                                 ["extend", 384, True, 1, None]]
    one_step = Step()
    shim.step = one_step
    hooks.FACTORIES["draft"](shim, "v2.draft")(lambda self, b: verify_input, _NS(speculative_num_steps=1), batch)
    assert one_step.passes == []  # a one-step draft runs no decode forward


def _first_step_detaches(shim, worker):
    """What the step hook takes out at the first step, the forward hook first (make_step)."""
    detach_plan._detach_counting_forwards(shim, worker)
    detach_plan._detach_draft_and_extend(shim, worker)


@pytest.fixture
def extend_detachable(shim, graph_free, monkeypatch):
    """The graph-free v2 worker with four steps, whose draft and draft-extend seams SGLang's wrapper
    holds too (a seam whose wrapper was replaced since cannot be taken out: its detacher says False)."""

    worker, _ = graph_free
    worker.speculative_num_steps = 4
    taken, held = [], set()
    for seam in (detach_plan.DRAFT_SEAM, detach_plan.EXTEND_SEAM):
        shim.seams.detachers[seam] = lambda seam=seam: seam not in held and not taken.append(seam)
    shim.plan.draft_at_verify = False
    shim.plan.extend_at_verify = False
    shim.topology = None  # one stage, as without the scheduler's hook
    return worker, taken, held


def test_a_graph_free_v2_server_takes_the_draft_and_extend_hooks_out_too(shim, extend_detachable):
    worker, taken, _ = extend_detachable
    _first_step_detaches(shim, worker)
    assert taken == [detach_plan.DRAFT_SEAM, detach_plan.EXTEND_SEAM] and shim.plan.draft_at_verify and shim.plan.extend_at_verify


@pytest.mark.parametrize("held", [detach_plan.DRAFT_SEAM, detach_plan.EXTEND_SEAM])
def test_only_a_hook_taken_out_has_its_work_moved(shim, extend_detachable, held):
    """A hook still in place keeps doing its own work: moving it too would count its passes twice."""
    worker, taken, holding = extend_detachable
    holding.add(held)
    _first_step_detaches(shim, worker)
    assert held not in taken
    assert shim.plan.draft_at_verify is (held != detach_plan.DRAFT_SEAM) and shim.plan.extend_at_verify is (held != detach_plan.EXTEND_SEAM)


@pytest.mark.parametrize("why", ["zero steps", "v1", "graphs", "pipeline"])
def test_the_draft_and_extend_hooks_stay_where_verify_cannot_stand_for_them(shim, extend_detachable, monkeypatch, why):
    """0 steps (SGLang drafts nothing and may stub the extend out: SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND),
    a v1 worker (its extend reads the batch, not verify's result), a draft graph (the forward hook
    stays) or pipeline stages (the last drafts the next round at the end of the step: eagle_worker_v2.py
    0.5.23, the PP tail-draft, which verify never sees)."""
    worker, taken, _ = extend_detachable
    if why == "zero steps":
        worker.speculative_num_steps = 0
    elif why == "pipeline":
        shim.topology = {"parallel": {"pp_size": 2}}
    elif why == "v1":
        shim.load.workers = [("v1", worker, None, None)]
    else:
        worker.draft_worker.cuda_graph_runner = type("EAGLEDraftCudaGraphRunner", (), {})()
    _first_step_detaches(shim, worker)
    assert taken == [] and not shim.plan.draft_at_verify and not shim.plan.extend_at_verify


def _verify_result(width: int):
    return _NS(accept_lens=_NS(is_cpu=True, tolist=lambda: [2]), next_token_ids=_NS(is_cpu=True, tolist=lambda: [5, 6]),
               logits_output=_NS(hidden_states=_NS(shape=(4, width))))


def _verify_batch(width: int | None = 128, prebuilt: bool = False):
    """A batch as verify gets it: spec_info is the verify input the draft made (draft_token); the
    step's hook saw the draft input before (hidden_states), or a verify input already (PP)."""
    return _NS(spec_info=_NS(draft_token=_NS(is_cpu=True, tolist=lambda: [1, 7, 8, 9]), is_verify_input=lambda: prebuilt,
                             hidden_states=None if width is None else _NS(shape=(1, width))))


def test_verify_adds_the_draft_and_extend_passes_as_their_hooks_did(shim, extend_detachable, monkeypatch):
    """The frame is the one the two hooks gave: the draft's tokens, decode x (steps - 1) at the width
    the step's hook read, draft_extend_v2 at verify's hidden width with fc (3H into an H draft)."""
    worker, _, _ = extend_detachable
    _first_step_detaches(shim, worker)
    shim.publisher = None
    step = Step()
    step.draft_from = hooks._draft_start(_verify_batch(128), {})
    shim.step = step
    hooks.FACTORIES["verify_v2"](shim, "v2.verify")(lambda self, b: _verify_result(384), _NS(topk=1, speculative_num_steps=4),
                                              _verify_batch())
    assert _decided(shim, step) == [["decode", 128, False, 3, None], ["draft_extend_v2", 384, True, 1, None]]
    assert step.draft == [1, 7, 8, 9] and step.draft_ns > 0 and step.verify_end is not None and step.verify_ns is not None
    again = Step()  # aux capture off: the H-wide states skip fc; a verify input already there: no draft ran
    again.draft_from = hooks._draft_start(_verify_batch(prebuilt=True), {})
    shim.step = again
    hooks.FACTORIES["verify_v2"](shim, "v2.verify")(lambda self, b: _verify_result(128), _NS(topk=1, speculative_num_steps=4),
                                              _verify_batch())
    assert _decided(shim, again) == [["draft_extend_v2", 128, False, 1, None]] and again.draft_ns is None
    assert again.draft == [1, 7, 8, 9]  # the tokens it verifies all the same
    assert hooks._draft_start(_NS(spec_info=None), {})[1] is None  # SGLang drafts from an idle input it makes


def test_the_step_times_the_draft_before_verify_and_the_extend_after_it(shim, extend_detachable, monkeypatch):
    import time

    worker, _, _ = extend_detachable
    _first_step_detaches(shim, worker)
    submitted = []
    shim.publisher = _NS(submit=lambda kind, payload, fin: submitted.append(payload) or True)
    shim.aux_channel = None
    shim.step = None
    shim.seams.status.clear()  # no commit seam: the step goes out at once
    shim.plan.stepped = True
    result = _verify_result(384)
    verify = hooks.FACTORIES["verify_v2"](shim, "v2.verify")

    def round_(self, b):
        time.sleep(0.2)  # SGLang's draft, unhooked
        b.spec_info = _verify_batch().spec_info
        verify(lambda *a: time.sleep(0.1) or result, _NS(topk=1, speculative_num_steps=4), b)  # SGLang's verify
        time.sleep(0.02)  # SGLang's draft extend, unhooked
        return result

    batch = _NS(forward_mode=_NS(is_idle=lambda: False, is_extend=lambda: False), is_extend_in_batch=False,
                reqs=[_NS(rid="r")], spec_info=_verify_batch(128).spec_info)
    hooks.FACTORIES["step"](shim, "v2.step")(round_, worker, batch)
    step = submitted[0]
    # the sleeps before, in and after verify, each in its own phase (verify's ends its draft's time)
    assert 200e6 <= step.draft_ns < 300e6 and step.verify_ns >= 100e6 and 20e6 <= step.extend_ns < 100e6
    assert _decided(shim, step) == [["decode", 128, False, 3, None], ["draft_extend_v2", 384, True, 1, None]]
