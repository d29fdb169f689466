"""Hooks in vLLM's EngineCore (the scheduler's process): the one publisher of a vLLM server, the
hello, and per round the requests' drafts against what the model runner committed, read from the
host lists ``Scheduler.update_from_output`` already has (vLLM's own ``num_accepted`` is
``len(committed) - 1``, computed the same way here before vLLM trims a stopped request's tokens), and
``finish`` frames carrying vLLM's own per-request counters. The model runner's facts (passes, aux
capture, timings, the load report, its seams) arrive on the ``ModelRunnerOutput`` (:mod:`.worker`).
"""

from __future__ import annotations

import logging
import time

from eagle3scope_shim import aux_channel
from eagle3scope_shim.guard import around
from eagle3scope_shim.shim_state import requested_endpoint
from eagle3scope_shim.vllm import frames
from eagle3scope_shim.vllm.worker import FACTS_ATTR

log = logging.getLogger("eagle3scope")


class EngineFacts:
    """What the EngineCore's hooks learned: the configuration, the model runner's seams, failures seen."""

    def __init__(self) -> None:
        self.vllm_config = None
        self.worker_seams: dict[str, str] = {}  # seams of a model runner in another process
        self.failed_seen = 0  # hooks of this process seen disabled when the hello was last built


def vllm_version() -> str | None:
    try:
        import vllm

        return str(vllm.__version__)
    except Exception:
        return None


def refresh_hello(state) -> None:
    shim, facts = state.shim, state.engine
    pub = shim.publisher
    if pub is None or facts.vllm_config is None:
        return
    seams = {**facts.worker_seams, **shim.seams.status}
    facts.failed_seen = len(shim.seams.disabled)
    control = shim.aux_channel.endpoint if shim.aux_channel is not None else None
    pub.set_sticky("hello", frames.hello_body(facts.vllm_config, vllm_version(), shim.started_ns, seams,
                                              pub.endpoint, control))


def make_scheduler(state, seam):
    """The scheduler is built: this process publishes (one publisher per EngineCore, per DP rank)."""
    shim = state.shim

    def post(_t0, result, self, vllm_config, *args, **kwargs):
        state.engine.vllm_config = vllm_config
        if shim.publisher is None:
            endpoint = requested_endpoint()
            index = int(getattr(vllm_config.parallel_config, "data_parallel_rank", 0) or 0)
            size = int(getattr(vllm_config.parallel_config, "data_parallel_size", 1) or 1)
            if endpoint is None or not shim.start_publisher(endpoint, index, size):
                return
            open_refusing_control(shim, vllm_config, index)
        refresh_hello(state)

    return around(shim, seam, None, post, traceable=False)


def open_refusing_control(shim, vllm_config, index: int) -> None:
    """Where the user asked for the control channel (``EAGLE3SCOPE_CONTROL``), open it as for SGLang
    (token, loopback, the same protocol), so that ``aux describe`` answers and every ``aux set`` gets
    a refusal naming why, instead of a request that times out. It holds no SGLang worker, so its
    facts name no target; the reason is vLLM's."""
    channel = aux_channel.start(shim, None, index)
    if channel is not None:
        channel.facts.why_not = frames.aux_refusal(vllm_config)
        log.info("eagle3scope: control channel on %s refuses aux changes: %s", channel.endpoint, channel.facts.why_not)


def make_update_from_output(state, seam):
    shim, facts = state.shim, state.engine

    def pre(self, scheduler_output, model_runner_output, *args, **kwargs):
        if shim.publisher is None:
            return None
        sampled = model_runner_output.sampled_token_ids
        index = model_runner_output.req_id_to_index
        spec = scheduler_output.scheduled_spec_decode_tokens
        requests = self.requests
        rounds, fresh, reqs = [], [], []
        for rid in scheduler_output.num_scheduled_tokens:
            i = index.get(rid)
            committed = sampled[i] if sampled and i is not None else None
            if not committed:
                continue  # a prefill chunk still running: nothing committed
            drafts = spec.get(rid)
            if drafts:
                rounds.append((rid, list(drafts), len(committed), committed))
            else:
                fresh.append(rid)
            reqs.append((rid, requests.get(rid)))
        return rounds, fresh, reqs, getattr(model_runner_output, FACTS_ATTR, None)

    def post(ctx, result, *args, **kwargs):
        if ctx is None:
            return
        rounds, fresh, reqs, worker = ctx
        pub = shim.publisher
        if worker:
            _forwarded(state, pub, worker)
        if len(shim.seams.disabled) != facts.failed_seen:  # a hook of this process failed: the hello says so
            refresh_hello(state)
        if rounds or fresh:
            ctx_len = {rid: req.num_tokens for rid, req in reqs if req is not None}
            seq = shim.seq
            shim.seq += (1 if rounds else 0) + (1 if fresh else 0)
            payload = (seq, time.time_ns(), rounds, fresh, worker, ctx_len)
            for part in range((1 if rounds else 0) + (1 if fresh else 0)):
                pub.submit("step", (part, payload), _step_finalize)
        done = [frames.finished(rid, req.spec_decode_metrics) for rid, req in reqs
                if req is not None and req.is_finished()]
        if done:
            pub.submit("finish", dict(seq=max(shim.seq - 1, 0), dropped=pub.dropped, requests=done))

    return around(shim, seam, pre, post, hot=True, step=True, traceable=False)


def _step_finalize(item) -> dict:
    """Publisher thread: the ``part``-th step frame of a round (a round of both kinds gives two)."""
    part, payload = item
    return frames.step_bodies(*payload)[part]


def _forwarded(state, pub, worker: dict) -> None:
    """What the model runner's process sent along: the load report once, its seams, its hook reports."""
    load = worker.pop("load", None)
    if load is not None:
        pub.set_sticky("load", load)
    for hook in worker.pop("hooks", None) or ():
        pub.submit("hook", hook)
    seams = worker.pop("seams", None)
    if seams is not None:
        state.engine.worker_seams = seams
        refresh_hello(state)


FACTORIES = {
    "vllm.scheduler": make_scheduler,
    "vllm.update_from_output": make_update_from_output,
}
