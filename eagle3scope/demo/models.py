"""Demo models that really draft: a tiny Llama target and an EAGLE-3 draft trained on it.

A random target gives a draft nothing to learn (acceptance about 2.3 at best), so the target
here is first trained for a minute on a small synthetic language whose next word is a fixed
function of the previous two words. Its greedy output is then predictable, but only with
context the target's hidden states carry: a draft that loses the aux states (or reads the
wrong layers) can no longer predict it, which is exactly what the fault scenarios show.

The draft is trained the way EAGLE-3 drafts are: on the target's own aux hidden states and
greedy outputs, with a short training-time-test unroll so that its later steps, which feed
back its own hidden state, are trained too. It mirrors SGLang's ``LlamaForCausalLMEagle3``
(``fc`` over the concatenated aux states, one decoder layer over ``[embeds, hidden]``, its
own ``lm_head`` over a reduced draft vocabulary, ``d2t`` offsets, ``t2d`` mask). Two
departures make it depend on its aux layers as a real draft does: its token-embedding input
is silenced (it predicts from the aux states alone), and it is trained to give uniform
logits on states from neighbouring layers, which in a target this small decode almost like
its own (without that, the aux-offset scenario keeps full acceptance).

Everything is generated from fixed seeds and cached under
``$EAGLE3SCOPE_CACHE/models/<version>/`` (default ``~/.cache/eagle3scope``); the version
hashes this file, so a second call is instant and any change to it rebuilds. torch and
transformers are imported inside the functions that need them: ``import eagle3scope.demo``
stays light. Run ``python -m eagle3scope.demo.models --cache DIR`` with the engine venv's
python to build from a shell.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from eagle3scope.demo.server import cache_dir as cache_root
from eagle3scope.demo.server import engine_python

SEED = 20260
#: The synthetic language: NUM_WORDS words, next word = TABLE[previous, current] with
#: probability 1 - NOISE, otherwise a random word.
NUM_WORDS = 32
NOISE = 0.15
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
#: Aux layer shifts the draft is trained to distrust, and the weight of that loss term.
NEIGHBOUR_SHIFTS = (1, -1, 1, 2)
NEIGHBOUR_WEIGHT = 0.5
TARGET_STEPS = 220
DRAFT_STEPS = 300
SEQ_LEN = 96
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]

Progress = Callable[[str], None]


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
        """Build figures recorded in ``stamp.json`` (times, training accuracy)."""
        return json.loads((self.root / "stamp.json").read_text())["stats"]


def version() -> str:
    """Hash of the code that shapes the models: this file and the writers it reuses."""
    digest = hashlib.sha256()
    for source in (Path(__file__), Path(__file__).with_name("tiny.py")):
        digest.update(source.read_bytes())
    return digest.hexdigest()[:12]


def cached(cache_dir: Path | str | None = None) -> ModelPaths | None:
    """The built models for this version, or None when they still have to be built."""
    paths = _paths(Path(cache_dir or cache_root()) / "models" / version())
    return paths if (paths.root / "stamp.json").exists() else None


def ensure_demo_models(
    cache_dir: Path | str | None = None, progress: Progress | None = None, python: Path | str | None = None
) -> ModelPaths:
    """From any venv: the cached models, else a build in the engine venv (which has torch).

    Progress lines of the build are passed to ``progress`` as they come.
    """
    return build_in_engine(sys.modules[__name__], cache_dir, progress, python)


def build_in_engine(module, cache_dir=None, progress: Progress | None = None, python: Path | str | None = None):
    """``module.cached(cache)``, else ``python -m module --cache CACHE`` in the engine venv, then that."""
    found = module.cached(cache_dir)
    if found:
        return found
    cache = Path(cache_dir or cache_root())
    cmd = [str(python or engine_python()), "-m", module.__name__, "--cache", str(cache)]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        lines = []
        for line in proc.stdout:
            lines.append(line.rstrip())
            if progress and not line.startswith("{"):
                progress(line.rstrip())
    found = module.cached(cache)
    if proc.returncode or not found:
        raise RuntimeError(f"building the demo models failed ({proc.returncode}):\n" + "\n".join(lines[-30:]))
    return found


# ---------------------------------------------------------------- the language (pure Python)


def vocabulary() -> list[str]:
    """Token strings by id: specials, then two-syllable words with a SentencePiece marker."""
    syllables = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
    words = ["\u2581" + a + b for a in syllables for b in syllables]
    random.Random(SEED).shuffle(words)
    return SPECIALS + words[: TARGET["vocab_size"] - len(SPECIALS)]


def language() -> tuple[list[int], list[list[int]]]:
    """(token id of each language word, TABLE[a][b] = index of the word that follows a, b)."""
    rng = random.Random(SEED + 1)
    word_ids = sorted(rng.sample(range(len(SPECIALS), TARGET["vocab_size"] // 2), NUM_WORDS))
    table = [[rng.randrange(NUM_WORDS) for _ in range(NUM_WORDS)] for _ in range(NUM_WORDS)]
    return word_ids, table


def demo_prompts(n: int = 8, seed: int = 0, words: int = 16) -> list[str]:
    """Prompts in the demo language (noisy, like the training text) for serving the demo."""
    word_ids, table = language()
    vocab = vocabulary()
    rng = random.Random(seed)
    prompts = []
    for _ in range(n):
        seq = [rng.randrange(NUM_WORDS), rng.randrange(NUM_WORDS)]
        while len(seq) < words:
            nxt = table[seq[-2]][seq[-1]]
            seq.append(rng.randrange(NUM_WORDS) if rng.random() < NOISE else nxt)
        prompts.append(" ".join(vocab[word_ids[w]][1:] for w in seq))
    return prompts


# ---------------------------------------------------------------- building (torch)


def build_demo_models(cache_dir: Path | str | None = None, progress: Progress | None = None) -> ModelPaths:
    """Build (or find cached) target + healthy drafts; returns their paths."""
    say = progress or (lambda msg: None)
    root = Path(cache_dir or cache_root()) / "models" / version()
    paths = _paths(root)
    if (root / "stamp.json").exists():
        say(f"demo models cached at {root}")
        return paths
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.with_name(root.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second builder waits, then finds the stamp
        if not (root / "stamp.json").exists():
            tmp = root.with_name(root.name + f".tmp{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            stats = _build(_paths(tmp), paths.target, say)
            (tmp / "stamp.json").write_text(json.dumps({"version": version(), "stats": stats}, indent=1))
            shutil.rmtree(root, ignore_errors=True)
            tmp.rename(root)
    say(f"demo models ready at {root}")
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
    stats["replay_accept_length"] = round(_replay_acceptance(target, draft, draft_ids), 3)
    stats["replay_accept_length_aux_offset"] = round(_replay_acceptance(target, draft, draft_ids, shift=1), 3)
    say(
        f"replayed acceptance length (steps 3, topk 1): {stats['replay_accept_length']}, "
        f"aux layers one deeper: {stats['replay_accept_length_aux_offset']}"
    )
    _write_drafts(draft, draft_ids, paths, final_target)
    stats["build_s"] = round(time.monotonic() - t0, 1)
    stats["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return stats


def _sample(batch: int, length: int, gen, clean_from=None):
    """Language samples (word indices); positions from ``clean_from[b]`` on carry no noise."""
    import torch

    _, table = language()
    table_t = torch.tensor(table)
    x = torch.empty(batch, length, dtype=torch.long)
    x[:, :2] = torch.randint(NUM_WORDS, (batch, 2), generator=gen)
    for t in range(2, length):
        noisy = torch.rand(batch, generator=gen) < NOISE
        if clean_from is not None:
            noisy &= t < clean_from
        x[:, t] = torch.where(noisy, torch.randint(NUM_WORDS, (batch,), generator=gen), table_t[x[:, t - 2], x[:, t - 1]])
    return x


def _word_ids():
    import torch

    return torch.tensor(language()[0])


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
    gen = torch.Generator().manual_seed(SEED)
    word_ids = _word_ids()
    for step in range(TARGET_STEPS):
        ids = word_ids[_sample(32, 64, gen)]
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
        x = _sample(64, 64, gen)
        pred = model(input_ids=word_ids[x]).logits[:, 1:-1].argmax(-1)
        _, table = language()
        want = word_ids[torch.tensor(table)[x[:, :-2], x[:, 1:-1]]]
        stats["target_rule_accuracy"] = round((pred == want).float().mean().item(), 4)
    say(f"  target follows the language rule at {stats['target_rule_accuracy']:.1%}")
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


def _draft_vocab(target, gen):
    """The DRAFT_VOCAB target ids the target emits most (ties: lowest id), sorted by id."""
    import torch

    ids = _word_ids()[_sample(64, SEQ_LEN, gen)]
    _, argmax = _target_pass(target, ids)
    counts = torch.bincount(argmax.flatten(), minlength=TARGET["vocab_size"]).float()
    counts -= torch.arange(TARGET["vocab_size"]) * 1e-6
    return counts.topk(DRAFT_VOCAB).indices.sort().values


def _train_draft(target, say: Progress, stats: dict):
    import torch

    gen = torch.Generator().manual_seed(SEED + 2)
    draft_ids = _draft_vocab(target, gen)
    t2d = torch.full((TARGET["vocab_size"],), -100, dtype=torch.long)
    t2d[draft_ids] = torch.arange(DRAFT_VOCAB)
    for p in target.parameters():
        p.requires_grad_(False)
    draft = _Draft.make(target.model.embed_tokens)
    # Every target layer carries the current word, so a draft that reads its own token
    # embeddings predicts this language just as well from any layers' features. With the
    # embedding half silenced (input_layernorm weight 0, frozen; SGLang applies the same
    # norm) the draft predicts from the fused aux states alone. That alone costs aux-offset
    # little (replayed 3.97 -> 3.81): neighbouring layers still decode alike, see below.
    draft.layers[0].input_layernorm.weight.data.zero_()
    params = [p for n, p in draft.named_parameters() if not n.startswith("embed") and "input_layernorm" not in n]
    opt = torch.optim.AdamW(params, lr=2e-3, betas=(0.9, 0.98), weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=2e-3, total_steps=DRAFT_STEPS, pct_start=0.05)
    word_ids = _word_ids()
    n = SEQ_LEN - TTT_STEPS - 1
    for step in range(DRAFT_STEPS):
        # Noisy prompts continued by the rule, as served prompts are continued by the target.
        clean_from = torch.randint(8, 40, (32, 1), generator=gen).squeeze(1)
        ids = word_ids[_sample(32, SEQ_LEN, gen, clean_from=clean_from)]
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
        outs = draft.unroll(ids[:, 1 : n + 1], feats[:, :n], TTT_STEPS, lambda j, _: ids[:, 1 + j : n + 1 + j])
        for j, logits in enumerate(outs):
            if j:
                on_path &= ids[:, 1 + j : n + 1 + j] == argmax[:, j : n + j]
            labels = t2d[argmax[:, 1 + j : n + 1 + j]].masked_fill(~on_path, -100)
            losses.append(torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100))
        loss = sum(losses) - NEIGHBOUR_WEIGHT * wrong.log_softmax(-1).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if step % 100 == 0 or step == DRAFT_STEPS - 1:
            say(f"  draft step {step}/{DRAFT_STEPS} loss per step " + " ".join(f"{x.item():.2f}" for x in losses))
    stats["draft_final_losses"] = [round(x.item(), 3) for x in losses]
    return draft, draft_ids


def _replay_acceptance(target, draft, draft_ids, prompts: int = 8, new_tokens: int = 64, shift: int = 0) -> float:
    """Mean acceptance length (bonus included) replaying greedy decode, steps 3 / topk 1.

    ``shift`` feeds the draft aux states from that many layers deeper (aux-offset).
    """
    import torch

    word_ids = _word_ids()
    gen = torch.Generator().manual_seed(SEED + 3)
    prompt_len = 16
    ids = word_ids[_sample(prompts, prompt_len, gen)]
    with torch.no_grad():
        for _ in range(new_tokens):
            ids = torch.cat([ids, target(input_ids=ids).logits[:, -1:].argmax(-1)], 1)
        feats, _ = _target_pass(target, ids, shift)
        n = ids.shape[1] - 1
        outs = draft.unroll(ids[:, 1:], feats[:, :n], TTT_STEPS, lambda j, logits: draft_ids[logits.argmax(-1)])
    preds = torch.stack([draft_ids[o.argmax(-1)] for o in outs], -1)  # [b, i, j] drafts for token i+2+j
    lengths = []
    for b in range(prompts):
        i, made, rounds = prompt_len - 1, 1, 0
        while made < new_tokens:
            accepted = 0
            while accepted < TTT_STEPS and i + 2 + accepted <= n and preds[b, i, accepted] == ids[b, i + 2 + accepted]:
                accepted += 1
            made += accepted + 1
            rounds += 1
            i += accepted + 1
        lengths.append((made - 1) / rounds)
    return sum(lengths) / len(lengths)


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
    from eagle3scope.demo.tiny import vocab_maps

    tensors = {}
    for name, value in draft.state_dict().items():
        if not name.startswith("embed."):
            tensors[name.replace("layers.0.", layer_prefix, 1)] = value.clone()
    # SGLang replaces it with the target's (set_embed); SpecForge and speculators save it anyway.
    tensors["embed_tokens.weight"] = draft.embed.weight.detach().clone()
    tensors["d2t"], tensors["t2d"] = vocab_maps(draft_ids.tolist(), TARGET["vocab_size"])
    return tensors


def draft_config(target_dir: Path) -> dict:
    """The SGLang / HF ``config.json`` of the healthy draft (the form SpecForge writes)."""
    from eagle3scope.demo.tiny import draft_config as tiny_draft_config

    config = tiny_draft_config(target_dir, draft_vocab_size=DRAFT_VOCAB, aux_layer_ids=AUX_LAYER_IDS)
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
    from eagle3scope.demo.tiny import write_draft

    for out, prefix, config in (
        (paths.draft, "layers.0.", draft_config(paths.target)),
        (paths.draft_midlayer, "midlayer.", draft_config(paths.target)),
        (paths.draft_speculators, "layers.0.", speculators_config(final_target)),
    ):
        write_draft(out, config, _draft_tensors(draft, draft_ids, prefix))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=None, help="cache root (default $EAGLE3SCOPE_CACHE)")
    args = parser.parse_args(argv)
    paths = build_demo_models(args.cache, progress=lambda msg: print(msg, flush=True))
    print(json.dumps({k: str(v) for k, v in paths.__dict__.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
