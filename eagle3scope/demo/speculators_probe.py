"""Load a draft with the real ``speculators`` package and report what it saw (JSON on stdout).

Run with the python of the speculators venv (scripts/build-speculators-env.sh) and the project
on PYTHONPATH: ``python -m eagle3scope.demo.speculators_probe DRAFT_DIR``. It checks the claim
that the demo's speculators-layout draft is what speculators itself reads: its config parses
into ``Eagle3SpeculatorConfig`` and serialises back to the same values, and
``Eagle3DraftModel.from_pretrained`` loads every tensor of the file unchanged.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def probe(draft_dir: Path) -> dict:
    import torch
    from safetensors.torch import load_file
    from speculators.models.eagle3 import Eagle3SpeculatorConfig
    from speculators.models.eagle3.core import Eagle3DraftModel

    written = json.loads((draft_dir / "config.json").read_text())
    config = Eagle3SpeculatorConfig.from_pretrained(str(draft_dir))
    reserialised = config.to_dict()
    changed = sorted(
        key for key, value in written.items()
        if key != "transformer_layer_config" and reserialised.get(key) != value
    )
    layer = reserialised["transformer_layer_config"]
    changed += [
        f"transformer_layer_config.{key}" for key, value in written["transformer_layer_config"].items()
        if key in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "vocab_size")
        and layer.get(key) != value
    ]
    model = Eagle3DraftModel.from_pretrained(str(draft_dir))
    state = model.state_dict()
    tensors = load_file(str(draft_dir / "model.safetensors"))
    return {
        "speculators_model_type": config.speculators_model_type,
        "aux_layer_ids": list(model.config.eagle_aux_hidden_state_layer_ids),
        "config_fields_changed_by_round_trip": changed,
        "not_loaded": sorted(k for k in tensors if k not in state),
        "loaded_differently": sorted(k for k in tensors if k in state and not torch.equal(state[k], tensors[k])),
        "left_at_init": sorted(
            k for k in state if k not in tensors and not k.startswith("verifier_")
        ),
    }


if __name__ == "__main__":
    print(json.dumps(probe(Path(sys.argv[1]))))
