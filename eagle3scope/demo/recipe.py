"""The Llama demo pair's recipe: the target's shape, the draft's aux layers, vocabulary and width,
and the training budgets, all from fixed seeds.

Every number here decides the weights, so all of this module is part of the build's cache key
(:func:`eagle3scope.demo.models.version`). The DeepseekV3 family trains its drafts with the same
draft half of it (:mod:`eagle3scope.demo.deepseek`).
"""

from __future__ import annotations

from eagle3scope.demo import language

SEED = language.SEED
#: Target: tiny Llama. Words live below TARGET_VOCAB // 2 so that a ``d2t`` read as absolute
#: ids still lands inside the vocabulary (the d2t-absolute scenario degrades, not crashes).
TARGET = dict(
    vocab_size=1024,
    hidden_size=128,
    intermediate_size=384,
    num_hidden_layers=8,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=1024,
    rms_norm_eps=1e-5,
    rope_theta=10000.0,
)
#: SpecForge's default aux layers for an 8-layer target, ``[1, n//2-1, n-4]``, in SGLang's
#: numbering (output of layer ``i``). speculators writes the same layers as ``[2, n//2, n-3]``
#: (input of layer ``i``); pasting those into SGLang's config is the aux-offset scenario.
AUX_LAYER_IDS = [1, 3, 4]
DRAFT_VOCAB = 64
DRAFT_INTERMEDIATE = 512
TTT_STEPS = 3
#: Loss weight of unroll step j: TTT_LOSS_DECAY ** j (EAGLE's trainer weighs step j by 0.8 ** j,
#: ``ploss_weight`` in SafeAILab/EAGLE ``eagle/traineagle3/main.py``). Lower here, with the short
#: budget below, so later steps learn later: the decay over draft positions real drafts show.
TTT_LOSS_DECAY = 0.25
DRAFT_LR = 1e-3
#: Aux layer shifts the draft is trained to distrust, and the weight of that loss term.
NEIGHBOUR_SHIFTS = (1, -1, 1, 2)
NEIGHBOUR_WEIGHT = 0.5
TARGET_STEPS = 300
#: Draft training steps with the training-time-test unroll, then steps that train its first
#: step alone (one one-cycle schedule over both). Short of convergence on purpose: on a language
#: this small a fully trained draft matches the target at every step (4 of 4), where a real one
#: is right on most first drafts and less often on later ones (public EAGLE-3 figures at
#: steps 3 / topk 1: about 2.9). The first-step-only phase is for sampled traffic: greedy text
#: keeps to one long cycle of the rule map, which an unrolled draft learns first, and a sampled
#: second choice jumps off it into pairs a short-trained draft does not know yet, so its misses
#: at temperature > 0 came in runs. Figures per budget: BENCHMARKS.md, bench_draft_curve.py.
DRAFT_STEPS = 100
FIRST_STEP_ONLY = 120
SEQ_LEN = 96


def target_config():
    """transformers' LlamaConfig of the tiny target."""
    from transformers import LlamaConfig

    return LlamaConfig(
        **TARGET,
        hidden_act="silu",
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=3,
        architectures=["LlamaForCausalLM"],
        torch_dtype="float32",
    )
