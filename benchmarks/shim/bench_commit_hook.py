"""Cost of the commit hook (SGLang's ``_resolve_spec_v2_tokens``, where a round is counted per
request) on the scheduler thread: (hooked - plain) CPU µs per round at batch 1 and 64, with stand-in
requests whose ``spec_verify_ct`` the stand-in settle advances as SGLang does.

Usage (engine venv, this checkout first): PYTHONPATH=.:instrumentation python benchmarks/shim/bench_commit_hook.py
"""

from __future__ import annotations

import json
import time
import weakref

from eagle3scope_shim import detach_plan, hooks
from eagle3scope_shim.shim_state import Shim, Step


class Req:
    def __init__(self, rid: str) -> None:
        self.rid, self.is_retracted, self.spec_verify_ct = rid, False, 0

    def finished(self) -> bool:
        return False


class Result:
    """Stands in for GenerationBatchResult (a weak-referenceable dataclass)."""


class Publisher:
    def submit(self, *args) -> bool:
        return True


def settle(processor, result, batch) -> None:
    for req in batch.reqs:
        req.spec_verify_ct += 1


def main(rounds: int = 20000) -> dict:
    shim = Shim()
    shim.publisher = Publisher()
    shim.seams.status[detach_plan.COMMIT_SEAM] = "attached"
    commit = hooks.FACTORIES["commit"](shim, detach_plan.COMMIT_SEAM)
    out = {}
    for bs in (1, 64):
        batch = type("Batch", (), {"reqs": [Req(f"req-{i:04d}") for i in range(bs)]})()
        results = [Result() for _ in range(rounds)]

        def plain() -> int:
            t0 = time.thread_time_ns()
            for r in results:
                settle(None, r, batch)
            return time.thread_time_ns() - t0

        def hooked() -> int:
            spent = 0
            for r in results:
                shim.uncommitted.append((weakref.ref(r), Step()))  # what the step hook left
                t0 = time.thread_time_ns()
                commit(settle, None, r, batch)
                spent += time.thread_time_ns() - t0
            return spent

        out[f"bs{bs}"] = round(min(hooked() - plain() for _ in range(3)) / rounds / 1000, 2)
    return {"commit_hook_us_per_round": out}


if __name__ == "__main__":
    print(json.dumps(main()))
