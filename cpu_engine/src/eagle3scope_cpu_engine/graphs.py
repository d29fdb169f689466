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

Differences, on purpose: a shape is captured at its first use, not at startup (so no dummy
batches are needed), and there is no padding to a captured bucket (one graph per exact batch
size). Prefill stays eager (SGLang's prefill graphs are another runner).
"""

from __future__ import annotations

import copy
import logging
import os

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

log = logging.getLogger(__name__)

ENV = "EAGLE3SCOPE_CPU_GRAPHS"

_aten = torch.ops.aten
#: Ops a CUDA capture cannot hold: they sync with the host or size their output from data.
_HOST_SYNC = {
    _aten._local_scalar_dense.default, _aten.nonzero.default, _aten.masked_select.default,
    _aten._unique2.default, _aten.unique_consecutive.default, _aten.unique_dim.default,
}


def enabled() -> bool:
    return os.environ.get(ENV, "").strip() == "1"


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
        from sglang.srt.model_executor.runner_utils.capture_mode import model_capture_mode

        recorder = _Recorder()
        _RECORDING.append(recorder)
        try:
            with model_capture_mode(), recorder:
                out = fn()
        finally:
            _RECORDING.pop()
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
        if worker.speculative_num_steps > 1:
            worker.cuda_graph_runner = DraftDecodeGraphRunner(worker)
        worker.cuda_graph_runner_for_draft_extend = DraftExtendGraphRunner(worker)
        log.info("eagle3scope-cpu-engine: draft decode and draft extend run from CPU graphs (%s=1)", ENV)
    return result


def install() -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register("sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker._capture_cuda_graphs",
                          _capture_cuda_graphs, HookType.AROUND)
