"""The frame bodies of a vLLM server, built from plain values (no vLLM import), so they are tested
without the engine. The schema is the SGLang shim's (:mod:`eagle3scope.wire.bodies`); what differs is
said in the fields: ``engine: "vllm"``, ``offset_rule: "none"`` (vLLM captures the configured aux ids
as given, sorted and deduplicated), and passes named by what vLLM's drafter runs in one round.

One vLLM round (one ``execute_model`` + ``sample_tokens``) verifies the drafts scheduled for it and
then drafts the next: a first draft pass over every scheduled token, at the width the target's aux
states give it (``combine_hidden_states``: k x H, fc applied whenever the draft uses aux states),
then ``num_speculative_tokens - 1`` single-token passes at width H. The first pass is a prefill's
``extend`` when no request of the round verified drafts, else a ``draft_extend``.
"""

from __future__ import annotations

import os
import socket

from eagle3scope.wire import bodies
from eagle3scope_shim.version import __version__

ENGINE = "vllm"


def server_args(vllm_config) -> dict:
    """hello.server_args from vLLM's ``VllmConfig``: EAGLE-3 here is a chain (topk 1)."""
    spec = getattr(vllm_config, "speculative_config", None)
    model = getattr(vllm_config, "model_config", None)
    compilation = getattr(vllm_config, "compilation_config", None)
    k = getattr(spec, "num_speculative_tokens", None)
    method = getattr(spec, "method", None)
    out: dict = {
        "algorithm": "EAGLE3" if method == "eagle3" else (str(method).upper() if method else None),
        "num_steps": int(k) if k is not None else None,
        "topk": 1,
        "num_draft_tokens": int(k) + 1 if k is not None else None,
        "dtype": str(getattr(model, "dtype", "")).replace("torch.", "") or None,
        "cuda_graph": _graphs(model, compilation),
        "model_path": _text(getattr(model, "model", None)),
        "draft_model_path": _text(getattr(spec, "model", None)),
        "overlap_schedule": bool(getattr(getattr(vllm_config, "scheduler_config", None), "async_scheduling", False)),
    }
    out["compile_mode"] = compile_mode(vllm_config)
    out["enforce_eager"] = bool(getattr(model, "enforce_eager", False))
    return out


def _text(value) -> str | None:
    return None if value is None else str(value)


def _graphs(model, compilation) -> bool:
    """Whether vLLM replays captured graphs: never in eager mode, nor without capture sizes (CPU)."""
    if getattr(model, "enforce_eager", False):
        return False
    return bool(getattr(compilation, "cudagraph_capture_sizes", None))


def compile_mode(vllm_config) -> str | None:
    """vLLM's compilation mode by name (``NONE`` in eager mode)."""
    mode = getattr(getattr(vllm_config, "compilation_config", None), "mode", None)
    if mode is None:
        return None
    return getattr(mode, "name", None) or str(mode)


def compiled(vllm_config) -> bool:
    mode = compile_mode(vllm_config)
    return mode not in (None, "NONE", "0") and not getattr(getattr(vllm_config, "model_config", None),
                                                          "enforce_eager", False)


def observable(vllm_config) -> dict:
    """What the hooks see on this configuration: every draft pass is seen at its eager caller
    (compiled or not), no graph replays; timings are host wall time."""
    return {"steps": True, "draft_ids": True, "accepted": True, "passes_prefill": True,
            "passes_draft_decode": True, "passes_draft_extend": True, "graph_prefill": False,
            "graph_draft_decode": False, "graph_draft_extend": False, "device_timings": False}


def aux_refusal(vllm_config) -> str:
    """Why the control channel refuses every aux change on this vLLM server."""
    restart = "restart vLLM with other eagle_aux_hidden_state_layer_ids in the draft's config"
    if compiled(vllm_config):
        return (f"vLLM compile mode {compile_mode(vllm_config)}: the target's compiled forward holds the aux layers"
                f" it was traced with, so they cannot change without a restart; {restart}")
    return ("vLLM sets the aux layers once, in the model runner's process, as it loads the model; this shim does"
            f" not change them on a running server; {restart}")


def unobserved(vllm_config) -> dict[str, str]:
    """What the shim cannot see or do on this configuration, said loudly in the hello."""
    out = {"control": f"`aux set` is refused: {aux_refusal(vllm_config)}"}
    if compiled(vllm_config):
        out["draft_model"] = (f"vLLM compile mode {compile_mode(vllm_config)}: the draft's and the target's inner"
                              " LlamaModel.forward run compiled, so widths inside them are not seen; each draft pass"
                              " is read at its eager caller (combine_hidden_states, Eagle3LlamaForCausalLM.forward)"
                              " and the aux capture from the target's output")
    return out


def unhooked(seams: dict) -> dict[str, str]:
    """hello.unobserved for every seam that is not in place: what it would have shown is not shown."""
    return {seam: f"{status}: this seam's hook is not running, so what it observes is not reported (its hook event"
                  " says why)" for seam, status in seams.items() if status in ("failed", "missing", "disabled")}


def hello_body(vllm_config, vllm_version: str | None, started_ns: int, seams: dict,
               endpoint: str | None, control: str | None = None) -> dict:
    parallel = getattr(vllm_config, "parallel_config", None)
    body: dict = {
        "pid": os.getpid(),
        "started": started_ns,
        "host": socket.gethostname(),
        "tp_rank": 0,
        "dp_rank": int(getattr(parallel, "data_parallel_rank", 0) or 0),
        "parallel": {"tp_size": int(getattr(parallel, "tensor_parallel_size", 1) or 1),
                     "dp_size": int(getattr(parallel, "data_parallel_size", 1) or 1),
                     "pp_size": int(getattr(parallel, "pipeline_parallel_size", 1) or 1)},
        "publisher_rank": {"tp_rank": 0, "dp_rank": int(getattr(parallel, "data_parallel_rank", 0) or 0),
                           "reason": "vLLM's EngineCore (the scheduler) publishes; the model runner's facts"
                                     " arrive with its output"},
        "engine": ENGINE,
        "engine_version": vllm_version,
        "shim_version": __version__,
        "worker": ENGINE,
        "worker_class": "EagleProposer",
        "server_args": server_args(vllm_config),
        "observable": observable(vllm_config),
        "control": control,
        "seams": dict(seams),
        "unobserved": {**unobserved(vllm_config), **unhooked(seams)},
    }
    if endpoint is not None:
        body["endpoint"] = endpoint
    return body


# -- per round ----------------------------------------------------------------------------------
def passes(worker: dict | None, decoding: bool) -> list[dict]:
    """The draft passes of one round from the model runner's facts: ``first`` = (width, fc, rows) of
    the pass over every scheduled token, ``later`` = (width, count) of the single-token passes."""
    if not worker or worker.get("first") is None:
        return []
    width, fc, _rows = worker["first"]
    out: list[dict] = [{"mode": "draft_extend" if decoding else "extend", "width": int(width),
                               "fc": bool(fc), "n": 1}]
    later = worker.get("later")
    if later and later[1] > 0:
        out.append({"mode": "decode", "width": int(later[0]), "fc": False, "n": int(later[1])})
    return out


def step_bodies(seq: int, t_ns: int, rounds: list[tuple], fresh: list[str], worker: dict | None,
                ctx: dict) -> list[dict]:
    """The step frames of one vLLM round: a ``prefill`` step for its requests that verified no drafts
    (``fresh``: starting, or drafting nothing this round), and a ``decode`` step for those that did.
    ``rounds``: (rid, draft ids, n committed, committed ids): n as vLLM's model runner returned them,
    the bonus included (accepted drafts = n - 1, vLLM's own count), the ids as vLLM kept them (it
    trims a request's tokens past its stop). The draft passes go with the
    decode step when there is one. ``ctx``: rid -> tokens in its context as the round ends."""
    out: list[dict] = []
    worker = worker or {}
    timing = {"draft_ms": worker.get("draft_ms"), "verify_ms": worker.get("verify_ms"), "extend_ms": None}
    capture = worker.get("capture")
    if fresh:
        out.append({"seq": seq, "t_ns": t_ns, "mode": "prefill", "bs": len(fresh), "rids": list(fresh),
                    "draft_ids": [[] for _ in fresh], "accepted": [0] * len(fresh), "bonus": [0] * len(fresh),
                    "accepted_ids": [[] for _ in fresh], "passes": [] if rounds else passes(worker, False),
                    "capture": capture, **timing})
        seq += 1
    if rounds:
        out.append({"seq": seq, "t_ns": t_ns, "mode": "decode", "bs": len(rounds),
                    "rids": [r[0] for r in rounds],
                    "draft_ids": [[int(x) for x in r[1]] for r in rounds],
                    "accepted": [max(r[2] - 1, 0) for r in rounds],
                    "bonus": [1 if r[2] > 0 else 0 for r in rounds],
                    "accepted_ids": [[int(x) for x in r[3]] for r in rounds],
                    "ctx_len": [int(ctx.get(r[0], 0)) for r in rounds],
                    "passes": passes(worker, True), "capture": capture,
                    "num_steps": worker.get("num_steps"), **timing})
    return out


def finished(rid: str, metrics) -> dict:
    """vLLM's own counts of one finished request (its ``RequestSpecDecodeMetrics``, on with
    ``per_request_spec_decode_metrics``): rounds, accepted drafts (bonus excluded), the histogram of
    rounds per number of accepted drafts. Without them only the rid (the viewer then judges nothing)."""
    out: dict = {"rid": str(rid)}
    hist = getattr(metrics, "histogram", None)
    if isinstance(hist, list) and len(hist) <= bodies.MAX_DRAFT_TOKENS + 1:
        counts = [int(x) for x in hist]
        out["verify_ct"] = sum(counts)
        out["correct_drafts"] = sum(i * n for i, n in enumerate(counts))
        out["histogram"] = counts
    return out
