"""Start time and step rate of TP-2 and DP-2 servers on the CPU engine, with and without the shim.

Usage: .venv/bin/python benchmarks/engine/bench_parallel.py [--requests 8] [--tokens 64] [--rounds 3] [--tiny]

Per topology two servers, shim off and on, started one after the other (start time: launch to
/health_generate answering; it includes the other load on the box: say so when you quote it), then
serving in alternate blocks: the demo's healthy draft (``--tiny``: the tiny random pair), greedy,
``--requests`` concurrent requests of ``--tokens`` new tokens each after one warm-up request.
Reported: verify steps per second (SGLang's own ``spec_verify_ct`` summed over a block's requests,
divided by its wall time; DP ranks serve in parallel), median and all blocks, tokens per second;
with the shim on, the decode steps its publishers sent, all seen from one endpoint; the box's
1/5/15-minute load averages before the servers start and after the last block (``load_before``,
``load_after``: on a shared machine they say what else competed for the cores).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def _block(server, prompts, tokens: int) -> tuple[float, int, int]:
    """One batch of concurrent requests: (wall s, verify steps, completion tokens)."""
    t0 = time.monotonic()
    with ThreadPoolExecutor(len(prompts)) as pool:
        out = list(pool.map(lambda p: server.generate(p, max_new_tokens=tokens)[0], prompts))
    wall = time.monotonic() - t0
    return (wall, sum(r["meta_info"]["spec_verify_ct"] for r in out), sum(r["meta_info"]["completion_tokens"] for r in out))


def run(target: Path, draft: Path, tp: int, dp: int, requests: int, tokens: int, rounds: int) -> list[dict]:
    """Both servers of a topology (shim off, on), started one after the other, then serving in
    alternate blocks: the box's other load hits both alike. Median over ``rounds`` blocks each."""
    from contextlib import ExitStack

    from eagle3scope.demo.models import demo_prompts
    from eagle3scope.demo.server import SGLangServer, parallel_launch
    from eagle3scope.live.subscriber import Subscriber
    from eagle3scope.wire.endpoints import fresh_ipc_endpoint

    args, env = parallel_launch(tp, dp)
    prompts = demo_prompts(requests, seed=3)
    endpoint = fresh_ipc_endpoint()
    load_before = [round(x, 1) for x in os.getloadavg()]
    with ExitStack() as stack:
        sub = stack.enter_context(Subscriber([endpoint]))
        servers = {False: stack.enter_context(SGLangServer(target, draft, extra_args=args, env=env)),
                   True: stack.enter_context(SGLangServer(target, draft, extra_args=args,
                                                          env={**env, "EAGLE3SCOPE_ENDPOINT": endpoint}))}
        for server in servers.values():
            server.generate(prompts[0], max_new_tokens=8)  # warm-up
        blocks = {False: [], True: []}
        for _ in range(rounds):
            for shim, server in servers.items():
                blocks[shim].append(_block(server, prompts, tokens))
        published, deadline = {}, time.monotonic() + 3.0
        while time.monotonic() < deadline:
            for frame in sub.poll(100):
                if frame.kind == "step" and frame.body.get("mode") == "decode":
                    published[frame.src] = published.get(frame.src, 0) + 1
        load_after = [round(x, 1) for x in os.getloadavg()]
    out = []
    for shim, server in servers.items():
        rates = sorted(v / w for w, v, _ in blocks[shim])
        tok = sorted(c / w for w, _, c in blocks[shim])
        out.append({"tp": tp, "dp": dp, "shim": shim, "start_s": round(server.startup_s, 1),
                    "verify_steps_per_s_median": round(rates[len(rates) // 2], 1),
                    "verify_steps_per_s_all": [round(r, 1) for r in rates],
                    "tokens_per_s_median": round(tok[len(tok) // 2], 1),
                    "accept_length": round(sum(c for *_, c in blocks[shim]) / sum(v for _, v, _ in blocks[shim]), 2),
                    "published_decode_steps": published if shim else None,
                    "load_before": load_before, "load_after": load_after})
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tiny", action="store_true", help="the tiny random pair instead of the trained demo")
    opts = parser.parse_args()
    from eagle3scope.demo import families
    from eagle3scope.demo.server import cache_dir

    if opts.tiny:
        root = cache_dir() / "models" / "tiny-random-v2"
        target, draft = root / "target", root / "draft-random"
    else:
        models = families.ensure_models("llama")
        target, draft = models.target, models.draft
    for tp, dp in ((2, 1), (1, 2)):
        for row in run(target, draft, tp, dp, opts.requests, opts.tokens, opts.rounds):
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
