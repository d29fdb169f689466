"""What each SGLang release's EAGLE-3 draft loader (``LlamaForCausalLMEagle3``) does with a name.

The one place that knows the per-release loader behaviour; ``doctor`` and ``fix`` only ask it.
0.5.23 is modelled line by line on ``sglang/srt/models/llama_eagle3.py`` (``__init__`` and
``load_weights``); older ranges follow the same file in each release's wheel (the ranges in
:data:`LAYOUTS` name them, :data:`SINCE` the first release of each later feature, and
:data:`DRAFT_CLASSES` which draft classes a release registers). tests/shim/test_compat_static.py reads
these facts back from every wheel of the compat table, so a new release cannot drift silently. A
release newer than the last range is assumed to behave like it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from eagle3scope.wire.releases import parse_version

#: SGLang's stacked-parameter mapping (checkpoint shard name -> fused parameter, shard id).
STACKED = ((".qkv_proj", ".q_proj", "q"), (".qkv_proj", ".k_proj", "k"), (".qkv_proj", ".v_proj", "v"),
           (".gate_up_proj", ".gate_proj", 0), (".gate_up_proj", ".up_proj", 1))
#: 0.5.12+: legacy checkpoint names rewritten by substring before lookup.
LEGACY_RENAMES = (("midlayer", "layers.0"), ("aux_norm_low", "fc_norm.0"), ("aux_norm_mid", "fc_norm.1"),
                  ("aux_norm_high", "fc_norm.2"))
LAYER_PARAMS = ("self_attn.qkv_proj.weight", "self_attn.o_proj.weight", "mlp.gate_up_proj.weight",
                "mlp.down_proj.weight", "input_layernorm.weight", "post_attention_layernorm.weight", "hidden_norm.weight")


#: EAGLE-3 draft classes SGLang registers (``EntryClass`` in ``models/*.py``), by first release.
DRAFT_CLASSES = {"LlamaForCausalLMEagle3": "0.4.4.post2", "Eagle3DeepseekV2ForCausalLM": "0.5.12"}
#: Other runtimes' names for SGLang's LlamaForCausalLMEagle3 layout, which no SGLang release
#: registers (vLLM's registry maps all of them to its llama_eagle3.Eagle3LlamaForCausalLM,
#: vllm/model_executor/models/registry.py; AngelSlim's and vLLM-side exports write the first).
FOREIGN_DRAFT_CLASSES = ("Eagle3LlamaForCausalLM", "Eagle3Qwen2_5vlForCausalLM", "Eagle3Qwen3vlForCausalLM",
                         "Eagle3Speculator", "Eagle3DraftModel")
#: The first release whose llama_eagle3.py (llama.py for set_embed) has each behaviour.
SINCE = {
    "head_from_target": "0.5.2",  # draft_vocab_size None -> the target's lm_head (load_lm_head_from_target)
    "fc_from_config": "0.5.12",  # fc built for num_aux_hidden_states / len(ids) states; before: exactly 3
    "fc_norm": "0.5.12",  # model.fc_norm.{i} (config fc_norm or use_aux_norm; legacy aux_norm_* names)
    "norm_output": "0.5.12",  # the normed state fed back as the next step's hidden state
    "norm_before_fc": "0.5.17",  # model.input_norm over the concatenated aux states
}
#: Wheels beyond the compat table's that pin the first releases above and in wire/aux_layers'
#: CAPTURE_SINCE (tests/shim/test_compat_static.py; scripts/fetch-sglang-wheels.sh caches them too).
BOUNDARY_WHEELS = ("0.4.9", "0.4.10", "0.5.2", "0.5.4", "0.5.9", "0.5.11", "0.5.17", "0.5.21", "0.5.22")
#: EAGLE-3.x config flags -> the behaviour in :data:`SINCE` that applies them.
NORM_FLAGS = {"fc_norm": "fc_norm", "use_aux_norm": "fc_norm", "norm_before_fc": "norm_before_fc",
              "norm_output": "norm_output"}
#: Checkpoint names (after the legacy renames) of the EAGLE-3.x norms -> the behaviour that loads them.
NORM_KEYS = ((re.compile(r"(^|\.)fc_norm\.\d+\."), "fc_norm"), (re.compile(r"(^|\.)input_norm\."), "norm_before_fc"))
#: Aux states fc takes up to 0.5.11 (llama_eagle3.py: ``Linear(self.hidden_size_in * 3, ...)``).
FIXED_FC_AUX = 3


def norm_feature(name: str) -> str | None:
    """The EAGLE-3.x behaviour that loads this checkpoint name (legacy ``aux_norm_*`` included)."""
    for legacy, new in LEGACY_RENAMES[1:]:
        name = name.replace(legacy, new)
    return next((feature for pattern, feature in NORM_KEYS if pattern.search(name)), None)


@dataclass(frozen=True)
class LoaderLayout:
    """Loader behaviour of one range of SGLang releases (``at``: the release asked about)."""

    first: str
    last: str | None
    has_eagle3: bool = True
    layer_module: str = "layers"  # "midlayer": a single model.midlayer; "layers": model.layers[i]
    legacy_renames: bool = False
    #: "silent": unknown names skipped without a word; "delegated": handed to LlamaForCausalLM
    #: (unknown q/k/v/gate/up names raise KeyError, others are logged)
    unknown_names: str = "silent"
    d2t_required: bool = False  # no d2t -> AttributeError at start-up
    single_layer_only: bool = False
    note: str = ""
    at: str = ""

    def has(self, feature: str) -> bool:
        """Whether the release asked about has a behaviour of :data:`SINCE`."""
        return since(self.at or self.first, SINCE[feature])

    @property
    def fc_aux_states(self) -> int | None:
        """How many aux states fc is built for whatever the config says (None: as configured)."""
        return None if self.has("fc_from_config") else FIXED_FC_AUX

    def covers(self, version: tuple[int, ...]) -> bool:
        if version < parse_version(self.first):
            return False
        return self.last is None or version <= parse_version(self.last)

    @property
    def label(self) -> str:
        return f"{self.first}-{self.last}" if self.last else f"{self.first}+"


LAYOUTS: tuple[LoaderLayout, ...] = (
    LoaderLayout("0.0.0", "0.4.4.post1", has_eagle3=False, note="no EAGLE-3 support at all"),
    LoaderLayout("0.4.4.post2", "0.4.8", layer_module="midlayer", unknown_names="delegated", d2t_required=True,
                 single_layer_only=True, note="prefixes 'model.' and delegates to LlamaForCausalLM.load_weights"),
    LoaderLayout("0.4.9", "0.5.2", layer_module="midlayer", single_layer_only=True,
                 note="module midlayer; unknown names skipped silently"),
    LoaderLayout("0.5.3", "0.5.11", layer_module="midlayer", single_layer_only=True,
                 note="module midlayer; layers.0.* dropped silently"),
    LoaderLayout("0.5.12", None, legacy_renames=True,
                 note="model.layers[i]; midlayer->layers.0 mapped; unknown names skipped silently"),
)


def layout_for(version: str) -> LoaderLayout:
    v = parse_version(version)
    for layout in LAYOUTS:
        if layout.covers(v):
            return replace(layout, at=version)
    raise ValueError(f"no loader layout for SGLang {version}")


def since(version: str, first: str) -> bool:
    return parse_version(version) >= parse_version(first)


def registered_draft_classes(version: str) -> set[str]:
    """The EAGLE-3 draft classes this release can start."""
    return {cls for cls, first in DRAFT_CLASSES.items() if since(version, first)}


def num_aux(config: dict) -> int:
    """0.5.23 ``LlamaModel.__init__``: num_aux_hidden_states, else len(eagle layer ids), else 3."""
    explicit = config.get("num_aux_hidden_states")
    if explicit is not None:
        return explicit
    ids = (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    return len(ids) if ids else 3


def norm_before_fc(config: dict) -> bool:
    return bool((config.get("eagle_config") or {}).get("norm_before_fc", config.get("norm_before_fc", False)))


def expected_params(layout: LoaderLayout, config: dict) -> dict[str, tuple | dict]:
    """The draft model's parameters (SGLang names) and the shapes checkpoint tensors must have,
    from config.json; fused parameters map shard id -> shard shape."""
    hidden = config["hidden_size"]
    target_hidden = config.get("target_hidden_size") or hidden
    heads, kv_heads = config["num_attention_heads"], config.get("num_key_value_heads") or config["num_attention_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    inter = config.get("intermediate_size_mlp") if config.get("model_type") == "llama4_text" else config.get("intermediate_size")
    vocab, k = config["vocab_size"], layout.fc_aux_states or num_aux(config)
    params: dict[str, tuple[int, ...] | None] = {
        "model.embed_tokens.weight": (vocab, hidden),
        "model.fc.weight": (hidden, target_hidden * k),
        "model.norm.weight": (hidden,),
    }
    if config.get("bias"):
        params["model.fc.bias"] = (hidden,)
    if layout.has("norm_before_fc") and norm_before_fc(config):
        params["model.input_norm.weight"] = (target_hidden * k,)
    if layout.has("fc_norm") and (config.get("fc_norm") or config.get("use_aux_norm")):
        for i in range(k):
            params[f"model.fc_norm.{i}.weight"] = (target_hidden,)
    n_layers = 1 if layout.layer_module == "midlayer" else config.get("num_hidden_layers", 1)
    for i in range(n_layers):
        prefix = "model.midlayer." if layout.layer_module == "midlayer" else f"model.layers.{i}."
        width = 2 * hidden if i == 0 else hidden
        shapes = {  # fused parameters: the shape of each checkpoint shard
            "self_attn.qkv_proj.weight": {"q": (heads * head_dim, width), "k": (kv_heads * head_dim, width),
                                          "v": (kv_heads * head_dim, width)},
            "self_attn.o_proj.weight": (hidden, heads * head_dim),
            "mlp.gate_up_proj.weight": {0: (inter, hidden), 1: (inter, hidden)},
            "mlp.down_proj.weight": (hidden, inter),
            "input_layernorm.weight": (hidden,),
            "post_attention_layernorm.weight": (hidden,),
            "hidden_norm.weight": (hidden,),
        }
        for name in LAYER_PARAMS:
            params[prefix + name] = shapes[name]
    if not config.get("tie_word_embeddings"):
        draft_vocab = config.get("draft_vocab_size")
        if draft_vocab is None and not layout.has("head_from_target"):
            draft_vocab = vocab
        params["lm_head.weight"] = (draft_vocab or vocab, hidden)
    return params


@dataclass(frozen=True)
class Mapping:
    """What the loader does with one checkpoint name."""

    name: str
    action: str  # "param" | "d2t" | "ignored" (t2d) | "skipped" (silently) | "crash" | "logged"
    param: str | None = None
    shard: object = None


def map_name(layout: LoaderLayout, name: str, params: dict) -> Mapping:
    """Follow ``load_weights`` of the release for one checkpoint tensor name."""
    original = name
    if layout.legacy_renames:
        for legacy, new in LEGACY_RENAMES:
            if legacy in name:
                name = name.replace(legacy, new)
    if "d2t" in name:
        return Mapping(original, "d2t")
    if "t2d" in name:
        return Mapping(original, "ignored")
    if layout.unknown_names == "delegated":
        # 0.4.4.post2-0.4.8: everything but d2t/t2d/lm_head gets 'model.' and goes to LlamaForCausalLM
        full = name if "lm_head" in name else f"model.{name}"
        for param_name, weight_name, shard in STACKED:
            if weight_name in full:
                fused = full.replace(weight_name, param_name)
                if fused in params:
                    return Mapping(original, "param", fused, shard)
                return Mapping(original, "crash")  # params_dict[name] raises KeyError
        return Mapping(original, "param", full) if full in params else Mapping(original, "logged")
    for param_name, weight_name, shard in STACKED:
        if weight_name not in name:
            continue
        name = name.replace(weight_name, param_name)
        target = name if name in params else f"model.{name}"
        return Mapping(original, "param", target, shard) if target in params else Mapping(original, "skipped")
    target = name if name in params else f"model.{name}"
    return Mapping(original, "param", target) if target in params else Mapping(original, "skipped")


def canonical_name(layout: LoaderLayout, param: str, shard: object = None) -> str:
    """The checkpoint name this release loads into ``param`` (the shard's name for fused params)."""
    name = param[len("model."):] if param.startswith("model.") else param
    if shard is not None:
        for param_name, weight_name, shard_id in STACKED:
            if shard_id == shard and param_name in name:
                return name.replace(param_name, weight_name)
    return name
