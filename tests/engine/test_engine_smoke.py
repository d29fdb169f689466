"""The real SGLang engine on CPU: EAGLE-3 speculative decoding must not change greedy output, and
plain decoding must compute what the target's weights compute.

Starts `sglang.launch_server` three times (tiny random target with a random
EAGLE-3 draft as a top-k 1 chain and as a top-k 2 tree, and the target alone)
and compares token ids. float32 + greedy makes
the outputs exactly comparable (bfloat16 was seen to diverge). Since every server runs the same
attention stand-ins (cpu_engine/), the plain server's log-probabilities are also checked against
a direct transformers forward of the same checkpoint, which shares none of SGLang's code.
"""

import json

import pytest

from support.engine import run_engine_python
from eagle3scope.demo.server import SGLangServer

pytestmark = pytest.mark.engine

PROMPTS = ["the quick brown fox bada", "kimo tuviro sa lena fe"]
NEW_TOKENS = 32

# Teacher-forced log-probabilities of given token ids under transformers' own Llama (eager attention).
TRANSFORMERS_LOGPROBS = r"""
import json, sys, torch
from transformers import LlamaForCausalLM
model = LlamaForCausalLM.from_pretrained(sys.argv[1], torch_dtype=torch.float32, attn_implementation="eager").eval()
out = []
for ids in json.loads(sys.argv[2]):
    with torch.no_grad():
        logprobs = torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), -1)
    out.append({"chosen": [logprobs[i, ids[i + 1]].item() for i in range(len(ids) - 1)],
                "best": logprobs.max(-1).values.tolist()})
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def served(engine_python, tiny_models):
    """Greedy outputs of the three servers, and the plain server's answer with log-probabilities
    of every prompt and output token."""
    target, draft = tiny_models
    servers = {
        "chain": SGLangServer(target, draft, python=engine_python),  # topk 1, 4 draft tokens
        "tree": SGLangServer(target, draft, python=engine_python, topk=2, num_draft_tokens=6),
        "plain": SGLangServer(target, None, python=engine_python),
    }
    try:  # all start at once: startup is mostly single-threaded
        for server in servers.values():
            server.launch()
        outs = {name: server.wait_ready().generate(PROMPTS, max_new_tokens=NEW_TOKENS, temperature=0)
                for name, server in servers.items()}
        scored = servers["plain"].post("/generate", {
            "text": PROMPTS, "sampling_params": {"max_new_tokens": NEW_TOKENS, "temperature": 0},
            "return_logprob": True, "logprob_start_len": 0})
    finally:
        for server in servers.values():
            server.stop()
    return outs, scored


def test_eagle3_output_equals_plain_decoding(served):
    outs, _ = served

    for spec_name, max_len in (("chain", 4), ("tree", 4)):
        for s, p in zip(outs[spec_name], outs["plain"]):
            assert len(p["output_ids"]) == NEW_TOKENS
            assert s["output_ids"] == p["output_ids"], spec_name
            assert s["text"] == p["text"]
            meta = s["meta_info"]
            assert meta["spec_verify_ct"] > 0
            # Each verify round commits at least the bonus token, at most num_steps + 1.
            assert meta["spec_verify_ct"] <= NEW_TOKENS
            assert 1.0 <= meta["spec_accept_length"] <= max_len
            assert not p["meta_info"].get("spec_verify_ct")


def test_plain_decoding_matches_a_direct_transformers_forward(engine_python, tiny_models, served):
    """Prefill (extend attention) and every decode step (decode attention): SGLang's log-probability of
    each token equals transformers' within float32 noise, and each greedy token is transformers'
    argmax. A masking, scaling or GQA slip in the attention stand-ins moves these by ~0.2."""
    _, scored = served
    sequences = []
    for item in scored:
        meta = item["meta_info"]
        prompt = [tok for _, tok, _ in meta["input_token_logprobs"]]
        sequences.append((prompt, item["output_ids"], meta))
    done = run_engine_python(engine_python, "-c", TRANSFORMERS_LOGPROBS, str(tiny_models[0]),
                             json.dumps([p + o for p, o, _ in sequences]))
    assert done.returncode == 0, done.stderr[-3000:]
    reference = json.loads(done.stdout.strip().splitlines()[-1])
    for (prompt, output, meta), ref in zip(sequences, reference):
        assert len(output) == NEW_TOKENS
        mine = [lp for lp, _, _ in meta["input_token_logprobs"][1:]] + [lp for lp, _, _ in meta["output_token_logprobs"]]
        assert len(mine) == len(ref["chosen"])
        assert max(abs(a - b) for a, b in zip(mine, ref["chosen"])) < 1e-3
        for i, token_lp in enumerate(ref["chosen"][len(prompt) - 1:]):  # greedy: each output token is the argmax
            assert token_lp > ref["best"][len(prompt) - 1 + i] - 1e-4, (i, output[i])
