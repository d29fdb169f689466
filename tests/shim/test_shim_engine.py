"""The shim inside the real SGLang 0.5.23 CPU engine: what it reports, that it agrees with SGLang's
own per-request ``meta_info``, that it adds no host-device sync, and that a failing hook changes
nothing SGLang produces.

Four 0.5.23 servers (about 40 s each, two alive at once: ServerPool): a healthy tiny pair under the
sync guard; the same pair with a fault injected into the verify hook; an EAGLE-1 draft under EAGLE;
and a broken draft (aux capture off, a weight under a name SGLang drops, no ``lm_head``, absolute
``d2t``), the last two served with SGLang's simulated acceptance so that per-request counts are
non-trivial. (SGLang 0.5.10 cannot serve EAGLE on a CPU: see
test_shim_v1.py for what runs there.)
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from support.engine import run_engine_python
from support.servers import (GUARDED, MAX_NEW, PROMPTS, ServerPool, bodies, check_agreement, check_finished,
                             failed_hooks, last_body, launch, pooled)

from eagle3scope.analysis import analyse
from eagle3scope.analysis.views import publisher_rows

pytestmark = pytest.mark.engine

H, AUX = 128, 3  # tiny.py's target hidden size and aux layer count

WRITE_BROKEN_DRAFT = r"""
import sys, torch
from pathlib import Path
from eagle3scope.demo import tiny
target, out = Path(sys.argv[1]), Path(sys.argv[2])
config = tiny.draft_config(target, use_aux_hidden_state=False)
state = tiny.random_draft_state(config, range(config["draft_vocab_size"]), seed=7)
state["decoder.mlp.down_proj.weight"] = state.pop("layers.0.mlp.down_proj.weight")  # SGLang drops it
del state["lm_head.weight"]
state["d2t"] = torch.arange(config["draft_vocab_size"])  # absolute ids where offsets belong
tiny.write_draft(out, config, state)
"""

# An EAGLE-1 draft as SGLang's LlamaForCausalLMEagle loads it (sglang/srt/models/llama_eagle.py): one
# decoder layer without input_layernorm, fc over cat(embeds, hidden) (2H -> H, with bias), its own
# embeddings and head; load_weights prefixes every name but lm_head with "model.".
WRITE_EAGLE1_DRAFT = r"""
import json, sys, torch
from pathlib import Path
from safetensors.torch import save_file
target, out = Path(sys.argv[1]), Path(sys.argv[2])
cfg = json.loads((target / "config.json").read_text())
h, inter, heads, kv, vocab = (cfg[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads",
                                                "num_key_value_heads", "vocab_size"))
hd = h // heads
g = torch.Generator().manual_seed(11)
w = lambda *shape: torch.randn(*shape, generator=g) * 0.02
state = {"embed_tokens.weight": w(vocab, h), "fc.weight": w(h, 2 * h), "fc.bias": torch.zeros(h),
         "lm_head.weight": w(vocab, h), "layers.0.post_attention_layernorm.weight": torch.ones(h),
         "layers.0.self_attn.q_proj.weight": w(heads * hd, h), "layers.0.self_attn.k_proj.weight": w(kv * hd, h),
         "layers.0.self_attn.v_proj.weight": w(kv * hd, h), "layers.0.self_attn.o_proj.weight": w(h, heads * hd),
         "layers.0.mlp.gate_proj.weight": w(inter, h), "layers.0.mlp.up_proj.weight": w(inter, h),
         "layers.0.mlp.down_proj.weight": w(h, inter)}
out.mkdir(parents=True)
keep = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "vocab_size",
        "max_position_embeddings", "rms_norm_eps", "rope_theta", "bos_token_id", "eos_token_id", "hidden_act")
config = {**{k: cfg[k] for k in keep if k in cfg}, "architectures": ["LlamaForCausalLMEagle"],
          "model_type": "llama", "num_hidden_layers": 1, "tie_word_embeddings": False, "torch_dtype": "float32"}
(out / "config.json").write_text(json.dumps(config))
save_file(state, str(out / "model.safetensors"))
"""


@pytest.fixture(scope="module")
def models(engine_python, tiny_models, tmp_path_factory):
    target, draft = tiny_models
    root = tmp_path_factory.mktemp("shim-models")
    for script, name in ((WRITE_BROKEN_DRAFT, "draft-broken"), (WRITE_EAGLE1_DRAFT, "draft-eagle1")):
        done = run_engine_python(engine_python, "-c", script, str(target), str(root / name))
        assert done.returncode == 0, done.stderr[-3000:]
    return {"target": target, "draft": draft, "broken": root / "draft-broken", "eagle1": root / "draft-eagle1"}



@pytest.fixture(scope="module")
def pool(request, models):
    """The module's four servers, each started while the one before it runs (ServerPool).
    ``healthy``: greedy requests, then the same prompts at temperature 0.8 (SGLang's sampling verify,
    which the cpu_engine plugin enables on CPU); ``fault``: the same pair with the verify hook failing;
    ``broken`` and ``eagle1`` under SGLang's simulated acceptance."""
    target = models["target"]
    return ServerPool(request, {
        "healthy": (((target, models["draft"], GUARDED), {}), {"temperatures": (0.0, 0.8)}),
        "broken": (((target, models["broken"], {"SGLANG_SIMULATE_ACC_LEN": "2.5", **GUARDED}), {}), {"concurrent": True}),
        "fault": (((target, models["draft"], {"EAGLE3SCOPE_FAULT": "v2.verify"}), {}), {}),
        "eagle1": (((target, models["eagle1"], {"SGLANG_SIMULATE_ACC_LEN": "2.5", **GUARDED}), {"algorithm": "EAGLE"}), {}),
    })


healthy, broken, fault, eagle1 = (pooled(name) for name in ("healthy", "broken", "fault", "eagle1"))


def test_healthy_run_reports_widths_and_fc(healthy):
    frames, _ = healthy
    hello, load = last_body(frames, "hello"), last_body(frames, "load")
    assert hello["worker"] == "v2" and hello["sglang_version"] == "0.5.23" and hello["tp_rank"] == 0
    assert hello["observable"]["passes_draft_decode"] and not hello["server_args"]["cuda_graph"]
    assert all(status == "attached" for status in hello["seams"].values()), hello["seams"]
    assert load["fc"] == {"in": AUX * H, "out": H} and load["hidden_size"] == H
    assert load["aux"]["capture_on"] and load["aux"]["use_aux"] and load["aux"]["offset_rule"] == "+1"
    assert load["aux"]["captured"] == [x + 1 for x in load["aux"]["configured"]]
    assert load["weights"]["skipped"] == [] and load["weights"]["unwritten"] == []
    assert load["d2t"]["t2d_consistent"] and not load["d2t"]["looks_absolute"]
    assert load["lm_head"]["source"] == "checkpoint" and load["embed_tokens"]["source"] == "target"
    steps = bodies(frames, "step")
    prefill = [b for b in steps if b["mode"] == "prefill"]
    decode = [b for b in steps if b["mode"] == "decode"]
    assert len(prefill) >= len(PROMPTS) and decode
    for body in prefill:
        assert {(p["mode"], p["width"], p["fc"]) for p in body["passes"]} == {("extend", AUX * H, True)}
    for body in decode:
        passes = {(p["mode"], p["width"], p["fc"]): p["n"] for p in body["passes"]}
        assert passes == {("decode", H, False): 2, ("draft_extend_v2", AUX * H, True): 1}
        assert body["capture"] == {"on": True, "layers": load["aux"]["captured"]}
        assert body["draft_ms"] > 0 and body["verify_ms"] > 0 and body["extend_ms"] > 0


def test_every_body_names_only_typed_fields(healthy):
    """The real shim builds every body as its wire type (eagle3scope/wire/bodies.py): no field the
    type does not name, nested maps included."""
    from support.declared import undeclared

    from eagle3scope.wire import bodies

    frames, _ = healthy
    assert {f.kind for f in frames} >= {"hello", "load", "step", "heartbeat"}
    assert [(f.kind, path) for f in frames for path in undeclared(f.body, bodies.BODIES[f.kind])] == []


def test_healthy_run_agrees_with_meta_info_and_adds_no_sync(healthy):
    frames, responses = healthy
    # the sync guard was on: any item/tolist/blocking copy in a hook body would be a failed hook
    assert failed_hooks(frames) == []
    check_agreement(frames, responses)  # greedy and sampled requests alike


def test_heartbeats_carry_the_shims_own_time_per_step_seam(healthy):
    """The hooks time themselves. Every seam a real v2 round fires shows up in some
    heartbeat's ``shim_us``, against the rounds' ``step_us``; the shim's part is a fraction of it
    (loose bound: the sync guard is on in this run, which makes the hooks several times dearer)."""
    frames, _ = healthy
    beats = [b for b in bodies(frames, "heartbeat") if b.get("step_us")]
    assert beats, "no heartbeat over a busy interval"
    seen = {seam for b in beats for seam in b["shim_us"]}
    round_seams = {"v2.step", "v2.draft", "v2.verify", "v2.draft_extend"}
    assert {"v2.step", "v2.verify"} <= seen, seen
    # a CPU server has no draft graph runner: the first step took the counting draft-forward hook
    # out (its callers add the passes, test_healthy_run_reports_widths_and_fc), and the draft and
    # draft-extend hooks with it (the step's and verify's hooks add their passes and times); SGLang
    # runs no overlap loop for speculative decoding on a CPU, so the commit hook went too (steps are
    # published as they end). After the first busy interval none of them runs (BENCHMARKS.md, "Shim")
    taken_out = ("llama_eagle3.forward", "v2.draft", "v2.draft_extend", "commit.resolve")
    assert not any(b["shim_us"].get(seam) for b in beats[1:] for seam in taken_out), [b["shim_us"] for b in beats]
    # the round's own seams against the rounds (load-time hooks, e.g. the weight watch, land in the
    # first heartbeat too and relate to no round)
    shim = sum(us for b in beats for seam, us in b["shim_us"].items() if seam in round_seams)
    rounds = sum(b["step_us"] for b in beats)
    assert 0 < shim < 0.5 * rounds, (shim, rounds, [b["shim_us"] for b in beats[:2]])
    # the rounds are the step seam's calls: they hold every draft/verify/extend call the steps timed
    # (once they held only the commit seam's, and the TUI showed the shim at 858 % of them)
    worker_us = 1000 * sum(b.get(k) or 0 for b in bodies(frames, "step") for k in ("draft_ms", "verify_ms", "extend_ms"))
    assert worker_us > 0 and rounds >= 0.9 * worker_us, (rounds, worker_us)
    # the share the TUI shows: the hooks within the rounds (round_shim_us) over them
    assert shim - 1 <= sum(b["round_shim_us"] for b in beats) < 0.5 * rounds


def test_sampled_requests_take_the_sampling_verify_path(healthy):
    _, responses = healthy
    greedy, sampled = responses[: len(PROMPTS)], responses[len(PROMPTS) :]
    # Greedy verify would commit the argmax and repeat the greedy answers; sampling verify draws
    # from the target's distribution (a random tiny target's is flat), and drafts still get accepted.
    assert sum(g["output_ids"] != s["output_ids"] for g, s in zip(greedy, sampled)) >= len(PROMPTS) - 1
    assert all(len(s["output_ids"]) == MAX_NEW for s in sampled)
    assert all(s["meta_info"]["spec_verify_ct"] > 0 for s in sampled)


def test_broken_draft_facts_and_simulated_acceptance_agree(broken):
    frames, responses = broken
    load = last_body(frames, "load")
    assert load["aux"]["use_aux"] is False and load["aux"]["capture_on"] is False and load["aux"]["captured"] == []
    assert "decoder.mlp.down_proj.weight" in load["weights"]["skipped"]
    assert {"model.layers.0.mlp.down_proj.weight", "lm_head.weight"} <= set(load["weights"]["unwritten"])
    assert load["lm_head"]["source"] == "init"
    assert load["d2t"]["looks_absolute"] and load["d2t"]["t2d_consistent"] is False
    steps = bodies(frames, "step")
    for body in steps:
        for p in body["passes"]:
            assert p["width"] == H and p["fc"] is False, p  # fc skipped on every pass: aux is off
    assert any(b["mode"] == "decode" and any(a > 0 for a in b["accepted"]) for b in steps)
    assert max(b["bs"] for b in steps) > 1
    check_agreement(frames, responses)
    assert failed_hooks(frames) == []  # batched rounds under the sync guard


def test_failing_hook_is_reported_once_and_changes_no_token(fault, healthy):
    frames, responses = fault
    failed = [b for b in bodies(frames, "hook") if b["status"] == "failed"]
    assert [b["seam"] for b in failed] == ["v2.verify"] and "injected" in failed[0]["detail"]
    greedy = healthy[1][: len(PROMPTS)]  # the healthy run also asked each prompt sampled, after these
    assert len(responses) == len(greedy) and [r["text"] for r in responses] == [r["text"] for r in greedy]
    assert bodies(frames, "step")  # the other hooks go on publishing (prefill steps)
    assert last_body(frames, "heartbeat")["hook_failures"] >= 1
    # the header counts the hello's seams with the later hook events over them (a header that counted only hook events showed 0/1)
    statuses = {**(last_body(frames, "hello").get("seams") or {}), **{b["seam"]: b["status"] for b in bodies(frames, "hook")}}
    (row,) = publisher_rows(analyse(frames))
    assert (row.hooks_ok, row.hooks_total) == (sum(s == "attached" for s in statuses.values()), len(statuses))
    assert row.hooks_total > row.hooks_ok >= 5


def test_a_shim_that_misses_rounds_fails_check_with_both_counts(fault, tmp_path):
    """The verify hook failing (EAGLE3SCOPE_FAULT) is a shim that publishes no round: SGLang's own
    counts in the finish frames show it, and check fails on accounting-mismatch as well as hook-failed."""
    import json

    from support.cli import invoke
    from support.recordings import record

    frames, responses = fault
    result = invoke("check", record(tmp_path / "fault.e3s", frames), "--json")
    assert result.exit_code == 1, result.output
    fired = {v["id"]: v for v in json.loads(result.output)["violations"]}
    assert fired["accounting-mismatch"]["severity"] == "error" and "hook-failed" in fired
    evidence = fired["accounting-mismatch"]["evidence"]
    assert evidence["requests_mismatched"] >= len(responses)
    metas = {r["meta_info"]["id"]: r["meta_info"] for r in responses}
    shown = [e for e in evidence["examples"] if e["rid"] in metas]
    assert shown and all(e["sglang"]["verify_ct"] == metas[e["rid"]]["spec_verify_ct"] > 0 == e["eagle3scope"]["verify_ct"]
                         for e in shown)


def test_an_aborted_request_is_published_with_the_counts_sglang_reported(models):
    """/abort_request on a request in mid-decode: SGLang finishes it with the rounds it ran, its finish
    frame carries what its meta_info reports, and the viewer's tally of its steps agrees."""
    import urllib.request

    sub, srv = launch(models["target"], models["draft"], {})
    frames, rid = [], "abort-me"
    try:
        srv.wait_ready()
        with ThreadPoolExecutor(1) as pool:
            params = {"max_new_tokens": 1500, "temperature": 0.0, "ignore_eos": True}
            pending = pool.submit(srv.post, "/generate", {"text": "one two three", "rid": rid, "sampling_params": params})
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not any(
                    f.kind == "step" and f.body["mode"] == "decode" and rid in f.body["rids"] for f in frames):
                frames += sub.poll(timeout_ms=200)
            abort = urllib.request.Request(srv.url + "/abort_request", data=b'{"rid": "abort-me"}',
                                           headers={"Content-Type": "application/json"})
            urllib.request.urlopen(abort, timeout=60).close()
            response = pending.result(timeout=300)
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < 1.5:  # until no step or finish came for 1.5 s
            new = sub.poll(timeout_ms=200)
            frames += new
            if any(f.kind in ("step", "finish") for f in new):
                quiet_since = time.monotonic()
    finally:
        srv.stop()
        sub.close()
    meta = response["meta_info"]
    assert meta["finish_reason"]["type"] == "abort" and 0 < meta["completion_tokens"] < params["max_new_tokens"]
    assert meta["spec_verify_ct"] > 0
    check_finished(frames, [response])


def test_eagle1_draft_under_eagle_is_a_valid_setup(eagle1):
    """--speculative-algorithm EAGLE with an EAGLE-1 draft: no aux capture and a 2H fc by design, so
    neither aux rule may fire (the same flags with an EAGLE-3 draft are the wrong-algorithm break).
    Its forward (llama_eagle.LlamaModel) is hooked: every pass H wide with fc applied, none read as a
    replay, no unobserved part. SGLang's simulated acceptance makes the counts non-trivial (a random
    EAGLE-1 draft accepts nothing: zero-acceptance would be true there); they add up to meta_info."""
    from eagle3scope.analysis import analyse

    frames, responses = eagle1
    hello, load = last_body(frames, "hello"), last_body(frames, "load")
    assert str(hello["server_args"]["algorithm"]).rsplit(".", 1)[-1] == "EAGLE"
    assert load["draft_class"] == "LlamaForCausalLMEagle" and load["fc"] == {"in": 2 * H, "out": H}
    assert load["aux"]["capture_on"] is False
    assert hello["seams"]["llama_eagle.forward"] == "attached" and hello["unobserved"] == {}
    assert hello["observable"]["passes_draft_decode"] is True and hello["observable"]["graph_draft_decode"] is False
    steps = bodies(frames, "step")
    assert [b for b in steps if b["mode"] == "decode"]
    passes = [p for b in steps for p in b["passes"]]
    assert {p["mode"] for p in passes} >= {"extend", "decode"}
    assert all(p["width"] == H and p["fc"] is True and "replayed" not in p for p in passes), passes[:4]
    assert all(r["meta_info"]["spec_verify_ct"] > 0 for r in responses)  # it did speculate
    assert sum(r["meta_info"]["spec_num_correct_drafts"] for r in responses) > 0
    check_agreement(frames, responses)
    assert failed_hooks(frames) == []  # the forward hook on every pass, under the sync guard
    fired = {v.id for v in analyse(frames).violations()}
    assert not fired & {"worker-unobserved", "zero-acceptance", "passes-unobserved"}, fired
    assert not fired & {"aux-capture-off", "fc-bypassed", "hidden-width-mismatch", "aux-layers-mismatch"}, fired
