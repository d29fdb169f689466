"""Cost of the shim: the hook path alone (µs per speculative round) and the real CPU engine's
tokens/s with and without the shim, measured in the same run.

Usage: .venv/bin/python benchmarks/bench_shim.py [--rounds 6] [--tokens 48] [--pairs 3] [--steps 20000]

1. Hook path: in the engine venv (torch), the real hook functions of the v2 adapter wrap trivial
   stand-ins for SGLang's step/draft/verify/draft-extend and three draft-model forwards (two draft
   decode passes, one draft-extend pass), with tensors shaped like SGLang's at batch 1 and 64, and
   a real Publisher. Reported: (hooked - unhooked) CPU µs per round on the calling (scheduler)
   thread, and the publisher thread's finalize cost per round (off the hot path).
2. Engine: the real server (tiny random target + random EAGLE-3 draft, float32, greedy) started
   alternately without and with ``EAGLE3SCOPE_ENDPOINT`` (off, on, off, on, ...; one server alive
   at a time: two live servers on a shared 2-core box slow whichever started first by up to 1.7x),
   the same sequential requests each phase. Reported: tokens/s per phase, the per-pair ratios,
   their geometric mean as the ratio, and whether both produced the same text.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time


def hook_path(steps: int, device: str = "cpu") -> dict:
    """Hook cost per round on stand-in SGLang objects; on "cuda", the hooked rounds run under
    ``torch.cuda.set_sync_debug_mode("error")``, so any host-device sync the hooks add raises."""
    import contextlib

    import torch

    from eagle3scope_shim import hooks
    from eagle3scope_shim.publisher import Publisher
    from eagle3scope_shim.state import STATE

    class Mode:
        def __init__(self, name, extend=False):
            self.name, self._extend = name, extend

        def is_extend(self):
            return self._extend

    class NS:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    @contextlib.contextmanager
    def sync_guard():
        if device != "cpu":
            torch.cuda.set_sync_debug_mode("error")
        try:
            yield
        finally:
            if device != "cpu":
                torch.cuda.set_sync_debug_mode("default")

    STATE.publisher = pub = Publisher(f"ipc:///tmp/eagle3scope-bench-{id(STATE)}", "bench", queue_size=1 << 16)
    pub.start()
    STATE.ring_capacity = 64 * 4  # as the worker-init hook sizes it: max running requests x draft tokens
    make = hooks.FACTORIES
    h_step, h_draft, h_verify, h_extend, h_fwd = (
        make["step"]("b.step"), make["draft"]("b.draft"), make["verify_v2"]("b.verify"),
        make["draft_extend"]("b.extend"), make["draft_forward"]("b.fwd"),
    )
    draft_model = NS(embed_tokens=NS(weight=torch.zeros(8, 128, device=device)))
    out = {}
    for bs in (1, 64):
        batch = NS(reqs=[NS(rid=f"req-{i:04d}") for i in range(bs)], forward_mode=Mode("decode"))
        fb_decode = NS(forward_mode=Mode("decode"), spec_info=NS(hidden_states=torch.zeros(bs, 128, device=device)))
        fb_extend = NS(forward_mode=Mode("draft_extend_v2"), spec_info=NS(hidden_states=torch.zeros(bs * 4, 384, device=device)))
        verify_input = NS(draft_token=torch.randint(0, 1024, (bs * 4,), device=device))
        result = NS(accept_lens=torch.randint(1, 5, (bs,), dtype=torch.int32, device=device),
                    next_token_ids=torch.randint(0, 1024, (bs * 4,), device=device))

        def fwd(self, ids, pos, fb):
            return None

        def draft(self, b):
            return verify_input

        def verify(self, b):
            return result

        def extend(self, b, r):
            return None

        def plain_round(self, b):
            draft(self, b)
            fwd(draft_model, None, None, fb_decode)
            fwd(draft_model, None, None, fb_decode)
            r = verify(self, b)
            fwd(draft_model, None, None, fb_extend)
            extend(self, b, r)
            return r

        def hooked_round(self, b):
            h_draft(draft, self, b)
            h_fwd(fwd, draft_model, None, None, fb_decode)
            h_fwd(fwd, draft_model, None, None, fb_decode)
            r = h_verify(verify, self, b)
            h_fwd(fwd, draft_model, None, None, fb_extend)
            h_extend(extend, self, b, r)
            return r

        def timed(fn) -> float:
            # CPU time of this (the "scheduler") thread: on a shared, loaded machine wall time
            # mostly measures waiting for a core; the publisher thread's work is not counted.
            # Rounds run in chunks of 16 and the publisher drains between chunks (unclocked),
            # as it does between a server's rounds: a back-to-back loop would outrun it, fill
            # the ring and time cheap drops instead of copies.
            best = float("inf")
            for _ in range(3):
                spent = 0
                for _ in range(steps // 16):
                    t0 = time.thread_time_ns()
                    for _ in range(16):
                        fn()
                    spent += time.thread_time_ns() - t0
                    while pub.queued:
                        time.sleep(0.0002)
                best = min(best, spent / (steps // 16 * 16) / 1000)
            return best

        plain = timed(lambda: plain_round(None, batch))
        with sync_guard():
            hooked = timed(lambda: h_step(hooked_round, None, batch))
        captured = []
        pub_submit = pub.submit
        pub.submit = lambda kind, payload, finalize=None: captured.append((payload, finalize)) or True
        h_step(hooked_round, None, batch)
        pub.submit = pub_submit
        payload, finalize = captured[0]
        # the body must carry what the (device) tensors held, read from the ring's host buffers
        assert finalize(payload)["accepted"] == [n - 1 for n in result.accept_lens.tolist()]
        t0 = time.thread_time_ns()
        for _ in range(1000):
            body = finalize(payload)
        out[f"bs{bs}"] = {
            "hook_path_us": round(hooked - plain, 2),
            "finalize_us_publisher_thread": round((time.thread_time_ns() - t0) / 1000 / 1000, 2),
            "step_body_bs": body["bs"],
        }
    out["publisher"] = {"steps": pub.steps, "dropped": pub.dropped}
    if STATE.ring is not None:  # device tensors only: CPU tensors are cloned
        out["publisher"].update(ring_slots=len(STATE.ring.slots), ring_dropped=STATE.ring.dropped)
    pub.close()
    return out


def _phase(root, label: str, rounds: int, tokens: int) -> tuple[float, list, int]:
    """One server alone: tokens/s over the sequential requests, their texts, step frames seen."""
    from eagle3scope.demo.server import SGLangServer
    from eagle3scope.live.subscriber import Subscriber
    from eagle3scope.wire.endpoints import fresh_ipc_endpoint

    endpoint = fresh_ipc_endpoint()
    env = {"EAGLE3SCOPE_ENDPOINT": endpoint} if label == "on" else {}
    texts, n = [], 0
    with Subscriber([endpoint]) as sub, SGLangServer(root / "target", root / "draft-random", env=env) as server:
        server.post("/generate", {"text": "warm up", "sampling_params": {"max_new_tokens": 8, "temperature": 0}})
        t0 = time.perf_counter()
        for i in range(rounds):
            body = {"text": f"bench prompt {i} kimo tuviro",
                    "sampling_params": {"max_new_tokens": tokens, "temperature": 0, "ignore_eos": True}}
            response = server.post("/generate", body)
            n += response["meta_info"]["completion_tokens"]
            texts.append(response["text"])
        rate = n / (time.perf_counter() - t0)
        frames = sum(1 for f in sub.poll(timeout_ms=500) if f.kind == "step")
    return rate, texts, frames


def engine(rounds: int, tokens: int, pairs: int) -> dict:
    """Phases off, on, off, on, ...: one server alive at a time; ratio = geometric mean of on/off
    over adjacent pairs, so slow drift in the shared machine's load cancels."""
    from eagle3scope.demo.server import cache_dir, engine_python
    from eagle3scope.demo.tiny import MODELS_DIRNAME

    root = cache_dir() / "models" / MODELS_DIRNAME
    subprocess.run([str(engine_python()), "-m", "eagle3scope.demo.tiny", str(root)], check=True, capture_output=True)
    rates, texts, frames = {"off": [], "on": []}, {"off": [], "on": []}, 0
    for _ in range(pairs):
        for label in ("off", "on"):
            rate, out, seen = _phase(root, label, rounds, tokens)
            rates[label].append(rate)
            texts[label].append(out)
            frames += seen
    ratios = [on / off for on, off in zip(rates["on"], rates["off"])]
    return {
        "tokens_per_s_off": [round(x, 1) for x in rates["off"]],
        "tokens_per_s_on": [round(x, 1) for x in rates["on"]],
        "pair_ratios": [round(r, 4) for r in ratios],
        "ratio_on_over_off": round(math.prod(ratios) ** (1 / len(ratios)), 4),
        "same_text": texts["on"] == texts["off"],
        "step_frames_received": frames,
        "requests_per_phase": rounds,
        "tokens_per_request": tokens,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="requests per phase")
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--pairs", type=int, default=3, help="off/on phase pairs")
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--hook-path-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cpu", help="with --hook-path-only: cpu, or cuda (sync debug mode 'error')")
    args = parser.parse_args()
    if args.hook_path_only:
        print(json.dumps(hook_path(args.steps, args.device)))
        return
    from eagle3scope.demo.server import engine_python

    done = subprocess.run([str(engine_python()), __file__, "--hook-path-only", "--steps", str(args.steps)],
                          check=True, capture_output=True, text=True)
    print(json.dumps({"hook_path": json.loads(done.stdout.strip().splitlines()[-1])}, indent=1))
    print(json.dumps({"engine": engine(args.rounds, args.tokens, args.pairs)}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
