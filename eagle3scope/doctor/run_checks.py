"""Checks of a draft checkpoint against what one SGLang release will do with it.

``diagnose`` returns findings (stable ids shared with the live rules where the break is the same:
``weights-dropped``, ``d2t-absolute``, ``lm-head-mismatch``, ``aux-layers-mismatch``, ...) and the
facts ``fix`` needs: which keys to rename, whether d2t can be converted, the SGLang config to write.
It never stops early: a config problem is a finding, and every check that does not depend on the
broken part still runs. Who wrote the checkpoint (``producers``) decides the conventions assumed,
and each assumption is reported.

This module only runs the checks, in order and each guarded: the types are ``diagnosis``, the
checks ``config_checks`` (files, producer, config.json), ``weight_checks`` (tensors against the
loader) and ``aux_check`` (which target layers feed the draft).
"""

from __future__ import annotations

from pathlib import Path

from eagle3scope.doctor.aux_check import check_aux_layers
from eagle3scope.doctor.checkpoint import open_checkpoint
from eagle3scope.doctor.config_checks import MODEL_FIELDS, check_config, check_files, is_llama_draft, read_target, recognise
from eagle3scope.doctor.findings import Diagnosis
from eagle3scope.doctor.loader_layouts import expected_params, layout_for
from eagle3scope.doctor.producer_flags import check_producer_flags
from eagle3scope.doctor.weight_checks import (
    check_embedding,
    check_head,
    check_names,
    check_shapes,
    check_target,
    check_vocab_map,
)
from eagle3scope.wire.releases import installed_sglang as installed

DEFAULT_SGLANG = "0.5.23"


def installed_sglang() -> str:
    """The SGLang version to check against when none is given: the installed one, else 0.5.23."""
    return installed() or DEFAULT_SGLANG


def diagnose(draft_dir: str | Path, *, sglang_version: str | None = None, target_dir: str | Path | None = None) -> Diagnosis:
    """Raises ValueError only for a malformed ``sglang_version`` (a usage error); everything about
    the checkpoint and the target becomes a finding."""
    version = sglang_version or installed_sglang()
    layout = layout_for(version)
    dx = Diagnosis(open_checkpoint(draft_dir), version, layout, str(draft_dir))
    ckpt = dx.checkpoint
    guarded(dx, read_target, target_dir)
    for check in (check_files, recognise, check_config, check_producer_flags):
        guarded(dx, check)
    if not layout.has_eagle3:
        dx.add("no-eagle3", "error", f"SGLang {version} has no EAGLE-3 support", {"sglang_version": version},
               "Use SGLang 0.4.4.post2 or newer (0.5.12+ maps both midlayer.* and layers.0.* names).")
        dx.refuse("this SGLang release cannot serve EAGLE-3 drafts")
        return dx
    params = None
    if dx.config is not None and ckpt.tensors and is_llama_draft(dx):
        missing = [k for k in MODEL_FIELDS if k not in dx.config]
        if missing:
            dx.add("config-incomplete", "error", "config.json lacks fields the draft model is built from",
                   {"missing": missing}, "Add the Llama fields (" + ", ".join(missing) + ") the draft was trained with.")
            dx.refuse("config.json is incomplete")
        else:
            params = expected_params(layout, dx.config)
    if params is not None:
        for check in (check_names, check_shapes, check_head, check_embedding):
            guarded(dx, check, params)
    for check in (check_vocab_map, check_aux_layers, check_target):
        guarded(dx, check)
    return dx


def guarded(dx: Diagnosis, check, *args) -> None:
    """Run one check; an unexpected exception becomes a finding (so the others still run)."""
    try:
        check(dx, *args)
    except Exception as exc:  # noqa: BLE001 - reported, never swallowed silently
        dx.add("check-failed", "error", f"The {check.__name__.strip('_').replace('_', ' ')} check failed",
               {"error": f"{type(exc).__name__}: {exc}"[:300]},
               "The checkpoint has a shape the doctor did not expect; please report it.")
        dx.refuse(f"{check.__name__.strip('_')} could not be checked")
