"""Writes the recordings whose ``check --json`` the compatibility test pins (run once, with the code
the expected outputs were taken from; the .e3s files and .json outputs beside it are the test data).

Each recording exercises a different part of the schema: old hellos (``dp_rank`` only, no
``parallel``), trees and adaptive steps, constrained and greedy requests, finish reports, hook and
config events, heartbeats with per-seam costs, several publishers, unknown kinds and fields of a
newer shim, and frames a reader must drop (bad bodies)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

from eagle3scope.store import SessionWriter
from eagle3scope.wire import Frame, encode_frame

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))
from synthetic import hello_body, load_body, step_body, T0_NS  # noqa: E402


def write(path: Path, frames: list[tuple[str, str, dict]]) -> None:
    """``frames``: (kind, src, body); a body under the key "__raw__" is written as those bytes."""
    counters: dict[str, int] = {}
    with SessionWriter(path) as writer:
        for i, (kind, src, body) in enumerate(frames):
            n = counters.get(src, 0)
            counters[src] = n + 1
            t = T0_NS + i * 10_000_000
            raw = encode_frame(kind, body, src=src, n=n, t=t)
            writer.add(raw, Frame(kind, src, n, t, body))


def healthy(n_steps: int = 120, src: str = "dp0", bs: int = 2, seed: int = 1, **hello) -> list:
    rng = random.Random(seed)
    out = [("hello", src, hello_body(**hello)), ("load", src, load_body())]
    for seq in range(n_steps):
        out.append(("step", src, step_body(seq, bs=bs, rng=rng)))
        if seq % 40 == 39:
            out.append(("heartbeat", src, {"steps": seq + 1, "dropped": 0, "hook_failures": 0, "queued": 0,
                                           "shim_us": {"verify": 120.5, "draft": 80.0}, "step_us": 9000.0,
                                           "round_shim_us": 150.0, "publisher_us": 60.0,
                                           "ring": {"slots": 4, "capacity": 64, "allocations": 4,
                                                    "late_allocations": 0, "oversize": 0}}))
    return out


def variants() -> list:
    """Trees (accepted_path), adaptive budgets, discarded requests, ctx_len/greedy/constrained."""
    rng = random.Random(7)
    out = [("hello", "dp0", hello_body(num_steps=4, parallel={"tp_size": 2, "dp_size": 1, "pp_size": 1,
                                                                "attn_tp_size": 2, "attn_dp_size": 1, "ep_size": 1},
                                       publisher_rank={"tp_rank": 0, "dp_rank": 0, "attn_tp_rank": 0, "pp_rank": 0,
                                                       "reason": "entry rank"},
                                       seams={"verify": "attached", "draft": "attached", "commit": "missing"},
                                       observable={"steps": True, "draft_ids": True, "accepted": True,
                                                   "passes_draft_decode": False, "graph_draft_decode": True,
                                                   "device_timings": True},
                                       graphs={"captured": [{"mode": "decode", "bs": 4, "width": 4096, "fc": False}],
                                               "target_aux": {"on": True, "layers": [2, 16, 29]}})),
           ("load", "dp0", load_body())]
    for seq in range(80):
        body = step_body(seq, bs=3, num_steps=4, rng=rng)
        budget = 2 + seq % 3
        body["accepted"] = [min(a, budget) for a in body["accepted"]]
        body["accepted_ids"] = [ids[:a] + [5] for ids, a in zip(body["draft_ids"], body["accepted"])]
        body["num_steps"] = budget
        body["accepted_path"] = [list(range(a)) for a in body["accepted"]]
        body["ctx_len"] = [100 + 37 * seq + i * 900 for i in range(3)]
        body["greedy"] = [i % 2 == 0 for i in range(3)]
        if seq % 4 == 0:
            body["constrained"] = [True, False, False]
        if seq % 9 == 0:
            body["discarded"] = ["gone-%d" % seq]
        body["draft_device_ms"], body["verify_device_ms"] = 1.5, 4.25
        if seq % 10 == 3:
            body["passes"][0]["replayed"], body["passes"][0]["graph_bs"] = True, 4
        out.append(("step", "dp0", body))
        if seq == 20:
            out.append(("step", "dp0", step_body(1000, bs=1, mode="prefill", rng=rng)))
    return out


def events() -> list:
    """Hook failures, config changes, finish reports that agree and one that does not, aux turned off."""
    rng = random.Random(3)
    out = [("hello", "dp0", hello_body()), ("load", "dp0", load_body())]
    for seq in range(60):
        out.append(("step", "dp0", step_body(seq, bs=1, rng=rng, aux_off=seq >= 30)))
        if seq == 10:
            out.append(("hook", "dp0", {"seam": "verify", "status": "failed", "detail": "boom \x1b[31m"}))
        if seq == 30:
            out.append(("config", "dp0", {"layers": [], "captured": [], "applied": True, "reason": "control",
                                          "origin": "control", "request_id": "abc", "pause_ms": 12.5}))
    out.append(("finish", "dp0", {"seq": 59, "dropped": 0, "requests": [
        {"rid": "req-3-0", "verify_ct": 1, "correct_drafts": 0, "histogram": [1, 0, 0, 0]},
        {"rid": "nobody", "verify_ct": 5, "correct_drafts": 9}]}))
    out.append(("hook", "dp0", {"seam": "worker", "status": "unhooked", "detail": "another class"}))
    return out


def fleet() -> list:
    """Two publishers: an old shim (dp_rank only, no parallel) and a newer one with unknown fields."""
    old = healthy(50, src="dp0", seed=4)
    new = healthy(50, src="dp1", seed=5, dp_rank=1, future_field={"x": [1, 2]},
                  server_args={"algorithm": "EAGLE3", "num_steps": 3, "topk": 1, "num_draft_tokens": 4,
                               "overlap_schedule": True, "newer_arg": "yes"})
    for kind, src, body in new:
        if kind == "step":
            body["future_step_field"] = 3
    merged = [x for pair in zip(old, new) for x in pair]
    merged.append(("future_kind", "dp1", {"anything": [1, "two"]}))
    return merged


def damaged() -> list:
    """Frames a reader drops and counts: a step whose lists disagree with bs, a hello with a bad type."""
    out = healthy(40, seed=6)
    bad_step = step_body(999, bs=2)
    bad_step["accepted"] = [1]
    out.insert(10, ("step", "dp0", bad_step))
    out.insert(20, ("hello", "dp0", hello_body(tp_rank="zero")))
    out.insert(30, ("step", "dp0", dict(step_body(998, bs=1), accepted=[1 << 40])))
    return out


CORPUS = {"healthy": healthy, "variants": variants, "events": events, "fleet": fleet, "damaged": damaged}

if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    for name, frames in CORPUS.items():
        path = here / f"{name}.e3s"
        path.unlink(missing_ok=True)
        write(path, frames())
