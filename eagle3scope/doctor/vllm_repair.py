"""``fix --for-vllm``: write a copy of a draft that vLLM serves as it was trained, never in place.

What it repairs, from the vLLM prediction (``vllm_checks``): aux ids renumbered so vLLM (ids as
given) captures the layers the draft was trained on, an architecture name vLLM registers,
``use_aux_hidden_state: false`` beside a trained fc, key names vLLM has no parameter for where
the doctor maps them unambiguously, and an absolute-id d2t. Tensors are written through
safetensors' own serializer (any dtype, bytes unchanged), the copy is read back, compared byte
for byte and re-diagnosed for vLLM before it is renamed into place; anything else is refused.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from eagle3scope.doctor.checkpoint import NP_DTYPES, TensorInfo, iter_bytes, read_header
from eagle3scope.doctor.findings import Diagnosis
from eagle3scope.doctor.producers import FIX_KEY
from eagle3scope.doctor.repair import FixRefused, FixResult, content_sha, finish_copy, new_output, verify_copy, write_atomically
from eagle3scope.doctor.vllm_checks import diagnose_for_vllm

#: vLLM-prediction errors the copy repairs, and whether this diagnosis found the repair.
REPAIRS = {
    "aux-layers-mismatch": lambda dx: dx.aux_ids is not None,
    "architecture": lambda dx: bool(dx.config_edits),
    "aux-capture-off": lambda dx: bool(dx.config_edits),
    "d2t-absolute": lambda dx: dx.d2t_offsets is not None,
    "weights-crash": lambda dx: bool(dx.renames) and not dx.unmappable,
    "weights-unwritten": lambda dx: bool(dx.renames) and not dx.unmappable,
}
#: safetensors header dtype -> the name safetensors' serializer takes.
SPEC_DTYPES = {"BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16", "F16": "float16",
               "BF16": "bfloat16", "I32": "int32", "U32": "uint32", "F32": "float32", "F64": "float64",
               "I64": "int64", "U64": "uint64", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}


def fix_for_vllm(src: str | Path, out: str | Path, *, vllm_version: str | None = None,
                 target_dir: str | Path | None = None) -> FixResult:
    src, out, given = new_output(src, out)
    dx = diagnose_for_vllm(src, vllm_version=vllm_version, target_dir=target_dir)
    left = [f"{f.id}: {f.title}" for f in dx.findings
            if f.severity == "error" and not (f.id in REPAIRS and REPAIRS[f.id](dx))]
    if dx.refusals or left:
        raise FixRefused(f"vLLM {dx.sglang_version}: " + "; ".join(dx.refusals + left))
    config = dict(dx.config or dx.checkpoint.config or {})
    config[FIX_KEY] = {"producer": dx.producer.label if dx.producer else "unknown",
                       "trained_capture": sorted(dx.trained_capture) if dx.trained_known and dx.trained_capture else None,
                       "target_class": dx.target_class or "LlamaForCausalLM", "for_vllm": [dx.sglang_version]}
    result = FixResult(out, before=dx, versions=[f"vLLM {dx.sglang_version}"])

    def write_and_verify(tmp: Path) -> None:
        expected = _write_copy(dx, config, tmp, result)
        result.after = [verify_copy(tmp, expected, lambda copy: diagnose_for_vllm(
            copy, vllm_version=dx.sglang_version, target_dir=target_dir), f"vLLM {dx.sglang_version}")]

    write_atomically(out, given, write_and_verify)
    return result


def _write_copy(dx: Diagnosis, config: dict, tmp: Path, result: FixResult) -> dict[str, tuple]:
    """Write the copy into ``tmp``; return name -> (dtype, shape, sha256) of what must be there."""
    import numpy as np

    ckpt = dx.checkpoint
    for entry in ckpt.entries:
        shutil.copyfile(entry.resolve(), tmp / entry.name)
    d2t = next((n for n in ckpt.tensors if n.split(".")[-1] == "d2t"), None)
    expected: dict[str, tuple] = {}
    for file in ckpt.files:
        header, _ = read_header(file.resolve())
        tensors = {}
        for name, info in ((n, i) for n, i in ckpt.tensors.items() if i.shard == file.name):
            data = b"".join(iter_bytes(info))
            if name == d2t and dx.d2t_offsets is not None:
                data = dx.d2t_offsets.astype(NP_DTYPES[info.dtype]).tobytes()
                result.changes.append(f"{name}: absolute ids -> offsets (d2t - arange)")
            new = dx.renames.get(name, name)
            if new != name:
                result.changes.append(f"{name} -> {new}")
            tensors[new] = (info, np.frombuffer(data, dtype=np.uint8).copy())
            expected[new] = (info.dtype, info.shape, content_sha(data))
        _serialize(tmp / file.name, tensors, header.get("__metadata__"))
    finish_copy(dx, config, tmp, result.changes)
    return expected


def _serialize(path: Path, tensors: dict[str, tuple[TensorInfo, object]], metadata: dict | None) -> None:
    """safetensors' own writer over raw bytes (``buffer`` stays referenced until it returns)."""
    from safetensors import serialize_file

    try:
        from safetensors import TensorSpec
    except ImportError:  # safetensors before 0.8 takes plain dicts
        specs = {n: {"dtype": i.dtype, "shape": list(i.shape), "data": b.tobytes()} for n, (i, b) in tensors.items()}
    else:
        unknown = sorted({i.dtype for i, _ in tensors.values()} - set(SPEC_DTYPES))
        if unknown:
            raise FixRefused(f"tensor dtype {unknown[0]} is not one safetensors' writer takes")
        specs = {n: TensorSpec(dtype=SPEC_DTYPES[i.dtype], shape=tuple(i.shape), data_ptr=b.ctypes.data,
                               data_len=b.nbytes) for n, (i, b) in tensors.items()}
    serialize_file(specs, str(path), metadata=metadata)
