"""The eagle3scope wire schema: msgpack frames, versioned, safe to decode from untrusted bytes.

Both sides import this module: the shim inside SGLang encodes with :func:`encode_frame`, the
viewer, recorder and replayer decode with :func:`decode_frame`. It depends on msgpack and msgspec only.

A frame is a msgpack map ``{"v": [major, minor], "k": kind, "src": publisher, "n": frame_no,
"t": time_ns, "b": body}``. ``n`` counts every frame a publisher sends, so a gap tells the viewer
that frames were lost in transit. Bodies per kind (all keys are short ASCII strings; their types and
bounds are :mod:`bodies`' records, which frames are decoded into):

``hello`` (process identity, re-sent periodically so late viewers learn it)
    pid, host, tp_rank, publisher_index (which of the server's publishers: its DP or attention-DP
    index; older shims sent it as dp_rank, still read), engine ("sglang"|"vllm"; absent: sglang) and
    engine_version (older shims: sglang_version), shim_version, worker ("v1"|"v2"|None),
    server_args: {algorithm, num_steps, topk, num_draft_tokens, dtype, cuda_graph, model_path,
    draft_model_path, attention_backend, overlap_schedule (whether SGLang runs the overlap loop;
    absent from older shims)}, observable: {name: bool} (what this configuration
    lets the shim see, e.g. draft passes hidden inside CUDA graphs), control: endpoint or None.
    Optional: seams: {seam name: "attached"|"missing"|"failed"|"disabled"|"unhooked"} (the shim's
    hook status at startup; later changes arrive as ``hook`` events); started: the shim's start time
    (ns), so a process restarted under the same pid and ``src`` (a container) is a new run;
    worker_class (the class of SGLang's speculative worker, e.g. "EAGLEWorkerV2",
    "MultiLayerEagleWorkerV2"); unobserved: {"worker"|"draft_model": why the hooks cannot see it}
    (the ``hook`` events' "unhooked" details);
    parallel: {tp_size, dp_size, pp_size, attn_tp_size, attn_dp_size, ep_size} (SGLang's names);
    publisher_rank: {tp_rank, dp_rank, attn_tp_rank, pp_rank, reason} (why this scheduler publishes:
    SGLang's entry rank of its DP replica or attention-DP group, on the last pipeline stage);
    endpoint (the one bound) and siblings: [endpoint of every publisher of this server, by DP
    index] (None when they cannot be derived), which viewers subscribe to as well.
    observable names the shim sends: steps, draft_ids, accepted, passes_prefill /
    passes_draft_decode / passes_draft_extend (the width and fc of those draft passes are seen,
    eagerly or at their caller), graph_prefill / graph_draft_decode / graph_draft_extend (that pass
    replays a captured graph on this server), device_timings. graphs: {captured: [{mode, bs,
    width, fc}] (what each draft graph captured, once), target_aux: {on, layers} | None (the aux
    layers the target's graphs were captured with)}; hello is re-sent when a graph is captured.
``load`` (load-time report of the draft; re-sent periodically)
    draft_class, target_class, hidden_size, target_hidden_size, num_target_layers,
    draft_vocab_size, target_vocab_size, fc: {in, out} | None,
    aux: {configured, use_aux, captured, capture_on, offset_rule},
    weights: {consumed: [..], skipped: [..], unwritten: [..]},
    Optional: aux.requested (the ids SGLang passed to ``set_eagle3_layers_to_capture``, None =
    its default), aux.calls (how many such calls), weights.ignored (checkpoint tensors SGLang
    reads on purpose without a parameter, e.g. ``t2d``); weights.unwritten is None when the
    loader could not be watched. offset_rule: "+1" | "none" | "default" | "other" | None.
    d2t: {present, size, min, max, target_min, target_max, out_of_range, injective,
          t2d_consistent, looks_absolute} | None,
    lm_head: {source: "checkpoint"|"target"|"init"|"tied", shape: [rows, cols]},
    embed_tokens: {source: ...}
    Optional on lm_head, embed_tokens and fc (on a TP-N server): shape is the full tensor (all
    ranks), shard_shape / parallel_dim / parallel_size this rank's shard when it holds one,
    org_vocab_size / padded_size the real and padded rows of a vocabulary layer. Recordings
    without them hold the publishing rank's own shape. d2t is always the checkpoint's full tensor.
    Meanings the contract rules rely on: aux.configured = the draft config's
    eagle_aux_hidden_state_layer_ids (None when absent), aux.captured = the target's
    layers_to_capture (input-of-layer indices), aux.offset_rule = what the target did with the
    ids it was last handed: "+1" | "none" (used as given) | "default" (called without ids) | "other";
    weights.skipped = checkpoint names the loader never consumed, weights.unwritten = draft
    parameters no checkpoint tensor wrote (excluding ones set from the target on purpose).
``step`` (one speculative round, or one prefill)
    seq (monotonic per publisher), t_ns, mode ("decode"|"prefill"), bs, rids: [str],
    draft_ids: [[target-vocab ids proposed per request]], accepted: [drafts accepted, bonus
    EXCLUDED], bonus: [0|1 per request], accepted_ids: [[committed ids incl. bonus]],
    passes: [{mode, width, fc, n}] (draft-model forwards: forward mode, width of the hidden
    states entering the draft, whether fc ran, how many such calls were folded in; optional
    replayed: true and graph_bs for passes whose draft forward ran no Python (a replayed graph, or
    a compiled region), read where SGLang hands the draft its hidden states; graph_bs = the batch
    size of the captured graph it pads to, 0 = no capture of it was seen),
    capture: {on, layers} | None, draft_ms, verify_ms, extend_ms (None when unknown; host
    wall time around the call, not device time: under the overlap loop or a graph replay only the
    launch). Optional: draft_device_ms, verify_device_ms, extend_device_ms (device time between
    timing events recorded on the current stream at the phase's boundaries, where the hello says
    observable.device_timings: true; a phase left out was not marked in that round). A "prefill" step carries passes and capture
    only: its draft_ids/accepted_ids are empty and accepted/bonus 0. SGLang may run one more
    decode round for a request that already finished; its tokens are discarded by SGLang.
    Optional: num_steps (this round's step budget; adaptive steps vary it, and every request's
    accepted is at most it), accepted_path (trees, topk > 1: per request the indices into its
    draft_ids of the accepted nodes, depth order, one per accepted draft; draft_ids are then tree
    nodes in score order, not a chain), discarded (rids SGLang ran in this round but did not commit,
    e.g. a finished request's extra overlap tick: the per-request lists then hold only the committed
    requests, so every consumer counts what SGLang counts), ctx_len (per request, the tokens in its
    context as the round ends: SGLang's host-side ``seq_lens_cpu``), greedy (per request, true when
    SGLang decodes it greedily: its ``top_k <= 1``), constrained ([bool per request]: a grammar
    constrains it, regex / JSON schema / EBNF / structural tag; only in steps with such a request, so
    its absence means none, or a recording made before the field).
``config`` (aux-layer configuration changed or refused)
    layers, captured, applied (bool), reason, origin ("startup"|"control"), request_id, and
    pause_ms only when the change recaptured the target's CUDA graphs (the serving pause).
``heartbeat``
    steps, dropped (frames the shim dropped before sending), hook_failures, queued; optional
    shim_us {seam: µs} (wall time in the shim's own hook bodies per seam since the last heartbeat,
    SGLang's wrapped calls excluded; seams without any left out), step_us (wall time of the step
    seams' whole calls over the same interval, their hooks included: the rounds), round_shim_us (the
    part of shim_us spent within those calls: the step seam's hooks and the hooks that run inside
    it, so round_shim_us / step_us is the shim's share of the rounds; the commit seam and load-time
    hooks run outside them) and publisher_us (the shim's publisher thread's CPU time turning events into frames: finalize, pack,
    send; it holds the GIL for all of it; in recordings made before 2026-12-05 it is wall time).
    Optional: ring: {slots, capacity, allocations, late_allocations, oversize} (the shim's host
    buffers for device snapshots; late_allocations counts allocations after the first step).
``hook``
    seam, status ("attached"|"missing"|"failed"|"disabled"|"unhooked"), detail. "unhooked" names a
    part of the server the hooks cannot see: seam "worker" (SGLang's speculative worker is another
    class) or "draft_model" (the draft's forward is not an EAGLE-3 draft class the shim hooks).
``finish`` (requests SGLang finished, sent as it emits their final output; newer shims only)
    seq (the last step published before it), dropped (the shim's dropped frames so far, as the
    heartbeat counts them), requests: [{rid, verify_ct, correct_drafts, histogram}]: SGLang's own
    per-request counts, the ones ``meta_info`` reports (``spec_verify_ct``, ``spec_num_correct_drafts``,
    ``spec_correct_drafts_histogram``: rounds, accepted drafts with the bonus excluded, rounds per
    number of accepted drafts); a field the release does not keep is left out. The viewer checks its
    tallies of the steps against them (the ``accounting-mismatch`` rule).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import msgpack
import msgspec

from eagle3scope.wire import bodies
from eagle3scope.wire.bodies import INT64_MAX, KINDS, MAX_NAME, MAX_PUBLISHERS, BodyError, is_decode_step  # noqa: F401

SCHEMA_MAJOR = 1
SCHEMA_MINOR = 0

#: kinds that describe a publisher's state rather than a step: what seeking in a recording replays
STATE_KINDS = ("hello", "load", "config", "hook", "heartbeat")

#: Draft forward modes whose input must be the target's (k x H)-wide aux features. Draft decode
#: steps feed back the draft's own H-wide state and are legitimately narrow.
FEATURE_CARRYING_MODES = frozenset({"extend", "draft_extend", "draft_extend_v2", "mixed"})

#: hard ceiling for one frame (``--max-frame-bytes`` cannot go above it; recordings are read up to it)
MAX_FRAME_BYTES = 8 * 1024 * 1024
#: what a subscriber accepts unless told otherwise: a step is ~300 B, a load report a few KB
DEFAULT_MAX_FRAME_BYTES = 1024 * 1024
_LIMITS = dict(
    max_str_len=1 << 20,
    max_bin_len=1 << 22,
    max_array_len=1 << 18,
    max_map_len=1 << 12,
    max_ext_len=0,
)


class FrameError(ValueError):
    """The bytes are not a well-formed eagle3scope frame.

    ``kind`` and ``src`` name the frame when its envelope could be read (None otherwise), so a
    viewer can report bad frames once per kind per publisher.
    """

    def __init__(self, message: str, *, kind: str | None = None, src: str | None = None) -> None:
        super().__init__(message)
        self.kind, self.src = kind, src


class SchemaVersionError(FrameError):
    """The frame comes from a newer, incompatible schema major version."""


@dataclass(slots=True)
class Frame:
    """One frame: ``body`` is the map as sent (what recordings store, unknown fields included),
    ``record`` its typed record (:mod:`bodies`; None for a kind this schema does not know)."""

    kind: str
    src: str
    n: int
    t: int
    body: dict
    minor: int = SCHEMA_MINOR
    _record: object = field(default=None, repr=False, compare=False)

    @property
    def known(self) -> bool:
        return self.kind in KINDS

    @property
    def record(self):
        """The body's record; read on first use for a frame built in memory rather than decoded."""
        record = self._record
        if record is None and self.kind in KINDS:
            record = self._record = bodies.read(self.kind, self.body)
        return record

    def to_dict(self) -> dict:
        return {"v": [SCHEMA_MAJOR, self.minor], "k": self.kind, "src": self.src, "n": self.n, "t": self.t, "b": self.body}


def encode_frame(kind: str, body: dict, *, src: str, n: int, t: int | None = None,
                 packer: FramePacker | None = None) -> bytes:
    """Pack one frame. ``body`` is a body record (:mod:`bodies`) or a map of msgpack-native types (no
    tensors); a record packs as the map of its fields, those left at their default omitted. A sender that packs
    many frames on one thread passes its own ``packer`` (:func:`frame_packer`): the same bytes, without
    building a packer per frame."""
    packer = packer or frame_packer()
    return frame_of_packed(kind, packer.pack(body), src=src, n=n, t=t, packer=packer)


def frame_of_packed(kind: str, packed_body: bytes, *, src: str, n: int, t: int | None, packer: FramePacker) -> bytes:
    """The frame whose body ``packed_body`` already is (``packer.pack(body)``): the bytes
    :func:`encode_frame` gives, so a sender can pack bodies first and number frames only as it sends
    them. The envelope is a map of six entries whose last, ``b``, is the body."""
    head = packer.pack({"v": [SCHEMA_MAJOR, SCHEMA_MINOR], "k": kind, "src": src, "n": n,
                        "t": time.time_ns() if t is None else t})
    return _SIX_ENTRIES + head[1:] + _BODY_KEY + packed_body


#: the envelope's map header (a fixmap of six entries; the five without the body pack as 0x85) and the body's key
_SIX_ENTRIES, _BODY_KEY = b"\x86", msgpack.packb("b")


class FramePacker:
    """Packs a body record or map (msgspec's encoder: a map packs to the bytes msgpack's
    ``Packer(use_bin_type=True)`` gives it, in a third of the time)."""

    __slots__ = ("pack",)

    def __init__(self) -> None:
        self.pack = msgspec.msgpack.Encoder().encode


def frame_packer() -> FramePacker:
    """A packer for :func:`encode_frame`, for one thread at a time (it resets itself after a failed pack)."""
    return FramePacker()


def _refuse_ext(code: int, data: bytes) -> Any:
    raise FrameError(f"msgpack extension type {code} is not allowed")


def unpack_untrusted(data, *, limits: dict = _LIMITS, max_bytes: int = MAX_FRAME_BYTES, what: str = "frame",
                     error: type[ValueError] = FrameError) -> dict:
    """One msgpack map from untrusted bytes: a size cap on the whole and on every container, no
    extension types. Anything else raises ``error`` with a message naming ``what`` was wrong."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise error(f"{what} must be bytes, got {type(data).__name__}")
    if len(data) > max_bytes:
        raise error(f"{what} of {len(data)} bytes exceeds the {max_bytes}-byte limit")
    try:
        obj = msgpack.unpackb(data, raw=False, strict_map_key=True, ext_hook=_refuse_ext, **limits)
    except Exception as exc:  # msgpack raises a zoo of types on garbage
        raise error(f"not a msgpack {what}: {type(exc).__name__}: {exc}") from None
    if not isinstance(obj, dict):
        raise error(f"{what} must be a map, got {type(obj).__name__}")
    return obj


def decode_frame(data: bytes, *, max_bytes: int = MAX_FRAME_BYTES) -> Frame:
    """Decode and check one frame from untrusted bytes (envelope and body, into its record: :func:`bodies.read`).

    Raises :class:`FrameError` for anything malformed and :class:`SchemaVersionError` for a newer
    major version. Unknown kinds and newer minor versions decode fine (``Frame.known`` tells).
    """
    obj = unpack_untrusted(data, max_bytes=max_bytes)
    version = obj.get("v")
    if not (isinstance(version, list) and len(version) == 2 and type(version[0]) is int and type(version[1]) is int):
        raise FrameError(f"frame has no valid schema version 'v': {version!r}")
    major, minor = version
    if major > SCHEMA_MAJOR:
        raise SchemaVersionError(
            f"frame uses eagle3scope schema {major}.{minor}, this viewer understands {SCHEMA_MAJOR}.x: upgrade eagle3scope"
        )
    if major < SCHEMA_MAJOR:
        raise SchemaVersionError(f"frame uses obsolete eagle3scope schema {major}.{minor}: upgrade the shim in the server")
    kind, src, n, t, body = obj.get("k"), obj.get("src"), obj.get("n"), obj.get("t"), obj.get("b")
    if type(kind) is not str or not kind or len(kind) > MAX_NAME:
        raise FrameError(f"frame has no kind 'k': {str(kind)[:60]!r}")
    if type(src) is not str or len(src) > MAX_NAME:
        raise FrameError(f"frame has no publisher id 'src': {str(src)[:60]!r}", kind=kind)
    if type(n) is not int or type(t) is not int or not (0 <= n <= INT64_MAX and 0 <= t <= INT64_MAX):
        raise FrameError("frame counter 'n' and time 't' must be non-negative 64-bit integers", kind=kind, src=src)
    if type(body) is not dict:
        raise FrameError(f"frame body 'b' must be a map, got {type(body).__name__}", kind=kind, src=src)
    try:
        record = bodies.read(kind, body)
    except BodyError as exc:
        raise FrameError(f"invalid {kind} frame: {exc}", kind=kind, src=src) from None
    return Frame(kind, src, n, t, body, minor, record)
