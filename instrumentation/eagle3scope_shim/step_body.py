"""The publisher thread's half of a step: the ``step`` body built from the :class:`~eagle3scope_shim.shim_state.Step`
record the step hook handed over whole (:func:`finalize_step`), after the slot's copies are done. The
hooks on the scheduler's thread only append what they see; every derivation (per-request splitting,
the bonus, the tree path, fc of the passes a caller read, merging runs of passes alike) is made here,
off the hot path.
"""

from __future__ import annotations

from eagle3scope.wire import bodies
from eagle3scope_shim.ring import HostRing, listed
from eagle3scope_shim.shim_state import Step


def finalize_step(shim, step: Step) -> bodies.Step:
    """Publisher thread: wait for the step's copies, build the ``step`` body (with the device phase
    times its slot marked), release the slot."""
    slot = step.slot
    if slot is None:
        return _step_body(shim, step)
    try:
        device_times = slot.ring.wait(slot)  # the slot's event was recorded after every mark
        body = _step_body(shim, step)
        body.update(device_times)
        return body
    finally:
        HostRing.release(slot)


def _step_body(shim, step: Step) -> bodies.Step:
    seq, t_ns, rids, capture = step.seq, step.t_ns, step.rids, step.capture
    bs = len(rids)
    accepted, bonus, accepted_ids = [0] * bs, [0] * bs, [[] for _ in range(bs)]
    width = 0
    if step.draft is not None and bs:
        tokens = listed(step.draft)
        width = len(tokens) // bs
        draft_ids = [tokens[i * width + 1 : (i + 1) * width] for i in range(bs)]
    else:
        draft_ids = [[] for _ in range(bs)]
    if step.verify is not None and bs:
        kind, counts, ids = step.verify
        ids = listed(ids) if ids is not None else []
        if kind == "v2":
            lens = listed(counts)
            stride = len(ids) // bs if bs else 0
            for i, n in enumerate(lens):
                accepted[i], bonus[i] = max(n - 1, 0), 1 if n > 0 else 0
                accepted_ids[i] = ids[i * stride : i * stride + n]
        else:
            pos = 0
            for i, n in enumerate(counts):
                accepted[i], bonus[i] = n, 1
                accepted_ids[i] = ids[pos : pos + n + 1]
                pos += n + 1
    path = _tree_path(step.path, accepted, bs, width) if step.path is not None and width else None
    body: bodies.Step = {
        "seq": seq,
        "t_ns": t_ns,
        "mode": "prefill" if step.prefill else "decode",
        "bs": bs,
        "rids": rids,
        "draft_ids": draft_ids,
        "accepted": accepted,
        "bonus": bonus,
        "accepted_ids": accepted_ids,
        "passes": merged_passes(shim.load, step.passes),
        "capture": capture,
        "draft_ms": _ms(step.draft_ns),
        "verify_ms": _ms(step.verify_ns),
        "extend_ms": _ms(step.extend_ns),
    }
    if path is not None:
        body["accepted_path"] = path
    if step.num_steps is not None:
        body["num_steps"] = int(step.num_steps)
    if getattr(step.ctx_len, "is_cpu", False):  # a device tensor would need a sync: left out
        ctx = step.ctx_len.tolist()
        if len(ctx) == bs:
            body["ctx_len"] = ctx
    if step.reqs is not None and len(step.reqs) == bs:
        greedy = _greedy(step.reqs)
        if greedy is not None:
            body["greedy"] = greedy
    if step.constrained is not None:
        body["constrained"] = step.constrained
    if step.discarded:
        _drop_discarded(body, set(step.discarded))
    shim.verdict.observe(body)
    return body


def _greedy(reqs: tuple) -> list[bool] | None:
    """Per request, whether SGLang decodes it greedily (``top_k <= 1``); None when a request does not say."""
    try:
        return [r.sampling_params.top_k <= 1 for r in reqs]
    except (AttributeError, TypeError):
        return None


def _ms(ns: int | None) -> float | None:
    return None if ns is None else ns / 1e6


def _tree_path(index, accepted: list, bs: int, width: int) -> list:
    """Per request, the accepted draft nodes as indices into its ``draft_ids`` (depth order): row i of
    ``accept_index`` is [root, node at depth 1, ...] in global node numbering (i * width + j, where
    node 0 is the root that ``draft_ids`` leaves out)."""
    flat = listed(index)
    if flat and type(flat[0]) is list:  # a CPU snapshot keeps the [bs, steps + 1] shape; ring views are flat
        flat = [x for row in flat for x in row]
    s1 = len(flat) // bs
    return [[flat[i * s1 + d] - i * width - 1 for d in range(1, accepted[i] + 1)] for i in range(bs)]


def _drop_discarded(body: bodies.Step, discarded: set) -> None:
    """Keep only the requests SGLang committed this round; the others are listed in ``discarded``."""
    keep = [i for i, rid in enumerate(body["rids"]) if rid not in discarded]
    if len(keep) == body["bs"]:
        return
    body["discarded"] = [rid for rid in body["rids"] if rid in discarded]
    for key in bodies.PER_REQUEST:
        if key in body:
            body[key] = [body[key][i] for i in keep]
    body["bs"] = len(keep)


def merged_passes(load, passes: list[tuple]) -> list[bodies.Pass]:
    """The step's ``passes`` as the hooks appended them, fc decided (:func:`fc_of`) where a caller read
    the width, and each run of passes alike (mode, width, fc, graph) merged into one with their count."""
    out: list[bodies.Pass] = []
    last = None
    for mode, width, fc, n, graph in passes:
        fc = fc_of(load, width) if fc is None else bool(fc)
        key = (mode, width, fc, graph)
        if key == last:
            out[-1]["n"] += n
            continue
        last = key
        body: bodies.Pass = {"mode": mode, "width": width, "fc": fc, "n": n}
        if graph is not None:  # read at the caller: the pass replayed the graph captured for this batch size
            body["replayed"] = True
            body["graph_bs"] = graph
        out.append(body)
    return out


def fc_of(load, width: int) -> bool:
    """Whether the draft applies fc to hidden states of ``width`` (EAGLE-3: iff it differs from the
    embedding width; an EAGLE-1/2 draft always), as a caller of the draft can tell. Asked on the
    publisher thread, of the passes a caller read (``Step.passes`` with fc None): the draft's facts
    are read once, as its worker is built."""
    embed = load.draft_embed_width
    return load.draft_fc_always or (embed is not None and width != embed)
