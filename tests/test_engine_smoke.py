"""The real SGLang engine on CPU: EAGLE-3 speculative decoding must not change greedy output.

Starts `sglang.launch_server` twice (tiny random target with a random EAGLE-3
draft, then the target alone) and compares token ids. float32 + greedy makes
the outputs exactly comparable (bfloat16 was seen to diverge).
"""

import pytest

from eagle3scope.demo.server import SGLangServer

pytestmark = pytest.mark.engine

PROMPTS = ["the quick brown fox bada", "kimo tuviro sa lena fe"]
NEW_TOKENS = 32


def test_eagle3_output_equals_plain_decoding(engine_python, tiny_models):
    target, draft = tiny_models
    spec = SGLangServer(target, draft, python=engine_python)
    plain = SGLangServer(target, None, python=engine_python)
    try:  # both start at once: startup is mostly single-threaded
        spec.launch()
        plain.launch()
        spec_out = spec.wait_ready().generate(PROMPTS, max_new_tokens=NEW_TOKENS, temperature=0)
        plain_out = plain.wait_ready().generate(PROMPTS, max_new_tokens=NEW_TOKENS, temperature=0)
    finally:
        spec.stop()
        plain.stop()

    for s, p in zip(spec_out, plain_out):
        assert len(p["output_ids"]) == NEW_TOKENS
        assert s["output_ids"] == p["output_ids"]
        assert s["text"] == p["text"]
        meta = s["meta_info"]
        assert meta["spec_verify_ct"] > 0
        # Each verify round commits at least the bonus token, at most num_draft_tokens.
        assert meta["spec_verify_ct"] <= NEW_TOKENS
        assert 1.0 <= meta["spec_accept_length"] <= 4.0
        assert not p["meta_info"].get("spec_verify_ct")
