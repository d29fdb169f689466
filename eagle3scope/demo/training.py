"""Training the demo pair: the target on the demo language, then the EAGLE-3 draft on the target.

A random target gives a draft nothing to learn (acceptance about 2.3 at best), so the target is
first trained for a minute or two on the synthetic language of :mod:`eagle3scope.demo.language`:
its greedy output is then predictable, but only with context the target's hidden states carry, so
a draft that loses the aux states (or reads the wrong layers) can no longer predict it, which is
exactly what the fault scenarios show. Its distribution keeps the language's noise, so sampled
requests (temperature > 0) accept fewer drafts than greedy ones, as on real models.

The draft is trained the way EAGLE-3 drafts are: on the target's own aux hidden states and greedy
outputs, with a training-time-test unroll so that its later steps, which feed back its own hidden
state, are trained too, their losses weighted down per step as EAGLE's trainer does. It is also
trained to give uniform logits on states from neighbouring layers, which in a target this small
decode almost like its own (without that, the aux-offset scenario keeps full acceptance). And it
trains for ``DRAFT_STEPS`` steps only (:mod:`eagle3scope.demo.recipe`). The loops take the model
to train (the DeepseekV3 family passes its own target and its MLA draft's factory).
"""

from __future__ import annotations

import random

from eagle3scope.demo import language
from eagle3scope.demo.cache import Progress
from eagle3scope.demo.llama_draft import make_draft as make_llama_draft
from eagle3scope.demo.recipe import AUX_LAYER_IDS, DRAFT_LR, DRAFT_STEPS, DRAFT_VOCAB, FIRST_STEP_ONLY, \
    NEIGHBOUR_SHIFTS, NEIGHBOUR_WEIGHT, SEED, SEQ_LEN, TARGET, TARGET_STEPS, TTT_LOSS_DECAY, TTT_STEPS, target_config


def sample(batch: int, length: int, rng: random.Random):
    """Token ids of ``batch`` texts of the demo language (``language.corpus``)."""
    import torch

    return torch.tensor(language.corpus(batch, length, rng, TARGET["vocab_size"]))


def _rule():
    """[vocab, vocab] tensor: the rule's next token id after each pair of a family's words (else -1)."""
    import torch

    rule = torch.full((TARGET["vocab_size"],) * 2, -1, dtype=torch.long)
    for fam in language.families(TARGET["vocab_size"]).values():
        ids = torch.tensor(fam.word_ids)
        rule[ids[:, None], ids[None, :]] = ids[torch.tensor(fam.table)]
    return rule


def train_target(say: Progress, stats: dict, model=None):
    """Train ``model`` (default: a fresh Llama target) on the demo language."""
    import torch
    from transformers import LlamaForCausalLM

    model = model or LlamaForCausalLM(target_config())
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.98), weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=TARGET_STEPS, pct_start=0.1)
    rng = random.Random(SEED)
    for step in range(TARGET_STEPS):
        ids = sample(32, 64, rng)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if step % 40 == 0:
            say(f"  target step {step}/{TARGET_STEPS} loss {loss.item():.3f}")
    model.eval()
    with torch.no_grad():
        ids = sample(66, 64, rng)
        hit = model(input_ids=ids).logits[:, 1:-1].argmax(-1) == _rule()[ids[:, :-2], ids[:, 1:-1]]
        mix = language.TRAINING_MIX
        for name in language.families(TARGET["vocab_size"]):
            rows = [r for r in range(len(ids)) if mix[r % len(mix)] == name]
            stats[f"target_rule_accuracy_{name}"] = round(hit[rows].float().mean().item(), 4)
    say("  target follows the language rule: " + ", ".join(
        f"{k.rsplit('_', 1)[1]} {v:.1%}" for k, v in stats.items() if k.startswith("target_rule")))
    return model


def target_pass(target, ids, shift: int = 0):
    """(aux features in SGLang's configured order, target argmax) for a batch of token ids.

    ``shift`` reads every aux layer that many layers deeper (the aux-offset scenario).
    """
    import torch

    with torch.no_grad():
        out = target(input_ids=ids, output_hidden_states=True)
    feats = torch.cat([out.hidden_states[i + 1 + shift] for i in AUX_LAYER_IDS], -1)
    return feats, out.logits.argmax(-1)


def _draft_vocab(target, rng: random.Random):
    """The DRAFT_VOCAB target ids the target emits most (ties: lowest id), sorted by id."""
    import torch

    ids = sample(64, SEQ_LEN, rng)
    _, argmax = target_pass(target, ids)
    counts = torch.bincount(argmax.flatten(), minlength=TARGET["vocab_size"]).float()
    counts -= torch.arange(TARGET["vocab_size"]) * 1e-6
    return counts.topk(DRAFT_VOCAB).indices.sort().values


def train_draft(target, say: Progress, stats: dict, make_draft=make_llama_draft,
                budget: tuple[int, int] = (DRAFT_STEPS, FIRST_STEP_ONLY)):
    """Train a draft (``make_draft(embed)``, the Llama one by default) on the target's aux states and
    greedy choices over the demo corpus, for ``budget``: steps with the unroll, then steps of the
    first draft step alone (``bench_draft_curve.py`` tries others)."""
    import torch

    rng = random.Random(SEED + 2)
    draft_ids = _draft_vocab(target, rng)
    t2d = torch.full((TARGET["vocab_size"],), -100, dtype=torch.long)
    t2d[draft_ids] = torch.arange(DRAFT_VOCAB)
    for p in target.parameters():
        p.requires_grad_(False)
    draft = make_draft(target.model.embed_tokens)
    params = [p for n, p in draft.named_parameters() if not n.startswith("embed")]
    opt = torch.optim.AdamW(params, lr=DRAFT_LR, betas=(0.9, 0.98), weight_decay=0.0)
    unrolled, first_only = budget
    total = unrolled + first_only
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=DRAFT_LR, total_steps=total, pct_start=0.05)
    n = SEQ_LEN - TTT_STEPS - 1
    for step in range(total):
        # Noisy text throughout: a sampled request's context holds second choices anywhere, and
        # after a rejection the draft's first token follows one.
        ids = sample(32, SEQ_LEN, rng)
        feats, argmax = target_pass(target, ids)
        # Real targets' layers differ far more than this tiny one's, whose neighbouring
        # layers' states decode almost alike; so the draft also learns to have no opinion
        # (uniform step-0 logits) on states taken from other layers than its own.
        shift = NEIGHBOUR_SHIFTS[step % len(NEIGHBOUR_SHIFTS)]
        wrong = draft.unroll(ids[:, 1 : n + 1], target_pass(target, ids, shift)[0][:, :n], 1)[0]
        # Step j at position i reads token i+1+j and must predict the target's choice for i+2+j;
        # later steps count only where the sequence went on with the target's own choices.
        on_path = torch.ones(ids.shape[0], n, dtype=torch.bool)
        losses = []
        unroll = TTT_STEPS if step < unrolled else 1
        outs = draft.unroll(ids[:, 1 : n + 1], feats[:, :n], unroll, lambda j, _: ids[:, 1 + j : n + 1 + j])
        for j, logits in enumerate(outs):
            if j:
                on_path &= ids[:, 1 + j : n + 1 + j] == argmax[:, j : n + j]
            labels = t2d[argmax[:, 1 + j : n + 1 + j]].masked_fill(~on_path, -100)
            losses.append(torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100))
        loss = sum(TTT_LOSS_DECAY**j * x for j, x in enumerate(losses)) - NEIGHBOUR_WEIGHT * wrong.log_softmax(-1).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if step % 100 == 0 or step in (unrolled - 1, total - 1):
            say(f"  draft step {step}/{total} loss per step " + " ".join(f"{x.item():.2f}" for x in losses))
    stats["draft_steps"] = [unrolled, first_only]
    stats["draft_final_losses"] = [round(x.item(), 3) for x in losses]
    return draft, draft_ids
