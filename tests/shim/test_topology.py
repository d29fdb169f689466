"""Multi-rank servers without an engine: which scheduler publishes (SGLang's entry ranks), the
parallel facts a hello carries, full shapes of sharded weights, rules on a TP-N head, sibling
endpoints and their discovery over real ZeroMQ sockets, and the overview's per-rank acceptance.

The entry-rank rule follows SGLang 0.5.23 ``managers/scheduler.py`` (``pp_rank == 0 and
attn_tp_rank == 0 and attn_cp_rank == 0`` guards its request intake) and the rank layout of
``runtime_context.py: derive_attention_ranks`` (``tp_rank = (attn_dp_rank * attn_cp_size +
attn_cp_rank) * attn_tp_size + attn_tp_rank``); tests/engine/test_parallel_engine.py checks it against
SGLang's own functions in the engine venv.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from hypothesis import given, strategies as st

from eagle3scope.analysis.rules import lm_head_mismatch
from eagle3scope.analysis.state import SessionState
from eagle3scope.analysis.views import acceptance_view
from eagle3scope.live.subscriber import Subscriber
from eagle3scope.wire import FrameError, decode_frame, encode_frame
from eagle3scope.wire.endpoints import reach_sibling, sibling_endpoints
from eagle3scope_shim import topology
from eagle3scope_shim.loadreport import tensor_facts
from eagle3scope_shim.publisher import Publisher
from benchmarks.support.synthetic import hello_body, load_body, step_body


def layout(tp: int, dp: int = 1, pp: int = 1, dp_attention: bool = False):
    """Every scheduler of a server as SGLang 0.5.23 numbers them: (parallel, rank) per process."""
    attn_dp = dp if dp_attention else 1
    replicas = 1 if dp_attention else dp
    attn_tp = tp // attn_dp
    parallel = {"tp_size": tp, "dp_size": replicas, "pp_size": pp, "attn_tp_size": attn_tp, "attn_dp_size": attn_dp,
                "ep_size": 1, "publishers": replicas * attn_dp}
    for replica in range(replicas):
        for stage in range(pp):
            for tp_rank in range(tp):
                attn_dp_rank = tp_rank // attn_tp
                rank = {"tp_rank": tp_rank, "dp_rank": attn_dp_rank if dp_attention else replica,
                        "attn_tp_rank": tp_rank % attn_tp, "attn_dp_rank": attn_dp_rank, "attn_cp_rank": 0,
                        "pp_rank": stage}
                yield parallel, rank


@pytest.mark.parametrize("tp,dp,pp,dp_attention", [
    (1, 1, 1, False), (2, 1, 1, False), (8, 1, 1, False), (1, 2, 1, False), (2, 2, 1, False),
    (2, 2, 1, True), (8, 4, 1, True), (8, 8, 1, True), (2, 1, 2, False), (4, 2, 2, True),
])
def test_one_publisher_per_dp_scheduler_on_the_last_stage(tp, dp, pp, dp_attention):
    chosen = [(p, r) for p, r in layout(tp, dp, pp, dp_attention) if topology.entry_rank(p, r)[0]]
    indexes = sorted(topology.publisher_index(p, r) for p, r in chosen)
    assert indexes == list(range(dp)), chosen  # one per DP replica or attention-DP group, each its own endpoint
    assert all(r["pp_rank"] == pp - 1 and r["attn_tp_rank"] == 0 for _, r in chosen)
    for p, r in layout(tp, dp, pp, dp_attention):
        publishes, reason = topology.entry_rank(p, r)
        assert reason and publishes == (r in [c[1] for c in chosen])
        if r["pp_rank"] != pp - 1:
            assert "holds no draft" in reason


def test_ranks_read_from_an_old_style_scheduler():
    """0.5.10 keeps ranks on the scheduler (Scheduler.__init__ sets tp_rank, pp_rank, attn_tp_rank ...)."""

    class Scheduler:
        def __init__(self, server_args, tp_rank, pp_rank, dp_rank):
            pass

    sched = Scheduler.__new__(Scheduler)
    sched.server_args = SimpleNamespace(tp_size=4, dp_size=2, pp_size=1, ep_size=1, enable_dp_attention=True)
    sched.attn_tp_rank, sched.attn_tp_size, sched.attn_dp_rank = 1, 2, 1
    parallel, rank = topology.read(sched, (sched, sched.server_args, 3, 0, 1), {})
    assert parallel == {"tp_size": 4, "dp_size": 2, "pp_size": 1, "attn_tp_size": 2, "attn_dp_size": 2, "ep_size": 1,
                        "publishers": 2}
    assert rank == {"tp_rank": 3, "dp_rank": 1, "attn_tp_rank": 1, "attn_dp_rank": 1, "attn_cp_rank": 0, "pp_rank": 0}
    assert topology.entry_rank(parallel, rank)[0] is False  # attn_tp_rank 1 is not an entry rank


def _module(shape, **attrs):
    return SimpleNamespace(weight=SimpleNamespace(shape=tuple(shape)), **attrs)


def test_full_shapes_of_sharded_weights():
    # ParallelLMHead of a 64-row draft head on TP-2 (layers/vocab_parallel_embedding.py)
    head = _module((32, 128), num_embeddings_padded=64, num_embeddings_per_partition=32, org_vocab_size=64, tp_size=2)
    assert tensor_facts(head) == {"shape": [64, 128], "shard_shape": [32, 128], "parallel_dim": 0, "parallel_size": 2,
                                  "org_vocab_size": 64, "padded_size": 64}
    # the same head on TP-1: nothing sharded, rows padded to 64 kept apart from the real ones
    head1 = _module((1024, 128), num_embeddings_padded=1024, num_embeddings_per_partition=1024, org_vocab_size=1000)
    assert tensor_facts(head1) == {"shape": [1024, 128], "org_vocab_size": 1000, "padded_size": 1024}
    # the MLA draft's fc: ColumnParallelLinear(3H -> H, gather_output=False), out sharded (kimi_k25_eagle3.py)
    fc = _module((64, 384), input_size=384, output_size=128, output_size_per_partition=64)
    assert tensor_facts(fc) == {"shape": [128, 384], "shard_shape": [64, 384], "parallel_dim": 0, "parallel_size": 2}
    row = _module((128, 192), input_size=384, output_size=128, input_size_per_partition=192)
    assert tensor_facts(row)["shape"] == [128, 384] and tensor_facts(row)["parallel_dim"] == 1
    assert tensor_facts(_module((128, 384))) == {"shape": [128, 384]}  # torch.nn.Linear (the Llama draft's fc)
    # a draft head whose weight SGLang replaced by the target's (--speculative-algorithm EAGLE shares the
    # target's head: speculative/eagle_worker_v2.py set_embed_and_head, 0.5.23): the weight is wider than the layer's padded
    # vocabulary, so it is reported as it is, not as a shard of size 0 that validation refuses
    shared = _module((1000, 128), num_embeddings_padded=64, num_embeddings_per_partition=64, org_vocab_size=64)
    assert tensor_facts(shared) == {"shape": [1000, 128], "org_vocab_size": 64, "padded_size": 64}


def _pub(load: dict):
    """The publisher view a session state makes of this load report (typed facts, as rules read them)."""
    state = SessionState()
    state.ingest(decode_frame(encode_frame("load", load, src="h:1:dp0", n=0, t=1)))
    return state.publishers["h:1:dp0"]


def test_lm_head_judged_on_the_full_head():
    tp2 = {"source": "checkpoint", "shape": [64, 128], "shard_shape": [32, 128], "parallel_dim": 0,
           "parallel_size": 2, "org_vocab_size": 64, "padded_size": 64}
    healthy = load_body(draft_vocab_size=64, hidden_size=128, lm_head=tp2)
    assert lm_head_mismatch(_pub(healthy)) is None
    wrong = load_body(draft_vocab_size=64, hidden_size=128, lm_head={**tp2, "org_vocab_size": 1024, "shape": [1024, 128]})
    assert "rows differ from draft_vocab_size" in lm_head_mismatch(_pub(wrong))["problems"]
    random_head = load_body(draft_vocab_size=64, hidden_size=128, lm_head={**tp2, "source": "init"})
    evidence = lm_head_mismatch(_pub(random_head))
    assert evidence["problems"] == ["random (never loaded)"] and evidence["parallel_size"] == 2
    padded = load_body(draft_vocab_size=1000, hidden_size=128,
                       lm_head={"source": "checkpoint", "shape": [1024, 128], "org_vocab_size": 1000, "padded_size": 1024})
    assert lm_head_mismatch(_pub(padded)) is None  # SGLang's padding is not a wrong head
    # a recording without the facts holds one rank's shard: judged as it stands
    old = load_body(draft_vocab_size=64, hidden_size=128, lm_head={"source": "checkpoint", "shape": [32, 128]})
    assert lm_head_mismatch(_pub(old))["problems"] == ["rows differ from draft_vocab_size"]


def _hello_frame(body: dict) -> bytes:
    return encode_frame("hello", body, src="h:1:dp0", n=0, t=1)


def test_hello_parallel_facts_validate_and_are_bounded():
    body = hello_body(parallel={"tp_size": 2, "dp_size": 1, "pp_size": 1, "attn_tp_size": 2, "attn_dp_size": 1,
                                "ep_size": 1},
                      publisher_rank={"tp_rank": 0, "dp_rank": 0, "attn_tp_rank": 0, "pp_rank": 0, "reason": "entry"},
                      endpoint="tcp://127.0.0.1:5557", siblings=["tcp://127.0.0.1:5557", "tcp://127.0.0.1:5558"])
    assert decode_frame(_hello_frame(body)).body["parallel"]["tp_size"] == 2
    assert decode_frame(_hello_frame(hello_body())).body["tp_rank"] == 0  # old hellos lack them
    for bad in ({"parallel": {"tp_size": 0}}, {"parallel": {"tp_size": "2"}}, {"siblings": ["x"] * 257},
                {"siblings": [3]}, {"publisher_rank": {"pp_rank": -1}}, {"endpoint": 5}):
        with pytest.raises(FrameError):
            decode_frame(_hello_frame(hello_body(**bad)))
    load = load_body(lm_head={"source": "checkpoint", "shape": [64, 128], "parallel_size": 0})
    with pytest.raises(FrameError):
        decode_frame(encode_frame("load", load, src="h:1:dp0", n=0, t=1))


def test_sibling_endpoints_follow_the_dp_rank_rule():
    assert sibling_endpoints("tcp://127.0.0.1:5557", 3) == [f"tcp://127.0.0.1:{p}" for p in (5557, 5558, 5559)]
    assert sibling_endpoints("ipc:///run/e3s/events", 2) == ["ipc:///run/e3s/events", "ipc:///run/e3s/events-dp1"]
    assert sibling_endpoints("ipc:///run/e3s/events.sock", 2)[1] == "ipc:///run/e3s/events-dp1.sock"
    assert sibling_endpoints("tcp://127.0.0.1:*", 2) is None  # ephemeral ports: cannot be derived
    assert sibling_endpoints("tcp://127.0.0.1:*", 1) == ["tcp://127.0.0.1:0"]


def test_reach_sibling_keeps_the_viewers_route():
    # an SSH forward 6000 -> 5557: the sibling on 5558 is reached on 6001, on the host the viewer used
    assert reach_sibling("tcp://127.0.0.1:6000", "tcp://0.0.0.0:5557", "tcp://10.0.0.9:5558") == "tcp://127.0.0.1:6001"
    assert reach_sibling("ipc:///d/ev", "ipc:///d/ev", "ipc:///d/ev-dp1") == "ipc:///d/ev-dp1"
    # a forwarded socket (ssh -L ~/.e3s/gpu.sock:/run/.../events.sock): its rank names beside it
    assert reach_sibling("ipc:///l/gpu.sock", "ipc:///r/events.sock", "ipc:///r/events-dp1.sock") == "ipc:///l/gpu-dp1.sock"
    assert reach_sibling("ipc:///l/gpu.sock", "ipc:///r/events.sock", "ipc:///r/other.sock") is None
    assert reach_sibling("ipc:///d/ev", "ipc:///d/ev", "ipc:///elsewhere/x") is None
    assert reach_sibling("ipc:///d/ev", "ipc:///d/ev", "ipc:///d/../x") is None
    assert reach_sibling("tcp://127.0.0.1:6000", "tcp://0.0.0.0:5557", "ipc:///d/x") is None
    assert reach_sibling("tcp://127.0.0.1:1", "tcp://h:60000", "tcp://h:1") is None  # port out of range


@given(st.text(max_size=60), st.text(max_size=60), st.text(max_size=60))
def test_reach_sibling_never_leaves_the_connected_host_or_directory(connected, announced, sibling):
    for here in (connected, "tcp://127.0.0.1:6000", "ipc:///d/ev"):
        out = reach_sibling(here, announced, sibling)
        if out is None:
            continue
        if here.startswith("tcp://"):
            host, _, port = out[6:].rpartition(":")
            assert host == here[6:].rpartition(":")[0] and 0 < int(port) < 65536
        else:
            assert out.rpartition("/")[0] == here.rpartition("/")[0]


def _collect(sub: Subscriber, until, timeout: float = 8.0) -> list:
    got, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline and not until(got):
        got.extend(sub.poll(50))
    return got


@pytest.fixture
def two_ranks(shim, tmp_path):
    """Two publishers of one DP-2 server on the shim's derived ipc endpoints, hellos listing both."""
    base = f"ipc://{tmp_path}/events"
    siblings = sibling_endpoints(base, 2)
    pubs = []
    for index, endpoint in enumerate(siblings):
        pub = Publisher(endpoint, f"h:{index}:dp{index}", sticky_interval_s=0.1, heartbeat_interval_s=0.1)
        pub.set_sticky("hello", hello_body(publisher_index=index, endpoint=endpoint, siblings=siblings))
        pub.start()
        pubs.append(pub)
    yield base, pubs
    for pub in pubs:
        pub.close()


def test_one_connect_finds_every_rank(two_ranks):
    base, pubs = two_ranks
    with Subscriber([base]) as sub:
        _collect(sub, lambda got: {f.src for f in got} == {"h:0:dp0", "h:1:dp1"})
        for i in range(10):
            for pub in pubs:
                pub.submit("step", step_body(i))
        frames = _collect(sub, lambda got: sum(f.kind == "step" for f in got) >= 20)
        assert {f.src for f in frames if f.kind == "step"} == {"h:0:dp0", "h:1:dp1"}
        assert sub.discovered == [f"{base}-dp1"] and sub.endpoints == [base, f"{base}-dp1"]
    with Subscriber([base], discover=False) as sub:
        frames = _collect(sub, lambda got: False, timeout=1.0)
        assert {f.src for f in frames} == {"h:0:dp0"} and sub.discovered == []


def test_hostile_siblings_lead_nowhere_else(tmp_path):
    endpoint = f"ipc://{tmp_path}/events"
    pub = Publisher(endpoint, "h:0:dp0", sticky_interval_s=0.1)
    pub.set_sticky("hello", hello_body(endpoint=endpoint, siblings=["tcp://10.1.2.3:22", "ipc:///etc/x", "inproc://y"]))
    pub.start()
    try:
        with Subscriber([endpoint]) as sub:
            _collect(sub, lambda got: len([f for f in got if f.kind == "hello"]) >= 3)
            assert sub.endpoints == [endpoint] and sub.discovered == []
    finally:
        pub.close()


def test_overview_names_the_worst_rank():
    state = SessionState()
    for dp, accepted in ((0, 3), (1, 1)):
        src = f"h:{dp}:dp{dp}"
        state.ingest(decode_frame(encode_frame("hello", hello_body(publisher_index=dp), src=src, n=0, t=1)))
        for i in range(20):
            body = step_body(i, bs=2)
            body["accepted"] = [accepted, accepted]
            state.ingest(decode_frame(encode_frame("step", body, src=src, n=i + 1, t=2 + i)))
    view = acceptance_view(state)
    assert [(r.label, r.mean) for r in view.ranks] == [("dp0", 4.0), ("dp1", 2.0)]
    assert (view.skew.worst, view.skew.best, view.skew.spread) == ("dp1", "dp0", 2.0)
    single = SessionState()
    single.ingest(decode_frame(encode_frame("hello", hello_body(), src="solo", n=0, t=1)))
    assert acceptance_view(single).ranks == [] and acceptance_view(single).skew is None


def test_ranks_of_several_servers_are_named_by_the_tail_of_their_ids_that_tells_them_apart(shim):
    def labels(srcs):
        state = SessionState()
        for src in srcs:  # single-rank servers: all DP rank 0
            state.ingest(decode_frame(encode_frame("hello", hello_body(publisher_index=0), src=src, n=0, t=1)))
            state.ingest(decode_frame(encode_frame("step", step_body(0), src=src, n=1, t=2)))
        return [r.label for r in acceptance_view(state).ranks]

    assert labels(["a:1:dp0", "b:2:dp0"]) == ["1:dp0", "2:dp0"]  # the pids tell them apart
    assert labels(["a:1:dp0", "b:1:dp0"]) == ["a:1:dp0", "b:1:dp0"]  # only the hosts do: the whole id
    assert labels(["dp0", "h:1:dp0", "x"]) == ["dp0", "1:dp0", "x"]  # ids not in the shim's form




def test_a_stage_without_the_draft_neither_fails_nor_publishes(shim, monkeypatch):
    """Pipeline stage 0 of 2: EAGLEWorkerV2 has _draft_worker=None (speculative/eagle_worker_v2.py)."""
    from eagle3scope_shim import hooks

    monkeypatch.setenv("EAGLE3SCOPE_ENDPOINT", "ipc:///nonexistent/never-bound")
    worker = SimpleNamespace(_draft_worker=None, target_worker=None)
    hooks.FACTORIES["worker_init_v2"](shim, "t.worker")(lambda self: None, worker)

    class Scheduler:
        def __init__(self, server_args):
            self.server_args = server_args
            self.tp_rank, self.pp_rank, self.attn_tp_rank = 0, 0, 0

    sa = SimpleNamespace(tp_size=1, dp_size=1, pp_size=2, ep_size=1)
    hooks.FACTORIES["scheduler_init"](shim, "t.sched")(Scheduler.__init__, Scheduler.__new__(Scheduler), sa)

    assert shim.seams.disabled == set() and shim.load.workers == [] and shim.publisher is None
    assert shim.topology["publishes"] is False and "holds no draft" in shim.topology["reason"]


def test_an_idle_attention_dp_pass_is_not_published(shim, monkeypatch):
    from eagle3scope_shim import hooks

    submitted = []
    shim.publisher = (SimpleNamespace(submit=lambda *a, **k: submitted.append(a), drop=None))
    idle = SimpleNamespace(forward_mode=SimpleNamespace(is_idle=lambda: True, is_extend=lambda: False), reqs=[])
    assert hooks.FACTORIES["step"](shim, "t.step")(lambda self, batch: "result", None, idle) == "result"
    assert submitted == [] and shim.step is None and shim.seams.disabled == set()


@pytest.mark.parametrize("flags,publishers", [((), 2), (("--no-discover",), 1)])
def test_record_from_one_endpoint_holds_every_rank(two_ranks, tmp_path, flags, publishers):
    import json
    import subprocess
    import sys
    import threading

    base, pubs = two_ranks
    stop = threading.Event()

    def steps():
        i = 0
        while not stop.is_set():
            for pub in pubs:
                pub.submit("step", step_body(i))
            i += 1
            stop.wait(0.02)

    feeder = threading.Thread(target=steps, daemon=True)
    feeder.start()
    out = tmp_path / "rec.e3s"
    try:
        done = subprocess.run([sys.executable, "-m", "eagle3scope", "record", "--connect", base, "--out", str(out),
                               "--duration", "3", *flags], capture_output=True, text=True, timeout=60)
    finally:
        stop.set()
        feeder.join()
    assert done.returncode == 0, done.stderr
    assert ("subscribed to" in done.stderr) == (publishers == 2)
    check = subprocess.run([sys.executable, "-m", "eagle3scope", "check", str(out), "--json"], capture_output=True,
                           text=True, timeout=60)
    assert len(json.loads(check.stdout)["summary"]["publishers"]) == publishers
