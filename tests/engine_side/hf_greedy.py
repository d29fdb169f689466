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
        for prompt in prompts:
            ids = torch.tensor([tokenizer(prompt)["input_ids"]])
            generated = []
            while len(generated) < new_tokens and (not generated or generated[-1] != tokenizer.eos_token_id):
                generated.append(int(model(input_ids=ids).logits[0, -1].argmax()))
                ids = torch.cat([ids, torch.tensor([[generated[-1]]])], 1)
            outputs.append(generated)
    print(json.dumps(outputs))


if __name__ == "__main__":
    main()
