"""Write an EAGLE-3 draft with the real ``speculators`` package (run with the speculators venv's python).

``python tests/engine_side/speculators_writer.py JOBS_JSON``, a list of ``{"out", "verifier",
"options"}``: each job builds the config the way ``Eagle3DraftModel.from_training_args`` does (``resolve_target_layer_ids`` against
the verifier's config, ``VerifierConfig.from_pretrained``), a tiny decoder layer of the requested
``model_type``, loads a d2t/t2d pair and saves with speculators' own ``save_pretrained``. Options:
``layer_ids`` (None = speculators' default), ``model_type`` ("llama" | "qwen3"),
``norm_before_residual``, ``norm_before_fc``, ``fc_norm``, ``norm_output``, ``hidden``,
``draft_vocab``; ``convert_from`` (a SpecForge/EAGLE-layout directory) runs speculators' own
``Eagle3Converter`` on it instead. One JSON line per job on stdout.
"""

from __future__ import annotations

import json
import sys
import warnings


def convert(out: str, verifier: str, source: str) -> None:
    from speculators.convert.eagle.eagle3_converter import Eagle3Converter

    Eagle3Converter().convert(source, out, base_model=verifier, validate=False)
    print(json.dumps({"out": out, "config": json.load(open(f"{out}/config.json"))}), flush=True)


def write(out: str, verifier: str, options: dict) -> None:
    import torch
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.models.eagle3 import Eagle3SpeculatorConfig
    from speculators.models.eagle3.core import Eagle3DraftModel
    from speculators.models.utils import resolve_target_layer_ids
    from speculators.proposals.greedy import GreedyTokenProposalConfig
    from transformers import AutoConfig

    verifier_config = AutoConfig.from_pretrained(verifier)
    hidden = options.get("hidden", verifier_config.hidden_size)
    layer_class = AutoConfig.for_model(options.get("model_type", "llama")).__class__
    layer = layer_class(vocab_size=verifier_config.vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                        num_hidden_layers=options.get("num_layers", 1), num_attention_heads=2, num_key_value_heads=1,
                        head_dim=hidden // 2, max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the default-ids warning
        layer_ids = resolve_target_layer_ids(options.get("layer_ids"), verifier)
    config = Eagle3SpeculatorConfig(
        transformer_layer_config=layer,
        draft_vocab_size=options.get("draft_vocab", 32),
        norm_before_residual=options.get("norm_before_residual", False),
        norm_before_fc=options.get("norm_before_fc", False),
        fc_norm=options.get("fc_norm", False),
        norm_output=options.get("norm_output", False),
        target_hidden_size=verifier_config.hidden_size if hidden != verifier_config.hidden_size else None,
        eagle_aux_hidden_state_layer_ids=layer_ids,
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3", proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=3)],
            default_proposal_method="greedy", verifier=VerifierConfig.from_pretrained(verifier)),
    )
    model = Eagle3DraftModel(config=config)
    torch.manual_seed(0)
    with torch.no_grad():  # training copies these from the verifier (load_verifier_weights); any finite values do
        model.embed_tokens.weight.normal_(0, 0.02)
        model.lm_head.weight.normal_(0, 0.02)
    draft_vocab = config.draft_vocab_size
    ids = torch.arange(0, 2 * draft_vocab, 2)[:draft_vocab]  # every other target token
    t2d = torch.zeros(verifier_config.vocab_size, dtype=torch.bool)
    t2d[ids] = True
    model.load_vocab_mappings(t2d, ids - torch.arange(draft_vocab))
    model.save_pretrained(out)
    print(json.dumps({"out": out, "config": json.load(open(f"{out}/config.json"))}), flush=True)


if __name__ == "__main__":
    for job in json.loads(sys.argv[1]):
        if "convert_from" in job["options"]:
            convert(job["out"], job["verifier"], job["options"]["convert_from"])
        else:
            write(job["out"], job["verifier"], job["options"])
