"""CPU stand-in for the EAGLE draft worker's CUDA graphs (``EAGLE3SCOPE_CPU_GRAPHS=1``, ``demo --graphs``).

What it stands in for: on a CUDA server SGLang 0.5.23's ``EagleDraftWorker._capture_cuda_graphs``
builds ``EAGLEDraftCudaGraphRunner`` (the draft decode steps, ``draft_forward``) and
``EAGLEDraftExtendCudaGraphRunner`` (the draft-extend pass after verify, ``model.forward``),
which capture one ``torch.cuda.CUDAGraph`` per shape through ``FullCudaGraphBackend`` and
replay it from then on. On a CPU ``_capture_cuda_graphs`` returns at once (``_is_cpu``), so
every draft pass runs its Python. Here the same two worker slots (``cuda_graph_runner``,
``cuda_graph_runner_for_draft_extend``) get runners with the interface SGLang calls
(``can_run_graph(forward_batch)``, ``execute(forward_batch[, select_index])``) and a CPU graph
object, :class:`OpGraph`.

Semantics kept from CUDA graphs:

- capture runs the Python forward once per shape (batch size, and all-greedy or not under
  rejection sampling, SGLang's variant label), inside SGLang's own ``model_capture_mode()``, so
  code asking ``get_is_capture_mode()`` gets the answer a CUDA capture gives; every tensor op
  it dispatches is recorded with the very tensors it read and wrote (static memory: the graph
  keeps them alive, as a CUDA graph keeps its pool);
- the inputs are static buffers: capture runs on private copies of the batch's tensors, replay
  copies the new batch's tensors into them (same shapes, else the batch runs eagerly, as
  ``can_run_graph`` refuses a shape never captured);
- replay re-executes the recorded ops on that memory and returns the capture's output tensors,
  overwritten at every replay: no Python of the draft's forward runs, nor any hook inside it;
- a host sync inside the captured region (``item``, ``nonzero``, ...) fails the capture, as it
  fails a CUDA capture; that shape then stays eager;
- attention is a break: the recorded call to the attention backend runs eagerly at replay, with
  metadata planned for the live batch just before, as SGLang's BREAKABLE backend
  (``runner_backend/breakable_cuda_graph_backend.py``) runs attention between graph segments.

Differences, on purpose, in the default mode (``=1``): a shape is captured at its first use,
not at startup (so no dummy batches are needed), and there is no padding to a captured bucket
(one graph per exact batch size). Prefill stays eager (SGLang's prefill graphs are another runner).

The strict mode (``EAGLE3SCOPE_CPU_GRAPHS=strict``) keeps none of those differences but the
graph object itself: the slots get SGLang's own ``EAGLEDraftCudaGraphRunner`` and
``EAGLEDraftExtendCudaGraphRunner`` (:func:`strict_runners`), whose graph backend is
:class:`OpGraphBackend` instead of ``FullCudaGraphBackend``. So, as on a GPU:

- every size of SGLang's capture list (``get_batch_sizes_to_capture``; ``EAGLE3SCOPE_CPU_GRAPHS_BS``
  narrows it) is captured while the scheduler is built, before the shim's publisher exists, from
  SGLang's own dummy batches in its static buffers;
- a batch is padded up to the next captured size by SGLang's ``execute`` (under DP attention from
  the global maximum), and the runner keeps the key it chose (``bs``);
- while a capture records, what ``cudaStreamCaptureModeGlobal`` forbids any thread (an event
  query or sync, a device or stream sync, a pinned host allocation) raises and invalidates the
  capture (:func:`forbid_while_capturing`);
- a capture that fails aborts start-up with SGLang's own "Capture cuda graph failed".
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import threading
import types

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

log = logging.getLogger(__name__)

ENV = "EAGLE3SCOPE_CPU_GRAPHS"
STRICT = "strict"
#: Narrows the strict mode's capture list (comma-separated sizes, e.g. "2,4": a batch of 1 pads to 2).
BS_ENV = "EAGLE3SCOPE_CPU_GRAPHS_BS"

_aten = torch.ops.aten
#: Ops a CUDA capture cannot hold: they sync with the host or size their output from data.
_HOST_SYNC = {
    _aten._local_scalar_dense.default, _aten.nonzero.default, _aten.masked_select.default,
    _aten._unique2.default, _aten.unique_consecutive.default, _aten.unique_dim.default,
}


def enabled() -> bool:
    return os.environ.get(ENV, "").strip() in ("1", STRICT)


def strict() -> bool:
    return os.environ.get(ENV, "").strip() == STRICT


class CaptureError(RuntimeError):
    """The captured region did something a graph cannot hold."""


class _Node:
    """One recorded call, re-executed at replay with the very tensors of the capture, its results
    copied into the captured outputs: a tensor op (views are not recorded: they alias captured
    memory already; in-place ops write it themselves), or a break (attention, run eagerly with the
    batch as it stood at capture)."""

    __slots__ = ("fn", "args", "kwargs", "outs")

    def __init__(self, fn, args, kwargs, out) -> None:
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]

    def replay(self) -> None:
        result = self.fn(*self.args, **self.kwargs)
        for dst, src in zip(self.outs, [t for t in tree_leaves(result) if isinstance(t, torch.Tensor)]):
            dst.copy_(src)


def _replayed(func) -> bool:
    """False for ops whose outputs only alias their inputs (views): nothing to redo."""
    returns = func._schema.returns
    return not returns or any(r.alias_info is None or r.alias_info.is_write for r in returns)


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.nodes: list = []
        self.paused = 0
        self.invalidated = ""  # what another call did while this capture recorded (global capture mode)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.paused:
            return func(*args, **kwargs)
        if func in _HOST_SYNC:
            raise CaptureError(f"{func} synchronises with the host inside the captured region")
        out = func(*args, **kwargs)
        if _replayed(func):
            self.nodes.append(_Node(func, args, kwargs, out))
        return out


_RECORDING: list[_Recorder] = []


def attention_break(original):
    """Wrap an attention backend's ``forward``: recorded as one eager break while capturing."""

    def forward(backend, q, k, v, layer, forward_batch, *args, **kwargs):
        recorder = _RECORDING[-1] if _RECORDING else None
        if recorder is None or recorder.paused:
            return original(backend, q, k, v, layer, forward_batch, *args, **kwargs)
        at_capture = copy.copy(forward_batch)  # attributes as this call saw them (per-step views)
        recorder.paused += 1
        try:
            out = original(backend, q, k, v, layer, at_capture, *args, **kwargs)
        finally:
            recorder.paused -= 1
        recorder.nodes.append(_Node(original, (backend, q, k, v, layer, at_capture) + args, kwargs, out))
        return out

    forward.eagle3scope_cpu_graph_break = True
    return forward


class OpGraph:
    """One captured shape: the recorded ops, and the static tensors they run on."""

    def __init__(self) -> None:
        self.nodes: list = []
        self.replays = 0

    def capture(self, fn):
        """Record ``fn()``, under SGLang's capture flag (already set by a runner that captures several
        shapes, whose flag an inner ``model_capture_mode`` would clear on leaving)."""
        from sglang.srt.model_executor.runner_utils.capture_mode import get_is_capture_mode, model_capture_mode

        recorder = _Recorder()
        _RECORDING.append(recorder)
        try:
            with contextlib.nullcontext() if get_is_capture_mode() else model_capture_mode(), recorder:
                out = fn()
        finally:
            _RECORDING.remove(recorder)
        if recorder.invalidated:
            raise CaptureError(f"the capture was invalidated: {recorder.invalidated}")
        self.nodes = recorder.nodes
        return out

    def replay(self) -> None:
        for node in self.nodes:
            node.replay()
        self.replays += 1


# -- static inputs -------------------------------------------------------------------------
_PARTS = ("", "spec_info", "sampling_info")


def _part(obj, part: str):
    return obj if not part else getattr(obj, part, None)


def _private(obj, memo: dict):
    """A shallow copy of ``obj`` whose tensors are private clones (aliases kept as aliases)."""
    twin = copy.copy(obj)
    for name, value in vars(obj).items():
        if isinstance(value, torch.Tensor):
            if id(value) not in memo:
                memo[id(value)] = value.clone()
            setattr(twin, name, memo[id(value)])
    return twin


def static_batch(forward_batch):
    """The capture's own forward batch: the live one's tensors copied into buffers it owns,
    and the list of (part, name, buffer) to refill before each replay."""
    memo: dict = {}
    fb = _private(forward_batch, memo)
    for part in _PARTS[1:]:
        value = getattr(forward_batch, part, None)
        if value is not None:
            setattr(fb, part, _private(value, memo))
    inputs = [(part, name, value) for part in _PARTS if _part(fb, part) is not None
              for name, value in vars(_part(fb, part)).items() if isinstance(value, torch.Tensor)]
    return fb, inputs


def _tensor_names(forward_batch) -> set:
    return {(part, name) for part in _PARTS if _part(forward_batch, part) is not None
            for name, value in vars(_part(forward_batch, part)).items() if isinstance(value, torch.Tensor)}


def _misfit(inputs, forward_batch) -> str:
    """Why the batch cannot replay the capture ("" when it can): it must have the capture's inputs,
    shape for shape, and no tensor the capture did not have (the replay would ignore it)."""
    names = _tensor_names(forward_batch) ^ {(part, name) for part, name, _ in inputs}
    if names:
        return "tensors " + ", ".join(sorted(".".join(filter(None, n)) for n in names)) + " differ from the capture's"
    for part, name, buf in inputs:  # a dtype may differ: the refill's copy_ converts, as SGLang's runners' do
        live = getattr(_part(forward_batch, part), name, None)
        if live.shape != buf.shape:
            return f"{'.'.join(filter(None, (part, name)))} is {tuple(live.shape)}, captured {tuple(buf.shape)}"
    return ""


def _fits(inputs, forward_batch) -> bool:
    return not _misfit(inputs, forward_batch)


def _refill(inputs, forward_batch) -> None:
    for part, name, buf in inputs:
        buf.copy_(getattr(_part(forward_batch, part), name))


class _Shape:
    __slots__ = ("graph", "batch", "inputs", "out")

    def __init__(self, graph, batch, inputs, out) -> None:
        self.graph, self.batch, self.inputs, self.out = graph, batch, inputs, out


class _Runner:
    """Shapes captured so far; a shape whose capture failed stays eager."""

    name = ""

    def __init__(self, worker) -> None:
        self.worker = worker
        self.shapes: dict = {}
        self.failed: set = set()
        self.refused: set = set()  # (key, reason) said once
        self.captures = 0

    def _key(self, forward_batch):
        sampling = getattr(forward_batch, "sampling_info", None)
        return (forward_batch.batch_size, bool(getattr(sampling, "is_all_greedy", True)))

    def can_run_graph(self, forward_batch) -> bool:
        if forward_batch.forward_mode.is_idle():
            return False
        key = self._key(forward_batch)
        if key in self.failed:
            return False
        shape = self.shapes.get(key)
        if shape is None:
            return True
        why = _misfit(shape.inputs, forward_batch)
        if why and (key, why) not in self.refused:
            self.refused.add((key, why))
            log.info("eagle3scope-cpu-engine: %s batch of size %d runs eagerly: %s", self.name, key[0], why)
        return not why

    def _run(self, forward_batch, plan, region):
        key = self._key(forward_batch)
        shape = self.shapes.get(key)
        if shape is not None:
            _refill(shape.inputs, forward_batch)
            plan(forward_batch)  # attention metadata of the live batch, outside the graph
            shape.graph.replay()
            return shape.out
        fb, inputs = static_batch(forward_batch)
        plan(fb)
        graph = OpGraph()
        try:
            out = graph.capture(lambda: region(fb))
        except CaptureError as exc:
            self.failed.add(key)
            log.warning("eagle3scope-cpu-engine: %s graph for batch size %d not captured (%s); it runs eagerly",
                        self.name, key[0], exc)
            raise
        self.shapes[key] = _Shape(graph, fb, inputs, out)
        self.captures += 1
        log.info("eagle3scope-cpu-engine: captured %s graph for batch size %d%s (%d ops)", self.name, key[0],
                 " (all greedy)" if key[1] else "", len(graph.nodes))
        return out


class DraftDecodeGraphRunner(_Runner):
    """Stands in for ``EAGLEDraftCudaGraphRunner``: the whole ``draft_forward`` of the draft steps."""

    name = "draft decode"

    def execute(self, forward_batch):
        worker = self.worker

        def plan(fb):
            worker.draft_attn_backend.init_forward_metadata(fb)
            fb.mark_forward_metadata_ready()

        try:
            return self._run(forward_batch, plan, worker.draft_forward)
        except CaptureError:
            plan(forward_batch)
            return worker.draft_forward(forward_batch)


class DraftExtendGraphRunner(_Runner):
    """Stands in for ``EAGLEDraftExtendCudaGraphRunner``: the draft model's forward over the
    verified tokens; like it, returns the rows at ``select_index`` (the eager caller then skips
    its own selection)."""

    name = "draft extend"

    def execute(self, forward_batch, select_index):
        from sglang.srt.layers.logits_processor import LogitsProcessorOutput
        from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

        runner = self.worker.draft_runner

        def plan(fb):
            runner.attn_backend.init_forward_metadata(fb)
            fb.mark_forward_metadata_ready()

        def region(fb):
            with forward_context(ForwardContext(attn_backend=runner.attn_backend), forward_batch=fb):
                return runner.model.forward(fb.input_ids, fb.positions, fb)

        try:
            out = self._run(forward_batch, plan, region)
        except CaptureError:
            plan(forward_batch)
            out = region(forward_batch)
        hidden = out.hidden_states[select_index] if out.hidden_states is not None else None
        return LogitsProcessorOutput(next_token_logits=out.next_token_logits[select_index], hidden_states=hidden)


def _break_attention(*backends) -> None:
    for backend in backends:
        cls = type(backend)
        if not getattr(cls.forward, "eagle3scope_cpu_graph_break", False):
            cls.forward = attention_break(cls.forward)


def _capture_cuda_graphs(original, worker, *args, **kwargs):
    """AROUND hook of ``EagleDraftWorker._capture_cuda_graphs``: on a CPU, where SGLang captures
    nothing, put the stand-in runners in the slots its CUDA runners take."""
    result = original(worker, *args, **kwargs)
    if worker.cuda_graph_runner is None and worker.cuda_graph_runner_for_draft_extend is None:
        draft_backend = worker.draft_attn_backend
        _break_attention(*getattr(draft_backend, "attn_backends", ()), worker.draft_runner.attn_backend)
        if strict():
            worker.cuda_graph_runner, worker.cuda_graph_runner_for_draft_extend = strict_runners(worker)
            log.info("eagle3scope-cpu-engine: draft decode and draft extend captured at start-up (%s=%s)", ENV, STRICT)
        elif worker.speculative_num_steps > 1:
            worker.cuda_graph_runner = DraftDecodeGraphRunner(worker)
        if not strict():
            worker.cuda_graph_runner_for_draft_extend = DraftExtendGraphRunner(worker)
            log.info("eagle3scope-cpu-engine: draft decode and draft extend run from CPU graphs (%s=1)", ENV)
    return result


def install() -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    if strict():
        _global_capture_mode()

    HookRegistry.register("sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker._capture_cuda_graphs",
                          _capture_cuda_graphs, HookType.AROUND)


# -- strict mode: SGLang's own runners, CPU graphs ------------------------------------------------
class OpGraphBackend:
    """Stands in for ``FullCudaGraphBackend`` (runner_backend/full_cuda_graph_backend.py 0.5.23): an
    :class:`OpGraph` per shape key where it keeps a ``torch.cuda.CUDAGraph``, captured after the
    same two warm-up runs, replayed as is; no capture stream or memory pool (host memory)."""

    def __init__(self) -> None:
        self.graphs: dict = {}

    @contextlib.contextmanager
    def capture_session(self, stream=None):
        yield

    def capture_one(self, shape_key, forward_fn, capture_inputs=None, post_warmup_hook=None) -> None:
        for _ in range(2):
            forward_fn()
            if post_warmup_hook is not None:
                post_warmup_hook()
        graph = OpGraph()
        self.graphs[shape_key] = (graph, graph.capture(forward_fn))

    def can_run(self, forward_batch, shape_key) -> bool:
        return shape_key in self.graphs

    @contextlib.contextmanager
    def replay_session(self):
        yield

    def replay(self, shape_key, static_forward_batch, **kwargs):
        graph, out = self.graphs[shape_key]
        graph.replay()
        return out

    def cleanup(self) -> None:
        self.graphs.clear()


class PlannedOutOfGraph:
    """A CPU attention backend as SGLang's graph runners ask for one: what a CUDA backend prepares
    for capture (``init_cuda_graph_state``: nothing to pre-size in host memory), the sequence
    length of padded rows (``fill``: at least the tokens each row extends by, since the CPU kernel
    reads a history of ``seq_len - extend_len`` tokens), and the metadata plan, all out of the graph
    (``init_forward_metadata_out_graph`` plans as the eager path does; attention itself is a break,
    :func:`attention_break`). Everything else is the backend's own."""

    def __init__(self, backend, fill: int = 1) -> None:
        self._backend, self._fill = backend, fill
        if hasattr(backend, "attn_backends"):
            self.attn_backends = [PlannedOutOfGraph(b, fill) for b in backend.attn_backends]

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def init_cuda_graph_state(self, max_bs: int, max_num_tokens: int) -> None:
        return None

    def get_cuda_graph_seq_len_fill_value(self) -> int:
        return self._fill

    def init_forward_metadata_out_graph(self, forward_batch, in_capture: bool = False) -> None:
        self._backend.init_forward_metadata(_with_extend_offsets(forward_batch))

    def init_forward_metadata_in_graph(self, forward_batch) -> None:
        return None


def _with_extend_offsets(forward_batch):
    """The batch a CPU backend plans an extend from: SGLang's draft-extend runner hands the plan its
    static batch (or, at replay, a view of it with whole static buffers, ``batch_size`` rows of
    them used) with the per-request lengths only (a CUDA backend derives the start offsets inside
    the graph), the lengths at replay in ``spec_info.extend_seq_lens_tensor``."""
    mode = forward_batch.forward_mode
    if mode.is_decode_or_idle() or mode.is_target_verify() or getattr(forward_batch, "extend_start_loc", None) is not None:
        return forward_batch
    lens = getattr(forward_batch, "extend_seq_lens", None)
    if lens is None:
        lens = forward_batch.spec_info.extend_seq_lens_tensor
    starts = (torch.cumsum(lens, 0) - lens).to(lens.dtype)
    return types.SimpleNamespace(**{**vars(forward_batch), "seq_lens": forward_batch.seq_lens[: forward_batch.batch_size],
                                    "extend_seq_lens": lens, "extend_start_loc": starts})


class _CapturedOnCPU:
    """The capture loop of SGLang's ``DecodeCudaGraphRunner.capture`` (every size of the list,
    largest first, under the capture flag the runner's ``__init__`` set) with the CPU graph
    backend, and without its CUDA capture stream; a failure raises out of the runner's ``__init__``
    as SGLang's "Capture cuda graph failed"."""

    def capture(self) -> None:
        self.backend = OpGraphBackend()
        narrowed = [int(x) for x in os.environ.get(BS_ENV, "").split(",") if x.strip()]
        if narrowed:
            self.capture_bs = sorted(bs for bs in narrowed if 0 < bs <= self.max_bs) or self.capture_bs
            self.max_bs = max(self.capture_bs)
        # as DecodeCudaGraphRunner._capture: the shared buffers may hold another runner's fill
        self.buffers.seq_lens.fill_(self.seq_len_fill_value)
        self.buffers.seq_lens_cpu.fill_(self.seq_len_fill_value)
        self.buffers.reset_index_buffers()
        for bs in reversed(self.capture_bs):
            self.capture_one_shape(bs, forward=None)
        log.info("eagle3scope-cpu-engine: captured %s for batch sizes %s", type(self).__name__, self.capture_bs)


_STRICT_CLASSES: list = []


def _strict_classes():
    if not _STRICT_CLASSES:
        from sglang.srt.speculative.eagle_draft_cuda_graph_runner import EAGLEDraftCudaGraphRunner
        from sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner import EAGLEDraftExtendCudaGraphRunner

        _STRICT_CLASSES.extend((type("StrictDraftDecodeGraphRunner", (_CapturedOnCPU, EAGLEDraftCudaGraphRunner), {}),
                                type("StrictDraftExtendGraphRunner", (_CapturedOnCPU, EAGLEDraftExtendCudaGraphRunner), {})))
    return _STRICT_CLASSES


def strict_runners(worker) -> tuple:
    """(draft decode runner or None, draft extend runner), SGLang's classes capturing CPU graphs now."""
    from sglang.srt.speculative.spec_utils import resolve_num_tokens_per_req

    decode_cls, extend_cls = _strict_classes()
    extend_backend = getattr(worker, "draft_extend_attn_backend", None) or worker.draft_runner.attn_backend
    runner = worker.draft_runner
    if runner.graph_shared_output is None:  # built only where the decode phase captures graphs (not on a CPU)
        from sglang.srt.model_executor.graph_shared_output import GraphSharedOutput

        runner.graph_shared_output = GraphSharedOutput(device=runner.device, max_rows=runner.max_shared_logits_buffer_rows())
    decode = None
    if worker.speculative_num_steps > 1:
        decode = decode_cls(worker, draft_attn_backend=PlannedOutOfGraph(worker.draft_attn_backend))
    extend_width = resolve_num_tokens_per_req(phase="draft_extend")
    return decode, extend_cls(worker, draft_extend_attn_backend=PlannedOutOfGraph(extend_backend, extend_width))


# -- strict mode: global capture mode --------------------------------------------------------------
def forbid_while_capturing(what: str) -> None:
    """``cudaStreamCaptureModeGlobal`` (SGLang captures in it): while any capture records, a call
    that is unsafe during capture, from any thread, fails and invalidates the capture."""
    if _RECORDING:
        for recorder in list(_RECORDING):
            recorder.invalidated = recorder.invalidated or f"{what} on thread {threading.current_thread().name}"
        raise CaptureError(f"{what} while a graph capture records (global capture mode)")


def _forbidding(what: str, original):
    def call(*args, **kwargs):
        forbid_while_capturing(what)
        return original(*args, **kwargs)

    return call


def _forbidding_pinned(what: str, original):
    def call(*args, **kwargs):
        if kwargs.get("pin_memory"):
            forbid_while_capturing(what)
        return original(*args, **kwargs)

    return call


def _global_capture_mode() -> None:
    """Wrap what global capture mode forbids: torch.cuda's event, stream and device syncs and
    event/stream queries, and pinned host allocations (``torch.empty(pin_memory=True)``,
    ``Tensor.pin_memory``)."""
    cuda = torch.cuda
    for owner, attr in ((cuda, "synchronize"), (cuda.Stream, "synchronize"), (cuda.Stream, "query"),
                        (cuda.Event, "synchronize"), (cuda.Event, "query")):
        name = f"torch.cuda.{'' if owner is cuda else owner.__name__ + '.'}{attr}"
        setattr(owner, attr, _forbidding(name, getattr(owner, attr)))
    torch.Tensor.pin_memory = _forbidding("a pinned host allocation", torch.Tensor.pin_memory)
    torch.empty = _forbidding_pinned("a pinned host allocation", torch.empty)
