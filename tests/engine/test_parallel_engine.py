"""Tensor and data parallelism through the real SGLang 0.5.23 CPU engine.

Four servers, each shared by its module's tests. Two on the tiny pair (tests/conftest.py:
tiny_models; a vocab-parallel draft head of 256 rows, 128 per rank at TP-2) with SGLang's simulated
acceptance (``SGLANG_SIMULATE_ACC_LEN``, as tests/shim/test_shim_engine.py), so per-request counts are
not trivial and sampled verify runs too: the healthy draft at ``--tp-size 2``, and at
``--dp-size 2`` seen through one endpoint. Two on the seeds' family (DeepseekV3: MLA attention +
MoE, trained; conftest ``deepseek_models``) at ``--tp-size 2``, as the demo serves its scenarios:
the MLA draft (``healthy-mla``: SGLang's Eagle3DeepseekV2ForCausalLM, whose ``fc`` is
column-parallel, each rank holding half of its output rows) fires nothing, and the seeds' own break
(``seeds``: Kimi-K2.5 wrapper, the Llama-style draft with aux capture off) is flagged with nothing
beside it; greedy only (the family's sampled verify needs a kernel the CPU build lacks,
demo/families.py: TEMPERATURES). Ranks get one core each (``SGLANG_CPU_OMP_THREADS_BIND``,
demo/server.py: parallel_launch). The demo's trained scenarios at TP-2 / DP-2 are what README's
``demo --tp N`` / ``--dp N`` serves (``demo --tp 2 --scenario ...``).

DP attention (``--tp-size 2 --dp-size 2 --enable-dp-attention``) does not run on SGLang's CPU path:
the server starts, and the first request kills the idle attention-DP rank, whose
``_execute_idle`` pass (``model_executor/runner/eager_runner.py``) reaches the target's native
rotary embedding with zero tokens (``layers/rotary_embedding/base.py: forward_native``,
``query.view(num_tokens, -1, head_size)``: "cannot reshape tensor of 0 elements into shape
[0, -1, 32]"). So the publisher selection under DP attention is tested against SGLang's own rank
arithmetic (``layers/dp_attention.py: compute_dp_attention_world_info``) in the engine venv.
"""

from __future__ import annotations

import json

import pytest
from support.engine import run_engine_python
from support.servers import ServerPool, bodies, check_agreement, last_body, pooled

from eagle3scope.analysis.state import analyse
from eagle3scope.demo import families
from eagle3scope.demo.models import demo_prompts
from eagle3scope.demo.server import checkout_pythonpath, parallel_launch

pytestmark = pytest.mark.engine

TEMPERATURES = (0.0, 0.8)  # greedy and SGLang's sampling verify


def _parallel_job(target, draft, tmp_path_factory, name, *, tp=1, dp=1):
    """A ServerPool job: the pair at TP-``tp`` x DP-``dp`` under simulated acceptance, concurrent requests."""
    args, env = parallel_launch(tp, dp)
    log = tmp_path_factory.mktemp("logs") / f"{name}-tp{tp}-dp{dp}.log"
    return (((target, draft, {**env, "SGLANG_SIMULATE_ACC_LEN": "2.5"}), {"extra_args": args, "log_path": log}),
            {"concurrent": True, "temperatures": TEMPERATURES, "publishers": dp})


def _fired(frames, severity="error") -> set[str]:
    state = analyse(frames)
    return {v.id for v in state.violations() if v.severity == severity}


@pytest.fixture(scope="module")
def tiny_pool(request, tiny_models, tmp_path_factory):
    """The tiny pair at TP-2 and at DP-2, the second started while the first runs (ServerPool)."""
    return ServerPool(request, {
        "tp2": _parallel_job(*tiny_models, tmp_path_factory, "healthy", tp=2),
        "dp2": _parallel_job(*tiny_models, tmp_path_factory, "healthy", dp=2),
    })


def _deepseek_job(models, name, tmp_path_factory, *, tp=2):
    """The family's scenario ``name`` (its target, draft and arguments, as the demo serves it) at TP-``tp``."""
    spec = families.scenarios_of("deepseek")[name].prepare(models, tmp_path_factory.mktemp(f"deepseek-{name}"))
    args, env = parallel_launch(tp, 1)
    log = tmp_path_factory.mktemp("logs") / f"deepseek-{name}-tp{tp}.log"
    return (((spec.target_dir, spec.draft_dir, env),
             {"algorithm": spec.algorithm, "extra_args": spec.extra_args + args, "log_path": log}),
            {"concurrent": True, "temperatures": families.TEMPERATURES["deepseek"], "prompts": demo_prompts(4),
             "max_new": 32})


@pytest.fixture(scope="module")
def deepseek_pool(request, deepseek_models, tmp_path_factory):
    """The DeepSeek family's healthy MLA draft and its seeds break at TP-2 (ServerPool)."""
    return ServerPool(request, {
        "deepseek_mla_tp2": _deepseek_job(deepseek_models, "healthy-mla", tmp_path_factory),
        "deepseek_seeds_tp2": _deepseek_job(deepseek_models, "seeds", tmp_path_factory),
    })


tp2, dp2 = (pooled(name, "tiny_pool") for name in ("tp2", "dp2"))
deepseek_mla_tp2, deepseek_seeds_tp2 = (pooled(name, "deepseek_pool") for name in ("deepseek_mla_tp2", "deepseek_seeds_tp2"))


def test_healthy_tp2_states_its_topology_and_fires_nothing(tp2):
    frames, responses = tp2
    assert len({f.src for f in frames}) == 1  # tp_rank 0 of 2 publishes alone
    hello, load = last_body(frames, "hello"), last_body(frames, "load")
    assert hello["parallel"] == {"tp_size": 2, "dp_size": 1, "pp_size": 1, "attn_tp_size": 2, "attn_dp_size": 1,
                                 "ep_size": 1}
    assert hello["publisher_rank"]["tp_rank"] == 0 and hello["publisher_rank"]["reason"]
    assert hello["siblings"] == [hello["endpoint"]]
    head, draft_vocab = load["lm_head"], load["draft_vocab_size"]
    assert head["shape"] == [draft_vocab, load["hidden_size"]] and head["org_vocab_size"] == draft_vocab
    assert head["shard_shape"] == [draft_vocab // 2, load["hidden_size"]] and head["parallel_size"] == 2
    assert load["embed_tokens"]["parallel_size"] == 2  # the target's vocab-parallel embedding, shared
    assert load["d2t"]["size"] == draft_vocab  # the checkpoint's full tensor
    assert _fired(frames) == set() and _fired(frames, "warning") == set()
    assert all(r["meta_info"]["spec_accept_length"] > 1.5 for r in responses if r["meta_info"]["spec_verify_ct"] > 2)


def test_tp2_counts_agree_with_meta_info(tp2):
    check_agreement(*tp2)


def test_dp2_seen_from_one_endpoint(dp2):
    frames, responses = dp2
    hellos = {f.src: f.body for f in frames if f.kind == "hello"}
    assert sorted(h["publisher_index"] for h in hellos.values()) == [0, 1], hellos.keys()
    (first, second) = sorted(hellos.values(), key=lambda h: h["publisher_index"])
    assert first["siblings"] == second["siblings"] == [first["endpoint"], second["endpoint"]]
    assert first["parallel"]["dp_size"] == 2 and "DP replica 1" in second["publisher_rank"]["reason"]
    stepping = {f.src for f in frames if f.kind == "step" and f.body["mode"] == "decode"}
    assert len(stepping) == 2  # both replicas served requests
    check_agreement(frames, responses)
    assert _fired(frames) == set()
    assert len(bodies(frames, "step")) < 4 * sum(r["meta_info"]["spec_verify_ct"] + 1 for r in responses)


def test_deepseek_mla_draft_at_tp2_fires_nothing_and_agrees_with_meta_info(deepseek_mla_tp2):
    frames, responses = deepseek_mla_tp2
    hello, load = last_body(frames, "hello"), last_body(frames, "load")
    assert len({f.src for f in frames}) == 1 and hello["parallel"]["tp_size"] == 2
    assert load["target_class"] == "DeepseekV3ForCausalLM" and load["draft_class"] == "Eagle3DeepseekV2ForCausalLM"
    hidden, draft_vocab = load["hidden_size"], load["draft_vocab_size"]
    fc = load["fc"]  # column-parallel: the full output width, each rank half of its rows
    assert fc["out"] == hidden and fc["shard_shape"] == [hidden // 2, fc["in"]] and fc["parallel_size"] == 2
    head = load["lm_head"]
    assert head["shape"] == [draft_vocab, hidden] and head["shard_shape"] == [draft_vocab // 2, hidden]
    assert load["embed_tokens"]["parallel_size"] == 2
    assert _fired(frames) == set() and _fired(frames, "warning") == set()
    check_agreement(frames, responses)
    accept = [r["meta_info"]["spec_accept_length"] for r in responses]
    assert sum(accept) / len(accept) > 2.0, accept  # the trained draft drafts well on both ranks' shards


def test_seeds_break_at_tp2_is_flagged_and_nothing_else(deepseek_seeds_tp2):
    frames, responses = deepseek_seeds_tp2
    load = last_body(frames, "load")
    assert load["target_class"] == "KimiK25ForConditionalGeneration" and last_body(frames, "hello")["parallel"]["tp_size"] == 2
    fired = _fired(frames)
    assert {"aux-capture-off", "fc-bypassed"} <= fired <= {"aux-capture-off", "fc-bypassed", "zero-acceptance"}, fired
    assert _fired(frames, "warning") == set()  # the sharded head, embedding and d2t raise nothing beside the real break
    check_agreement(frames, responses)


#: SGLang's rank arithmetic against the shim's choice, for every scheduler of each layout.
RANK_ARITHMETIC = r"""
import inspect, json, sys
from eagle3scope_shim import topology
from sglang.srt.layers.dp_attention import compute_dp_attention_world_info as world_info
new = "enable_dp_attention" not in inspect.signature(world_info).parameters  # 0.5.23: (tp_rank, tp_size, attn_dp_size, ...)
out = []
for tp, dp, pp, dpa in json.loads(sys.argv[1]):
    chosen = []
    for stage in range(pp):
        for tp_rank in range(tp):
            attn_dp = dp if dpa else 1
            if new:
                attn_tp_rank, attn_tp_size, attn_dp_rank, _ = world_info(tp_rank, tp, attn_dp, 1)
            else:
                attn_tp_rank, attn_tp_size, attn_dp_rank = world_info(dpa, tp_rank, tp, dp, 1)
            parallel = {"tp_size": tp, "dp_size": 1 if dpa else dp, "pp_size": pp, "attn_tp_size": attn_tp_size,
                        "attn_dp_size": attn_dp, "ep_size": 1}
            # the data-parallel controller hands a DP-attention scheduler its attn_dp_rank as dp_rank
            rank = {"tp_rank": tp_rank, "dp_rank": attn_dp_rank, "attn_tp_rank": attn_tp_rank,
                    "attn_dp_rank": attn_dp_rank, "attn_cp_rank": 0, "pp_rank": stage}
            if topology.entry_rank(parallel, rank)[0]:
                sglang_entry = attn_tp_rank == 0  # scheduler.py: attn_tp_rank == 0 and attn_cp_rank == 0
                chosen.append([tp_rank, stage, topology.publisher_index(parallel, rank), attn_dp_rank, sglang_entry])
    out.append(chosen)
print(json.dumps(out))
"""

LAYOUTS = [(2, 2, 1, True), (8, 4, 1, True), (8, 8, 1, True), (4, 2, 2, True), (2, 1, 1, False), (4, 1, 2, False)]


def test_dp_attention_publishers_follow_sglangs_rank_arithmetic(engine_python):
    """0.5.23's function; the script also speaks 0.5.10's signature (enable_dp_attention first)."""
    done = run_engine_python(engine_python, "-c", RANK_ARITHMETIC, json.dumps(LAYOUTS), env=checkout_pythonpath({}))
    assert done.returncode == 0, done.stderr[-3000:]
    for (tp, dp, pp, dpa), chosen in zip(LAYOUTS, json.loads(done.stdout)):
        groups = dp if dpa else 1
        assert len(chosen) == groups, (tp, dp, pp, chosen)  # one per attention-DP group
        assert all(entry and stage == pp - 1 for _, stage, _, _, entry in chosen)
        assert sorted(index for _, _, index, _, _ in chosen) == list(range(groups))
        assert all(index == attn_dp_rank for _, _, index, attn_dp_rank, _ in chosen)
