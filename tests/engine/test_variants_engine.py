"""Worker variants in the real SGLang 0.5.23 CPU engine: trees (topk > 1), adaptive steps, the
request pool sized by SGLang itself (no --max-running-requests), and a speculative worker or draft the
shim does not observe.

Four servers, each shared by the tests of one variant and started while the one before it runs
(ServerPool): a tiny pair built for real tree acceptance
(see WRITE_TREE_PAIR) at topk 2 (6 draft tokens, no --max-running-requests, the host ring
exercised on the CPU) and at topk 4;
the tiny pair with ``--speculative-adaptive`` and SGLang's simulated acceptance; the tiny target
drafting for itself under STANDALONE. What the CPU engine cannot run, read from the 0.5.23 source:
the overlap scheduler (arg_groups/speculative_hook.py ``_disable_overlap_schedule_for_cpu`` turns
it off for speculative decoding on CPU; the commit seam's behaviour under it is the unit test's),
NGRAM (speculative/ngram_worker.py imports ``reconstruct_indices_from_tree_mask`` from
sgl_kernel, which the CPU stand-in lacks) and multi-layer EAGLE / NEXTN / MTP (no CPU-sized draft
of those architectures here): their workers are classified against SGLang's own classes instead.
"""

from __future__ import annotations

import json
import os

import pytest
from support.engine import run_engine_python
from support.servers import ServerPool, bodies, check_agreement, last_body, pooled

from eagle3scope.analysis import analyse
from eagle3scope.demo.server import checkout_pythonpath

pytestmark = pytest.mark.engine

TREES = {2: 6, 4: 8}  # topk -> num_draft_tokens (speculative_num_steps stays 3)


def _tree_checks(frames, responses, topk):
    """Tree steps name the accepted path, and it is the right one: SGLang commits, for each accepted
    depth d, the draft token of the path's node d."""
    check_agreement(frames, responses, proposals=TREES[topk] - 1)
    decode = [b for b in bodies(frames, "step") if b["mode"] == "decode"]
    front_wrong = 0  # request-steps where the first n nodes are not what SGLang committed
    for body in decode:
        assert body["num_steps"] == 3
        for drafts, path, acc, ids in zip(body["draft_ids"], body["accepted_path"], body["accepted"], body["accepted_ids"]):
            assert len(path) == acc and len(set(path)) == acc
            assert [drafts[j] for j in path] == ids[:acc]
            front_wrong += [drafts[j] for j in range(acc)] != ids[:acc]
    return decode, front_wrong


# A pair whose tree acceptance is real and varied without training: the target's head is zero, so
# greedy verify always predicts token 0 (argmax of equal logits), and the draft maps every even draft
# id to target id 0 (d2t offsets -i), so whether a node is accepted depends on which ids the random
# draft ranks where, step by step: accepted paths run through later-ranked nodes as well as the front.
WRITE_TREE_PAIR = r"""
import shutil, sys, torch
from pathlib import Path
from safetensors.torch import load_file, save_file
from eagle3scope.demo import tiny
target, out = Path(sys.argv[1]), Path(sys.argv[2])
shutil.copytree(target, out / "target")
weights = load_file(str(out / "target" / "model.safetensors"))
weights["lm_head.weight"].zero_()
save_file(weights, str(out / "target" / "model.safetensors"), metadata={"format": "pt"})
config = tiny.draft_config(target, draft_vocab_size=64)
state = tiny.random_draft_state(config, range(64), seed=3)
i = torch.arange(64)
state["d2t"] = torch.where(i % 2 == 0, -i, torch.zeros_like(i))
tiny.write_draft(out / "draft", config, state)
"""


@pytest.fixture(scope="module")
def tree_pair(engine_python, tiny_models, tmp_path_factory):
    root = tmp_path_factory.mktemp("tree-pair")
    done = run_engine_python(engine_python, "-c", WRITE_TREE_PAIR, str(tiny_models[0]), str(root),
                             env=checkout_pythonpath(os.environ))
    assert done.returncode == 0, done.stderr[-3000:]
    return root / "target", root / "draft"


def _tree_job(pair, topk: int, env=None, **server):
    launch = ((*pair, env or {}), {"topk": topk, "num_draft_tokens": TREES[topk], **server})
    return launch, {"concurrent": True, "max_new": 32, "prompts": ["hello world", "the quick brown fox", "one two three four", "a b c"]}


ADAPTIVE_CONFIG = {"1": {"candidate_steps": [1, 2, 3], "warmup_batches": 0, "update_interval": 1, "ema_alpha": 0.6,
                         "down_hysteresis": 0.0, "up_hysteresis": 0.0}}


@pytest.fixture(scope="module")
def pool(request, tree_pair, tiny_models, tmp_path_factory):
    """The module's four servers, each started while the one before it runs (ServerPool)."""
    config = tmp_path_factory.mktemp("adaptive") / "adaptive.json"
    config.write_text(json.dumps(ADAPTIVE_CONFIG))
    target, draft = tiny_models
    return ServerPool(request, {
        # topk 2 without --max-running-requests (SGLang sizes the request pool after the worker's
        # __init__), the CPU tensors routed through the host ring as device tensors go on a GPU
        "tree2": _tree_job(tree_pair, 2, {"EAGLE3SCOPE_RING_ON_CPU": "1"}, max_running_requests=None),
        "tree4": _tree_job(tree_pair, 4),
        "adaptive": (((target, draft, {"SGLANG_SIMULATE_ACC_LEN": "2.2"}),
                      {"extra_args": ["--speculative-adaptive", "--speculative-adaptive-config", str(config)]}),
                     {"temperatures": (0.0,), "prompts": ["hello world", "a b c"], "max_new": 40}),
        "standalone": (((target, target, {}), {"algorithm": "STANDALONE"}), {"prompts": ["hello world"], "max_new": 16}),
    })


tree2, tree4, adaptive, standalone = (pooled(name) for name in ("tree2", "tree4", "adaptive", "standalone"))


@pytest.mark.parametrize("tree", [f"tree{k}" for k in sorted(TREES)])
def test_tree_steps_mark_the_accepted_path_and_agree_with_meta_info(tree, request):
    """topk 2 with 6 draft tokens and topk 4 with 8: counts equal meta_info."""
    topk = int(tree.removeprefix("tree"))
    frames, responses = request.getfixturevalue(tree)
    decode, front_wrong = _tree_checks(frames, responses, topk)
    assert front_wrong > 0  # colouring the first n nodes as accepted would have shown tokens SGLang did not commit
    assert max(b["bs"] for b in decode) > 1
    summary = analyse(frames).acceptance.summary()
    assert len(summary["per_position"]) == 3  # per depth, not per tree node
    print(f"topk {topk}: {json.dumps({k: summary[k] for k in ('steps', 'request_steps', 'mean_accept_length', 'per_position', 'histogram')})}"
          f" request-steps whose first n nodes were not the path {front_wrong}")


def test_without_max_running_requests_the_ring_is_sized_at_the_schedulers_start(tree2):
    frames, _ = tree2
    hello = last_body(frames, "hello")
    rings = [b["ring"] for b in bodies(frames, "heartbeat") if "ring" in b]
    assert rings, "no heartbeat carried the host ring"
    ring = rings[-1]
    # request pool x draft tokens: the pool SGLang sized itself (48 requests here), where __init__ saw 0
    assert ring["capacity"] >= 8 * TREES[2] and ring["capacity"] % TREES[2] == 0, ring
    # every field's buffers for every slot at the scheduler's start (draft tokens, accept lengths, ids, path)
    assert ring["allocations"] == 4 and ring["late_allocations"] == 0 and ring["oversize"] == 0, ring
    assert hello["worker_class"] == "EAGLEWorkerV2" and all(s == "attached" for s in hello["seams"].values())
    assert last_body(frames, "heartbeat")["dropped"] == 0


def test_adaptive_rounds_carry_their_budget_and_deeper_positions_are_unobserved(adaptive):
    frames, responses = adaptive
    check_agreement(frames, responses, proposals=None)
    decode = [b for b in bodies(frames, "step") if b["mode"] == "decode"]
    budgets = [b["num_steps"] for b in decode]
    assert len(set(budgets)) > 1, budgets  # SGLang switched the step count (adaptive_spec_params.py)
    for body in decode:  # a chain proposes exactly its round's budget
        assert all(len(d) == body["num_steps"] for d in body["draft_ids"])
    # per position: reached only by rounds whose budget covers it
    k = 3
    reached, accepted = [0] * k, [0] * k
    for body in decode:
        for a in body["accepted"]:
            for i in range(1, min(a + 1, body["num_steps"]) + 1):
                reached[i - 1] += 1
                accepted[i - 1] += a >= i
    state = analyse(frames)
    assert state.acceptance.total.positions(k) == (reached, accepted)
    assert state.acceptance.cumulative_per_position == [a / r if r else None for r, a in zip(reached, accepted)]
    full_short = sum(a == b < k for body in decode for a, b in [(a, body["num_steps"]) for a in body["accepted"]])
    assert full_short > 0  # rounds that took every draft of a short budget: position b+1 unobserved, not rejected
    print(f"adaptive: budgets {sorted(set(budgets))} ({len(budgets)} rounds), per position {state.acceptance.cumulative_per_position}")


def test_standalone_worker_is_observed_but_its_draft_is_named_as_unhooked(standalone):
    frames, responses = standalone
    hello = last_body(frames, "hello")
    assert hello["worker_class"] == "StandaloneWorkerV2" and hello["seams"]["draft_model"] == "unhooked"
    detail = hello["unobserved"]["draft_model"]
    assert "the draft model is LlamaForCausalLM," in detail and "llama_eagle3.LlamaModel" in detail
    check_agreement(frames, responses, proposals=3)  # its rounds are EAGLEWorkerV2's, and seen
    state = analyse(frames)
    v = {x.id: x for x in state.violations()}
    assert v["worker-unobserved"].severity == "warning" and v["worker-unobserved"].evidence["unobserved"] == ["draft_model"]
    assert v["worker-unobserved"].evidence["details"]["draft_model"] == detail


CLASSIFY = r"""
import json, os, sys, types
os.environ["EAGLE3SCOPE_ENDPOINT"] = "ipc:///tmp/unused"
from eagle3scope_shim import hooks
from eagle3scope_shim.instrumentor import INSTRUMENTOR
shim = INSTRUMENTOR.built()
INSTRUMENTOR.patcher.patch_all()
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
out = {}
for algorithm, multi in (("EAGLE3", False), ("EAGLE", True), ("STANDALONE", False), ("FROZEN_KV_MTP", False),
                         ("DFLASH", False)):
    cls = SpeculativeAlgorithm.from_string(algorithm).create_worker(types.SimpleNamespace(enable_multi_layer_eagle=multi))
    shim.seams.status.pop("worker", None)
    hooks.report_unobserved(shim, object.__new__(cls))
    out[f"{algorithm}{'+multi-layer' if multi else ''}"] = [cls.__name__, shim.seams.status.get("worker")]
print(json.dumps(out))
"""


def test_workers_sglang_selects_are_classified_by_what_the_hooks_see(engine_python):
    """SGLang's own worker selection (SpeculativeAlgorithm.create_worker, speculative/spec_info.py 0.5.23)
    for the variants the CPU engine cannot serve: a worker is observed iff it runs EAGLEWorkerV2's
    hooked forward_batch_generation unchanged."""
    done = run_engine_python(engine_python, "-c", CLASSIFY, env=checkout_pythonpath(os.environ))
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {
        "EAGLE3": ["EAGLEWorkerV2", None],
        "EAGLE+multi-layer": ["MultiLayerEagleWorkerV2", "unhooked"],
        "STANDALONE": ["StandaloneWorkerV2", None],  # inherits the hooked round (its draft is the other question)
        "FROZEN_KV_MTP": ["FrozenKVMTPWorkerV2", "unhooked"],  # overrides forward_batch_generation
        "DFLASH": ["DFlashWorkerV2", "unhooked"],
    }, got


RING = r"""
import json, torch
from eagle3scope_shim.ring import HostRing, snap
from eagle3scope_shim.shim_state import Shim, Step
shim = Shim()
shim.snapshots.on_cpu = True
shim.snapshots.start("cpu", 4 * 6)  # as the scheduler starts: 4 requests x 6 draft tokens
out, ptrs = {"copies": True}, {}
for bs in (1, 4, 2, 4, 3, 1, 4, 2, 3):
    step = Step()
    src = {"draft": torch.arange(bs * 6), "lens": torch.ones(bs, dtype=torch.int32),
           "ids": torch.arange(bs * 6, dtype=torch.int32), "path": torch.zeros(bs, 4, dtype=torch.int32)}
    views = {name: snap(shim.snapshots, step, name, t) for name, t in src.items()}
    out["copies"] &= all(views[n].tolist() == src[n].reshape(-1).tolist() for n in src)
    for name in src:
        ptrs.setdefault((step.slot.index, name), set()).add(step.slot.buffers[name][0].data_ptr())
    HostRing.record(step.slot)
    HostRing.release(step.slot)
ring = shim.snapshots.ring
out.update(slots=len(ring.slots), allocations=ring.allocations, late=ring.late_allocations,
           one_buffer_per_slot_and_field=all(len(p) == 1 for p in ptrs.values()),
           every_slot_allocated=all(len(s.buffers) == 4 for s in ring.slots))
big = Step()
out["oversize"] = [snap(shim.snapshots, big, "draft", torch.arange(5 * 6)) is None, big.dropped, ring.oversize, ring.allocations]
shim.snapshots.start("cpu", 0)  # capacity unknown (no request pool): a slot grows in a step, counted late
for bs in (1, 2, 4):
    step = Step()
    snap(shim.snapshots, step, "draft", torch.arange(bs * 6))
    HostRing.release(step.slot)
out["unsized"] = [shim.snapshots.ring.allocations, shim.snapshots.ring.late_allocations]
print(json.dumps(out))
"""


def test_the_host_ring_allocates_every_slot_at_start_and_never_in_a_step(engine_python):
    """The ring with real torch tensors (CPU standing in for device copies, as EAGLE3SCOPE_RING_ON_CPU
    does in the engine): batch sizes that grow and shrink, int64 and int32 fields, cost no allocation
    after the scheduler's start; a copy beyond the capacity drops its step instead of allocating."""
    done = run_engine_python(engine_python, "-c", RING, env=checkout_pythonpath(os.environ))
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["copies"] and got["one_buffer_per_slot_and_field"] and got["every_slot_allocated"], got
    assert got["allocations"] == 4 and got["late"] == 0 and got["slots"] >= 8, got
    assert got["oversize"] == [True, True, 1, 4], got
    assert got["unsized"] == [3, 3], got  # what an unknown capacity costs: the reason the ring is sized first


CPU_SNAP = r"""
import json, os, torch
from eagle3scope_shim import step_body
from eagle3scope_shim.ring import snap
from eagle3scope_shim.shim_state import Shim, Step
shim = Shim()
step, src = Step(), {"draft": torch.arange(8), "lens": torch.tensor([2, 3], dtype=torch.int32),
                     "path": torch.tensor([[0, 1, 2], [4, 6, 7]], dtype=torch.int32)}
views = {name: snap(shim.snapshots, step, name, t) for name, t in src.items()}
kinds = sorted({type(v).__name__ for v in views.values()})
for t in src.values():
    t.add_(100)  # SGLang reusing its buffers after the round: the snapshot must not follow
step.draft, step.verify, step.path = views["draft"], ("v2", views["lens"], views["draft"]), views["path"]
step.rids = ["a", "b"]
body = step_body.finalize_step(shim, step)
print(json.dumps({"kinds": kinds, "ring": shim.snapshots.ring is not None, "draft_ids": body["draft_ids"],
                  "accepted_ids": body["accepted_ids"], "path": body["accepted_path"]}))
"""


@pytest.mark.parametrize("guarded", [False, True])
def test_cpu_snapshots_are_host_copies_taken_at_once(engine_python, guarded):
    """A CPU tensor is listed at once (cheaper than a clone after a forward swept the caches),
    cloned under the sync guard (which flags tolist on any device); either is a copy the publisher
    turns into the same body, untouched by SGLang writing the tensors afterwards, and no ring is made."""
    env = {**checkout_pythonpath(os.environ), "EAGLE3SCOPE_SYNC_GUARD": "1" if guarded else ""}
    done = run_engine_python(engine_python, "-c", CPU_SNAP, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["kinds"] == (["Tensor"] if guarded else ["list"]) and got["ring"] is False, got
    assert got["draft_ids"] == [[1, 2, 3], [5, 6, 7]] and got["accepted_ids"] == [[0, 1], [4, 5, 6]], got
    assert got["path"] == [[0], [1, 2]], got
