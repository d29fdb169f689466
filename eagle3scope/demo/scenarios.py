"""Scenarios: the healthy demo draft and the real-world breaks, reproduced through the real engine.

Each scenario is a transformation of the healthy draft directory (its ``config.json`` or its
safetensors) plus server arguments; SGLang then fails exactly as it does in the wild, with no
event faked anywhere. The module is pure Python (safetensors files are rewritten by hand: a
JSON header and raw bytes), so the viewer can list and prepare scenarios without torch.

``SCENARIOS[name].prepare(models, out_dir)`` returns the ``ServerSpec`` to launch.
"""

from __future__ import annotations

import json
import shutil
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from eagle3scope.demo.models import ModelPaths

Tensors = dict[str, tuple[dict, bytes]]  # name -> (safetensors header entry, raw bytes)


@dataclass(frozen=True)
class ServerSpec:
    """What to launch: SGLangServer(target_dir, draft_dir, algorithm=..., extra_args=...)."""

    target_dir: Path
    draft_dir: Path
    algorithm: str = "EAGLE3"
    extra_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Scenario:
    name: str
    #: What is wrong, in one line (shown by the demo and the viewer).
    summary: str
    #: What SGLang's acceptance length does, measured on the demo models (BENCHMARKS.md):
    #: "healthy"; "collapse" (to about 1); "lower" (clearly below healthy, well above 1).
    expect: str
    #: Where this break was reported in the wild.
    seen_in: str = ""
    config_edit: Callable[[dict, "ModelPaths"], None] | None = None
    weights_edit: Callable[[Tensors], None] | None = None
    algorithm: str = "EAGLE3"
    extra_args: tuple[str, ...] = field(default=())
    source: str = "draft"  # which ModelPaths draft directory to start from
    target: str = "target"  # which ModelPaths target directory to serve

    def prepare(self, models: "ModelPaths", out_dir: Path | str) -> ServerSpec:
        """Write this scenario's draft under ``out_dir/<name>`` (healthy ones are served as built)."""
        src = Path(getattr(models, self.source))
        draft = src
        if self.config_edit or self.weights_edit:
            draft = Path(out_dir) / self.name
            shutil.rmtree(draft, ignore_errors=True)
            draft.mkdir(parents=True)
            config = json.loads((src / "config.json").read_text())
            if self.config_edit:
                self.config_edit(config, models)
            (draft / "config.json").write_text(json.dumps(config, indent=1))
            tensors = read_safetensors(src / "model.safetensors")
            if self.weights_edit:
                self.weights_edit(tensors)
            write_safetensors(draft / "model.safetensors", tensors)
        return ServerSpec(Path(getattr(models, self.target)), draft, self.algorithm, tuple(self.extra_args))


def read_safetensors(path: Path) -> Tensors:
    data = Path(path).read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + size])
    header.pop("__metadata__", None)
    body = data[8 + size :]
    return {name: (entry, body[entry["data_offsets"][0] : entry["data_offsets"][1]]) for name, entry in header.items()}


def write_safetensors(path: Path, tensors: Tensors) -> None:
    header: dict = {"__metadata__": {"format": "pt"}}
    chunks, offset = [], 0
    for name, (entry, raw) in tensors.items():
        header[name] = {"dtype": entry["dtype"], "shape": entry["shape"], "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    Path(path).write_bytes(struct.pack("<Q", len(blob)) + blob + b"".join(chunks))


def _aux_off(config: dict, models: "ModelPaths") -> None:
    config["eagle_config"]["use_aux_hidden_state"] = False


def _aux_offset(config: dict, models: "ModelPaths") -> None:
    shifted = [i + 1 for i in models.aux_layer_ids]
    # SGLang captures the output of layer id (input of id + 1); id + 1 must exist or the
    # server dies on the first request (fc gets 2H instead of 3H).
    if max(shifted) + 1 >= models.num_target_layers:
        raise ValueError(f"aux ids {shifted} run past the target's {models.num_target_layers} layers")
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = shifted


def _compiled_layer_names(tensors: Tensors) -> None:
    for name in [n for n in tensors if n.startswith("layers.0.")]:
        tensors[name.replace("layers.0.", "layers.0._orig_mod.", 1)] = tensors.pop(name)


def _d2t_absolute(tensors: Tensors) -> None:
    entry, raw = tensors["d2t"]
    if entry["dtype"] != "I64":
        raise ValueError(f"d2t has dtype {entry['dtype']}, expected I64")
    offsets = struct.unpack(f"<{len(raw) // 8}q", raw)
    absolute = [i + off for i, off in enumerate(offsets)]
    tensors["d2t"] = (entry, struct.pack(f"<{len(absolute)}q", *absolute))


def _drop_lm_head(tensors: Tensors) -> None:
    del tensors["lm_head.weight"]


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("healthy", "the trained draft, correct config (speculators naming layers.0.*)", "healthy"),
        Scenario(
            "healthy-midlayer",
            "the same draft in SpecForge naming (midlayer.*), which SGLang 0.5.23 maps onto layers.0",
            "healthy",
            source="draft_midlayer",
        ),
        Scenario(
            "aux-off",
            "eagle_config.use_aux_hidden_state=false: the target sends H-wide states and fc is skipped",
            "lower",
            "vLLM PR 40656 (flag handling); same evidence as sglang PR 21272",
            config_edit=_aux_off,
        ),
        Scenario(
            "wrong-algorithm",
            "--speculative-algorithm EAGLE with an EAGLE-3 draft: no aux capture, fc skipped",
            "collapse",
            "sglang PR 21272",
            algorithm="EAGLE",
        ),
        Scenario(
            "dropped-weights",
            "decoder layer saved from a torch.compile'd module (layers.0._orig_mod.*): "
            "SGLang skips the names without a warning and the layer keeps its uninitialised values",
            "lower",
            "sglang llama_eagle3.load_weights has no else branch; NeMo-RL PR 3699",
            weights_edit=_compiled_layer_names,
        ),
        Scenario(
            "d2t-absolute",
            "d2t holds absolute target ids instead of offsets: draft id i maps to id(i) + i",
            "collapse",
            "verl-SpeCo PR 67; EAGLE issue 222",
            weights_edit=_d2t_absolute,
        ),
        Scenario(
            "lm-head-missing",
            "no lm_head in the checkpoint while draft_vocab_size is set: the head stays uninitialised",
            "collapse",
            "sglang PR 27908",
            weights_edit=_drop_lm_head,
        ),
        Scenario(
            "aux-offset",
            "aux layer ids written in input-of-layer numbering (speculators' [2, n//2, n-3]) into "
            "SGLang's output-of-layer config: every captured layer is one too deep",
            "lower",
            "sglang PR 25454",
            config_edit=_aux_offset,
        ),
    )
}


def _d2t_under_t2d_name(tensors: Tensors) -> None:
    tensors.pop("t2d", None)
    tensors["t2d"] = tensors.pop("d2t")


#: The same failures through vLLM, whose numbering and loader differ from SGLang's: vLLM captures
#: ``eagle_aux_hidden_state_layer_ids`` as given where SGLang adds 1, so its healthy draft is the
#: speculators-format one (ids one higher); its loader raises on a name it cannot place, but drops
#: every name containing ``t2d`` unread.
VLLM_SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("healthy", "the trained draft with vLLM's aux numbering (speculators format, ids as captured)",
                 "healthy", source="draft_speculators"),
        Scenario(
            "aux-numbering",
            "the draft written with SGLang's aux numbering (the layer's output) served by vLLM, which takes "
            "the ids as the layer's input: every captured layer is one too shallow",
            "lower",
            "vLLM PR 43671 (MiniMax-M2 off-by-one)",
        ),
        Scenario(
            "aux-off",
            "eagle_config.use_aux_hidden_state=false: the target sends no aux states, fc is bypassed and its "
            "weight dropped at load",
            "lower",
            "vLLM PR 40656 (flag handling)",
            config_edit=_aux_off,
        ),
        Scenario(
            "dropped-weights",
            "the draft-to-target map saved under the name t2d: vLLM drops every t2d name unread, the map stays "
            "zeros and draft id i proposes target id i",
            "collapse",
            "llama_eagle3.load_weights skips t2d and maps an absent d2t to None",
            weights_edit=_d2t_under_t2d_name,
            source="draft_speculators",
        ),
    )
}
