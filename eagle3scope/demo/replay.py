"""How well a trained draft drafts, replayed in torch before any engine serves it: acceptance per
prompt family, greedy, greedy with the aux layers one deeper (the aux-offset scenario), and sampled
at temperature 0.8 as SGLang's sampling verify accepts.

The figures go into the build's stamp (:func:`eagle3scope.demo.cache.stats`), so this code is part
of the cache key; BENCHMARKS.md compares them with what SGLang reports serving the same weights.
"""

from __future__ import annotations

import random

from eagle3scope.demo import language
from eagle3scope.demo.cache import Progress
from eagle3scope.demo.recipe import SEED, TARGET, TTT_STEPS
from eagle3scope.demo.training import target_pass


def replay_stats(target, draft, draft_ids, say: Progress | None = None) -> dict:
    """The draft's acceptance replayed per prompt family: greedy, greedy with the aux layers one
    deeper (the aux-offset scenario), and sampled at temperature 0.8 (SGLang's verify)."""
    out = {}
    for family in language.families(TARGET["vocab_size"]):
        replay = _replay_inputs(target, family)
        out[f"replay_{family}"] = _replay_acceptance(draft, draft_ids, replay)
        out[f"replay_{family}_aux_offset"] = _replay_acceptance(draft, draft_ids, replay, shift=1)
        out[f"replay_{family}_t0.8"] = _replay_sampled(target, draft, draft_ids, family)
        if say:
            say(f"  replayed {family} (steps 3, topk 1): greedy {out[f'replay_{family}']}, "
                f"temperature 0.8 {out[f'replay_{family}_t0.8']}, "
                f"aux layers one deeper {out[f'replay_{family}_aux_offset']['accept_length']}")
    return out


def _replay_prompts(family: str, prompts: int = 8, prompt_len: int = 16):
    import torch

    fam = language.families(TARGET["vocab_size"])[family]
    rng = random.Random(SEED + 3)
    return torch.tensor([[fam.word_ids[w] for w in fam.walk(rng, prompt_len)] for _ in range(prompts)])


def _replay_inputs(target, family: str, new_tokens: int = 64) -> dict:
    """The target's greedy continuation of the family's replay prompts and its aux features, as
    trained (shift 0) and one layer too deep (shift 1, the aux-offset scenario)."""
    import torch

    ids = _replay_prompts(family)
    prompt_len = ids.shape[1]
    with torch.no_grad():
        for _ in range(new_tokens):
            ids = torch.cat([ids, target(input_ids=ids).logits[:, -1:].argmax(-1)], 1)
    return {"ids": ids, "prompt_len": prompt_len, "new_tokens": new_tokens,
            "feats": {shift: target_pass(target, ids, shift)[0] for shift in (0, 1)}}


def _rates(lengths: list[float], took: list[int], tried: list[int]) -> dict:
    return {
        "accept_length": round(sum(lengths) / len(lengths), 3),
        # each position given the one before was accepted, as `check` reports it
        "per_position": [round(a / t, 3) if t else None for a, t in zip(took, tried)],
    }


def _replay_acceptance(draft, draft_ids, replay: dict, shift: int = 0) -> dict:
    """Replay greedy decode at steps 3 / topk 1 (bonus token included): mean acceptance length and
    per-position rates. ``shift`` feeds the draft aux states from that many layers deeper."""
    import torch

    ids, prompt_len, new_tokens = replay["ids"], replay["prompt_len"], replay["new_tokens"]
    prompts, n = ids.shape[0], ids.shape[1] - 1
    with torch.no_grad():
        outs = draft.unroll(ids[:, 1:], replay["feats"][shift][:, :n], TTT_STEPS,
                            lambda j, logits: draft_ids[logits.argmax(-1)])
    preds = torch.stack([draft_ids[o.argmax(-1)] for o in outs], -1)  # [b, i, j] drafts for token i+2+j
    lengths, tried, took = [], [0] * TTT_STEPS, [0] * TTT_STEPS
    for b in range(prompts):
        i, made, rounds = prompt_len - 1, 1, 0
        while made < new_tokens:
            accepted = 0
            while accepted < TTT_STEPS and i + 2 + accepted <= n:
                tried[accepted] += 1
                if preds[b, i, accepted] != ids[b, i + 2 + accepted]:
                    break
                took[accepted] += 1
                accepted += 1
            made += accepted + 1
            rounds += 1
            i += accepted + 1
        lengths.append((made - 1) / rounds)
    return _rates(lengths, took, tried)


def _replay_sampled(target, draft, draft_ids, family: str, new_tokens: int = 64, temperature: float = 0.8) -> dict:
    """Decode the replay prompts as SGLang's sampling verify does (steps 3 / topk 1): the draft's
    chain is accepted token by token with the target's probability for it, the first rejected
    position resampled from the target's distribution without the draft token, a fully accepted
    chain followed by a sampled bonus. Fixed coins: the same figures on every build."""
    import torch

    gen = torch.Generator().manual_seed(SEED + 4)
    lengths, tried, took = [], [0] * TTT_STEPS, [0] * TTT_STEPS
    for prompt in _replay_prompts(family):
        ids = prompt[None]
        made = rounds = 0
        with torch.no_grad():
            first = (target(input_ids=ids).logits[0, -1] / temperature).softmax(-1)
            ids = torch.cat([ids, torch.multinomial(first, 1, generator=gen)[None]], 1)
            while made < new_tokens:
                n = ids.shape[1] - 1
                feats, _ = target_pass(target, ids)
                outs = draft.unroll(ids[:, 1:], feats[:, :n], TTT_STEPS, lambda j, logits: draft_ids[logits.argmax(-1)])
                chain = torch.stack([draft_ids[o[0, -1].argmax(-1)] for o in outs])
                probs = (target(input_ids=torch.cat([ids, chain[None]], 1)).logits[0, n:] / temperature).softmax(-1)
                committed = []
                for j, token in enumerate(chain.tolist()):
                    tried[j] += 1
                    if torch.rand(1, generator=gen).item() < probs[j, token].item():
                        took[j] += 1
                        committed.append(token)
                        continue
                    rest = probs[j].clone()
                    rest[token] = 0.0
                    committed.append(torch.multinomial(rest / rest.sum(), 1, generator=gen).item())
                    break
                else:
                    committed.append(torch.multinomial(probs[TTT_STEPS], 1, generator=gen).item())
                ids = torch.cat([ids, torch.tensor([committed])], 1)
                made += len(committed)
                rounds += 1
        lengths.append(made / rounds)
    return _rates(lengths, took, tried)
