"""Load-time facts: which draft weights SGLang consumed, skipped or never wrote, what ``d2t`` says,
where ``lm_head``/``embed_tokens`` came from, what the target captures; published as the sticky
``hello`` and ``load`` events (and a ``config`` event) once a publishing scheduler is built.

Runs only at startup, never on the decode hot path. Unwritten parameters are found exactly: every
parameter's ``weight_loader`` is wrapped for the duration of ``load_weights`` (the loader looks it
up with ``getattr(param, "weight_loader", default_weight_loader)``), so a name SGLang silently
drops, and a parameter nothing wrote, show up without guessing from values.
"""

from __future__ import annotations

import inspect
import os
import socket
import sys
import weakref

from eagle3scope.wire.aux_layers import capture_owner
from eagle3scope_shim import graph_capture, ring, seams
from eagle3scope_shim.seams import sglang_version
from eagle3scope_shim.version import __version__

_NOT_PARAMETERS = ("t2d",)  # checkpoint tensors SGLang reads on purpose without a parameter
#: Loaders that hold a checkpoint tensor back and write it later, fused with its partner:
#: kimi_k25_eagle3.py (Eagle3DeepseekV2ForCausalLM) caches ``q_a_proj`` / ``kv_a_proj_with_mqa``
#: until both are read, then writes ``fused_qkv_a_proj_with_mqa``. The first of the pair wrote
#: nothing when it was read; it counts as consumed once the fused write comes, skipped if it never does.
_FUSED = {"fused_qkv_a_proj_with_mqa": ("kv_a_proj_with_mqa", "q_a_proj")}


def _fused_key(name: str, parts: tuple[str, ...]) -> str:
    for part in parts:  # longest first
        name = name.replace(part, "*")
    return name


class LoadWatch:
    """Watches one ``load_weights`` call of a draft model. It holds the parameters weakly, and the
    model only while loading: after loading SGLang deletes the draft's own embedding (and head) and
    shares the target's (``set_embed``/``set_embed_and_head``, 0.5.23), and a reference kept here
    would keep those device tensors allocated (GBs per GPU)."""

    def __init__(self, model, facts) -> None:
        self.model = model  # while loading; None after finish
        self.facts = facts  # the shim's LoadFacts, where finish files this watch
        params = dict(model.named_parameters())
        self.params: dict[str, weakref.ref] = {name: weakref.ref(param) for name, param in params.items()}
        self.written: set[str] = set()
        self.consumed: list[str] = []
        self.skipped: list[str] = []
        self.ignored: list[str] = []
        self.tensors: dict[str, object] = {}
        self.tracked = True
        self._held: list[str] = []
        self._current: str | None = None
        self._hit = False
        self._fused: tuple[str, ...] | None = None
        self._restore: list[tuple] = []
        default = _default_weight_loader(model)
        for name, param in params.items():
            had = "weight_loader" in param.__dict__
            loader = param.__dict__.get("weight_loader", default)
            if loader is None:
                self.tracked = False
                continue
            param.weight_loader = self._wrap_loader(name, loader)
            self._restore.append((param, had, loader))

    def _wrap_loader(self, name, loader):
        def weight_loader(param, loaded_weight, *args, **kwargs):
            self.written.add(name)
            self._hit = True
            self._fused = next((parts for key, parts in _FUSED.items() if key in name), self._fused)
            return loader(param, loaded_weight, *args, **kwargs)

        return weight_loader

    def wrap(self, weights):
        """Yield the checkpoint's (name, tensor) pairs unchanged, noting which ones land."""
        self._hot = getattr(self.model, "hot_token_id", None)
        for item in weights:
            try:
                self._close_current()
                name = item[0]
                self._current, self._hit, self._fused = name, False, None
                if name.endswith(("d2t", "t2d")):
                    self.tensors[name.rsplit(".", 1)[-1]] = item[1].detach().to("cpu").clone()
            except Exception:
                pass
            yield item
        self._close_current()

    def _close_current(self) -> None:
        name = self._current
        if name is None:
            return
        self._current = None
        hot = getattr(self.model, "hot_token_id", None)
        if self._hit or hot is not self._hot:
            self.consumed.append(name)
            if self._fused:
                key = _fused_key(name, self._fused)
                for held in [n for n in self._held if _fused_key(n, self._fused) == key]:
                    self._held.remove(held)
                    self.consumed.append(held)
        elif name.rsplit(".", 1)[-1] in _NOT_PARAMETERS:
            self.ignored.append(name)
        elif any(part in name for parts in _FUSED.values() for part in parts):
            self._held.append(name)
        else:
            self.skipped.append(name)
        self._hot = hot

    def finish(self) -> None:
        self._close_current()
        self.skipped += self._held  # held back for a fused write that never came
        self._held = []
        restore_weight_loaders(self._restore)
        self.facts.draft_loads[id(self.model)] = self
        self.model = self._hot = None


def restore_weight_loaders(wrapped: list[tuple]) -> None:
    """Put back each (param, had its own, loader) a load watch wrapped, and forget them."""
    for param, had, loader in wrapped:
        if had:
            param.weight_loader = loader
        else:
            del param.weight_loader
    wrapped.clear()


def weights_facts(watch: LoadWatch, draft) -> dict:
    """What the draft's load did with each checkpoint tensor, and which parameters nothing wrote
    (those still the draft's own: one SGLang replaced, e.g. by the target's embedding, is not)."""
    now = dict(draft.named_parameters())
    unwritten = [n for n, ref in watch.params.items()
                 if n not in watch.written and (p := ref()) is not None and now.get(n) is p] if watch.tracked else None
    return {"consumed": watch.consumed, "skipped": watch.skipped, "unwritten": unwritten, "ignored": watch.ignored}


def _default_weight_loader(model):
    func = inspect.unwrap(type(model).load_weights)
    loader = getattr(sys.modules.get(func.__module__), "default_weight_loader", None)
    if loader is None:
        from sglang.srt.model_loader.weight_utils import default_weight_loader as loader
    return loader


# -- summaries -------------------------------------------------------------------------------
def d2t_summary(d2t, t2d, target_vocab: int | None) -> dict | None:
    """``d2t[i]`` is an offset (target id = i + d2t[i]); say whether it looks like absolute ids."""
    if d2t is None:
        return None
    import torch

    d = d2t.to(torch.long).flatten()
    n = d.numel()
    target = d + torch.arange(n)
    vocab = target_vocab if target_vocab is not None else int(target.max()) + 1
    out_of_range = int(((target < 0) | (target >= vocab)).sum())
    injective = int(torch.unique(target).numel()) == n
    consistent = None
    mask_ids = None
    if t2d is not None:
        mask_ids = t2d.to(torch.bool).flatten().nonzero().flatten()
        consistent = mask_ids.numel() == n and bool(torch.equal(mask_ids, torch.sort(target).values))
    absolute_ok = n > 0 and int(d.min()) >= 0 and int(d.max()) < vocab and int(torch.unique(d).numel()) == n
    if mask_ids is not None:
        looks_absolute = bool(absolute_ok and not consistent and mask_ids.numel() == n and torch.equal(mask_ids, torch.sort(d).values))
    else:
        looks_absolute = bool(absolute_ok and (out_of_range > 0 or not injective))
    return {
        "present": True,
        "size": n,
        "min": int(d.min()) if n else None,
        "max": int(d.max()) if n else None,
        "target_min": int(target.min()) if n else None,
        "target_max": int(target.max()) if n else None,
        "out_of_range": out_of_range,
        "injective": injective,
        "t2d_consistent": consistent,
        "looks_absolute": looks_absolute,
    }


def _ids(value):
    return None if value is None else [int(x) for x in value]


def _eagle_config(config) -> dict:
    value = getattr(config, "eagle_config", None)
    return value if isinstance(value, dict) else (vars(value) if value is not None else {})


def capture_now(shim):
    """The target's aux capture as it stands (host attributes only); same dict while unchanged. The
    models holding it are found once per target: every step reads it, and ``owner.model`` goes
    through torch's ``Module.__getattr__`` (capture_now was 9 µs a step in the engine, BENCHMARKS.md)."""
    if not shim.load.workers:
        return None
    target, where = shim.load.workers[-1][2], shim._capture_from
    if where is None or where[0] is not target:
        owner = capture_owner(target)
        where = shim._capture_from = (target, owner, getattr(owner, "model", None))
    _, owner, inner = where
    key = (bool(getattr(owner, "capture_aux_hidden_states", False)), tuple(getattr(inner, "layers_to_capture", ()) or ()))
    if key != shim._capture_key:
        shim._capture_key = key
        shim.capture = {"on": key[0], "layers": [int(x) for x in key[1]]}
    return shim.capture


def _offset_rule(requested, captured) -> str | None:
    if requested is None:
        return "default"
    if captured == [x + 1 for x in requested]:
        return "+1"
    if captured == requested:
        return "none"
    return "other"


def _resolved_use_aux(load, worker, target):
    if id(target) in load.aux_config:
        return load.aux_config[id(target)]["use_aux"]
    runner = getattr(getattr(worker, "target_worker", None), "model_runner", None)
    value = getattr(runner, "eagle_use_aux_hidden_state", None)
    return None if value is None else bool(value)


def tensor_facts(module) -> dict:
    """The full shape of ``module.weight`` on a TP-N server, from SGLang's own layer attributes:
    ``shape`` (all ranks together) and, only when this rank holds a shard, ``shard_shape``,
    ``parallel_dim`` and ``parallel_size``; vocabulary layers add ``org_vocab_size`` (the real
    rows) and ``padded_size`` (rows after SGLang's padding). ``layers/vocab_parallel_embedding.py``
    shards rows by ``num_embeddings_per_partition`` of ``num_embeddings_padded``; ``layers/linear.py``
    ColumnParallelLinear rows by ``output_size_per_partition``, RowParallelLinear columns by
    ``input_size_per_partition`` (0.5.23; the same names in 0.5.10)."""
    weight = getattr(module, "weight", None)
    if weight is None:
        return {}
    shard = [int(x) for x in weight.shape]
    full = list(shard)
    dim = None
    padded, per = getattr(module, "num_embeddings_padded", None), getattr(module, "num_embeddings_per_partition", None)
    if padded is not None and per is not None:
        dim, full[0] = 0, int(padded)
    elif getattr(module, "output_size_per_partition", None) is not None and len(full) == 2:
        dim, full[0] = 0, int(module.output_size)
    elif getattr(module, "input_size_per_partition", None) is not None and len(full) == 2:
        dim, full[1] = 1, int(module.input_size)
    if dim is not None and full[dim] < shard[dim]:
        # the weight is not the layer's own (e.g. a head SGLang replaced by the target's, wider
        # than the draft's vocabulary): its real shape is the fact, not a fraction of a shard
        dim, full = None, list(shard)
    facts: dict = {"shape": full}
    if dim is not None and full[dim] != shard[dim] and shard[dim]:
        facts.update(shard_shape=shard, parallel_dim=dim, parallel_size=full[dim] // shard[dim])
    if getattr(module, "org_vocab_size", None) is not None:
        facts.update(org_vocab_size=int(module.org_vocab_size), padded_size=int(padded if padded is not None else full[0]))
    return facts


def _source(param, target_param, written: bool) -> str:
    if target_param is not None and param is target_param:
        return "target"
    return "checkpoint" if written else "init"


def _fc(facts: dict) -> dict | None:
    """``{in, out}`` of the full fc (a column-parallel one, the MLA draft's, is sharded by out),
    plus where this rank's shard lies when it holds one."""
    if not facts:
        return None
    out, in_ = facts["shape"][:2]
    extra = {k: facts[k] for k in ("shard_shape", "parallel_dim", "parallel_size") if k in facts}
    return {"in": in_, "out": out, **extra}


def load_body(shim, kind: str, worker, target, draft) -> dict:
    text_model = capture_owner(target)  # a wrapper's (Kimi-K2.5's) language model: its config, head, embed
    cfg, tcfg = draft.config, text_model.config
    watch = shim.load.draft_loads.get(id(draft))
    written = watch.written if watch is not None else set()
    eagle_cfg = _eagle_config(cfg)
    capture = capture_now(shim) or {"on": False, "layers": []}
    last_call = shim.load.aux_calls[-1] if shim.load.aux_calls else None
    requested = last_call["requested"] if last_call else None
    inner = getattr(draft, "model", None)
    fc = getattr(inner, "fc", None)
    fc_facts = tensor_facts(fc) if fc is not None else {}
    lm_head, embed = getattr(draft, "lm_head", None), getattr(inner, "embed_tokens", None)
    target_lm = getattr(getattr(text_model, "lm_head", None), "weight", None)
    target_embed = getattr(getattr(getattr(text_model, "model", None), "embed_tokens", None), "weight", None)
    if lm_head is not None and lm_head is embed:
        lm_source = "tied"
    elif lm_head is not None:
        lm_source = _source(lm_head.weight, target_lm, "lm_head.weight" in written)
    else:
        lm_source = None
    weights = None if watch is None else weights_facts(watch, draft)
    return {
        "draft_class": type(draft).__name__,
        "target_class": type(target).__name__,
        "hidden_size": int(cfg.hidden_size),
        "target_hidden_size": int(getattr(cfg, "target_hidden_size", None) or tcfg.hidden_size),
        "num_target_layers": int(tcfg.num_hidden_layers),
        "draft_vocab_size": getattr(cfg, "draft_vocab_size", None),
        "target_vocab_size": int(tcfg.vocab_size),
        "fc": _fc(fc_facts),
        "aux": {
            "configured": _ids(eagle_cfg.get("eagle_aux_hidden_state_layer_ids")),
            "use_aux": _resolved_use_aux(shim.load, worker, target),
            "captured": capture["layers"] if capture["on"] else [],
            "capture_on": capture["on"],
            "offset_rule": _offset_rule(requested, last_call["captured"]) if last_call else None,
            "requested": requested,
            "calls": len(shim.load.aux_calls),
        },
        "weights": weights,
        "d2t": d2t_summary(watch.tensors.get("d2t") if watch else None, watch.tensors.get("t2d") if watch else None, int(tcfg.vocab_size)),
        "lm_head": {"source": lm_source, "shape": None, **(tensor_facts(lm_head) if lm_head is not None else {})},
        "embed_tokens": {"source": None if embed is None else _source(embed.weight, target_embed, "model.embed_tokens.weight" in written),
                         **(tensor_facts(embed) if embed is not None else {})},
    }


def _server_args(sa) -> dict:
    def get(name):
        value = getattr(sa, name, None)
        return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)

    device = get("device") or "cuda"
    return {
        "algorithm": get("speculative_algorithm"),
        "num_steps": get("speculative_num_steps"),
        "topk": get("speculative_eagle_topk"),
        "num_draft_tokens": get("speculative_num_draft_tokens"),
        "dtype": get("dtype"),
        "cuda_graph": device != "cpu" and not get("disable_cuda_graph"),
        "model_path": get("model_path"),
        "draft_model_path": get("speculative_draft_model_path"),
        "attention_backend": get("attention_backend"),
    }


def _class_name(obj) -> str | None:
    return None if obj is None else type(obj).__name__


def _parallel_facts(shim) -> dict:
    """``parallel``, ``publisher_rank`` and the endpoints of the hello, from ``shim.topology``."""
    topo = shim.topology or {}
    parallel = {k: v for k, v in (topo.get("parallel") or {}).items() if k != "publishers"} or None
    rank = topo.get("rank") or {}
    pub = shim.publisher
    return {
        "tp_rank": rank.get("tp_rank", 0),
        "publisher_index": topo.get("index", 0),  # which of the server's publishers: its DP or attention-DP rank
        "parallel": parallel,
        "publisher_rank": {
            "tp_rank": rank.get("tp_rank", 0), "dp_rank": rank.get("dp_rank", 0),
            "attn_tp_rank": rank.get("attn_tp_rank", 0), "pp_rank": rank.get("pp_rank", 0),
            "reason": topo.get("reason") or "",
        },
        "endpoint": None if pub is None else pub.endpoint,
        "siblings": shim.siblings,
    }


def _observable(shim, sa) -> dict:
    """What the shim sees on this server, as facts. A pass that replays a graph (or runs compiled)
    runs none of the draft forward's Python; its width and fc are then read at the caller that
    hands the draft its hidden states (``seams.DRAFT_INPUTS``), so they stay visible while that
    caller's seam is attached."""
    kind, worker = (shim.load.workers[-1][0], shim.load.workers[-1][1]) if shim.load.workers else (None, None)
    replays = graph_capture.replayed_passes(kind, worker)
    compiled = bool(getattr(sa, "enable_torch_compile", False))
    draft_seen = "draft_model" not in shim.unobserved  # else its passes say nothing, eager or replayed
    forward_seen = draft_seen and any(shim.seams.status.get(n) == "attached" for n in seams.OBSERVING_SEAMS["draft_model"])
    callers = {"prefill": "draft_extend_prefill", "decode": "draft", "draft_extend": "draft_extend"}

    def seen(name: str) -> bool:
        eager = forward_seen and not replays.get(name, False) and not compiled
        return eager or (draft_seen and shim.seams.status.get(f"{kind}.{callers[name]}") == "attached")

    return {
        "steps": True,
        "draft_ids": True,
        "accepted": True,
        "passes_prefill": seen("prefill"),
        "passes_draft_decode": seen("decode"),
        "passes_draft_extend": seen("draft_extend"),
        "graph_prefill": replays.get("prefill", False),
        "graph_draft_decode": replays.get("decode", False),
        "graph_draft_extend": replays.get("draft_extend", False),
        "device_timings": ring.times_device(sa) and "worker" not in shim.unobserved,
    }


def hello_body(shim, scheduler) -> dict:
    sa = getattr(scheduler, "server_args", None)
    server_args = _server_args(sa)
    overlap = getattr(scheduler, "enable_overlap", None)  # SGLang's decision, not the flag: it turns it off itself
    if isinstance(overlap, bool):
        server_args["overlap_schedule"] = overlap
    return {
        "pid": os.getpid(),
        "started": shim.started_ns,
        "host": socket.gethostname(),
        **_parallel_facts(shim),
        "sglang_version": sglang_version(),
        "shim_version": __version__,
        "worker": shim.load.workers[-1][0] if shim.load.workers else None,
        "worker_class": _class_name(getattr(scheduler, "draft_worker", None)),
        "server_args": server_args,
        "observable": _observable(shim, sa),
        # what each draft graph captured (width, fc per mode and batch size) and the aux layers the
        # target's graphs hold: replays run with these, whatever is configured since
        "graphs": {"captured": graph_capture.captured(shim.load), "target_aux": shim.load.target_graph_aux},
        "control": None if shim.aux_channel is None else shim.aux_channel.endpoint,
        "seams": dict(shim.seams.status),
        "unobserved": dict(shim.unobserved),
    }


def config_body(load, origin: str) -> dict:
    call = load.aux_calls[-1]
    return {
        "layers": call["requested"],
        "captured": call["captured"] if call["on"] else [],
        "applied": True,
        "reason": "",
        "origin": origin,
        "request_id": None,
    }


def publish_config(shim, origin: str) -> dict | None:
    """Publish the latest aux-layer change; the body, None when there was none."""
    if not shim.load.aux_calls:
        return None
    body = config_body(shim.load, origin)
    shim.publisher.submit("config", body)
    if origin != "startup":
        shim.verdict.applied_change(body)
    return body


def refresh_hello(shim) -> None:
    """Re-send hello after a graph capture (a recapture, or a graph captured after startup)."""
    if shim.publisher is not None and shim.hello_args is not None:
        shim.publisher.set_sticky("hello", hello_body(shim, *shim.hello_args))


def publish_startup(shim, scheduler) -> None:
    pub = shim.publisher
    shim.hello_args = (scheduler,)
    hello, load = hello_body(shim, scheduler), None
    pub.set_sticky("hello", hello)
    if shim.load.workers:
        kind, worker, target, draft = shim.load.workers[-1]
        load = load_body(shim, kind, worker, target, draft)
        pub.set_sticky("load", load)
    config = publish_config(shim, "startup")
    metrics = bool(getattr(getattr(scheduler, "server_args", None), "enable_metrics", False))
    shim.verdict.at_load(hello, load, config, publisher=pub, metrics=metrics)
