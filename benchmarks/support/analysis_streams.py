"""Event streams for the analysis tests and benchmark: a healthy EAGLE-3 session and its breaks.

Frames are built the way the shim builds them (encoded and decoded through the wire codec, so the
schema's step check runs on every one). ``hello`` and ``healthy_load`` are the one body factory's
(``synthetic.py``) at this small model's sizes; a scenario overrides fields of them or of the steps.
"""

from __future__ import annotations

import copy
import random

from eagle3scope.wire import Frame, decode_frame, encode_frame
from benchmarks.support.synthetic import hello_body, load_body

H = 64
LAYERS = 8
TARGET_VOCAB = 1000
DRAFT_VOCAB = 500
K = 3  # speculative_num_steps, topk 1 chain


def hello(algorithm: str = "EAGLE3", num_steps: int = K) -> dict:
    return hello_body(algorithm=algorithm, num_steps=num_steps, model_path="t", draft_model_path="d", host="box",
                      observable={"steps": True})


def healthy_load() -> dict:
    return load_body(hidden=H, layers=LAYERS, draft_vocab=DRAFT_VOCAB, target_vocab=TARGET_VOCAB,
                     configured=[1, LAYERS // 2 - 1, LAYERS - 4], d2t_max=400, d2t_target_max=899,
                     consumed=("fc.weight", "layers.0.self_attn.qkv_proj.weight", "lm_head.weight", "d2t"))


def step(seq: int, t_ns: int, accepted: list[int], *, k: int = K, feature_width: int = 3 * H, fc: bool = True,
         capture: dict | None = None, draft_ids: list[list[int]] | None = None, rng: random.Random | None = None) -> dict:
    """One decode step: draft decode passes are H-wide (fc off), draft-extend passes carry features."""
    rng = rng or random.Random(seq)
    bs = len(accepted)
    ids = draft_ids if draft_ids is not None else [[rng.randrange(TARGET_VOCAB) for _ in range(k)] for _ in range(bs)]
    return {
        "seq": seq, "t_ns": t_ns, "mode": "decode", "bs": bs, "rids": [f"r{i}" for i in range(bs)],
        "draft_ids": ids, "accepted": accepted, "bonus": [1] * bs,
        "accepted_ids": [row[:a] + [7] for row, a in zip(ids, accepted)],
        "passes": [{"mode": "decode", "width": H, "fc": False, "n": k - 1},
                   {"mode": "draft_extend_v2", "width": feature_width, "fc": fc, "n": 1}],
        "capture": capture if capture is not None else {"on": True, "layers": [2, 4, 5]},
        "draft_ms": 1.0, "verify_ms": 2.0, "extend_ms": 0.5,
    }


class Stream:
    """Builds frames for one publisher with a consecutive frame counter."""

    def __init__(self, src: str = "r0", t0: int = 1_000_000_000) -> None:
        self.src, self.n, self.t = src, 0, t0

    def frame(self, kind: str, body: dict, dt_ns: int = 1_000_000) -> Frame:
        self.t += dt_ns
        frame = decode_frame(encode_frame(kind, body, src=self.src, n=self.n, t=self.t))
        self.n += 1
        return frame


def session(n_steps: int = 2000, *, bs: int = 2, accept_p: float = 0.7, algorithm: str = "EAGLE3",
            load: dict | None = None, step_kw: dict | None = None, seed: int = 0) -> list[Frame]:
    """hello, load, then ``n_steps`` decode steps whose per-position acceptance is ``accept_p``."""
    rng = random.Random(seed)
    s = Stream()
    frames = [s.frame("hello", hello(algorithm)), s.frame("load", copy.deepcopy(load or healthy_load()))]
    for seq in range(n_steps):
        accepted = []
        for _ in range(bs):
            a = 0
            while a < K and rng.random() < accept_p:
                a += 1
            accepted.append(a)
        frames.append(s.frame("step", step(seq, s.t, accepted, rng=rng, **(step_kw or {}))))
        if seq % 500 == 499:
            frames.append(s.frame("heartbeat", {"steps": seq + 1, "dropped": 0, "hook_failures": 0, "queued": 0}))
    return frames


def sliced_session(n_steps: int, *, long_rates=(0.8, 0.7, 0.6), seed: int = 0):
    """Steps of two requests: a short greedy one (ctx 100 + seq) and a long sampled one (ctx 3000 + seq)
    whose positions are accepted at ``long_rates``; the short one always at 0.8, 0.7, 0.6."""
    rng = random.Random(seed)
    s = Stream()
    frames = [s.frame("hello", hello()), s.frame("load", healthy_load())]
    for seq in range(n_steps):
        accepted = []
        for rates in ((0.8, 0.7, 0.6), long_rates):
            a = 0
            while a < K and rng.random() < rates[a]:
                a += 1
            accepted.append(a)
        body = step(seq, s.t, accepted, rng=rng)
        body["ctx_len"], body["greedy"] = [100 + seq, 3000 + seq], [True, False]
        frames.append(s.frame("step", body))
    return frames
