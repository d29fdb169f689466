"""Rounds of a chain draft on a known machine (per-phase times linear in the batch), for the advisor's
tests and its cost benchmark: the truth the advisor's fit must find."""

from __future__ import annotations

import random

from benchmarks.support.synthetic import hello_body, load_body
from eagle3scope.wire import encode_frame

# A known machine: draft 0.8 ms + 0.05/request per step, verify 3 ms + 0.02/token, extend 1 ms + 0.01/token.
DRAFT, VERIFY, EXTEND = (0.8, 0.05), (3.0, 0.02), (1.0, 0.01)


def chain_frames(rounds: int, *, depth: int = 5, rates=(0.9, 0.7, 0.5, 0.35, 0.2), seed: int = 0,
                 noise: float = 0.02, topk: int = 1, src: str = "dp0", server: dict | None = None,
                 observable: dict | None = None, device: bool = False, launches: bool = False,
                 disturb=None) -> list[bytes]:
    """Frames of a chain draft at ``depth`` steps: acceptance by per-position conditional rates,
    times from the known machine above (with relative noise), batch sizes 1..8. ``server`` and
    ``observable`` add to the hello's; ``device``: the machine's times go in the device fields;
    ``launches``: the host fields then hold launch times that follow no model; ``disturb(rng, seq,
    bs)``: a factor on each phase's time (a round that does not follow the model)."""
    rng, launch = random.Random(seed), random.Random(seed + 1)
    args = dict(hello_body()["server_args"], num_steps=depth, topk=topk, num_draft_tokens=depth + 1, **(server or {}))
    seen = dict(hello_body()["observable"], **(observable or {}))
    frames = [encode_frame("hello", hello_body(server_args=args, observable=seen), src=src, n=0, t=1),
              encode_frame("load", load_body(), src=src, n=1, t=1)]
    for seq in range(rounds):
        bs = rng.randint(1, 8)
        accepted = []
        for _ in range(bs):
            a = 0
            while a < depth and rng.random() < rates[a]:
                a += 1
            accepted.append(a)
        tokens = bs * (depth + 1)
        jitter = lambda v: v * (1 + rng.uniform(-noise, noise))  # noqa: E731
        body = {
            "seq": seq, "t_ns": 10 + seq, "mode": "decode", "bs": bs, "rids": [f"r{i}" for i in range(bs)],
            "draft_ids": [[7] * depth for _ in range(bs)], "accepted": accepted, "bonus": [1] * bs,
            "accepted_ids": [[7] * (a + 1) for a in accepted], "passes": [], "capture": None,
        }
        factor = disturb(rng, seq, bs) if disturb is not None else 1.0
        times = (jitter(depth * (DRAFT[0] + DRAFT[1] * bs)) * factor, jitter(VERIFY[0] + VERIFY[1] * tokens) * factor,
                 jitter(EXTEND[0] + EXTEND[1] * tokens) * factor)
        if device:
            body.update(zip(("draft_device_ms", "verify_device_ms", "extend_device_ms"), times))
        if launches:  # a launch per phase: a few µs, whatever the batch
            times = tuple(launch.uniform(0.01, 0.05) for _ in times)
        body.update(zip(("draft_ms", "verify_ms", "extend_ms"), times))
        frames.append(encode_frame("step", body, src=src, n=seq + 2, t=10 + seq))
    return frames
