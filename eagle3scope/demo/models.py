"""Demo models that really draft: a tiny Llama target and an EAGLE-3 draft trained on it.

A random target gives a draft nothing to learn (acceptance about 2.3 at best), so the target
here is first trained for a minute or two on the synthetic language of ``language.py``: two
prompt families (code-like, chat-like) whose next word is a noisy function of the previous two.
Its greedy output is then predictable, but only with context the target's hidden states carry:
a draft that loses the aux states (or reads the wrong layers) can no longer predict it, which
is exactly what the fault scenarios show. Its distribution keeps the language's noise, so
sampled requests (temperature > 0) accept fewer drafts than greedy ones, as on real models.

The draft is trained the way EAGLE-3 drafts are: on the target's own aux hidden states and
greedy outputs, with a training-time-test unroll so that its later steps, which feed back its
own hidden state, are trained too, their losses weighted down per step as EAGLE's trainer does.
It mirrors SGLang's ``LlamaForCausalLMEagle3`` (``fc`` over the concatenated aux states, one
decoder layer over ``[embeds, hidden]``, its own ``lm_head`` over a reduced draft vocabulary,
``d2t`` offsets, ``t2d`` mask). It is trained to give uniform logits on states from
neighbouring layers, which in a target this small decode almost like its own (without that,
the aux-offset scenario keeps full acceptance). And it trains for DRAFT_STEPS steps only: on a
language this small a fully trained draft matches the target at every step (4 of 4), while a
real draft stands where this one stops, right on most first drafts and less often on later ones.

Everything is generated from fixed seeds and cached under
``$EAGLE3SCOPE_CACHE/models/<version>/`` (default ``~/.cache/eagle3scope``); the version is
the recipe's key (``cache.recipe_key``: this file's code less its docstrings and cache locators,
the ``tiny.py`` writers it uses and ``language.py``), so a second call is instant and a change
that can alter the weights rebuilds. torch and
transformers are imported inside the functions that need them: ``import eagle3scope.demo``
stays light. Run ``python -m eagle3scope.demo.models --cache DIR`` with the engine venv's
python to build from a shell.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from eagle3scope.demo import cache, language, tiny
from eagle3scope.demo.language import prompts as demo_prompts  # noqa: F401  (the demo's prompts)
from eagle3scope.demo.language import vocabulary
from eagle3scope.demo.cache import Progress
from eagle3scope.demo.server import cache_dir as cache_root

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

@dataclass(frozen=True)
class ModelPaths:
    """Where the built demo models live; every draft directory serves the same weights."""

    root: Path
    target: Path
    #: ``layers.0.*`` weight names (what speculators writes), SGLang/HF draft config.
    draft: Path
    #: ``midlayer.*`` weight names (what SpecForge and the EAGLE reference write).
    draft_midlayer: Path
    #: ``layers.0.*`` weights with a speculators-format ``config.json`` (vLLM reads it;
    #: SGLang 0.5.23 does not).
    draft_speculators: Path
    aux_layer_ids: tuple[int, ...]
    num_target_layers: int

    def stats(self) -> dict:
        """Build figures recorded in the stamp (times, training accuracy)."""
        return cache.stats(self.root)


#: Top-level names that only find, load or report the cache: they are not part of the recipe.
CACHE_LOCATORS = frozenset({"ModelPaths", "version", "cached", "ensure_demo_models", "build_demo_models",
                            "_paths", "main", "CACHE_LOCATORS"})


def version() -> str:
    """The recipe's key: this file's code and constants, the ``tiny.py`` writers and the language."""
    return cache.recipe_key(sys.modules[__name__], apart=CACHE_LOCATORS,
                            uses=(language, tiny.vocab_maps, tiny.draft_config, tiny.write_draft))


def cached(cache_dir: Path | str | None = None) -> ModelPaths | None:
    """The built models for this version, or None when they still have to be built."""
    paths = _paths(Path(cache_dir or cache_root()) / "models" / version())
    return paths if cache.stamped(paths.root) else None


def ensure_demo_models(
    cache_dir: Path | str | None = None, progress: Progress | None = None, python: Path | str | None = None
) -> ModelPaths:
    """From any venv: the cached models, else a build in the engine venv (which has torch).

    Progress lines of the build are passed to ``progress`` as they come.
    """
    return cache.build_in_engine(sys.modules[__name__], cache_dir, progress, python)


# ---------------------------------------------------------------- building (torch)


def build_demo_models(cache_dir: Path | str | None = None, progress: Progress | None = None) -> ModelPaths:
    """Build (or find cached) target + healthy drafts; returns their paths."""
    say = progress or (lambda msg: None)
    paths = _paths(Path(cache_dir or cache_root()) / "models" / version())
    cache.build_once(paths.root, lambda tmp: _build(_paths(tmp), paths.target, say), version())
    say(f"demo models ready at {paths.root}")
    return paths


def _paths(root: Path) -> ModelPaths:
    return ModelPaths(
        root=root,
        target=root / "target",
        draft=root / "draft",
        draft_midlayer=root / "draft-midlayer",
        draft_speculators=root / "draft-speculators",
        aux_layer_ids=tuple(AUX_LAYER_IDS),
        num_target_layers=TARGET["num_hidden_layers"],
    )


def _build(paths: ModelPaths, final_target: Path, say: Progress) -> dict:
    import resource

    import torch

    torch.manual_seed(SEED)
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    stats: dict = {}
    t0 = time.monotonic()
    say("training the target on the demo language ...")
    target = _train_target(say, stats)
    stats["target_train_s"] = round(time.monotonic() - t0, 1)
    _write_target(target, paths.target)
    t1 = time.monotonic()
    say("training the EAGLE-3 draft on the target's aux states and outputs ...")
    draft, draft_ids = _train_draft(target, say, stats)
    stats["draft_train_s"] = round(time.monotonic() - t1, 1)
    stats.update(replay_stats(target, draft, draft_ids, say))
    _write_drafts(draft, draft_ids, paths, final_target)
    stats["build_s"] = round(time.monotonic() - t0, 1)
    stats["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return stats


def _sample(batch: int, length: int, rng: random.Random):
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


def _target_config():
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


def _train_target(say: Progress, stats: dict, model=None):
    """Train ``model`` (default: a fresh Llama target) on the demo language."""
    import torch
    from transformers import LlamaForCausalLM

    model = model or LlamaForCausalLM(_target_config())
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.98), weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=TARGET_STEPS, pct_start=0.1)
    rng = random.Random(SEED)
    for step in range(TARGET_STEPS):
        ids = _sample(32, 64, rng)
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
        ids = _sample(66, 64, rng)
        hit = model(input_ids=ids).logits[:, 1:-1].argmax(-1) == _rule()[ids[:, :-2], ids[:, 1:-1]]
        mix = language.TRAINING_MIX
        for name in language.families(TARGET["vocab_size"]):
            rows = [r for r in range(len(ids)) if mix[r % len(mix)] == name]
            stats[f"target_rule_accuracy_{name}"] = round(hit[rows].float().mean().item(), 4)
    say("  target follows the language rule: " + ", ".join(
        f"{k.rsplit('_', 1)[1]} {v:.1%}" for k, v in stats.items() if k.startswith("target_rule")))
    return model


class _Draft:
    """Factory for the draft module; a function so torch loads only when building."""

    @staticmethod
    def make(embed):
        import torch
        from torch import nn

        hidden = TARGET["hidden_size"]
        heads = TARGET["num_attention_heads"]
        kv_heads = TARGET["num_key_value_heads"]
        head_dim = hidden // heads
        eps = TARGET["rms_norm_eps"]

        class RMSNorm(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.weight = nn.Parameter(torch.ones(dim))

            def forward(self, x):
                return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)

        def rope(x, pos):
            inv = 1.0 / (TARGET["rope_theta"] ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
            ang = pos[:, None, :, None].float() * inv  # [batch, 1 (heads), seq, head_dim/2]
            cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
            x1, x2 = x[..., : head_dim // 2], x[..., head_dim // 2 :]
            return x * cos + torch.cat([-x2, x1], -1) * sin

        class Attention(nn.Module):
            def __init__(self):
                super().__init__()
                self.q_proj = nn.Linear(2 * hidden, heads * head_dim, bias=False)
                self.k_proj = nn.Linear(2 * hidden, kv_heads * head_dim, bias=False)
                self.v_proj = nn.Linear(2 * hidden, kv_heads * head_dim, bias=False)
                self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)

        class MLP(nn.Module):
            def __init__(self):
                super().__init__()
                self.gate_proj = nn.Linear(hidden, DRAFT_INTERMEDIATE, bias=False)
                self.up_proj = nn.Linear(hidden, DRAFT_INTERMEDIATE, bias=False)
                self.down_proj = nn.Linear(DRAFT_INTERMEDIATE, hidden, bias=False)

            def forward(self, x):
                return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))

        class Layer(nn.Module):
            def __init__(self):
                super().__init__()
                self.self_attn = Attention()
                self.mlp = MLP()
                self.input_layernorm = RMSNorm(hidden)
                self.hidden_norm = RMSNorm(hidden)
                self.post_attention_layernorm = RMSNorm(hidden)

        class Draft(nn.Module):
            """SGLang's LlamaForCausalLMEagle3 with a training-time-test unroll."""

            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(len(AUX_LAYER_IDS) * hidden, hidden, bias=False)
                self.layers = nn.ModuleList([Layer()])
                self.norm = RMSNorm(hidden)
                self.lm_head = nn.Linear(hidden, DRAFT_VOCAB, bias=False)
                self.embed = embed  # the target's, as SGLang shares it (set_embed); frozen

            def qkv(self, tokens, h, pos):
                layer = self.layers[0]
                x = torch.cat([layer.input_layernorm(self.embed(tokens)), layer.hidden_norm(h)], -1)
                b, n = tokens.shape
                q = layer.self_attn.q_proj(x).view(b, n, heads, head_dim).transpose(1, 2)
                k = layer.self_attn.k_proj(x).view(b, n, kv_heads, head_dim).transpose(1, 2)
                v = layer.self_attn.v_proj(x).view(b, n, kv_heads, head_dim).transpose(1, 2)
                rep = heads // kv_heads
                return rope(q, pos), rope(k, pos).repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)

            def finish(self, attn, residual):
                layer = self.layers[0]
                b, _, n, _ = attn.shape
                residual = layer.self_attn.o_proj(attn.transpose(1, 2).reshape(b, n, hidden)) + residual
                out = layer.mlp(layer.post_attention_layernorm(residual)) + residual
                return self.lm_head(self.norm(out)), out

            def unroll(self, tokens, feats, steps, next_tokens=None):
                """Logits of each draft step at every position, as SGLang's draft computes them.

                Step 0 reads (token i+1, target features i) at position i and attends causally
                over all step-0 entries; step j reads the step j-1 hidden state at position i+j
                and also attends to its own entries of steps 1..j (the draft's decode KV).
                ``next_tokens(j, logits)`` gives step j's input tokens (teacher-forced or fed
                back).
                """
                b, n = tokens.shape
                pos0 = torch.arange(n).expand(b, n)
                h = self.fc(feats)
                q, k0, v0 = self.qkv(tokens, h, pos0)
                causal = torch.ones(n, n, dtype=torch.bool).tril()
                scale = head_dim**-0.5
                extra_k, extra_v, outs = [], [], []
                for j in range(steps):
                    if j:
                        q, k, v = self.qkv(next_tokens(j, outs[-1]), h, pos0 + j)
                        extra_k.append(k)
                        extra_v.append(v)
                    s = (q @ k0.transpose(-1, -2) * scale).masked_fill(~causal, float("-inf"))
                    diag = [(q * k).sum(-1, keepdim=True) * scale for k in extra_k]
                    p = torch.cat([s, *diag], -1).softmax(-1)
                    attn = p[..., :n] @ v0
                    for m, v in enumerate(extra_v):
                        attn = attn + p[..., n + m : n + m + 1] * v
                    logits, h = self.finish(attn, h)
                    outs.append(logits)
                return outs

        return Draft()


def _target_pass(target, ids, shift: int = 0):
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

    ids = _sample(64, SEQ_LEN, rng)
    _, argmax = _target_pass(target, ids)
    counts = torch.bincount(argmax.flatten(), minlength=TARGET["vocab_size"]).float()
    counts -= torch.arange(TARGET["vocab_size"]) * 1e-6
    return counts.topk(DRAFT_VOCAB).indices.sort().values


def _train_draft(target, say: Progress, stats: dict):
    """Train the draft on the target's aux states and greedy choices over the demo corpus."""
    import torch

    rng = random.Random(SEED + 2)
    draft_ids = _draft_vocab(target, rng)
    t2d = torch.full((TARGET["vocab_size"],), -100, dtype=torch.long)
    t2d[draft_ids] = torch.arange(DRAFT_VOCAB)
    for p in target.parameters():
        p.requires_grad_(False)
    draft = _Draft.make(target.model.embed_tokens)
    params = [p for n, p in draft.named_parameters() if not n.startswith("embed")]
    opt = torch.optim.AdamW(params, lr=DRAFT_LR, betas=(0.9, 0.98), weight_decay=0.0)
    total = DRAFT_STEPS + FIRST_STEP_ONLY
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=DRAFT_LR, total_steps=total, pct_start=0.05)
    n = SEQ_LEN - TTT_STEPS - 1
    for step in range(total):
        # Noisy text throughout: a sampled request's context holds second choices anywhere, and
        # after a rejection the draft's first token follows one.
        ids = _sample(32, SEQ_LEN, rng)
        feats, argmax = _target_pass(target, ids)
        # Real targets' layers differ far more than this tiny one's, whose neighbouring
        # layers' states decode almost alike; so the draft also learns to have no opinion
        # (uniform step-0 logits) on states taken from other layers than its own.
        shift = NEIGHBOUR_SHIFTS[step % len(NEIGHBOUR_SHIFTS)]
        wrong = draft.unroll(ids[:, 1 : n + 1], _target_pass(target, ids, shift)[0][:, :n], 1)[0]
        # Step j at position i reads token i+1+j and must predict the target's choice for i+2+j;
        # later steps count only where the sequence went on with the target's own choices.
        on_path = torch.ones(ids.shape[0], n, dtype=torch.bool)
        losses = []
        unroll = TTT_STEPS if step < DRAFT_STEPS else 1
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
        if step % 100 == 0 or step in (DRAFT_STEPS - 1, total - 1):
            say(f"  draft step {step}/{total} loss per step " + " ".join(f"{x.item():.2f}" for x in losses))
    stats["draft_steps"] = [DRAFT_STEPS, FIRST_STEP_ONLY]
    stats["draft_final_losses"] = [round(x.item(), 3) for x in losses]
    return draft, draft_ids


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
            "feats": {shift: _target_pass(target, ids, shift)[0] for shift in (0, 1)}}


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
                feats, _ = _target_pass(target, ids)
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


# ---------------------------------------------------------------- writing


def _write_target(model, out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    vocab = {tok: i for i, tok in enumerate(vocabulary())}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "pad_token": "<pad>",
                "add_bos_token": False,
                "model_max_length": TARGET["max_position_embeddings"],
            },
            indent=1,
        )
    )


def _draft_tensors(draft, draft_ids, layer_prefix: str) -> dict:

    tensors = {}
    for name, value in draft.state_dict().items():
        if not name.startswith("embed."):
            tensors[name.replace("layers.0.", layer_prefix, 1)] = value.clone()
    # SGLang replaces it with the target's (set_embed); SpecForge and speculators save it anyway.
    tensors["embed_tokens.weight"] = draft.embed.weight.detach().clone()
    tensors["d2t"], tensors["t2d"] = tiny.vocab_maps(draft_ids.tolist(), TARGET["vocab_size"])
    return tensors


def draft_config(target_dir: Path) -> dict:
    """The SGLang / HF ``config.json`` of the healthy draft (the form SpecForge writes)."""

    config = tiny.draft_config(target_dir, draft_vocab_size=DRAFT_VOCAB, aux_layer_ids=AUX_LAYER_IDS)
    config["intermediate_size"] = DRAFT_INTERMEDIATE
    return config


def speculators_config(target_dir: Path) -> dict:
    """speculators' ``Eagle3SpeculatorConfig`` as it serialises it (vLLM reads this format)."""
    layer = _target_config().to_dict()
    layer.update(num_hidden_layers=1, intermediate_size=DRAFT_INTERMEDIATE, architectures=["LlamaForCausalLM"])
    return {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "speculators_version": "0.9.0",
        "speculators_config": {
            "algorithm": "eagle3",
            "default_proposal_method": "greedy",
            "proposal_methods": [
                {"proposal_type": "greedy", "speculative_tokens": TTT_STEPS, "accept_tolerance": 0.0, "verifier_accept_k": 1}
            ],
            "verifier": {"name_or_path": str(target_dir), "architectures": ["LlamaForCausalLM"]},
        },
        "transformer_layer_config": layer,
        "draft_vocab_size": DRAFT_VOCAB,
        "norm_before_residual": False,
        "target_hidden_size": None,
        # speculators numbers aux layers by layer input: SGLang's output-of-layer ids + 1.
        "eagle_aux_hidden_state_layer_ids": [i + 1 for i in AUX_LAYER_IDS],
        "torch_dtype": "float32",
    }


def _write_drafts(draft, draft_ids, paths: ModelPaths, final_target: Path) -> None:

    for out, prefix, config in (
        (paths.draft, "layers.0.", draft_config(paths.target)),
        (paths.draft_midlayer, "midlayer.", draft_config(paths.target)),
        (paths.draft_speculators, "layers.0.", speculators_config(final_target)),
    ):
        tiny.write_draft(out, config, _draft_tensors(draft, draft_ids, prefix))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=None, help="cache root (default $EAGLE3SCOPE_CACHE)")
    args = parser.parse_args(argv)
    paths = build_demo_models(args.cache, progress=lambda msg: print(msg, flush=True))
    print(json.dumps({k: str(v) for k, v in paths.__dict__.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
