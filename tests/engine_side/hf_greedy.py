"""Plain greedy decoding by transformers, the reference SGLang's speculative output must equal.

Runs in the engine venv: ``python tests/engine_side/hf_greedy.py MODEL_DIR NEW_TOKENS PROMPT...``
prints one JSON list with each prompt's generated token ids (stopping after EOS, as SGLang does).
"""

import json
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main() -> None:
    model_dir, new_tokens, prompts = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    outputs = []
    with torch.no_grad():
        for prompt in prompts:  # one at a time: no padding, so no mask can change a logit
            ids = torch.tensor([tokenizer(prompt)["input_ids"]])
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                                 do_sample=False, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.eos_token_id)
            outputs.append(out[0, ids.shape[1]:].tolist())
    print(json.dumps(outputs))


if __name__ == "__main__":
    main()
