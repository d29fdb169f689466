"""``aux write``: put aux-layer ids into a draft's ``config.json`` for the next launch.

Either a new directory (a full copy written beside it, then renamed into place) or in place (a
timestamped backup of ``config.json``, then an atomic ``os.replace``): a crash never leaves a
half-written config. The ids are checked like the live channel checks them: as many as ``fc``
takes (read from the safetensors header), ascending, distinct, and, with the target's config,
inside the target after its family's +1 rule.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from eagle3scope.wire.aux_layers import check_layers, family_rule
from eagle3scope.doctor.checkpoint import open_checkpoint, read_json

KEY = "eagle_aux_hidden_state_layer_ids"


@dataclass
class WriteResult:
    path: Path
    old: list | None
    new: list[int]
    captured: list[int] | None
    backup: Path | None = None
    notes: tuple[str, ...] = ()


def _config(directory: Path) -> dict:
    """``directory/config.json`` through the doctor's bounded reader (a regular file inside the
    directory, at most 16 MiB, a JSON object); ValueError / OSError otherwise."""
    cfg = read_json(directory, directory / "config.json")
    if not isinstance(cfg, dict):
        raise ValueError(f"{directory / 'config.json'} is not a JSON object")
    return cfg


def _target_facts(target_dir: Path) -> tuple[int, str, int | None, str]:
    cfg = _config(target_dir)
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    layers, hidden, archs = text.get("num_hidden_layers"), text.get("hidden_size"), cfg.get("architectures")
    if type(layers) is not int or layers < 1:
        raise ValueError(f"{target_dir / 'config.json'} has no usable num_hidden_layers ({layers!r})")
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else "?"
    return layers, arch, hidden if type(hidden) is int else None, family_rule(arch) or ""


def expected_states(draft_dir: Path, target_hidden: int | None = None) -> int | None:
    """How many aux states the draft's ``fc`` takes (``fc.in / hidden``), None if unknown."""
    ckpt = open_checkpoint(draft_dir)
    info = ckpt.tensors.get("fc.weight") or ckpt.tensors.get("model.fc.weight")
    cfg = ckpt.config or {}
    hidden = cfg.get("target_hidden_size") or target_hidden or cfg.get("hidden_size")
    if info is None or len(info.shape) != 2 or not hidden:
        return None
    return int(info.shape[1]) // int(hidden)


def write_aux_ids(draft_dir: str | Path, ids: list[int], *, out: str | Path | None = None, in_place: bool = False,
                  target_dir: str | Path | None = None) -> WriteResult:
    """Write ``ids`` as ``eagle_config.eagle_aux_hidden_state_layer_ids``; raises LayerError or
    ValueError (nothing written) when the ids or the destination are not acceptable."""
    draft_dir = Path(draft_dir).resolve()
    if (out is None) == (not in_place):
        raise ValueError("give exactly one of --out NEW_DIR or --in-place")
    config_path = draft_dir / "config.json"
    config = _config(draft_dir)
    notes = []
    num_layers, rule, hidden = None, "+1", None
    if target_dir is not None:
        num_layers, arch, hidden, known = _target_facts(Path(target_dir))
        if known:
            rule = known
        else:
            notes.append(f"target architecture {arch} is not a family eagle3scope knows; assumed SGLang's +1 rule")
    expected = expected_states(draft_dir, hidden)
    captured = check_layers(list(ids), num_layers=num_layers, expected=expected, rule=rule)
    eagle = dict(config.get("eagle_config") or {})
    old = eagle.get(KEY)
    eagle[KEY] = list(ids)
    config["eagle_config"] = eagle
    if KEY in config:  # SGLang 0.5.23 has a second reader of a top-level copy
        config[KEY] = list(ids)
        notes.append(f"also updated the top-level {KEY}")
    text = json.dumps(config, indent=2) + "\n"
    if in_place:
        backup = draft_dir / f"config.json.bak-{time.strftime('%Y%m%d-%H%M%S')}"
        shutil.copy2(config_path, backup)
        _atomic_write(config_path, text)
        return WriteResult(config_path, old, list(ids), captured if num_layers else None, backup, tuple(notes))
    out = Path(out).resolve()
    if out.exists():
        raise ValueError(f"{out} already exists; choose a new directory")
    if out == draft_dir or draft_dir in out.parents:
        raise ValueError("--out must be outside the draft directory")
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        shutil.copytree(draft_dir, tmp, symlinks=True)
        _atomic_write(tmp / "config.json", text)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return WriteResult(out / "config.json", old, list(ids), captured if num_layers else None, None, tuple(notes))


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)

