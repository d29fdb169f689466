"""Where the shim hooks SGLang: seam families, their adapters, and how one is chosen.

Pure data plus an ``ast`` lookup, no SGLang or torch import, so the same table decides what to
patch at runtime (over the installed source) and what ``tests/shim/test_compat_static.py`` checks over
every release's wheel. An adapter applies when its anchor (first seam) exists in the installed
source; its other seams that are absent are reported as ``missing``, never fatal. A seam may name
alternatives (a method renamed across releases); the first one present is used. Hook bodies live
in :mod:`eagle3scope_shim.hooks` under the seam's ``hook`` name; they never test versions.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
from dataclasses import dataclass
from typing import Callable

from eagle3scope.wire.control_protocol import ENV_CONTROL
from eagle3scope.wire.releases import installed_sglang as sglang_version  # noqa: F401  (the shim's name)

#: The releases whose wheels tests/shim/test_compat_static.py checks this table against.
COMPAT_RELEASES = (
    "0.4.4", "0.4.4.post2", "0.4.6.post5", "0.4.8", "0.4.10.post2", "0.5.1", "0.5.3", "0.5.5",
    "0.5.6", "0.5.8", "0.5.10", "0.5.12", "0.5.14", "0.5.16", "0.5.18", "0.5.20", "0.5.23",
)

#: Majors the version guard accepts; anything else is refused with a log line.
SUPPORTED_MAJORS = {(0, 4), (0, 5)}

_SCHED = "sglang.srt.managers.scheduler"
_EW = "sglang.srt.speculative.eagle_worker"
_EW2 = "sglang.srt.speculative.eagle_worker_v2"
_LE = "sglang.srt.models.llama_eagle"
_LE3 = "sglang.srt.models.llama_eagle3"
_KIMI = "sglang.srt.models.kimi_k25_eagle3"
_QE = "sglang.srt.models.qwen2_eagle"
_ME = "sglang.srt.models.mistral_eagle"
_ML3E = "sglang.srt.models.mistral_large_3_eagle"
_LLAMA = "sglang.srt.models.llama"
_DSV2 = "sglang.srt.models.deepseek_v2"
_ABS = "sglang.srt.model_executor.model_runner_components.attention_backend_setup"
_BRP = "sglang.srt.managers.scheduler_components.batch_result_processor"
_SOPM = "sglang.srt.managers.scheduler_output_processor_mixin"
_RR = "sglang.srt.managers.scheduler_components.request_receiver"
_OS = "sglang.srt.managers.scheduler_components.output_streamer"
_CGR = "sglang.srt.model_executor.cuda_graph_runner"  # the target's graph runner up to 0.5.12
_DCGR = "sglang.srt.model_executor.runner.decode_cuda_graph_runner"  # from 0.5.14

#: the seam a change under tensor parallelism rides to every TP rank (:mod:`eagle3scope_shim.collective`)
BROADCAST = "tp.broadcast"


@dataclass(frozen=True)
class Seam:
    name: str
    targets: tuple[tuple[str, str], ...]  # alternatives: (module, qualname)
    hook: str
    only_with: str = ""  # an environment variable: the seam is attached only where it is set

    def wanted(self) -> bool:
        return not self.only_with or bool(os.environ.get(self.only_with, "").strip())


@dataclass(frozen=True)
class Adapter:
    name: str
    family: str
    seams: tuple[Seam, ...]


def _s(name: str, hook: str, *targets: tuple[str, str], only_with: str = "") -> Seam:
    return Seam(name, tuple(targets), hook, only_with)


#: EAGLE-1/2 drafts (--speculative-algorithm EAGLE): one forward each, its fc over cat(embeds, hidden)
#: on every pass, forward(input_ids, positions, forward_batch, ...). LlamaForCausalLMEagle in every
#: release (llama_eagle.py, 0.4.4 line 95 to 0.5.23 line 106), Qwen2ForCausalLMEagle in every release,
#: MistralLarge3ForCausalLMEagle from 0.5.10, MistralForCausalLMEagle from 0.5.11 (read in the wheels).
EAGLE1_FORWARDS = {
    "llama_eagle": (_LE, "LlamaModel.forward"),
    "qwen2_eagle": (_QE, "Qwen2Model.forward"),
    "mistral_eagle": (_ME, "MistralEagleModel.forward"),
    "mistral_large_3_eagle": (_ML3E, "MistralLarge3EagleModel.forward"),
}


def _eagle1(name: str, target: tuple[str, str]) -> Adapter:
    return Adapter(name, "draft_model", (_s(f"{name}.forward", "draft_forward", target),))


ADAPTERS: tuple[Adapter, ...] = (
    Adapter("scheduler", "process", (_s("scheduler.init", "scheduler_init", (_SCHED, "Scheduler.__init__")),)),
    Adapter("v2", "worker", (
        _s("v2.init", "worker_init_v2", (_EW2, "EAGLEWorkerV2.__init__")),
        _s("v2.step", "step", (_EW2, "EAGLEWorkerV2.forward_batch_generation")),
        _s("v2.draft", "draft", (_EW2, "EagleDraftWorker.draft")),
        _s("v2.verify", "verify_v2", (_EW2, "EAGLEWorkerV2.verify")),
        _s("v2.draft_extend", "draft_extend", (_EW2, "EagleDraftWorker._draft_extend_for_decode")),
        _s("v2.draft_extend_prefill", "draft_extend_prefill", (_EW2, "EagleDraftWorker._draft_extend_for_prefill")),
    )),
    Adapter("v1", "worker", (
        _s("v1.init", "worker_init_v1", (_EW, "EAGLEWorker.__init__")),
        _s("v1.step", "step", (_EW, "EAGLEWorker.forward_batch_generation"),
           (_EW, "EAGLEWorker.forward_batch_speculative_generation")),
        _s("v1.draft", "draft", (_EW, "EAGLEWorker.draft")),
        _s("v1.verify", "verify_v1", (_EW, "EAGLEWorker.verify")),
        _s("v1.draft_extend", "draft_extend", (_EW, "EAGLEWorker.forward_draft_extend_after_decode")),
        _s("v1.draft_extend_prefill", "draft_extend_prefill", (_EW, "EAGLEWorker.forward_draft_extend")),
    )),
    Adapter("llama_eagle3", "draft_model", (
        _s("llama_eagle3.forward", "draft_forward", (_LE3, "LlamaModel.forward")),
        _s("llama_eagle3.load", "draft_load", (_LE3, "LlamaForCausalLMEagle3.load_weights")),
    )),
    *(_eagle1(name, target) for name, target in EAGLE1_FORWARDS.items()),
    Adapter("kimi_k25_eagle3", "draft_model", (
        _s("kimi_k25_eagle3.forward", "draft_forward", (_KIMI, "Eagle3MLAModel.forward")),
        _s("kimi_k25_eagle3.load", "draft_load", (_KIMI, "Eagle3DeepseekV2ForCausalLM.load_weights")),
    )),
    Adapter("aux_call_site", "aux", (
        _s("aux.configure", "aux_configure", (_ABS, "configure_aux_hidden_state_capture")),
    )),
    Adapter("llama_set_eagle3", "aux", (
        _s("aux.llama_set_layers", "aux_set_layers", (_LLAMA, "LlamaForCausalLM.set_eagle3_layers_to_capture")),
    )),
    # DeepseekV2/V3 and Kimi-K2.5 (which delegates to its DeepseekV3 language model), from 0.5.5.
    Adapter("deepseek_set_eagle3", "aux", (
        _s("aux.deepseek_set_layers", "aux_set_layers", (_DSV2, "DeepseekV2ForCausalLM.set_eagle3_layers_to_capture")),
    )),
    # Where the scheduler settles a v2 round per request (spec_verify_ct, the accepted-drafts
    # histogram); from 0.5.12 a finished or retracted request's extra overlap tick is not counted
    # there (0.5.5-0.5.10 count it). Names: 0.5.5-0.5.10, 0.5.12, 0.5.14-0.5.23.
    Adapter("commit", "commit", (
        _s("commit.resolve", "commit", (_BRP, "SchedulerBatchResultProcessor._resolve_spec_v2_tokens"),
           (_SOPM, "SchedulerOutputProcessorMixin._resolve_spec_overlap_tokens"),
           (_SOPM, "SchedulerOutputProcessorMixin._resolve_spec_overlap_token_ids")),
    )),
    # Where the scheduler emits a finished request's output once, with its spec_verify_ct and
    # accepted-drafts counts (finish.py); read in the 0.5.10 (v1 and v2 workers) and 0.5.23 sources.
    Adapter("finish", "finish", (
        _s("finish.output", "finish", (_OS, "SchedulerOutputStreamer._stream_output_generation"),
           (_SOPM, "SchedulerOutputProcessorMixin.stream_output_generation")),
    )),
    # TP rank 0's per-iteration broadcast of what it pulled, from 0.5.14 (inline in Scheduler.recv_requests
    # before); only a control channel sends anything over it, so without one it costs nothing.
    Adapter("request_broadcast", "broadcast", (
        _s(BROADCAST, "tp_broadcast", (_RR, "SchedulerRequestReceiver._broadcast_reqs_across_ranks"),
           only_with=ENV_CONTROL),
    )),
    # The target's graph capture: which aux layers its graphs hold (<= 0.5.10 resets them to the
    # default set right before, cuda_graph_runner.py; sglang-compat D4).
    Adapter("target_graph_capture", "graphs", (
        _s("graphs.target_capture", "target_graph_capture", (_CGR, "CudaGraphRunner.capture"),
           (_DCGR, "DecodeCudaGraphRunner.capture")),
    )),
)

#: Per seam family whose hooks observe a speculative round, the seam whose method a class must
#: inherit unchanged for the shim to see it (a subclass overriding it runs code the shim never sees).
OBSERVING_SEAMS = {"worker": ("v2.step", "v1.step"),
                   "draft_model": ("llama_eagle3.forward", "kimi_k25_eagle3.forward",
                                   *(f"{name}.forward" for name in EAGLE1_FORWARDS))}

#: Draft forwards whose fc applies on every pass (EAGLE-1/2: 2H -> H over cat(embeds, hidden)); the
#: EAGLE-3 ones apply it iff the incoming width differs from the embedding width (llama_eagle3.py).
FC_ALWAYS = tuple(f"{name}.forward" for name in EAGLE1_FORWARDS)

#: Where each caller holds the hidden states it hands the draft, read in eager code whether or not
#: the draft pass then replays a graph: seam -> (argument index, self = 0; its keyword; attribute
#: path from it; the draft forward mode it feeds, as ``ForwardBatch.forward_mode`` names it).
DRAFT_INPUTS: dict[str, tuple[int, str, tuple[str, ...], str]] = {
    "v2.draft": (1, "batch", ("spec_info", "hidden_states"), "decode"),
    "v1.draft": (1, "batch", ("spec_info", "hidden_states"), "decode"),
    "v2.draft_extend": (2, "batch_result", ("logits_output", "hidden_states"), "draft_extend_v2"),
    "v1.draft_extend": (1, "batch", ("spec_info", "hidden_states"), "draft_extend"),
    "v2.draft_extend_prefill": (2, "target_hidden_states", (), "extend"),
    "v1.draft_extend_prefill": (2, "hidden_states", (), "extend"),
}

#: SGLang's own "a graph is being captured" flag (set by ``model_capture_mode()`` around every
#: capture, warm-ups included), per release: runner_utils from 0.5.14, cuda_graph_runner 0.4.6-0.5.12.
CAPTURE_FLAG = (
    ("sglang.srt.model_executor.runner_utils.capture_mode", "get_is_capture_mode"),
    (_CGR, "get_is_capture_mode"),
)

#: Where each worker kind keeps the draft's graph runners (None: that pass never replays a graph).
DRAFT_GRAPH_SLOTS: dict[str, dict[str, tuple[str, ...]]] = {
    "v2": {"decode": ("draft_worker", "cuda_graph_runner"),
           "draft_extend": ("draft_worker", "cuda_graph_runner_for_draft_extend"),
           "prefill": ("draft_worker", "draft_runner", "prefill_cuda_graph_runner")},
    "v1": {"decode": ("cuda_graph_runner",), "draft_extend": ("cuda_graph_runner_for_draft_extend",),
           "prefill": ("model_runner", "prefill_cuda_graph_runner")},
}

#: v1 ``EagleVerifyOutput``'s per-request accepted drafts (bonus excluded), renamed at 0.5.11/0.5.12.
V1_COUNT_FIELDS = ("accept_length_per_req_cpu", "num_accepted_drafts_per_req_cpu", "num_correct_drafts_per_req_cpu")
#: v1 ``EagleVerifyOutput``'s accepted tokens incl. bonus, packed over requests (renamed at 0.5.12).
V1_TOKEN_FIELDS = ("verified_id", "accept_tokens")

_SPEC_DATA = ("sglang.srt.speculative.eagle_utils", "sglang.srt.speculative.eagle_info")
_RESULT = ("sglang.srt.managers.utils",)

#: Data-class fields the hook bodies read, per adapter: (modules, class, fields of which one must exist).
FIELDS: dict[str, tuple[tuple[tuple[str, ...], str, tuple[str, ...]], ...]] = {
    "v1": (
        (_SPEC_DATA, "EagleVerifyInput", ("draft_token",)),
        (_SPEC_DATA, "EagleVerifyOutput", V1_TOKEN_FIELDS),
        (_SPEC_DATA, "EagleVerifyOutput", V1_COUNT_FIELDS),
    ),
    "v2": (
        (_SPEC_DATA, "EagleVerifyInput", ("draft_token",)),
        (_RESULT, "GenerationBatchResult", ("accept_lens",)),
        (_RESULT, "GenerationBatchResult", ("next_token_ids",)),
    ),
}

Lookup = Callable[[str, str], bool]


def choose(lookup: Lookup) -> list[tuple[Adapter, list[tuple[Seam, tuple[str, str] | None]]]]:
    """Adapters whose anchor exists, each with its seams resolved to a present target or None."""
    chosen = []
    for adapter in ADAPTERS:
        resolved = [(seam, next((t for t in seam.targets if lookup(*t)), None)) for seam in adapter.seams]
        if resolved[0][1] is not None:
            chosen.append((adapter, resolved))
    return chosen


# -- ast lookup over a source tree (installed package or unpacked wheel) --------------------------
def module_file(root: str, module: str) -> str | None:
    """Path of ``module``'s source under ``root`` (the directory that holds ``sglang/``)."""
    base = os.path.join(root, *module.split("."))
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            return path
    return None


def definitions(source: bytes) -> frozenset[str]:
    """Qualified names defined at module level and directly in top-level classes (methods and
    annotated fields)."""
    tree = ast.parse(source)
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(f"{node.name}.{item.name}")
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(f"{node.name}.{item.target.id}")  # dataclass field
    return frozenset(names)


@functools.lru_cache(maxsize=64)
def _file_definitions(path: str) -> frozenset[str]:
    with open(path, "rb") as fh:
        return definitions(fh.read())


def source_lookup(root: str) -> Lookup:
    def lookup(module: str, qualname: str) -> bool:
        path = module_file(root, module)
        return path is not None and qualname in _file_definitions(path)

    return lookup


def installed_root() -> str | None:
    """Directory holding the installed ``sglang`` package, found without importing it."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.dirname(list(spec.submodule_search_locations)[0])


def dotted(target: tuple[str, str]) -> str:
    return f"{target[0]}.{target[1]}"
