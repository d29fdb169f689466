"""Write a corrected copy of a draft checkpoint: only repairs that are certain, never in place.

What it repairs: key names the chosen SGLang release would silently skip (when exactly one name
it maps fits, shape checked), an absolute-id ``d2t`` (when t2d or the vocabulary bounds make the
reading unambiguous) and a speculators-format config. Everything else that the doctor calls an
error makes it refuse, because a copy that still breaks is worse than none. The copy is written to
a temporary sibling directory, read back and re-diagnosed, then renamed into place.
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
    TensorInfo,
    iter_bytes,
    open_checkpoint,
    read_header,
    write_safetensors,
)
from eagle3scope.doctor.diagnose import Diagnosis, diagnose

#: Error findings that the copy repairs (when the diagnosis found a certain repair for them).
REPAIRABLE = {"weights-dropped", "weights-crash", "weights-unwritten", "config-speculators-format", "d2t-absolute",
              "aux-layers-mismatch"}
_NP_DTYPES = {"I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1", "U8": "u1", "U16": "<u2", "U32": "<u4", "U64": "<u8"}


class FixRefused(Exception):
    """The repair would have to guess, or would leave errors behind; nothing was written."""


@dataclass
class FixResult:
    out: Path
    changes: list[str] = field(default_factory=list)
    before: Diagnosis | None = None
    after: Diagnosis | None = None


def _unrepaired(dx: Diagnosis) -> list[str]:
    repairs = {"weights-dropped": not dx.unmappable, "weights-crash": not dx.unmappable,
               "weights-unwritten": not dx.unmappable, "config-speculators-format": bool(dx.config_edits),
               "aux-layers-mismatch": bool(dx.config_edits),
               "d2t-absolute": dx.d2t_offsets is not None}
    return [f"{f.id}: {f.title}" for f in dx.findings
            if f.severity == "error" and not (f.id in REPAIRABLE and repairs[f.id])]


def fix_checkpoint(src: str | Path, out: str | Path, *, sglang_version: str | None = None,
                   target_dir: str | Path | None = None) -> FixResult:
    src, out = Path(src).resolve(), Path(out).resolve()
    if out == src or src in out.parents:
        raise FixRefused("--out must be outside the source checkpoint")
    if out.exists():
        raise FixRefused(f"{out} already exists; choose a new directory")
    dx = diagnose(src, sglang_version=sglang_version, target_dir=target_dir)
    if dx.refusals:
        raise FixRefused("; ".join(dx.refusals))
    left = _unrepaired(dx)
    if left:
        raise FixRefused("errors fix cannot repair: " + "; ".join(left))
    result = FixResult(out, before=dx)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        expected = _write_copy(dx, src, tmp, result.changes)
        result.after = _verify(dx, tmp, expected, sglang_version=sglang_version, target_dir=target_dir)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return result


def _write_copy(dx: Diagnosis, src: Path, tmp: Path, changes: list[str]) -> dict[str, tuple]:
    """Write the copy into ``tmp``; return name -> (dtype, shape, sha256) of what must be there."""
    ckpt = dx.checkpoint
    weight_files = {p.name for p in ckpt.files} | {INDEX_NAME, "config.json"}
    for entry in src.iterdir():
        if entry.name in weight_files:
            continue
        if entry.is_dir():
            shutil.copytree(entry, tmp / entry.name, symlinks=True)
        else:
            shutil.copy2(entry, tmp / entry.name)
    expected: dict[str, tuple] = {}
    d2t_name = next((n for n, m in dx.mappings.items() if m.action == "d2t"), None)
    for file in ckpt.files:
        header, _ = read_header(file)
        entries = []
        for name, info in sorted(((n, i) for n, i in ckpt.tensors.items() if i.file == file), key=lambda x: x[1].start):
            new = dx.renames.get(name, name)
            source: TensorInfo | bytes = info
            if name == d2t_name and dx.d2t_offsets is not None:
                source = dx.d2t_offsets.astype(_NP_DTYPES[info.dtype]).tobytes()
                changes.append(f"{name}: absolute ids -> offsets (d2t - arange)")
            if new != name:
                changes.append(f"{name} -> {new}")
            entries.append((new, source, info.dtype, info.shape))
            expected[new] = (info.dtype, info.shape, _sha(source))
        write_safetensors(tmp / file.name, entries, header.get("__metadata__"))
    if ckpt.index is not None:
        index = dict(ckpt.index)
        index["weight_map"] = {dx.renames.get(n, n): f for n, f in ckpt.index["weight_map"].items()}
        (tmp / INDEX_NAME).write_text(json.dumps(index, indent=2))
    changes += [f"config.json: {edit}" for edit in dx.config_edits]
    (tmp / "config.json").write_text(json.dumps(dx.config if dx.config_edits else ckpt.config, indent=2))
    for path in tmp.iterdir():
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())
    return expected


def _sha(source: TensorInfo | bytes) -> str:
    h = hashlib.sha256()
    for chunk in [source] if isinstance(source, bytes) else iter_bytes(source):
        h.update(chunk)
    return h.hexdigest()


def _verify(dx: Diagnosis, tmp: Path, expected: dict, **kw) -> Diagnosis:
    """Read the copy back with safetensors: same tensors, same bytes, and a clean diagnosis."""
    copy = open_checkpoint(tmp)
    if copy.errors:
        raise FixRefused(f"the written copy does not read back: {copy.errors}")
    got = {n: (i.dtype, i.shape, _sha(i)) for n, i in copy.tensors.items()}
    if got != expected:
        wrong = sorted(set(got) ^ set(expected) | {n for n in got if n in expected and got[n] != expected[n]})
        raise FixRefused(f"the written copy differs from what was intended: {wrong[:5]}")
    after = diagnose(tmp, sglang_version=dx.sglang_version, target_dir=kw.get("target_dir"))
    errors = [f.id for f in after.findings if f.severity == "error"]
    if errors:
        raise FixRefused(f"the written copy still has errors: {errors}")
    return after
