"""The real SGLang engine on CPU: EAGLE-3 speculative decoding must not change greedy output.

Starts `sglang.launch_server` three times (tiny random target with a random
EAGLE-3 draft as a top-k 1 chain and as a top-k 2 tree, and the target alone)
and compares token ids. float32 + greedy makes
the outputs exactly comparable (bfloat16 was seen to diverge).
"""

import pytest

from eagle3scope.demo.server import SGLangServer

pytestmark = pytest.mark.engine

PROMPTS = ["the quick brown fox bada", "kimo tuviro sa lena fe"]
NEW_TOKENS = 32


def test_eagle3_output_equals_plain_decoding(engine_python, tiny_models):
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
    finally:
        for server in servers.values():
            server.stop()

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
