"""Driving the shim's real snapshot ring and publisher as SGLang's scheduler would, on a model of the
CUDA runtime (:mod:`benchmarks.support.device_events`): for the ring's tests and ``benchmarks/shim/bench_ring_rates.py``."""

from __future__ import annotations

import pathlib
import time

from benchmarks.support.device_events import DeviceModel

from eagle3scope_shim import step_body
from eagle3scope_shim.publisher import Publisher
from eagle3scope_shim.ring import RING_BYTES, HostRing, ring_for, snap
from eagle3scope_shim.shim_state import Shim, Step

SCHEDULER_GPU = 3  # a scheduler not on GPU 0: a DP replica, an attention-DP leader, --base-gpu-id


def publish_steps(pub, ring, model, n: int, bodies: list | None = None, width: int = 4, shim: Shim | None = None) -> list[Step]:
    """``n`` steps as the hooks take them: a slot, a copy of the draft tokens, the event recorded
    after the copy, the step queued for the publisher thread, which waits, builds the body (into
    ``bodies``) and releases the slot; ``shim``: the shim the steps are the hooks' of (a fresh one)."""
    bodies = [] if bodies is None else bodies
    shim = Shim() if shim is None else shim

    def finalize(step):
        bodies.append(step_body.finalize_step(shim, step))
        return bodies[-1]

    steps = []
    for i in range(n):
        step = Step()
        step.slot = ring.acquire()
        if step.slot is None:
            pub.drop("step")
            continue
        step.draft = snap(shim.snapshots, step, "draft", model.device_tensor(range(i, i + width)))
        HostRing.record(step.slot)
        step.seq, step.rids = i, ["r"]
        pub.submit("step", step, finalize)
        steps.append(step)
    return steps


def scheduler_ring(model, capacity=64, wake=None):
    """The ring as the scheduler's thread makes it, on its own GPU."""
    model.set_device(SCHEDULER_GPU)
    return ring_for("cuda", capacity, wake=wake, torch=model.torch)


def drops_at(slots: int, rate_hz: float, seconds: float, tmp_path, *, ring_wakes: bool = True) -> tuple[int, int]:
    """(steps taken, steps dropped) for the real ring and publisher at a GPU server's step rate,
    each step's device work done 1 ms after its event is recorded."""
    model = DeviceModel(latency_s=0.001)
    pathlib.Path(tmp_path).mkdir(mode=0o700, parents=True, exist_ok=True)
    pub = Publisher(f"ipc://{tmp_path}/rate{slots}-{int(rate_hz)}", "t", heartbeat_interval_s=60)
    pub.start()
    try:
        ring = scheduler_ring(model, capacity=RING_BYTES // (4 * 8 * slots), wake=pub.wake if ring_wakes else None)
        assert len(ring.slots) == slots
        period, t0 = 1.0 / rate_hz, time.monotonic()
        n, shim = int(seconds * rate_hz), Shim()
        for i in range(n):
            publish_steps(pub, ring, model, 1, shim=shim)
            time.sleep(max(0.0, t0 + (i + 1) * period - time.monotonic()))
        pub.flush(5)
        return n, ring.dropped
    finally:
        pub.close(0.2)
