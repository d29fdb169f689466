"""A draft checkpoint directory, read lazily: config.json, safetensors headers, small tensors on demand.

Only headers are parsed (``safe_open``), so a multi-GB checkpoint is inspected in milliseconds;
``load`` reads one tensor (d2t, t2d) as numpy. ``write_safetensors`` copies tensors byte for byte
into a new file (any dtype, bf16 included, no torch), which is what ``fix`` needs to rename keys.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

INDEX_NAME = "model.safetensors.index.json"
PICKLE_NAMES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt", "model.pth")
DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
               "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
INT_DTYPES = ("I8", "I16", "I32", "I64", "U8", "U16", "U32", "U64")


@dataclass
class TensorInfo:
    file: Path
    shape: tuple[int, ...]
    dtype: str  # safetensors dtype string, e.g. "BF16"
    start: int = 0  # absolute byte offsets of the data in ``file``
    end: int = 0


@dataclass
class Checkpoint:
    path: Path
    config: dict | None = None
    config_error: str | None = None
    files: list[Path] = field(default_factory=list)
    tensors: dict[str, TensorInfo] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # unreadable files, index problems
    pickles: list[str] = field(default_factory=list)
    index: dict | None = None
    duplicates: list[str] = field(default_factory=list)

    def load(self, name: str):
        """One tensor as a numpy array (small tensors only: d2t, t2d)."""
        from safetensors import safe_open

        info = self.tensors[name]
        with safe_open(str(info.file), "np") as f:
            return f.get_tensor(name)


def read_header(path: Path) -> tuple[dict, int]:
    """The safetensors JSON header and the offset where the data starts."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return header, 8 + n


def open_checkpoint(path: str | Path) -> Checkpoint:
    from safetensors import SafetensorError, safe_open

    root = Path(path)
    ckpt = Checkpoint(root)
    if not root.is_dir():
        ckpt.errors.append(f"{root} is not a directory")
        return ckpt
    cfg = root / "config.json"
    if not cfg.is_file():
        ckpt.config_error = "config.json is missing"
    else:
        try:
            ckpt.config = json.loads(cfg.read_text())
            if not isinstance(ckpt.config, dict):
                raise ValueError("not a JSON object")
        except (ValueError, UnicodeDecodeError) as exc:
            ckpt.config, ckpt.config_error = None, f"config.json is not valid JSON: {exc}"
    ckpt.pickles = sorted(p.name for p in root.iterdir() if p.name in PICKLE_NAMES or p.suffix in (".bin", ".pt", ".pth"))
    index_path = root / INDEX_NAME
    if index_path.is_file():
        try:
            ckpt.index = json.loads(index_path.read_text())
            weight_map = ckpt.index["weight_map"]
        except (ValueError, KeyError, TypeError) as exc:
            ckpt.errors.append(f"{INDEX_NAME} is unreadable: {exc}")
            weight_map = {}
        for file in sorted(set(weight_map.values())):
            if not (root / file).is_file():
                ckpt.errors.append(f"{INDEX_NAME} names {file}, which does not exist")
    ckpt.files = sorted(root.glob("*.safetensors"))
    for file in ckpt.files:
        try:
            with safe_open(str(file), "np") as f:
                names = list(f.keys())
                slices = {n: f.get_slice(n) for n in names}
                header, data_start = read_header(file)
        except (SafetensorError, OSError, ValueError, struct.error) as exc:
            ckpt.errors.append(f"{file.name} is not a readable safetensors file: {exc}")
            continue
        for name in names:
            if name in ckpt.tensors:
                ckpt.duplicates.append(name)
            start, end = header[name]["data_offsets"]
            ckpt.tensors[name] = TensorInfo(file, tuple(slices[name].get_shape()), slices[name].get_dtype(),
                                            data_start + start, data_start + end)
    if ckpt.index is not None:
        for name, file in (ckpt.index.get("weight_map") or {}).items():
            info = ckpt.tensors.get(name)
            if (root / file).is_file() and (info is None or info.file.name != file):
                ckpt.errors.append(f"{INDEX_NAME} places {name} in {file}, but it is not there")
    return ckpt


def write_safetensors(out: Path, tensors: list[tuple[str, TensorInfo | bytes, str, tuple[int, ...]]],
                      metadata: dict | None = None) -> None:
    """Write ``(name, source, dtype, shape)`` entries; a TensorInfo source is copied byte for byte."""
    header: dict = {"__metadata__": metadata} if metadata else {}
    offset = 0
    for name, source, dtype, shape in tensors:
        size = source.end - source.start if isinstance(source, TensorInfo) else len(source)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the format aligns the data start to 8 bytes
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for _, source, _, _ in tensors:
            if isinstance(source, TensorInfo):
                for chunk in iter_bytes(source):
                    f.write(chunk)
            else:
                f.write(source)


def iter_bytes(info: TensorInfo, chunk: int = 1 << 24):
    """A tensor's raw bytes from its file, in chunks (no decoding, any dtype)."""
    with open(info.file, "rb") as f:
        f.seek(info.start)
        remaining = info.end - info.start
        while remaining:
            data = f.read(min(remaining, chunk))
            if not data:
                raise OSError(f"{info.file} ended early")
            yield data
            remaining -= len(data)
