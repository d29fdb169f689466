"""Write a corrected copy of a draft checkpoint: only repairs that are certain, never in place.

What it repairs: key names the chosen SGLang releases would skip (when exactly one name they map
fits, shape checked), an absolute-id ``d2t`` (when t2d or the vocabulary bounds make the reading
unambiguous), a speculators-format config, ``use_aux_hidden_state: false`` beside a trained ``fc``
(the seeds' break), rope scaling an export injected (``producer_flags``), and aux ids that
capture other layers than the draft was trained on (translated by the producer's stated convention and the target family's rule).
One copy serves several releases when it can: names the oldest loader needs (newer ones map
them too) and ids every release's rule turns into the trained layers. Everything else the doctor
calls an error makes it refuse, with the next step, because a copy that still breaks is worse
than none. The copy is written to a temporary sibling directory, read back and re-diagnosed for
every release, then renamed into place. The config records what fix assumed (``eagle3scope_fix``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from eagle3scope.doctor.checkpoint import (
    INDEX_NAME,
    NP_DTYPES,
    TensorInfo,
    iter_bytes,
    open_checkpoint,
    read_header,
    write_safetensors,
)
from eagle3scope.doctor.aux_check import ASSUMED_TARGET
from eagle3scope.doctor.run_checks import diagnose, installed_sglang
from eagle3scope.doctor.findings import Diagnosis
from eagle3scope.doctor.producers import FIX_KEY
from eagle3scope.wire.aux_layers import captured_for, family_rule
from eagle3scope.wire.releases import ERAS, parse_version

#: Error findings that the copy repairs (when the diagnosis found a certain repair for them).
REPAIRABLE = {"weights-dropped", "weights-crash", "weights-unwritten", "weights-unused", "config-speculators-format",
              "d2t-absolute", "aux-layers-mismatch", "architecture", "aux-capture-off", "lm-head-tied",
              "target-hidden-null", "rope-scaling-injected"}
#: Findings that mean this release cannot serve the draft at all (not a repair fix could make).
UNSERVABLE = {"no-eagle3", "multi-layer-draft", "architecture-unsupported", "eagle-config-ignored",
              "fc-width-unsupported", "aux-capture-unsupported", "aux-final-state-unsupported"}


class FixRefused(Exception):
    """The repair would have to guess, or would leave errors behind; nothing was written."""


@dataclass
class FixResult:
    out: Path
    changes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    before: Diagnosis | None = None
    after: list[Diagnosis] = field(default_factory=list)
    versions: list[str] = field(default_factory=list)


def _unrepaired(dx: Diagnosis) -> list[str]:
    repairs = {"weights-dropped": not dx.unmappable, "weights-crash": not dx.unmappable,
               "weights-unwritten": not dx.unmappable, "weights-unused": True,
               "config-speculators-format": bool(dx.config_edits), "architecture": bool(dx.config_edits),
               "aux-layers-mismatch": bool(dx.config_edits) or dx.aux_ids is not None,
               "aux-capture-off": bool(dx.config_edits), "lm-head-tied": bool(dx.config_edits),
               "target-hidden-null": bool(dx.config_edits), "rope-scaling-injected": bool(dx.config_edits),
               "d2t-absolute": dx.d2t_offsets is not None}
    return [f"{f.id}: {f.title}" for f in dx.findings
            if f.severity == "error" and not (f.id in REPAIRABLE and repairs[f.id])]


def _on(dx: Diagnosis, text: str) -> str:
    """``text`` said for this release (once: many titles name it already)."""
    return text if f"SGLang {dx.sglang_version}" in text else f"SGLang {dx.sglang_version}: {text}"


def _next_steps(dx: Diagnosis) -> str:
    """The doctor's own fix hints for the errors fix leaves (the most important first)."""
    steps = [f.fix for f in dx.ordered() if f.severity == "error" and f.fix and "eagle3scope fix" not in f.fix
             and not any(f.fix.rstrip(".") in why or why in f.fix for why in dx.refusals)]
    steps = list(dict.fromkeys(steps))[:2]
    return (". Next: " + " Then: ".join(steps)) if steps else ""


def versions_for(spec: str | None) -> tuple[list[str], bool]:
    """``--for-sglang`` -> the releases, and whether they were named (False: the default)."""
    if spec:
        versions = [v.strip() for v in spec.split(",") if v.strip()]
        for v in versions:
            parse_version(v)  # ValueError: a usage error
        return sorted(set(versions), key=parse_version), True
    from importlib.util import find_spec

    return ([installed_sglang()] if find_spec("sglang") else list(ERAS)), False


def fix_checkpoint(src: str | Path, out: str | Path, *, sglang_version: str | None = None,
                   target_dir: str | Path | None = None) -> FixResult:
    src, out, given = new_output(src, out)
    versions, named = versions_for(sglang_version)
    diagnoses = [diagnose(src, sglang_version=v, target_dir=target_dir) for v in versions]
    notes: list[str] = []
    serving = []
    for dx in diagnoses:
        blocked = [f for f in dx.findings if f.id in UNSERVABLE and f.severity == "error"]
        if blocked and (named or len(diagnoses) == 1):
            raise FixRefused(f"{_on(dx, blocked[0].title)}. Next step: {blocked[0].fix}")
        if blocked:
            notes.append(f"not for SGLang {dx.sglang_version}: " + (blocked[0].title if dx.sglang_version not in
                                                                   blocked[0].title else blocked[0].fix))
            continue
        serving.append(dx)
    if not serving:
        raise FixRefused("no SGLang release can serve this draft: " + "; ".join(notes))
    for dx in serving:
        if dx.refusals:
            raise FixRefused(f"SGLang {dx.sglang_version}: " + "; ".join(dx.refusals) + _next_steps(dx))
        left = _unrepaired(dx)
        if left:
            raise FixRefused(f"SGLang {dx.sglang_version}: errors fix cannot repair: " + "; ".join(left) + _next_steps(dx))
    base = serving[0]  # the oldest release: the names its loader needs are mapped by the newer ones too
    config = _config_for_all(serving)
    result = FixResult(out, before=base, versions=[dx.sglang_version for dx in serving])
    result.notes = notes + [n for n in base.notes]

    def write_and_verify(tmp: Path) -> None:
        expected = _write_copy(base, config, tmp, result)
        result.after = [_verify(dx, tmp, expected, target_dir) for dx in serving]

    write_atomically(out, given, write_and_verify)
    return result


def new_output(src: str | Path, out: str | Path) -> tuple[Path, Path, str]:
    """The resolved source and output directories and the output as given; FixRefused when the
    output is inside the source or exists already."""
    given = str(out)
    src, out = Path(src).resolve(), Path(out).resolve()
    if out == src or src in out.parents:
        raise FixRefused("--out must be outside the source checkpoint")
    if out.exists():
        raise FixRefused(f"{given} already exists; choose a new directory")
    return src, out, given


def write_atomically(out: Path, given: str, write_and_verify) -> None:
    """Run ``write_and_verify(tmp)`` on a temporary sibling of ``out``, then rename it into place
    (on any failure the sibling is removed and nothing is left at ``out``)."""
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
    except OSError as exc:
        raise OSError(f"cannot write {given}: {exc.strerror or exc}") from None
    try:
        write_and_verify(tmp)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _config_for_all(serving: list[Diagnosis]) -> dict:
    """The base diagnosis' SGLang config, with aux ids that capture the trained layers on every
    release served (and the record of what fix assumed)."""
    base = serving[0]
    config = dict(base.config if base.config_edits else base.checkpoint.config)
    known = base.trained_known and base.trained_capture is not None
    if known:
        candidates = [dx.aux_ids for dx in serving]
        good = [c for c in candidates if all(_captures(dx, c) == base.trained_capture for dx in serving)]
        if not good:
            per = "; ".join(f"--for-sglang {dx.sglang_version} (ids {dx.aux_ids})" for dx in serving)
            raise FixRefused(f"no single id list makes every release capture the trained layers "
                             f"{base.trained_capture}: make one copy per release: {per}")
        eagle = dict(config.get("eagle_config") or {})
        if good[0] is None:
            eagle.pop("eagle_aux_hidden_state_layer_ids", None)
        else:
            eagle["eagle_aux_hidden_state_layer_ids"] = good[0]
        if eagle or "eagle_config" in config:
            config["eagle_config"] = eagle
    config[FIX_KEY] = {"producer": base.producer.label if base.producer else "unknown",
                       "trained_capture": base.trained_capture if known else None,
                       "target_class": base.target_class or ASSUMED_TARGET,
                       "for_sglang": [dx.sglang_version for dx in serving],
                       "notes": base.notes}
    return config


def _captures(dx: Diagnosis, ids: list[int] | None) -> list[int] | None:
    """What this release captures for ``ids`` (None: its default, resolvable with the target's layer count)."""
    rule = family_rule(dx.target_class or ASSUMED_TARGET, dx.sglang_version)
    n = (dx.target or {}).get("num_hidden_layers")
    if rule is None or (ids is None and not n):
        return None
    return captured_for(ids, rule, n or 0)


def _write_copy(dx: Diagnosis, config: dict, tmp: Path, result: FixResult) -> dict[str, tuple]:
    """Write the copy into ``tmp``; return name -> (dtype, shape, sha256) of what must be there."""
    ckpt, changes = dx.checkpoint, result.changes
    for entry in ckpt.entries:  # safe regular files only (links out of the directory were refused)
        shutil.copyfile(entry.resolve(), tmp / entry.name)
    skipped = sorted(p.name + "/" for p in ckpt.path.iterdir() if p.is_dir() and not p.is_symlink())
    if skipped:
        result.notes.append("not copied (directories): " + ", ".join(skipped))
    expected: dict[str, tuple] = {}
    d2t_name = next((n for n, m in dx.mappings.items() if m.action == "d2t"), None)
    for file in ckpt.files:
        header, _ = read_header(file.resolve())
        entries = []
        for name, info in sorted(((n, i) for n, i in ckpt.tensors.items() if i.shard == file.name),
                                 key=lambda x: x[1].start):
            new = dx.renames.get(name, name)
            source: TensorInfo | bytes = info
            if name == d2t_name and dx.d2t_offsets is not None:
                source = dx.d2t_offsets.astype(NP_DTYPES[info.dtype]).tobytes()
                changes.append(f"{name}: absolute ids -> offsets (d2t - arange)")
            if new != name:
                changes.append(f"{name} -> {new}")
            entries.append((new, source, info.dtype, info.shape))
            expected[new] = (info.dtype, info.shape, content_sha(source))
        write_safetensors(tmp / file.name, entries, header.get("__metadata__"))
    finish_copy(dx, config, tmp, changes)
    return expected


def finish_copy(dx: Diagnosis, config: dict, tmp: Path, changes: list[str]) -> None:
    """After the tensors: the shard index under the new names, the config, everything synced to disk."""
    ckpt = dx.checkpoint
    if ckpt.index is not None:
        index = dict(ckpt.index)
        index["weight_map"] = {dx.renames.get(n, n): f for n, f in ckpt.index["weight_map"].items()}
        (tmp / INDEX_NAME).write_text(json.dumps(index, indent=2))
    changes += [f"config.json: {edit}" for edit in dx.config_edits]
    (tmp / "config.json").write_text(json.dumps(config, indent=2))
    for path in tmp.iterdir():
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())


def content_sha(source: TensorInfo | bytes) -> str:
    h = hashlib.sha256()
    for chunk in [source] if isinstance(source, bytes) else iter_bytes(source):
        h.update(chunk)
    return h.hexdigest()


def _verify(dx: Diagnosis, tmp: Path, expected: dict, target_dir) -> Diagnosis:
    """Read the copy back: same tensors, same bytes, and a clean diagnosis for this release."""
    return verify_copy(tmp, expected, lambda copy: diagnose(copy, sglang_version=dx.sglang_version, target_dir=target_dir),
                       f"SGLang {dx.sglang_version}")


def verify_copy(tmp: Path, expected: dict, rediagnose, where: str) -> Diagnosis:
    """The written copy read back: the ``expected`` tensors (name -> dtype, shape, sha256) and no
    error in ``rediagnose(tmp)``, the diagnosis for the engine release ``where`` names."""
    copy = open_checkpoint(tmp)
    if copy.errors:
        raise FixRefused(f"the written copy does not read back: {copy.errors}")
    got = {n: (i.dtype, i.shape, content_sha(i)) for n, i in copy.tensors.items()}
    if got != expected:
        wrong = sorted(set(got) ^ set(expected) | {n for n in got if n in expected and got[n] != expected[n]})
        raise FixRefused(f"the written copy differs from what was intended: {wrong[:5]}")
    after = rediagnose(tmp)
    errors = [f"{f.id}: {f.title}" for f in after.findings if f.severity == "error"]
    if errors:
        raise FixRefused(f"the written copy still has errors on {where}: {errors}")
    return after
