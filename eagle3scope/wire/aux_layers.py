"""Aux-layer ids: how SGLang turns configured ids into captured layers, what is safe, and presets.

Configured ids are what ``eagle_config.eagle_aux_hidden_state_layer_ids`` and ``aux set`` take.
SGLang captures the *input* of layer ``c`` (the output of layer ``c - 1``) for each captured index
``c``, and derives ``c`` from a configured id by a per-family rule (each family's
``set_eagle3_layers_to_capture`` in ``sglang/srt/models/``):

``"+1"``
    ``c = id + 1`` (Llama, Qwen, most families); the release's *default* list ``[2, n//2, n-3]``
    is used as captured indices as is (no ``+1``).
``"+1-if-first-1"``
    DeepseekV2/V3 / GLM4-MoE-lite / Kimi-K2 / Kimi-K2.5 from 0.5.13: ``+1`` only when the first id
    is 1 (0.5.23 deepseek_v2.py:3470); up to 0.5.12 a plain ``+1`` (0.5.10 deepseek_v2.py:2307).
``"+1-unless-final"``
    GPT-OSS from 0.5.17: ids whose largest is ``n`` (the final hidden state) are captured as given,
    others get ``+1`` (0.5.23 gpt_oss.py:1349); up to 0.5.16 a plain ``+1``.
``"+1-always"``
    MiniMax-M3's vision wrapper (0.5.18+ minimax_m3_vl.py): ``+1``, and on the default list too.
``"none"``
    ids are captured indices.

Which captured indices a release can produce at all: the input of layer 0 (the embeddings) only
from 0.5.22 in llama.py's LlamaModel (0.5.10-0.5.21 add a residual that is still None there and
crash, 0.5.10 llama.py:388; 0.5.22 captures through the layer boundary); other families are not
checked. The final hidden state (index ``n``) only for GPT-OSS from 0.5.17.

A captured index past the last layer never matches, fewer states reach the draft's ``fc`` and the
scheduler dies on the first request; duplicates do the same. SGLang concatenates the captured
states in layer order whatever the list order, so ids must be ascending. Pure functions only:
the shim validates with them, the CLI/TUI build their preset lists with them, the contract rules
and the checkpoint doctor name the training tools' defaults with them.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from enum import StrEnum

from eagle3scope.wire.releases import before


class CaptureRule(StrEnum):
    """A family's rule from configured ids to captured indices (the value is the name printed and
    sent); each member is declared with its summary for screens, so none can lack one."""

    summary: str

    def __new__(cls, value: str, summary: str) -> "CaptureRule":
        member = str.__new__(cls, value)
        member._value_ = value
        member.summary = summary
        return member

    PLUS_ONE = "+1", "captures id + 1"
    PLUS_ONE_IF_FIRST_1 = "+1-if-first-1", "as given; id + 1 only when the first id is 1"
    PLUS_ONE_UNLESS_FINAL = "+1-unless-final", "as given when the largest id is the final state n; else id + 1"
    PLUS_ONE_ALWAYS = "+1-always", "captures id + 1, the default list too"
    NONE = "none", "as given"

#: Classes that define ``set_eagle3_layers_to_capture`` themselves (or inherit it unchanged), by
#: the rule their release line applies. ``None`` means: DeepseekV2 family, rule by version.
_PLUS_ONE = (
    "ApertusForCausalLM", "BailingMoEForCausalLM", "ExaoneMoEForCausalLM", "Gemma3ForCausalLM",
    "Gemma4ForCausalLM", "Gemma4ForConditionalGeneration", "Glm4MoeForCausalLM",
    "Glm5NextForConditionalGeneration", "GptOssForCausalLM", "LlamaForCausalLM", "Phi3ForCausalLM",
    "LongcatFlashForCausalLM", "MiniMaxM2ForCausalLM", "MiniMaxM3SparseForCausalLM",
    "MiniMaxM3SparseForConditionalGeneration", "Qwen2ForCausalLM", "Qwen2_5_VLForConditionalGeneration",
    "Qwen2MoeForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "Qwen3NextForCausalLM",
    "Qwen3VLForConditionalGeneration", "Qwen3_5ForCausalLM", "MistralForCausalLM", "Llama4ForCausalLM",
)
_DEEPSEEK = ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "Glm4MoeLiteForCausalLM")
#: Wrappers that forward the call to ``self.language_model``, and that language model's class (the
#: rule is the inner model's): mllama4.py, gemma3_mm.py, kimi_k25.py.
WRAPPED = {"Gemma3ForConditionalGeneration": "Gemma3ForCausalLM", "Llama4ForConditionalGeneration": "Llama4ForCausalLM",
           "KimiK25ForConditionalGeneration": "DeepseekV3ForCausalLM"}
DELEGATES = tuple(WRAPPED)
#: Classes that gained ``set_eagle3_layers_to_capture`` after EAGLE-3 itself (0.4.4.post2): an older
#: release has no aux capture for them and fails at start-up (tests/shim/test_compat_static.py reads it
#: back from every wheel).
CAPTURE_SINCE: dict[str, tuple[int, int, int]] = {
    "Llama4ForConditionalGeneration": (0, 4, 9), "Qwen3ForCausalLM": (0, 4, 9), "Qwen3MoeForCausalLM": (0, 4, 9),
    "Qwen2ForCausalLM": (0, 5, 2), "Qwen2MoeForCausalLM": (0, 5, 2), "Qwen2_5_VLForConditionalGeneration": (0, 5, 2),
    "DeepseekV2ForCausalLM": (0, 5, 5), "DeepseekV3ForCausalLM": (0, 5, 5), "Glm4MoeForCausalLM": (0, 5, 5),
    "LongcatFlashForCausalLM": (0, 5, 6), "MiniMaxM2ForCausalLM": (0, 5, 6), "BailingMoEForCausalLM": (0, 5, 9),
    "Qwen3NextForCausalLM": (0, 5, 9), "KimiK25ForConditionalGeneration": (0, 5, 10),
    "Qwen3VLForConditionalGeneration": (0, 5, 11), "Gemma3ForCausalLM": (0, 5, 12),
    "Gemma3ForConditionalGeneration": (0, 5, 12), "Gemma4ForCausalLM": (0, 5, 12),
    "Gemma4ForConditionalGeneration": (0, 5, 12), "MiniMaxM3SparseForConditionalGeneration": (0, 5, 18),
    "Qwen3_5ForCausalLM": (0, 5, 22),
}


#: GPT-OSS keeps ids that end at the final state as given from this release (gpt_oss.py).
FINAL_STATE_SINCE = (0, 5, 17)


def capture_owner(model):
    """The model that holds the aux capture state (``capture_aux_hidden_states``, ``.model.layers_to_capture``)
    and the text config: ``model`` itself, or the language model a delegating wrapper forwards to."""
    while type(model).__name__ in DELEGATES and getattr(model, "language_model", None) is not None:
        model = model.language_model
    return model


class Engine(StrEnum):
    """The serving engine a hello names (``hello.engine``); absent or unknown reads as SGLang."""

    SGLANG = "sglang"
    VLLM = "vllm"

    @property
    def label(self) -> str:
        return {"sglang": "SGLang", "vllm": "vLLM"}[self.value]


def vllm_captured(ids: list[int] | None, num_layers: int) -> list[int]:
    """The captured indices vLLM derives from configured ``ids``: as given, deduplicated and sorted
    (``_set_aux_hidden_state_layers``); no ids (None or empty) = its default ``(2, n//2, n-3)``."""
    return sorted(set(ids)) if ids else sorted(set(default_capture(num_layers)))


class LayerError(ValueError):
    """A layer list SGLang cannot capture safely; the message says why."""


#: Classes built on llama.py's LlamaModel (their capture loop is the one checked for layer 0).
_LLAMA_MODEL = ("LlamaForCausalLM", "Phi3ForCausalLM", "MistralForCausalLM", "InternLM3ForCausalLM")


def family_rule(class_name: str, sglang_version: str | None = None) -> CaptureRule | None:
    """The rule for a target class in a release (None: the newest), or None when its family is
    unknown to eagle3scope ("unknown family: cannot predict" is the honest answer) or the release
    has no capture for it (:func:`capture_since` says which). A delegating wrapper has its inner
    model's rule."""
    since = capture_since(class_name)
    if since and before(sglang_version, since):
        return None
    class_name = WRAPPED.get(class_name, class_name)
    if class_name == "MiniMaxM3SparseForConditionalGeneration":
        return CaptureRule.PLUS_ONE_ALWAYS
    if class_name == "GptOssForCausalLM":
        return CaptureRule.PLUS_ONE if before(sglang_version, FINAL_STATE_SINCE) else CaptureRule.PLUS_ONE_UNLESS_FINAL
    if class_name in _PLUS_ONE:
        return CaptureRule.PLUS_ONE
    if class_name in _DEEPSEEK:
        return CaptureRule.PLUS_ONE if before(sglang_version, "0.5.13") else CaptureRule.PLUS_ONE_IF_FIRST_1
    return None


def capture_since(class_name: str) -> str | None:
    """The first release that captures aux states from this class, when that is later than EAGLE-3."""
    firsts = [CAPTURE_SINCE[c] for c in (class_name, WRAPPED.get(class_name)) if c in CAPTURE_SINCE]
    return ".".join(map(str, max(firsts))) if firsts else None


def captured_for(ids: list[int] | None, rule: str, num_layers: int) -> list[int]:
    """The captured layer indices SGLang derives from configured ``ids`` (None = its default)."""
    if ids is None:
        return [c + 1 for c in default_capture(num_layers)] if rule == "+1-always" else default_capture(num_layers)
    if rule == "+1-unless-final":
        return list(ids) if ids and max(ids) == num_layers else [i + 1 for i in ids]
    if rule in ("+1", "+1-always") or (rule == "+1-if-first-1" and ids and ids[0] == 1):
        return [i + 1 for i in ids]
    if rule in ("none", "+1-if-first-1"):
        return list(ids)
    raise LayerError(f"unknown id rule {rule!r}")


def ids_for(captured: list[int], rule: str, num_layers: int | None = None) -> list[int] | None:
    """Configured ids that make SGLang capture ``captured`` (None when no ids can)."""
    if rule == "+1-unless-final" and captured and num_layers is not None and max(captured) == num_layers:
        return list(captured)
    if rule in ("+1", "+1-unless-final", "+1-always"):
        return [c - 1 for c in captured]
    if rule == "none" or (rule == "+1-if-first-1" and captured and captured[0] != 1):
        return list(captured)
    return None  # "+1-if-first-1" cannot start a capture at layer 1


def capture_problem(captured: list[int], num_layers: int | None, class_name: str | None,
                    sglang_version: str | None) -> str | None:
    """Why this release cannot capture these indices (None: it can, as far as eagle3scope knows).

    Index ``c`` is the input of layer ``c``: ``0..n-1`` exist, ``0`` (the embeddings) needs a release
    whose capture loop handles the missing residual, ``n`` (the final state) a family that captures it.
    """
    class_name = WRAPPED.get(class_name, class_name)
    if any(c < 0 for c in captured):
        return f"negative captured index in {captured}: SGLang never matches it"
    if num_layers is not None:
        final_ok = class_name == "GptOssForCausalLM" and not before(sglang_version, FINAL_STATE_SINCE)
        past = [c for c in captured if c > num_layers or (c == num_layers and not final_ok)]
        if past:
            return (f"captured index {past[0]} is past the target's layers 0..{num_layers - 1}: the scheduler "
                    "would crash on the first request")
    if 0 in captured:
        if class_name in _LLAMA_MODEL and not before(sglang_version, "0.5.22"):
            return None
        if class_name in _LLAMA_MODEL or before(sglang_version, "0.5.22"):
            return (f"SGLang {sglang_version} cannot capture the input of layer 0 (the embeddings): it adds a "
                    "residual that is still None there and crashes; use SGLang 0.5.22+, or retrain with ids >= 1")
        return (f"capturing the input of layer 0 (the embeddings) is not checked for {class_name}: llama.py "
                "handles it from 0.5.22, older releases crash")
    return None


def default_capture(num_layers: int) -> list[int]:
    """SGLang's default aux layers (captured indices, no +1): ``[2, n//2, n-3]``."""
    return [2, num_layers // 2, num_layers - 3]


def specforge_defaults(num_layers: int) -> list[int]:
    """SpecForge's defaults, output-of-layer numbering (the same capture points as SGLang's default)."""
    return [1, num_layers // 2 - 1, num_layers - 4]


def check_layers(layers, *, num_layers: int | None, expected: int | None, rule: str | None, first_layer: int = 0) -> list[int]:
    """Validate configured ids; return the captured indices or raise :class:`LayerError`.

    ``expected`` is how many states the draft's ``fc`` takes (``fc.in / hidden``); ``first_layer``
    the first layer this (pipeline) rank holds; ``num_layers`` None skips the range check.
    """
    if rule is None:
        raise LayerError("unknown model family: eagle3scope does not know how this target maps aux ids")
    if not isinstance(layers, (list, tuple)) or not all(type(x) is int for x in layers):
        raise LayerError(f"layer ids must be a list of integers, got {layers!r}")
    layers = list(layers)
    if expected is not None and len(layers) != expected:
        raise LayerError(f"the draft's fc takes {expected} aux states, got {len(layers)} ids {layers}")
    if not layers:
        raise LayerError("no layer ids")
    if len(set(layers)) != len(layers):
        raise LayerError(f"duplicate ids {layers}: SGLang captures each layer once, so fc would get too few states")
    if layers != sorted(layers):
        raise LayerError(f"ids {layers} are not ascending: SGLang concatenates the states in layer order anyway")
    if layers[0] < 0:
        raise LayerError(f"negative id in {layers}: SGLang never matches it, so fc would get too few states")
    captured = captured_for(layers, rule, num_layers or 0)
    bad = [] if num_layers is None else [(i, c) for i, c in zip(layers, captured) if not first_layer <= c <= num_layers - 1]
    if bad:
        i, c = bad[0]
        where = f"layers {first_layer}..{num_layers - 1}"
        raise LayerError(
            f"id {i} makes SGLang capture the input of layer {c} ({rule} rule), but the target has {where}: "
            "the scheduler would crash on the first request"
        )
    return captured


@dataclass(frozen=True)
class Preset:
    name: str
    label: str
    layers: list | None
    captured: list | None
    available: bool
    reason: str = ""
    same_as: str | None = None  # an earlier preset that captures the same layers

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Preset":
        return cls(**{k: data.get(k) for k in ("name", "label", "layers", "captured", "available", "reason", "same_as")})


def presets(num_layers: int, expected: int | None, rule: str | None, configured: list | None, *,
            custom: list | None = None, first_layer: int = 0) -> list[Preset]:
    """Every preset for this target and draft, unavailable ones with the reason.

    ``configured``: the draft's own ids; ``custom``: a user list (omitted when None).
    """
    n = num_layers
    candidates: list[tuple[str, str, list | None, str]] = []
    shifted = None if configured is None else list(configured)
    candidates.append(("configured", "the draft's configured ids", shifted, "the draft config names no ids"))
    default = None if rule is None else ids_for(default_capture(n), rule)
    candidates.append(("sglang-default", f"SGLang's default: captures {default_capture(n)} (no +1)", default,
                       "no configured ids reproduce SGLang's default under this family's rule"))
    for delta, name in ((-1, "configured-1"), (+1, "configured+1")):
        ids = None if configured is None else [i + delta for i in configured]
        candidates.append((name, f"configured ids shifted by {delta:+d}", ids, "the draft config names no ids"))
    candidates.append(("specforge-default", "SpecForge default [1, n//2-1, n-4] (output of layer i)", specforge_defaults(n), ""))
    candidates.append(("speculators-default", "speculators default [2, n//2, n-3] (input of layer i)", default_capture(n), ""))
    if custom is not None:
        candidates.append(("custom", "custom list", list(custom), ""))
    out: list[Preset] = []
    seen: dict[tuple, str] = {}
    for name, label, ids, missing in candidates:
        if ids is None:
            out.append(Preset(name, label, None, None, False, missing))
            continue
        try:
            captured = check_layers(ids, num_layers=n, expected=expected, rule=rule, first_layer=first_layer)
        except LayerError as exc:
            out.append(Preset(name, label, ids, None, False, str(exc)))
            continue
        key = tuple(captured)
        out.append(Preset(name, label, ids, captured, True, "", seen.get(key)))
        seen.setdefault(key, name)
    return out


def parse_ids(text: str) -> list[int]:
    """``"1,3,4"`` / ``"1 3 4"`` / ``"[1, 3, 4]"`` -> [1, 3, 4]."""
    parts = [p for p in re.split(r"[\s,]+", text.strip().strip("[]")) if p]
    try:
        return [int(p) for p in parts]
    except ValueError:
        raise LayerError(f"not a list of integers: {text!r}") from None


# -- a draft that does not state its trained layers ------------------------------------------
# One judgement, said in the same words by the doctor, `check` and the TUI: no file can tell which
# layers such a draft was trained on (a training-run argument, as SpecForge's aux-layer option,
# leaves no trace), so unstated layers are a fact, not a mismatch; only low acceptance at the
# first draft position over a window makes them suspect.

#: First-position acceptance below which unstated layers are suspect. The demo's healthy draft
#: accepts 0.94-0.98 at position 1 on the real engine, its draft fed one layer too deep 0.66-0.74
#: (BENCHMARKS.md, served per scenario).
UNSTATED_SUSPECT_POSITION_1 = 0.75
#: Request-steps the window must hold before acceptance counts as evidence.
UNSTATED_MIN_REQUEST_STEPS = 64
UNSTATED_TITLE = "The draft does not state its trained aux layers; SGLang captures its default"
UNSTATED_SUSPECT_TITLE = "Low acceptance at draft position 1, and the draft does not state its trained aux layers"
UNSTATED_FACT = ("No config field names the target layers the draft was trained on, so SGLang captures its "
                 "default [2, n//2, n-3] (the input of each layer). That is right for drafts trained on the "
                 "default (SpecForge without an aux-layer option, AngelSlim, lmsys' releases); a draft trained on "
                 "other layers accepts less, and only its acceptance can show it.")
UNSTATED_NEXT = ("Find the trained set with `eagle3scope aux cycle` (it tries the presets live), then write it "
                 "into eagle_config.eagle_aux_hidden_state_layer_ids.")


def unstated_severity(position_1: float | None, request_steps: int) -> str:
    """``info`` for unstated layers; ``warning`` once position-1 acceptance over a full window is low."""
    if position_1 is None or request_steps < UNSTATED_MIN_REQUEST_STEPS:
        return "info"
    return "warning" if position_1 < UNSTATED_SUSPECT_POSITION_1 else "info"


def unstated_title(severity: str) -> str:
    return UNSTATED_SUSPECT_TITLE if severity == "warning" else UNSTATED_TITLE
