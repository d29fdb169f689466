"""The aux-layer toggle under tensor parallelism, without the engine: the change riding SGLang's
request broadcast, every rank applying it together, the outcome gathered, one failure restoring all.

Built from SGLang 0.5.23's source: ``SchedulerRequestReceiver._broadcast_reqs_across_ranks``
(managers/scheduler_components/request_receiver.py) pickles what TP rank 0 pulled through
``broadcast_pyobj`` (utils/common.py) and every rank then dispatches the list with a
``TypeBasedDispatcher`` that raises on unknown objects (sglang/utils.py); ``handle_rpc_request``
(managers/scheduler.py) ends its all-rank RPCs with a collective over the TP CPU group. Ranks are
threads here and the gather is a barrier with ``all_gather_object``'s semantics (every rank gets
every rank's object, in rank order; a rank that skipped a gather leaves the others stuck, which
the barrier's timeout turns into a failure). ``test_aux_tp_engine.py`` runs the real TP-2 server.
"""

from __future__ import annotations

import pickle
import threading
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eagle3scope.control.client import ControlClient
from eagle3scope.wire.endpoints import free_port
from eagle3scope.wire.token import create_token_file, read_token
from eagle3scope_shim import aux_channel, collective, control_apply, control_facts, hooks, seams
from eagle3scope_shim import graph_capture as shim_graphs

from support.aux_support import Recorder, StandInTarget, TargetRunner, looping


# -- the change on SGLang's broadcast list ---------------------------------------------------------
class TokenizedGenerateReqInput:  # what SGLang's list holds (any object the shim must leave alone)
    def __init__(self, rid):
        self.rid = rid

    def __eq__(self, other):
        return type(other) is type(self) and other.rid == self.rid


def test_a_change_rides_the_pickled_broadcast_and_is_gone_before_dispatch():
    pulled = [TokenizedGenerateReqInput("a"), TokenizedGenerateReqInput("b")]
    change = {"id": "r1", "layers": [1, 3, 4], "captured": [2, 4, 5], "previous": [2, 4, 5], "recapture": False}
    sent = collective.inject(pulled, change)
    assert pulled == [TokenizedGenerateReqInput("a"), TokenizedGenerateReqInput("b")]  # rank 0's own list untouched
    received = pickle.loads(pickle.dumps(sent))  # what broadcast_pyobj hands the other ranks
    received.append(TokenizedGenerateReqInput("local-abort"))  # SGLang appends local aborts after the pulled ones
    assert collective.take(received) == [change]
    assert received == [*pulled, TokenizedGenerateReqInput("local-abort")]
    assert collective.take(received) == []


_objects = st.one_of(st.builds(TokenizedGenerateReqInput, st.text(max_size=3)), st.integers(), st.none(),
                     st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))


@given(st.lists(_objects, max_size=8), st.lists(st.integers(0, 8), max_size=3))
def test_take_removes_exactly_the_shims_objects_in_order(others, where):
    reqs = list(others)
    changes = [{"id": f"c{i}"} for i in range(len(where))]
    for pos, change in zip(where, changes):
        reqs.insert(min(pos, len(reqs)), {collective.MARK: change})
    in_list_order = [r[collective.MARK] for r in reqs if type(r) is dict and collective.MARK in r]
    assert sorted(in_list_order, key=lambda c: c["id"]) == changes
    assert collective.take(reqs) == in_list_order
    assert reqs == others


# -- every rank applies together -------------------------------------------------------------------
class ThreadGather:
    """``all_gather_object`` for ranks that are threads: every rank blocks until all have given theirs."""

    def __init__(self, n: int) -> None:
        self.n, self.slots, self.barrier, self.calls = n, [None] * n, threading.Barrier(n, timeout=5), 0

    def of(self, rank: int):
        def gather(obj):
            self.slots[rank] = obj
            self.barrier.wait()
            out = list(self.slots)
            self.barrier.wait()
            if rank == 0:
                self.calls += 1
            return out

        return gather


def _facts(target, runner=None) -> aux_channel.Facts:
    facts = control_facts.ControlFacts()
    facts.target = facts.inner = target
    facts.tp_size = 2
    if runner is not None:
        worker = SimpleNamespace(target_worker=SimpleNamespace(model_runner=runner), adaptive_controller=None)
        facts.graphs = shim_graphs.plan(worker, SimpleNamespace(device="cuda"), "0.5.23")
    return facts


def _targets(n: int = 2):
    targets = [StandInTarget(8) for _ in range(n)]
    for t in targets:
        t.set_eagle3_layers_to_capture([2, 4, 5])
        t.calls.clear()
    return targets


def _everywhere(shim, change, facts_per_rank):
    """Run ``apply_everywhere`` on every rank at once; each rank's outcome and the gather count."""
    gather, outcomes = ThreadGather(len(facts_per_rank)), {}

    def rank(r):
        outcomes[r] = control_apply.apply_everywhere(shim, change, facts_per_rank[r], gather.of(r), r)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(len(facts_per_rank))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == list(range(len(facts_per_rank))), "a rank did not finish (stuck in a gather?)"
    return [outcomes[r] for r in sorted(outcomes)], gather.calls


def _change(layers, recapture=False, previous=(2, 4, 5)):
    return {"id": "r1", "layers": list(layers), "captured": [i + 1 for i in layers], "previous": list(previous),
            "recapture": recapture}


@pytest.fixture
def scheduler(shim, monkeypatch):
    shim.scheduler = SimpleNamespace(forward_ct=41)


def test_every_rank_applies_the_set_and_reports_its_capture_list(shim, scheduler):
    targets = _targets()
    outcomes, gathers = _everywhere(shim, _change([1, 3, 4]), [_facts(t) for t in targets])
    assert outcomes[0] == outcomes[1]  # every rank took the same branch
    assert outcomes[0]["ok"] and outcomes[0]["status"] == "applied" and gathers == 1
    assert outcomes[0]["ranks"] == [{"rank": r, "captured": [2, 4, 5], "on": True, "forward_ct": 41, "error": ""}
                                   for r in (0, 1)]
    assert [t.model.layers_to_capture for t in targets] == [[2, 4, 5], [2, 4, 5]]
    assert shim.aux_change_applying is False


def test_one_rank_failing_refuses_the_set_and_restores_every_rank(shim, scheduler, monkeypatch):
    targets = _targets()
    shim.fault = "aux.apply@tp1=1,3,4"  # rank 1 only, this set only
    outcomes, gathers = _everywhere(shim, _change([1, 3, 4]), [_facts(t) for t in targets])
    assert outcomes[0] == outcomes[1] and not outcomes[0]["ok"] and gathers == 2
    assert outcomes[0]["error"] == ("TP rank 1: fault injected into aux.apply on TP rank 1 by EAGLE3SCOPE_FAULT; "
                                    "restored [2, 4, 5] on every TP rank")
    assert [r["captured"] for r in outcomes[0]["ranks"]] == [[3, 5, 6], [3, 5, 6]]
    assert targets[0].calls == [[1, 3, 4], [2, 4, 5]] and targets[1].calls == [[2, 4, 5]]
    outcomes, _ = _everywhere(shim, _change([3, 5, 6]), [_facts(t) for t in targets])  # another set is not faulted
    assert outcomes[0]["ok"]


class ShardedTarget(StandInTarget):
    """A rank whose target refuses ids of its own (e.g. a layer it does not hold), as SGLang raises."""

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        if layer_ids is not None and 6 in layer_ids:
            raise ValueError("layer 7 is not on this rank")
        super().set_eagle3_layers_to_capture(layer_ids)


class ShiftedTarget(StandInTarget):
    """A rank whose capture list comes out other than the rule predicts."""

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        super().set_eagle3_layers_to_capture(layer_ids)
        self.model.layers_to_capture = [v + 1 for v in self.model.layers_to_capture]


@pytest.mark.parametrize("odd, message", [
    (ShardedTarget, "TP rank 1: SGLang raised ValueError: layer 7 is not on this rank"),
    (ShiftedTarget, "TP rank 1: SGLang captured [5, 7, 8] (on=True) for [3, 5, 6], expected [4, 6, 7]"),
])
def test_a_rank_whose_target_disagrees_refuses_for_all(shim, scheduler, odd, message):
    targets = [StandInTarget(8), odd(8)]
    for t in targets:
        t.model.layers_to_capture, t.capture_aux_hidden_states = [3, 5, 6], True
    outcomes, _ = _everywhere(shim, _change([3, 5, 6]), [_facts(t) for t in targets])
    assert outcomes[0] == outcomes[1] and outcomes[0]["error"] == message + "; restored [2, 4, 5] on every TP rank"
    assert targets[0].model.layers_to_capture == [3, 5, 6]


def test_a_rank_without_a_target_fails_in_step_with_the_others(shim, scheduler):
    lost = control_facts.ControlFacts()
    lost.why_not = "no EAGLE worker in this process (is speculative decoding on?)"
    outcomes, _ = _everywhere(shim, _change([1, 3, 4]), [_facts(_targets(1)[0]), lost])
    assert outcomes[0] == outcomes[1] and "TP rank 1: no target to change on this rank: no EAGLE worker" in \
        outcomes[0]["error"] and "putting [2, 4, 5] back: TP rank 1:" in outcomes[0]["error"]


def test_recapture_is_collective_and_a_failure_on_one_rank_recaptures_the_old_set_everywhere(shim, scheduler):
    targets = _targets()
    runners = [TargetRunner(t) for t in targets]
    outcomes, gathers = _everywhere(shim, _change([1, 3, 4], recapture=True), [_facts(t, r) for t, r in zip(targets, runners)])
    assert outcomes[0] == outcomes[1] and outcomes[0]["ok"] and gathers == 2 and outcomes[0]["pause_ms"] >= 0
    assert [r.decode_cuda_graph_runner.replays for r in runners] == [[2, 4, 5], [2, 4, 5]]
    runners[1].fail = 1  # rank 1's next capture runs out of memory
    outcomes, gathers = _everywhere(shim, _change([3, 5, 6], recapture=True, previous=(1, 3, 4)),
                                    [_facts(t, r) for t, r in zip(targets, runners)])
    assert outcomes[0] == outcomes[1] and gathers == 3
    assert outcomes[0]["error"] == ("TP rank 1: recapturing the target's graphs failed (RuntimeError: CUDA out of "
                                    "memory during capture); restored [1, 3, 4] on every TP rank, its graphs recaptured")
    assert [r.decode_cuda_graph_runner.replays for r in runners] == [[2, 4, 5], [2, 4, 5]]
    assert [r.captures for r in runners] == [4, 3]  # rank 0: new set, then the old again; rank 1: the old again


# -- the seam: rank 0 injects a queued set, the broadcast's far side applies it ---------------------
class Receiver:
    """SGLang's request receiver with a one-rank TP group (``world_size`` 1: no collective)."""

    tp_group = SimpleNamespace(world_size=1, rank_in_group=0, ranks=[0], cpu_group=None)
    server_args = SimpleNamespace(tp_size=2)

    def __init__(self) -> None:
        self.sent = []

    def _broadcast_reqs_across_ranks(self, recv_reqs, local_reqs=None):
        self.sent.append(list(recv_reqs or []))
        return pickle.loads(pickle.dumps([*(recv_reqs or []), *(local_reqs or [])]))


@pytest.fixture
def tp_channel(shim, tmp_path, scheduler, monkeypatch):
    target = _targets(1)[0]
    facts = _facts(target)
    facts.family, facts.rule, facts.num_layers, facts.expected, facts.configured = "LlamaForCausalLM", "+1", 8, 3, [2, 4, 5]
    token = read_token(create_token_file(tmp_path))
    ctl = aux_channel.AuxChannel(shim, f"tcp://127.0.0.1:{free_port()}", token, facts)
    ctl.current = [2, 4, 5]
    shim.publisher = Recorder()
    shim.aux_channel = ctl
    ctl.start()
    try:
        yield ctl, target, ControlClient(ctl.endpoint, token, timeout_s=5)
    finally:
        ctl.close()


def test_the_seam_carries_a_queued_set_through_the_broadcast_to_the_parked_reply(shim, tp_channel):
    ctl, target, client = tp_channel
    hook, receiver = hooks.FACTORIES["tp_broadcast"](shim, seams.BROADCAST), Receiver()
    original = Receiver._broadcast_reqs_across_ranks
    pulled = [TokenizedGenerateReqInput("a")]
    assert hook(original, receiver, pulled, []) == pulled  # nothing pending: the list goes as SGLang built it
    assert receiver.sent == [pulled]
    ctl.apply_pending()  # the step hook's path is for single-rank servers only
    reply = client.set([1, 3, 4], request_id="tp1", wait_s=0)
    assert reply["status"] == "queued" and target.calls == []
    assert hook(original, receiver, None, []) == []  # a rank that pulls nothing injects nothing
    assert ctl._pending is not None
    dispatched = hook(original, receiver, pulled, [])
    assert dispatched == pulled  # the change is out again before SGLang dispatches
    assert receiver.sent[-1][-1] == {collective.MARK: {"id": "tp1", "layers": [1, 3, 4], "captured": [2, 4, 5],
                                                       "previous": [2, 4, 5], "recapture": False}}
    assert target.calls == [[1, 3, 4]] and ctl.current == [1, 3, 4] and ctl._pending is None
    assert client.list()["current"] == [1, 3, 4]
    (config,) = [b for k, b in shim.publisher.events if k == "config"]
    assert config["request_id"] == "tp1" and config["applied"]
    assert seams.BROADCAST not in shim.seams.disabled


def test_a_broadcast_called_with_recv_reqs_by_keyword_carries_the_change_too(shim, tp_channel):
    """A caller that names ``recv_reqs``: the change is injected into that list, the same as positionally."""
    ctl, target, client = tp_channel
    hook, receiver = hooks.FACTORIES["tp_broadcast"](shim, seams.BROADCAST), Receiver()
    assert client.set([1, 3, 4], request_id="kw", wait_s=0)["status"] == "queued"
    pulled = [TokenizedGenerateReqInput("a")]
    assert hook(Receiver._broadcast_reqs_across_ranks, receiver, recv_reqs=pulled, local_reqs=[]) == pulled
    assert receiver.sent[-1][0] is pulled[0] and receiver.sent[-1][-1][collective.MARK]["id"] == "kw"
    assert target.calls == [[1, 3, 4]] and seams.BROADCAST not in shim.seams.disabled


def test_a_set_waits_in_its_reply_for_the_broadcast(shim, tp_channel):
    ctl, target, client = tp_channel
    hook, receiver = hooks.FACTORIES["tp_broadcast"](shim, seams.BROADCAST), Receiver()
    with looping(lambda: hook(Receiver._broadcast_reqs_across_ranks, receiver, [], [])):
        reply = client.set([3, 5, 6], wait_s=3)
    assert reply["status"] == "applied" and reply["captured"] == [4, 6, 7] and "ranks" not in reply
    assert target.model.layers_to_capture == [4, 6, 7]


# -- what stays refused, and why -------------------------------------------------------------------
@pytest.mark.parametrize("sa, tp_rank, attached, reason", [
    (SimpleNamespace(), 0, True, ""),
    (SimpleNamespace(), 0, False, "no request broadcast the shim rides"),
    (SimpleNamespace(), 2, True, "this is TP rank 2: changes ride the broadcast from TP rank 0"),
    (SimpleNamespace(enable_dp_attention=True, enable_dp_attention_local_control_broadcast=False), 0, True, ""),
    (SimpleNamespace(enable_dp_attention=True, enable_dp_attention_local_control_broadcast=True), 0, True,
     "control messages stay inside each attention-DP group"),
    (SimpleNamespace(enable_dp_attention=True), 0, True, "cannot tell whether control messages reach every TP rank"),
])
def test_what_under_tp_cannot_reach_every_rank_is_refused(sa, tp_rank, attached, reason):
    got = collective.blocker(sa, tp_rank, attached)
    assert (reason in got) if reason else got == ""



def test_the_broadcast_seam_is_attached_only_where_a_control_channel_is_asked_for(shim, monkeypatch):
    """Read over the installed 0.5.23 source (no import): without EAGLE3SCOPE_CONTROL nothing can
    ride the broadcast, so the seam is not even wrapped and costs SGLang's loop nothing."""
    from eagle3scope.demo.server import engine_python
    from eagle3scope.wire.control_protocol import ENV_CONTROL
    from eagle3scope_shim import patching

    roots = sorted(engine_python("0.5.23").parent.parent.glob("lib/python3*/site-packages"))
    if not roots or not (roots[0] / "sglang").is_dir():
        pytest.skip("no SGLang 0.5.23 engine venv to read the source of")
    monkeypatch.setattr(seams, "installed_root", lambda: str(roots[0]))
    monkeypatch.delenv(ENV_CONTROL, raising=False)
    without = {name for name, _, _ in patching.plan(shim)}
    monkeypatch.setenv(ENV_CONTROL, "tcp://127.0.0.1:5560")
    planned = {name: (target, hook) for name, target, hook in patching.plan(shim)}
    assert set(planned) - without == {seams.BROADCAST} and "v2.step" in without
    assert planned[seams.BROADCAST][0] == ("sglang.srt.managers.scheduler_components.request_receiver",
                                          "SchedulerRequestReceiver._broadcast_reqs_across_ranks")
    assert shim.seams.status == {}  # nothing reported missing on 0.5.23
