"""Synthetic wire bodies shaped like a real EAGLE-3 run (see eagle3scope/wire/schema.py), for tests.

``step_body`` models a top-k 1 chain: ``num_steps`` drafts proposed per request, ``accepted``
of them accepted (bonus excluded), the target's bonus token on top, one feature-carrying
draft-extend pass of width ``aux * hidden`` (``fc`` ran) and ``num_steps - 1`` draft-decode passes
of width ``hidden``. ``aux_off=True`` gives the silent break: capture off, H-wide draft-extend
input, ``fc`` skipped, acceptance near zero. Deterministic for a given ``seed``.
"""

from __future__ import annotations

import random
from typing import Iterator

from eagle3scope.wire import encode_frame

HIDDEN = 4096
TARGET_VOCAB = 128256
AUX_LAYERS = [2, 16, 29]  # captured: SGLang adds 1 to each configured id
AUX_CONFIGURED = [i - 1 for i in AUX_LAYERS]
T0_NS = 1_700_000_000_000_000_000


def hello_body(*, algorithm: str = "EAGLE3", num_steps: int = 3, model_path: str = "meta-llama/Llama-3.1-8B-Instruct",
               draft_model_path: str = "lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B", **overrides: object) -> dict:
    """A hello (top-k 1 chain of ``num_steps`` drafts); ``overrides`` replace whole top-level fields."""
    body = {
        "pid": 4242, "host": "synthetic", "tp_rank": 0, "publisher_index": 0,
        "sglang_version": "0.5.23", "shim_version": "0.1.0", "worker": "v2",
        "server_args": {
            "algorithm": algorithm, "num_steps": num_steps, "topk": 1, "num_draft_tokens": num_steps + 1,
            "dtype": "bfloat16", "cuda_graph": False, "model_path": model_path, "draft_model_path": draft_model_path,
            "attention_backend": "torch_native",
        },
        "observable": {"steps": True, "draft_ids": True, "accepted": True},
        "control": None,
    }
    body.update(overrides)
    return body


def load_body(*, hidden: int = HIDDEN, layers: int = 32, draft_vocab: int = 32000, target_vocab: int = TARGET_VOCAB,
              configured: list[int] = AUX_CONFIGURED, d2t_max: int = 96000, d2t_target_max: int = 128000,
              consumed: tuple[str, ...] = ("fc.weight", "midlayer.self_attn.q_proj.weight"),
              **overrides: object) -> dict:
    """A healthy load report of a Llama target (aux ids +1) and its EAGLE-3 draft of these sizes;
    ``overrides`` replace whole top-level fields."""
    body = {
        "draft_class": "LlamaForCausalLMEagle3", "target_class": "LlamaForCausalLM",
        "hidden_size": hidden, "target_hidden_size": hidden, "num_target_layers": layers,
        "draft_vocab_size": draft_vocab, "target_vocab_size": target_vocab,
        "fc": {"in": len(configured) * hidden, "out": hidden},
        "aux": {"configured": list(configured), "use_aux": True, "captured": [i + 1 for i in configured],
                "capture_on": True, "offset_rule": "+1"},
        "weights": {"consumed": list(consumed), "skipped": [], "unwritten": []},
        "d2t": {"present": True, "size": draft_vocab, "min": 0, "max": d2t_max, "target_min": 0,
                "target_max": d2t_target_max, "out_of_range": 0, "injective": True, "t2d_consistent": True,
                "looks_absolute": False},
        "lm_head": {"source": "checkpoint", "shape": [draft_vocab, hidden]},
        "embed_tokens": {"source": "target"},
    }
    body.update(overrides)
    return body


def step_body(seq: int, *, bs: int = 1, num_steps: int = 3, rng: random.Random | None = None,
              t_ns: int | None = None, aux_off: bool = False, mode: str = "decode") -> dict:
    rng = rng or random.Random(seq)
    draft_ids, accepted, bonus, accepted_ids = [], [], [], []
    for _ in range(bs):
        drafts = [rng.randrange(TARGET_VOCAB) for _ in range(num_steps)]
        acc = 0 if aux_off and rng.random() < 0.9 else rng.randint(0, num_steps)
        draft_ids.append(drafts)
        accepted.append(acc)
        bonus.append(1)
        accepted_ids.append(drafts[:acc] + [rng.randrange(TARGET_VOCAB)])
    width = HIDDEN if aux_off else len(AUX_LAYERS) * HIDDEN
    passes = [{"mode": "draft_extend", "width": width, "fc": not aux_off, "n": 1}]
    if num_steps > 1:
        passes.append({"mode": "decode", "width": HIDDEN, "fc": False, "n": num_steps - 1})
    return {
        "seq": seq, "t_ns": T0_NS + seq * 20_000_000 if t_ns is None else t_ns, "mode": mode, "bs": bs,
        "rids": [f"req-{seq % 97}-{i}" for i in range(bs)],
        "draft_ids": draft_ids, "accepted": accepted, "bonus": bonus, "accepted_ids": accepted_ids,
        "passes": passes,
        "capture": {"on": not aux_off, "layers": [] if aux_off else AUX_LAYERS},
        "draft_ms": round(rng.uniform(1.0, 3.0), 3), "verify_ms": round(rng.uniform(5.0, 9.0), 3), "extend_ms": None,
    }


def session_frames(n_steps: int, *, src: str = "dp0", bs: int = 1, seed: int = 0, step_ns: int = 20_000_000,
                   t0: int = T0_NS, heartbeat_every: int = 50, aux_off: bool = False) -> Iterator[bytes]:
    """Encoded frames of a whole session: hello, load, then steps with a heartbeat every so often."""
    rng = random.Random(seed)
    n = 0

    def frame(kind: str, body: dict, t: int) -> bytes:
        nonlocal n
        data = encode_frame(kind, body, src=src, n=n, t=t)
        n += 1
        return data

    yield frame("hello", hello_body(), t0)
    yield frame("load", load_body(), t0)
    for seq in range(n_steps):
        t = t0 + (seq + 1) * step_ns
        yield frame("step", step_body(seq, bs=bs, rng=rng, t_ns=t, aux_off=aux_off), t)
        if heartbeat_every and (seq + 1) % heartbeat_every == 0:
            yield frame("heartbeat", {"steps": seq + 1, "dropped": 0, "hook_failures": 0, "queued": 0}, t)
