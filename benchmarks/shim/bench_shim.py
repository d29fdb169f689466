"""Cost of the shim: the hook path alone (µs per speculative round) and the real CPU engine's
CPU time and tokens/s per generated token with and without the shim, measured in the same run.

Usage: .venv/bin/python benchmarks/shim/bench_shim.py [--rounds 16] [--tokens 48] [--pairs 10] [--sessions 2]
       [--design interleave|toggle|two-servers] [--interleave-rounds 1] [--draft random|trained] [--batch 1]
       [--steps 20000] [--sample-hz 100]
       [--hook-path-only [--device cuda]]

1. Hook path: in the engine venv (torch), the real hook functions of the v2 adapter, called through
   the one-frame wrapper SGLang's HookRegistry installs, with the capture walk a worker makes, wrap trivial
   stand-ins for SGLang's step/draft/verify/draft-extend, the draft-model forwards (two draft
   decode passes inside draft, one draft-extend pass inside draft-extend) and the commit seam the
   scheduler calls after the step (where the step is published), with tensors shaped like
   SGLang's at batch 1 and 64, and a real Publisher. Reported: (hooked - unhooked) CPU µs per round
   on the calling (scheduler) thread for the three rounds a server runs: eager on a graph-free
   server (``hook_path_us``: the CPU engine's round, whose first step took the counting forward hook
   and the draft, draft-extend and commit hooks out, two hook calls: step, verify), replayed from graphs (``hook_path_graphs_us``: no
   forward runs, the callers' width reads give the passes) and eager with the forward hook counting
   (``hook_path_counted_forwards_us``: a graphed server's batch that runs eagerly, eight calls);
   the shim's own account of the graph-free rounds (``around``'s per-seam cells, what heartbeats carry
   as ``shim_us``), the same account with cold caches (each stand-in sweeps 16 MiB first, as
   a forward does, and the rounds run back to back, as a busy scheduler's do: the figure that
   predicts the engine's), the publisher thread's finalize cost per
   round (off the hot path), the cost of one read of each candidate clock and of the self-timing
   per hook.
2. Engine: the real server (tiny random target + random EAGLE-3 draft, or the demo's trained pair,
   float32, greedy), in blocks of requests with and without the shim's hooks, never at the same
   time (see :func:`engine`): by default ONE server whose hooks are switched off and on round by
   round (``--design interleave``, ``shim_toggle.Interleave``: the host's speed drifts over seconds,
   which alternate rounds cancel and blocks do not; each half of a block starts its turns with the
   other arm, so the rounds of the request that follows the bench's pause fall to both alike), or
   between blocks (``toggle``), else two
   servers, one without and one with ``EAGLE3SCOPE_ENDPOINT``.
   Reported: tokens per CPU-second of the server processes (thread run times from /proc, the
   shim's own threads left out of the off arm; interleaved, the on arm pays the publisher's CPU outside
   its drains, which goes by the second, for its share of the rounds, ``cpu_ratio_publisher_fixed_in_full``
   giving the ratio without that correction) with ÷ without the shim (``cpu_ratio_on_over_off``),
   the same for wall time, each with a 95 % confidence interval over the pairs, CPU ms per token of
   each scheduler thread role (main, shim publisher, shim zmq, sglang zmq, other), and whether both
   produced the same text. And the attribution per decode round: each seam's self time from the
   heartbeats' ``shim_us``, the round time (``step_us``), the publisher thread's busy time
   (``publisher_us``) and CPU, and the main thread's CPU per round without and with the shim, per
   pair: its difference with a 95 % CI (``main_thread_delta_us_per_round``), against which the
   hook-path figures are held (``agreement``). An outside sampler (py-spy, when installed;
   ``--sample-hz``, benchmarks/support/sampled.py) counts the shim's share of the on blocks' main-thread
   samples, which also sees what the self-report cannot: SGLang's ``HookRegistry`` wrapper and the
   calls into each hook (``sampled_shim_us_per_round``). ``--draft trained`` serves the demo's
   trained draft (several tokens a round), ``--batch 8`` sends each block's requests eight at a time.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the checkout: benchmarks.support


def hook_path(steps: int, device: str = "cpu") -> dict:
    """Hook cost per round on stand-in SGLang objects; on "cuda", the hooked rounds run under
    ``torch.cuda.set_sync_debug_mode("error")``, so any host-device sync the hooks add raises."""
    import contextlib

    import torch

    from eagle3scope_shim import detach_plan, hooks, seams
    from eagle3scope_shim.patching import _wrap
    from eagle3scope_shim.publisher import Publisher
    from eagle3scope.wire.endpoints import fresh_ipc_endpoint
    from eagle3scope_shim.shim_state import Shim

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

    # woken by each chunk of 16 rounds (timed below), as a server's rounds wake it by its flush timer:
    # the default 64 would leave every chunk waiting out the 0.5 s timer
    shim = Shim()
    shim.publisher = pub = Publisher(fresh_ipc_endpoint("bench"), "bench", queue_size=1 << 16, wake_batch=16)
    pub.start()
    shim.snapshots.start(device, 64 * 4, wake=pub.wake)  # as the scheduler's start makes it: request pool x draft tokens
    shim.plan.stepped = True  # the bench chooses which hooks run, not the first step
    make = hooks.FACTORIES

    def round_hooks():
        """The v2 adapter's hooks (by its seam names: the draft and draft-extend callers read the width
        they hand over): step, draft, verify, draft-extend, draft forward, commit."""
        return (make["step"](shim, "v2.step"), make["draft"](shim, "v2.draft"), make["verify_v2"](shim, "v2.verify"),
                make["draft_extend"](shim, "v2.draft_extend"), make["draft_forward"](shim, "llama_eagle3.forward"),
                make["commit"](shim, detach_plan.COMMIT_SEAM))

    h_step, h_draft, h_verify, h_extend, h_fwd, h_commit = round_hooks()
    # the same hooks timing themselves in CPU time (thread_time_ns) into their own cells: the cold
    # account comparable with the engine's /proc CPU figures (wall time on a loaded box is mostly waiting)
    wall_cells, wall_clock = shim.self_ns, time.perf_counter_ns
    shim.self_ns, time.perf_counter_ns = {}, time.thread_time_ns
    try:
        cpu_cells, cpu_hooks = shim.self_ns, round_hooks()
    finally:
        shim.self_ns, time.perf_counter_ns = wall_cells, wall_clock
    shim.seams.status[detach_plan.COMMIT_SEAM] = "attached"  # steps wait for the commit, as in the engine
    # SGLang's capture flag, which the engine has imported by the first round (seams.CAPTURE_FLAG):
    # without it the forward hook would look it up on every call, which no server does
    import types

    flag_module, flag_name = seams.CAPTURE_FLAG[0]
    flag = sys.modules.setdefault(flag_module, types.ModuleType(flag_module))
    setattr(flag, flag_name, lambda: False)
    processor = NS()
    shim.load.draft_embed_width = 128
    worker = NS(speculative_num_steps=3)
    draft_model = NS(embed_tokens=NS(weight=torch.zeros(8, 128, device=device)))
    # as the worker-init hook records it: capture_now() walks the target's capture attributes per step
    target = NS(capture_aux_hidden_states=True, model=NS(layers_to_capture=[2, 4, 7]))
    shim.load.workers.append(("v2", None, target, draft_model))
    out = {"clock_read_ns": _clock_costs(), "self_timing_ns_per_hook": _self_timing_cost()}
    # cold caches: each stand-in call first sweeps 16 MiB, as SGLang's forwards sweep weights and
    # activations between two hooks; only the hooks' own account is read (the sweep dwarfs them)
    scratch, cold = torch.zeros(4 << 20), False
    torch.set_num_threads(1)  # as the CPU engine runs (OMP_NUM_THREADS=1): no OpenMP workers spinning
    for bs in (1, 64):
        # SGLang's batch.spec_info: the draft input as a round begins, the verify input the draft made once
        # forward_batch_generation has it (eagle_worker_v2.py 0.5.23)
        draft_input = NS(hidden_states=torch.zeros(bs, 128, device=device), is_verify_input=lambda: False)
        batch = NS(reqs=[NS(rid=f"req-{i:04d}", spec_verify_ct=0) for i in range(bs)], forward_mode=Mode("decode"),
                   spec_info=draft_input,
                   seq_lens=torch.zeros(bs, dtype=torch.int64, device=device))
        fb_decode = NS(forward_mode=Mode("decode"), batch_size=bs,
                       spec_info=NS(hidden_states=torch.zeros(bs, 128, device=device)))
        fb_extend = NS(forward_mode=Mode("draft_extend_v2"), batch_size=bs,
                       spec_info=NS(hidden_states=torch.zeros(bs * 4, 384, device=device)))
        verify_input = NS(draft_token=torch.randint(0, 1024, (bs * 4,), device=device), is_verify_input=lambda: True)
        result = NS(accept_lens=torch.randint(1, 5, (bs,), dtype=torch.int32, device=device),
                    next_token_ids=torch.randint(0, 1024, (bs * 4,), device=device),
                    logits_output=NS(hidden_states=torch.zeros(bs * 4, 384, device=device)))
        forward = None  # the draft model's forward as the worker calls it: plain, hooked, or replayed (None)

        def fwd(self, ids, pos, fb):
            cold and scratch.add_(1)

        def draft(self, b):
            cold and scratch.add_(1)
            if forward is not None:  # SGLang runs the draft decode forwards inside draft
                forward(draft_model, None, None, fb_decode)
                forward(draft_model, None, None, fb_decode)
            return verify_input

        def verify(self, b):
            cold and scratch.add_(1)
            return result

        def extend(self, b, r):
            cold and scratch.add_(1)
            if forward is not None:
                forward(draft_model, None, None, fb_extend)

        def plain_round(self, b):
            b.spec_info = draft(self, b)
            r = verify(self, b)
            extend(self, b, r)
            return r

        def resolve(self, r, b):  # the scheduler settles the round after the worker's call
            cold and scratch.add_(1)
            for req in b.reqs:
                req.spec_verify_ct += 1
            b.spec_info = draft_input  # the next round's draft input

        # called through the same one-frame wrapper SGLang's HookRegistry (or the own patcher) installs
        w_draft, w_fwd, w_verify, w_extend = (_wrap(draft, h_draft), _wrap(fwd, h_fwd), _wrap(verify, h_verify),
                                              _wrap(extend, h_extend))

        def round_(self, b):
            b.spec_info = calls["draft"](self, b)
            r = w_verify(self, b)
            calls["extend"](self, b, r)
            return r

        w_step, w_commit = _wrap(round_, h_step), _wrap(resolve, h_commit)
        c_step, c_draft, c_verify, c_extend, _, c_commit = cpu_hooks
        c_draft, c_verify, c_extend = _wrap(draft, c_draft), _wrap(verify, c_verify), _wrap(extend, c_extend)
        # the draft, draft extend and commit as the round calls them: hooked, or (graph-free:
        # detach_plan._detach_counting_forwards, _detach_commit) unhooked, step and verify doing their work
        calls = {"draft": w_draft, "extend": w_extend, "cpu_draft": c_draft, "cpu_extend": c_extend}

        def cpu_round(self, b):
            b.spec_info = calls["cpu_draft"](self, b)
            r = c_verify(self, b)
            calls["cpu_extend"](self, b, r)
            return r

        c_step, c_commit = _wrap(cpu_round, c_step), _wrap(resolve, c_commit)
        calls.update(commit=w_commit, cpu_commit=c_commit)

        def plain_tick():
            resolve(processor, plain_round(worker, batch), batch)

        def hooked_tick():  # what a real round fires: step (draft, forwards, verify, extend), then commit
            calls["commit"](processor, w_step(worker, batch), batch)

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

        # graphs: the draft model's forward is replayed, so none of it runs; the callers' eager reads
        # publish the passes (as replayed). Eager with the counting forward hook: a graphed server's
        # batch that runs eagerly. Then eager on a graph-free server, the CPU engine's round, which
        # the rest of the figures are about: the first step took the forward, draft and extend hooks
        # out, step and verify add the passes (detach_plan._detach_counting_forwards), and with no overlap loop
        # the commit hook (detach_plan._detach_commit): two hook calls a round.
        def graph_free(yes: bool) -> None:
            nonlocal forward
            forward = fwd if yes else None
            shim.plan.forwards_at_callers = shim.plan.draft_at_verify = shim.plan.extend_at_verify = yes
            shim.plan.published_at_step = yes  # a CPU server runs no overlap loop: the commit hook is out too
            calls.update(draft=draft if yes else w_draft, extend=extend if yes else w_extend,
                         cpu_draft=draft if yes else c_draft, cpu_extend=extend if yes else c_extend,
                         commit=resolve if yes else w_commit, cpu_commit=resolve if yes else c_commit)

        graph_free(False)
        plain_graphs = timed(plain_tick)
        with sync_guard():
            hooked_graphs = timed(hooked_tick)
        forward = w_fwd
        with sync_guard():
            hooked_counted = timed(hooked_tick)
        graph_free(True)
        plain = timed(plain_tick)
        before = sum(cell[0] for cell in shim.self_ns.values())
        with sync_guard():
            hooked = timed(hooked_tick)
        # the shim's own account of the same rounds (heartbeat shim_us), 3 x steps of them
        self_us = (sum(cell[0] for cell in shim.self_ns.values()) - before) / 1000 / (3 * (steps // 16 * 16))
        # back to back, as a busy scheduler runs its rounds: the publisher drains on its own thread
        # (its ring holds far more than these rounds). Waiting for it after each round, as the warm
        # loop does between chunks, put the thread to sleep every round, and on this VM a sleep's trip
        # through the kernel left the caches far colder than a forward does: the cold account was
        # 150-220 µs a round that way, against the engine's 66-81 (BENCHMARKS.md, "Shim": Method)
        cold, before = True, sum(cell[0] for cell in shim.self_ns.values())
        for _ in range(steps // 20):
            hooked_tick()
        cold_us = (sum(cell[0] for cell in shim.self_ns.values()) - before) / 1000 / (steps // 20)
        before = {seam: cell[0] for seam, cell in cpu_cells.items()}
        for _ in range(steps // 20):
            calls["cpu_commit"](processor, c_step(worker, batch), batch)
        while pub.queued:
            time.sleep(0.0002)
        cold_cpu = {seam: (cell[0] - before[seam]) / 1000 / (steps // 20) for seam, cell in cpu_cells.items()}
        cold_cpu_us = sum(cold_cpu.values())
        cold, captured = False, []
        pub_submit = pub.submit
        pub.submit = lambda kind, payload, finalize=None: captured.append((payload, finalize)) or True
        hooked_tick()
        graph_free(False)
        hooked_tick()
        pub.submit = pub_submit
        # the body must carry what the (device) tensors held, read from the ring's host buffers
        for (payload, finalize), replayed in zip(captured, (False, True)):
            body = finalize(payload)
            assert body["accepted"] == [n - 1 for n in result.accept_lens.tolist()]
            assert [(p["mode"], p["width"], p["fc"], p["n"], p.get("replayed", False)) for p in body["passes"]] == [
                ("decode", 128, False, 2, replayed), ("draft_extend_v2", 384, True, 1, replayed)], body["passes"]
        payload, finalize = captured[0]
        t0 = time.thread_time_ns()
        for _ in range(1000):
            body = finalize(payload)
        out[f"bs{bs}"] = {
            "hook_path_us": round(hooked - plain, 2),  # eager, graph-free: the CPU engine's two hook calls
            "hook_path_graphs_us": round(hooked_graphs - plain_graphs, 2),
            "hook_path_counted_forwards_us": round(hooked_counted - plain, 2),  # eager, forward hook counting
            "shim_us_self_reported": round(self_us, 2),
            "shim_us_self_reported_cold_caches": round(cold_us, 2),
            "shim_cpu_us_self_reported_cold_caches": round(cold_cpu_us, 2),  # the figure that predicts the engine's
            "shim_cpu_us_cold_caches_per_seam": {seam: round(us, 2) for seam, us in sorted(cold_cpu.items())},
            "finalize_us_publisher_thread": round((time.thread_time_ns() - t0) / 1000 / 1000, 2),
            "step_body_bs": body["bs"],
        }
    out["publisher"] = {"steps": pub.steps, "dropped": pub.dropped}
    if shim.snapshots.ring is not None:  # device tensors only: CPU tensors are cloned
        out["publisher"].update(ring_slots=len(shim.snapshots.ring.slots), ring_dropped=shim.snapshots.ring.dropped)
    pub.close()
    return out


def _best_ns(fn, n: int = 2000, tries: int = 30) -> float:
    best = float("inf")
    clock = time.perf_counter_ns
    for _ in range(tries):
        t0 = clock()
        for _ in range(n):
            fn()
        best = min(best, (clock() - t0) / n)
    return best


def _clock_costs() -> dict:
    """ns per read of the clocks a hook could time itself with (best of 30 x 2,000; loop included)."""
    return {name: round(_best_ns(getattr(time, name)), 1) for name in ("perf_counter_ns", "thread_time_ns")}


def _self_timing_cost() -> float:
    """ns the self-timing adds to one hook call: ``around``'s four clock reads and two adds, over the
    same closure without them (best of 30 x 2,000)."""
    clock, cell, rounds = time.perf_counter_ns, [0], [0]

    def timed():
        t0 = clock()
        t1 = clock()
        t2 = clock()
        cell[0] += t1 - t0 + clock() - t2
        rounds[0] += t2 - t1

    def bare():
        pass

    return round(_best_ns(timed) - _best_ns(bare), 1)


def _t95(df: int) -> float:
    """Two-sided 95 % Student t quantile (table; the normal value beyond 30 degrees of freedom)."""
    table = (12.71, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
             2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
             2.045, 2.042)
    return table[df - 1] if df <= len(table) else 1.96


def ratio_ci(ratios: list[float]) -> dict:
    """Geometric mean of per-pair ratios and its 95 % confidence interval (t on the log ratios)."""
    logs = [math.log(r) for r in ratios]
    mean = sum(logs) / len(logs)
    if len(logs) < 2:
        return {"ratio": round(math.exp(mean), 4), "ci95": None, "pairs": len(logs)}
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
    half = _t95(len(logs) - 1) * sd / math.sqrt(len(logs))
    return {"ratio": round(math.exp(mean), 4), "ci95": [round(math.exp(mean - half), 4), round(math.exp(mean + half), 4)],
            "pairs": len(logs)}


#: the shim's own threads in a scheduler process (procstat.thread_role)
SHIM_THREADS = ("shim publisher", "shim zmq")


def median_ci(values: list[float]) -> dict:
    """Median and its distribution-free 95 % confidence interval (order statistics: the k-th smallest
    and largest values, k the largest with P(Binomial(n, 1/2) < k) <= 0.025). A load spike that makes
    one pair's ratio 2 moves it by one rank, where it moves a mean by its size."""
    ordered, n = sorted(values), len(values)
    mid = (ordered[(n - 1) // 2] + ordered[n // 2]) / 2
    k, below = 0, 0.0
    while k < n and below + math.comb(n, k) / 2 ** n <= 0.025:
        below += math.comb(n, k) / 2 ** n
        k += 1
    ci = [round(ordered[k - 1], 4), round(ordered[n - k], 4)] if k >= 1 else None
    return {"median": round(mid, 4), "ci95": ci, "pairs": n}


def _block(server, pair: int, rounds: int, tokens: int, batch: int = 1, midway=None) -> dict:
    """One block of requests on one server, ``batch`` at a time: tokens, wall time, CPU time of every
    server process and of each scheduler thread role, from /proc before and after. ``midway()`` runs
    between the block's two halves (the interleaved design restarts its turns there)."""
    from concurrent.futures import ThreadPoolExecutor

    from benchmarks.support import procstat

    def ask(i: int) -> dict:
        body = {"text": f"bench prompt {pair}-{i} kimo tuviro",
                "sampling_params": {"max_new_tokens": tokens, "temperature": 0, "ignore_eos": True}}
        return server.post("/generate", body)

    requests = rounds * batch
    halves = [range(requests)] if midway is None else [range(requests // 2), range(requests // 2, requests)]
    before, t0 = procstat.snapshot(server.proc.pid), time.perf_counter()
    responses = []
    with ThreadPoolExecutor(batch) as pool:
        for i, half in enumerate(halves):
            if i:
                midway()
            responses += pool.map(ask, half)
    n = sum(r["meta_info"]["completion_tokens"] for r in responses)
    texts = [r["text"] for r in responses]
    wall = time.perf_counter() - t0
    spent = procstat.delta(before, procstat.snapshot(server.proc.pid))
    return {"tokens": n, "wall_s": wall, "cpu_s": sum(spent["process_cpu_s"].values()),
            "scheduler_threads": spent["thread_cpu_s"].get("sglang::scheduler", {}), "texts": texts}


def _heard_all(sub, heard, timeout_ms: int = 0) -> int:
    """Every frame the subscriber holds, through ``heard`` (one ``poll`` returns at most 256: the
    rounds and heartbeats the shim's account is taken from were left unread with 16 requests a block)."""
    n, got = 0, sub.poll(timeout_ms=timeout_ms)
    while got:
        n += heard(got)
        got = sub.poll(timeout_ms=0)
    return n


def _arms_delta(before: dict, after: dict) -> dict:
    return {arm: {k: after[arm][k] - before[arm][k] for k in after[arm]} for arm in after}


def _split_arms(blocks: list[dict], fixed_in_full: bool = False) -> tuple[list[dict], list[dict]]:
    """Each interleaved block as an off and an on block: each arm keeps the main-thread CPU of its
    own rounds' ``run_batch`` + ``process_batch_result`` calls; the on arm also the shim's threads
    (which work only for its rounds); everything else (the scheduler's loop between the calls,
    SGLang's other threads and processes, which the shim does not run in) is shared by rounds. Wall
    time likewise. The block's tokens are shared by rounds too: both arms write the same text over a
    run (``same_text``), and which arm a round with many accepted tokens fell to depends on the
    turn, not on the shim (with a trained draft, counting each arm's own tokens gave pairs of 1.15
    in one session and 0.86 in the next).

    The publisher's CPU outside its drains (``_publisher_fixed``: wake-ups, heartbeats, sticky
    re-sends, looks for viewers joining) goes by the second, not by the round: a server with the shim
    on in every round pays it once over twice the on arm's rounds. The on arm is charged its rounds'
    share of it, unless ``fixed_in_full`` (the figure before this correction, printed beside it)."""
    off, on = [], []
    for b in blocks:
        arms, threads = b["arms"], b["scheduler_threads"]
        total_rounds = arms["on"]["rounds"] + arms["off"]["rounds"]
        shim = {role: threads.get(role, 0.0) for role in SHIM_THREADS}
        in_calls = (arms["on"]["cpu_ns"] + arms["off"]["cpu_ns"]) / 1e9
        shared_cpu = b["cpu_s"] - in_calls - sum(shim.values())
        shared_main = threads.get("main", 0.0) - in_calls
        shared_wall = b["wall_s"] - (arms["on"]["wall_ns"] + arms["off"]["wall_ns"]) / 1e9
        for arm, out in (("off", off), ("on", on)):
            a, share = arms[arm], arms[arm]["rounds"] / total_rounds
            own_threads = {"main": a["cpu_ns"] / 1e9 + share * shared_main}
            cpu = a["cpu_ns"] / 1e9 + share * shared_cpu
            if arm == "on":
                own_threads.update(shim)
                if not fixed_in_full:
                    own_threads["shim publisher"] -= (1 - share) * _publisher_fixed(b)
                cpu += sum(own_threads[role] for role in SHIM_THREADS)
            out.append({"tokens": share * b["tokens"], "cpu_s": cpu, "wall_s": a["wall_ns"] / 1e9 + share * shared_wall,
                        "scheduler_threads": own_threads, "texts": b["texts"], "arm": a})
    return off, on


def _publisher_fixed(block: dict) -> float:
    """CPU seconds of the publisher thread outside its drains in a block (0 where not told)."""
    busy = block.get("publisher_busy_s")
    return 0.0 if busy is None else max(0.0, block["scheduler_threads"].get("shim publisher", 0.0) - busy)


def _gc_delta(before: dict | None, after: dict | None) -> dict | None:
    if before is None or after is None:
        return None
    return {"ns": [a - b for a, b in zip(after["ns"], before["ns"])], "n": [a - b for a, b in zip(after["n"], before["n"])],
            "by_arm": {arm: after["by_arm"][arm] - before["by_arm"][arm] for arm in after["by_arm"]}}


def _gc_summary(blocks: list[dict]) -> dict | None:
    """The scheduler's garbage collections over the interleaved blocks: count and CPU per generation,
    and CPU within each arm's calls, all per round."""
    gcs = [b["gc"] for b in blocks if b.get("gc")]
    if not gcs:
        return None
    rounds = max(1, sum(b["arms"]["on"]["rounds"] + b["arms"]["off"]["rounds"] for b in blocks))
    per_arm_rounds = {arm: max(1, sum(b["arms"][arm]["rounds"] for b in blocks)) for arm in ("on", "off")}
    return {"collections_per_1000_rounds": [round(1000 * sum(g["n"][i] for g in gcs) / rounds, 2) for i in range(3)],
            "cpu_us_per_round": [round(sum(g["ns"][i] for g in gcs) / 1000 / rounds, 2) for i in range(3)],
            "cpu_us_per_round_in_arm": {arm: round(sum(g["by_arm"][arm] for g in gcs) / 1000 / per_arm_rounds[arm], 2)
                                        for arm in ("on", "off")}}


def _per_round(blocks: list[dict]) -> float:
    """µs of main-thread CPU per round in the arm's own calls."""
    return sum(b["arm"]["cpu_ns"] for b in blocks) / 1000 / max(1, sum(b["arm"]["rounds"] for b in blocks))


def mean_ci(values: list[float]) -> dict:
    """Arithmetic mean and its 95 % confidence interval (t)."""
    mean = sum(values) / len(values)
    if len(values) < 2:
        return {"mean": round(mean, 1), "ci95": None, "pairs": len(values)}
    sd = math.sqrt(sum((x - mean) ** 2 for x in values) / (len(values) - 1))
    half = _t95(len(values) - 1) * sd / math.sqrt(len(values))
    return {"mean": round(mean, 1), "ci95": [round(mean - half, 1), round(mean + half, 1)], "pairs": len(values)}


class Toggler:
    """The bench's side of ``shim_toggle``: switch the one server's hooks and wait for its scheduler
    to say so. ``off_hook_ns``: what the shim's self-time cells gained while the hooks were off
    (between an ``off`` and the next switch), which must stay 0."""

    def __init__(self, path: Path) -> None:
        self.path, self.serial, self.pid = path, 0, None
        self.off_hook_ns, self._last = 0, None  # _last: (state, cells) at the previous switch

    def set(self, state: str, timeout: float = 30.0) -> dict:
        got = self._switch(state, timeout)
        if self._last is not None and self._last[0] == "off":
            self.off_hook_ns += got["shim_ns"] - self._last[1]
        self._last = (state, got["shim_ns"])
        return got

    def _switch(self, state: str, timeout: float) -> dict:
        self.serial += 1
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(f"{state} {self.serial}")
        os.replace(tmp, self.path)
        answer, deadline = Path(f"{self.path}.{self.pid}"), time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                got = json.loads(answer.read_text())
                if got["serial"] == str(self.serial):
                    return got
            except (OSError, ValueError):
                pass
            time.sleep(0.005)
        raise SystemExit(f"the scheduler {self.pid} did not switch the shim {state} within {timeout} s")


def engine(rounds: int, tokens: int, pairs: int, sessions: int, draft: str = "random", batch: int = 1,
           sample_hz: int = 100, design: str = "interleave", interleave_rounds: int = 1) -> dict:
    """Per pair, one block of requests with the shim's hooks and one without, never at the same
    time; the block order alternates every pair and every session, so drift in the shared machine's
    load cancels. ``toggle`` (default): ONE server with the shim, its hooks switched off and on
    between blocks (``shim_toggle``): both arms run in the same process; the off arm's CPU leaves
    out the shim's own threads (publisher, its ZeroMQ threads), which a server without the shim
    does not have. ``two-servers``: one server without and one with the shim, alive together, the
    start order flipped every session. Per pair: tokens per CPU-second of all server processes
    (launcher, scheduler, detokenizer) with ÷ without the shim, and tokens per wall second
    likewise; ratios = geometric means with 95 % confidence intervals."""
    import tempfile

    from benchmarks.support import sampled as sampled_mod
    from eagle3scope.demo.server import SGLangServer, cache_dir, engine_python
    from eagle3scope.demo.tiny import MODELS_DIRNAME
    from eagle3scope.live.subscriber import Subscriber
    from eagle3scope.wire.endpoints import fresh_ipc_endpoint

    if draft == "trained":  # the demo's trained pair, as built (models.cached never builds)
        from eagle3scope.demo.models import cached

        paths = cached()
        if paths is None:
            raise SystemExit("the demo models are not built (make models)")
        target_dir, draft_dir = paths.target, paths.draft
    else:
        root = cache_dir() / "models" / MODELS_DIRNAME
        subprocess.run([str(engine_python()), "-m", "eagle3scope.demo.tiny", str(root)], check=True, capture_output=True)
        target_dir, draft_dir = root / "target", root / "draft-random"
    blocks: dict[str, list] = {"off": [], "on": []}
    sampled: list[dict] = []  # py-spy's view of the on server's scheduler, per session (sampled.py)
    frames, load = 0, [os.getloadavg()[0]]
    cost = {"shim_us": {}, "step_us": 0.0, "round_shim_us": 0.0, "publisher_us": 0.0, "decode_steps": 0,
            "passes": 0}  # the shim's own account
    off_hook_ns = 0  # toggle: the shim's self-time cells' growth during off blocks (must stay 0)

    def heard(got) -> int:
        for f in got:
            if f.kind == "heartbeat" and f.body.get("shim_us") is not None:
                for seam, us in f.body["shim_us"].items():
                    cost["shim_us"][seam] = cost["shim_us"].get(seam, 0.0) + us
                cost["step_us"] += f.body.get("step_us") or 0.0
                cost["round_shim_us"] += f.body.get("round_shim_us") or 0.0
                cost["publisher_us"] += f.body.get("publisher_us") or 0.0
            elif f.kind == "step" and f.body.get("mode") == "decode":
                cost["decode_steps"] += 1
                cost["passes"] += sum(p["n"] for p in f.body["passes"])
        return sum(1 for f in got if f.kind == "step")

    warm = {"text": "warm up", "sampling_params": {"max_new_tokens": 8, "temperature": 0}}
    site = Path(tempfile.mkdtemp(prefix="e3s-toggle-"))
    (site / "sitecustomize.py").write_text(
        f"import sys\nsys.path.insert(0, {str(Path(__file__).resolve().parents[1] / 'support')!r})\n"
        "import shim_toggle\nshim_toggle.start()\n")
    for session in range(sessions):
        order = ("off", "on") if session % 2 == 0 else ("on", "off")
        endpoint = fresh_ipc_endpoint()
        with Subscriber([endpoint]) as sub:
            servers, toggler = {}, None
            try:
                if design in ("toggle", "interleave"):
                    toggler = Toggler(site / f"state-{session}")
                    env = {"EAGLE3SCOPE_ENDPOINT": endpoint, "E3S_TOGGLE": str(toggler.path), "PYTHONPATH": str(site)}
                    servers["on"] = servers["off"] = SGLangServer(target_dir, draft_dir, env=env).start()
                    servers["on"].post("/generate", warm)
                    toggler.pid = sampled_mod.scheduler_pid(servers["on"].proc.pid)
                    if design == "interleave":
                        toggler.set(f"interleave:{interleave_rounds}:{order[0]}")  # the first round's arm
                else:
                    for label in order:  # started one after the other: no start-up contention
                        env = {"EAGLE3SCOPE_ENDPOINT": endpoint} if label == "on" else {}
                        servers[label] = SGLangServer(target_dir, draft_dir, env=env).start()
                        servers[label].post("/generate", warm)
                pid = sampled_mod.scheduler_pid(servers["on"].proc.pid) if sample_hz else None
                sampler = sampled_mod.Sampler(pid, sample_hz) if pid is not None else None
                for pair in range(pairs):
                    if design == "interleave":  # one block holds both arms, round by round
                        first, second = order if pair % 2 == 0 else order[::-1]
                        got0 = toggler.set(f"interleave:{interleave_rounds}:{first}")
                        block = _block(servers["on"], pair, rounds, tokens, batch,
                                       midway=lambda: toggler.set(f"interleave:{interleave_rounds}:{second}"))
                        got = toggler.set("interleave")
                        block["arms"], block["gc"] = _arms_delta(got0["arms"], got["arms"]), _gc_delta(got0["gc"], got["gc"])
                        if got0.get("publisher_busy_ns") is not None and got.get("publisher_busy_ns") is not None:
                            block["publisher_busy_s"] = (got["publisher_busy_ns"] - got0["publisher_busy_ns"]) / 1e9
                        blocks["on"].append(block)
                        frames += _heard_all(sub, heard)
                        continue
                    for label in order if pair % 2 == 0 else order[::-1]:
                        if toggler is not None:
                            toggler.set(label)
                        blocks[label].append(_block(servers[label], pair, rounds, tokens, batch))
                    frames += _heard_all(sub, heard)
                if toggler is not None and design == "toggle":
                    toggler.set("on")  # closes the last off block's account
                    off_hook_ns += toggler.off_hook_ns
                if sampler is not None and (got := sampler.stop()) is not None:
                    sampled.append(got)
                frames += _heard_all(sub, heard, timeout_ms=1500)
            finally:
                for server in {id(s): s for s in servers.values()}.values():
                    server.stop()
        load.append(os.getloadavg()[0])
    shutil.rmtree(site, ignore_errors=True)
    off, on = blocks["off"], blocks["on"]
    fixed_in_full = None  # interleave: the ratio with the publisher's per-second CPU charged to the on rounds in full
    if design == "interleave":
        fixed_in_full = ratio_ci([(b["tokens"] / b["cpu_s"]) / (a["tokens"] / a["cpu_s"]) for a, b in zip(*_split_arms(on, True))])
        off, on = _split_arms(on)
    if design == "toggle":  # a server without the shim has no shim threads: the off arm leaves them out
        for b in off:
            b["cpu_s"] -= sum(b["scheduler_threads"].get(role, 0.0) for role in SHIM_THREADS)
    cpu_ratios = [(b["tokens"] / b["cpu_s"]) / (a["tokens"] / a["cpu_s"]) for a, b in zip(off, on)]
    wall_ratios = [(b["tokens"] / b["wall_s"]) / (a["tokens"] / a["wall_s"]) for a, b in zip(off, on)]
    per_token = lambda bl, key: 1000 * sum(b[key] for b in bl) / sum(b["tokens"] for b in bl)  # noqa: E731
    roles = lambda bl: {r: round(1000 * sum(b["scheduler_threads"].get(r, 0.0) for b in bl) / sum(b["tokens"] for b in bl), 4)  # noqa: E731
                        for r in sorted({r for b in bl for r in b["scheduler_threads"]})}
    n_rounds = max(1, cost["decode_steps"])
    main = lambda bl: 1e6 * sum(b["scheduler_threads"].get("main", 0.0) for b in bl)  # noqa: E731
    if design == "interleave":  # each arm's own rounds: CPU of its run_batch + process_batch_result calls
        deltas = [(b["arm"]["cpu_ns"] / b["arm"]["rounds"] - a["arm"]["cpu_ns"] / a["arm"]["rounds"]) / 1e3
                  for a, b in zip(off, on)]
    else:  # same text on and off: a pair's blocks ran the same rounds, rounds per token as the steps said
        rounds_per_token = n_rounds / max(1, sum(b["tokens"] for b in on))
        deltas = [1e6 * (b["scheduler_threads"].get("main", 0.0) - a["scheduler_threads"].get("main", 0.0))
                  / max(1.0, rounds_per_token * b["tokens"]) for a, b in zip(off, on)]
    main_samples = sum(x["main_thread_samples"] for x in sampled)
    shim_samples = sum(x["shim_samples"] for x in sampled)
    parts: dict[str, int] = {}
    for x in sampled:
        for part, n in x["by_part"].items():
            parts[part] = parts.get(part, 0) + n
    # toggle: the sampler ran through both arms and the shim can only be in the on blocks' samples
    on_share = main(on) / (main(on) + main(off)) if design == "toggle" and main(on) + main(off) else 1.0
    share = shim_samples / (main_samples * on_share) if main_samples else None
    return {
        # an outside sampler's view (py-spy, when installed): the shim's share of the on server's
        # main-thread samples, and that share of its main-thread CPU per round
        "sampled_shim_share_of_main_thread": round(share, 5) if share is not None else None,
        "sampled_shim_us_per_round": round(share * main(on) / n_rounds, 1) if share is not None else None,
        "sampled_main_thread_samples": main_samples, "sampled_shim_samples": shim_samples,
        "sampled_by_part": dict(sorted(parts.items(), key=lambda kv: -kv[1])[:12]),
        # the shim's own account (heartbeat shim_us / step_us) per decode round, and the main
        # thread's measured difference per round (CPU, /proc): the attribution that bounds the cost
        "shim_self_us_per_round": {k: round(v / n_rounds, 2) for k, v in sorted(cost["shim_us"].items())},
        "shim_self_us_per_round_total": round(sum(cost["shim_us"].values()) / n_rounds, 2),
        "round_us": round(cost["step_us"] / n_rounds, 1),
        "round_shim_us_per_round": round(cost["round_shim_us"] / n_rounds, 2),  # the hooks within the rounds
        "shim_share_of_rounds": round(cost["round_shim_us"] / cost["step_us"], 5) if cost["step_us"] else None,
        "draft_forwards_per_round": round(cost["passes"] / n_rounds, 2),
        # same text on and off, so the off server ran as many rounds as the on one reported
        "main_thread_cpu_us_per_round_off_on": ([round(_per_round(off), 1), round(_per_round(on), 1)] if design == "interleave"
                                                else [round(main(off) / n_rounds, 1), round(main(on) / n_rounds, 1)]),
        "main_thread_delta_us_per_round": mean_ci(deltas),  # per pair: on - off, CPU (/proc ticks)
        "main_thread_pair_deltas_us": [round(d) for d in deltas],
        "off_blocks_hook_ns": (sum(b["arm"]["hook_ns"] for b in off) if design == "interleave"
                               else off_hook_ns if design == "toggle" else None),  # hooks that ran while off: 0
        "garbage_collection": _gc_summary(blocks["on"]) if design == "interleave" else None,
        # interleave: the tokens each arm's own rounds added (the ratio shares the block's by rounds)
        "interleave_tokens_per_round": ({arm: round(sum(b["arms"][arm]["tokens"] for b in blocks["on"])
                                               / max(1, sum(b["arms"][arm]["rounds"] for b in blocks["on"])), 3)
                                         for arm in ("on", "off")} if design == "interleave" else None),
        "publisher_busy_us_per_round": round(cost["publisher_us"] / n_rounds, 1),  # its CPU turning events into frames
        "publisher_thread_cpu_us_per_round": round(1e6 * sum(b["scheduler_threads"].get("shim publisher", 0.0) for b in blocks["on"]) / n_rounds, 1),
        # interleave: the publisher's CPU outside its drains per second of the blocks (goes by time, not rounds)
        "publisher_fixed_us_per_s": (round(1e6 * sum(_publisher_fixed(b) for b in blocks["on"])
                                           / sum(b["wall_s"] for b in blocks["on"]), 1) if design == "interleave" else None),
        "cpu_ratio_on_over_off": ratio_ci(cpu_ratios),  # tokens per CPU-second, with ÷ without the shim
        "cpu_ratio_publisher_fixed_in_full": fixed_in_full,
        "cpu_ratio_median": median_ci(cpu_ratios),  # the same, robust to a load spike in one pair
        "wall_ratio_on_over_off": ratio_ci(wall_ratios),  # tokens per wall second, likewise
        "cpu_ms_per_token_off": round(per_token(off, "cpu_s"), 3),
        "cpu_ms_per_token_on": round(per_token(on, "cpu_s"), 3),
        "scheduler_thread_cpu_ms_per_token_off": roles(off),
        "scheduler_thread_cpu_ms_per_token_on": roles(on),
        "cpu_pair_ratios": [round(r, 4) for r in cpu_ratios],
        "wall_pair_ratios": [round(r, 4) for r in wall_ratios],
        "tokens_per_s_off": round(sum(b["tokens"] for b in off) / sum(b["wall_s"] for b in off), 1),
        "tokens_per_s_on": round(sum(b["tokens"] for b in on) / sum(b["wall_s"] for b in on), 1),
        # interleave: each session's prompts again in the next one with the arms the other way round
        "same_text": ((all(len({json.dumps(b["texts"]) for b in on[i::pairs]}) == 1 for i in range(pairs))
                       if sessions > 1 else None)
                      if design == "interleave" else [b["texts"] for b in off] == [b["texts"] for b in on]),
        "step_frames_received": frames,
        "load_average_1min": [round(x, 2) for x in load],
        "design": design, "interleave_rounds": interleave_rounds if design == "interleave" else None, "sessions": sessions, "pairs_per_session": pairs, "requests_per_block": rounds * batch, "batch": batch,
        "draft": draft, "tokens_per_request": tokens, "decode_rounds_on": cost["decode_steps"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=None,
                        help="waves of --batch requests per block (default: 16 at batch 1, 4 above): 4 at batch 1 "
                             "left the ratio's CI at +-0.3 %%, too wide for a cost near the 1 %% goal")
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--pairs", type=int, default=10, help="off/on block pairs per session")
    parser.add_argument("--sessions", type=int, default=2, help="servers started in turn, the block order flipped each time")
    parser.add_argument("--design", choices=("interleave", "toggle", "two-servers"), default="interleave",
                        help="interleave: one server, its hooks switched off and on round by round; "
                             "toggle: one server, switched between blocks; "
                             "two-servers: one server without the shim and one with it")
    parser.add_argument("--interleave-rounds", type=int, default=1,
                        help="with --design interleave: rounds of one arm before the other's")
    parser.add_argument("--draft", choices=("random", "trained"), default="random",
                        help="random: one token a round; trained: the demo's draft, several")
    parser.add_argument("--batch", type=int, default=1, help="requests in flight per block")
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--sample-hz", type=int, default=100,
                        help="py-spy's rate on the shim's scheduler (benchmarks/support/sampled.py; 0: no sampling)")
    parser.add_argument("--hook-path-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cpu", help="with --hook-path-only: cpu, or cuda (sync debug mode 'error')")
    args = parser.parse_args()
    if args.hook_path_only:
        print(json.dumps(hook_path(args.steps, args.device)))
        return
    from eagle3scope.demo.server import checkout_pythonpath, engine_python

    env = {**os.environ, **checkout_pythonpath(os.environ)}  # this checkout's shim, not the venv's install
    done = subprocess.run([str(engine_python()), __file__, "--hook-path-only", "--steps", str(args.steps)],
                          check=True, capture_output=True, text=True, env=env)
    path = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps({"hook_path": path}, indent=1))
    rounds = args.rounds or (16 if args.batch == 1 else 4)
    measured = engine(rounds, args.tokens, args.pairs, args.sessions, args.draft, args.batch, args.sample_hz,
                      args.design, args.interleave_rounds)
    print(json.dumps({"engine": measured}, indent=1))
    print(json.dumps({"agreement": agreement(path, measured)}, indent=1))


def agreement(path: dict, measured: dict) -> dict:
    """Whether the hook-path figures (batch 1) lie within the CI of the engine's per-round
    main-thread difference, and whether the CPU ratio's lower bound reaches the 0.99 goal."""
    ci = measured["main_thread_delta_us_per_round"]["ci95"]
    figures = {"hook_path_us": path["bs1"]["hook_path_us"],
               "hook_path_cold_cpu_us": path["bs1"]["shim_cpu_us_self_reported_cold_caches"],
               "engine_self_reported_us": measured["shim_self_us_per_round_total"]}
    if measured["sampled_shim_us_per_round"] is not None:
        figures["engine_sampled_us"] = measured["sampled_shim_us_per_round"]
    ratio, median = measured["cpu_ratio_on_over_off"], measured["cpu_ratio_median"]
    return {"main_thread_delta_ci95": ci,
            "within_ci": {k: (ci is not None and ci[0] <= v <= ci[1]) for k, v in figures.items()}, **figures,
            "cpu_ratio_lower_bound": ratio["ci95"][0] if ratio["ci95"] else None,
            "cpu_ratio_median_lower_bound": median["ci95"][0] if median["ci95"] else None,
            "goal_0_99_shown": bool(ratio["ci95"]) and ratio["ci95"][0] >= 0.99}


if __name__ == "__main__":
    sys.exit(main())
