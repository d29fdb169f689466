"""A draft checkpoint directory, read lazily and defensively: config.json, safetensors headers,
small tensors on demand.

Only headers are parsed (by this module, no mmap), so a multi-GB checkpoint is inspected in
milliseconds; ``load`` reads one small tensor (d2t, t2d) as numpy, refusing above
``MAX_VECTOR_BYTES``. Nothing outside the draft directory is read: only regular files are opened
(a FIFO or device named ``*.safetensors`` is reported, never opened), and a symlink is followed
only when it stays inside the directory or is a Hugging Face hub snapshot link into its
repository's ``blobs/``. ``write_safetensors`` copies tensors byte for byte into a new file (any
dtype, bf16 included, no torch), which is what ``fix`` needs to rename keys.
"""

from __future__ import annotations

import json
import math
import os
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path

INDEX_NAME = "model.safetensors.index.json"
PICKLE_NAMES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt", "model.pth")
DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
               "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
INT_DTYPES = ("I8", "I16", "I32", "I64", "U8", "U16", "U32", "U64")
NP_DTYPES = {"BOOL": "?", "U8": "u1", "I8": "i1", "I16": "<i2", "U16": "<u2", "I32": "<i4", "U32": "<u4",
             "I64": "<i8", "U64": "<u8", "F16": "<f2", "F32": "<f4", "F64": "<f8"}
#: JSON files (config.json, the shard index) larger than this are not read.
MAX_JSON_BYTES = 16 << 20
#: safetensors' own limit on the header.
MAX_HEADER_BYTES = 100_000_000
#: d2t / t2d larger than this are not loaded: a real one is a few MB (vocabulary x 8 bytes).
MAX_VECTOR_BYTES = 64 << 20


class UnsafePath(OSError):
    """A path the doctor will not open: not a regular file, or a link out of the draft directory."""


@dataclass
class TensorInfo:
    file: Path
    shape: tuple[int, ...]
    dtype: str  # safetensors dtype string, e.g. "BF16"
    start: int = 0  # absolute byte offsets of the data in ``file``
    end: int = 0
    shard: str = ""  # the file's name in the draft directory (``file`` may be a hub blob it links to)

    @property
    def nbytes(self) -> int:
        return self.end - self.start


@dataclass
class Checkpoint:
    path: Path
    config: dict | None = None
    config_error: str | None = None
    files: list[Path] = field(default_factory=list)
    tensors: dict[str, TensorInfo] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # unreadable files, index problems
    unsafe: list[str] = field(default_factory=list)  # entries refused: FIFOs, devices, links leaving the dir
    pickles: list[str] = field(default_factory=list)
    index: dict | None = None
    duplicates: list[str] = field(default_factory=list)
    entries: list[Path] = field(default_factory=list)  # every other safe regular file (for fix's copy)

    def load(self, name: str):
        """One small tensor as a numpy array; UnsafePath / ValueError when it cannot be read safely."""
        import numpy as np

        info = self.tensors[name]
        if info.nbytes > MAX_VECTOR_BYTES:
            raise ValueError(f"{name} is {info.nbytes} bytes; tensors over {MAX_VECTOR_BYTES} bytes are not loaded")
        if info.dtype not in NP_DTYPES:
            raise ValueError(f"{name} has dtype {info.dtype}, which numpy cannot read")
        data = b"".join(iter_bytes(info))
        return np.frombuffer(data, dtype=NP_DTYPES[info.dtype]).reshape(info.shape)


def is_hub_blob(root: Path, resolved: Path) -> bool:
    """A Hugging Face hub snapshot (``.../snapshots/<rev>/``) links its files into ``../../blobs/``."""
    return root.parent.name == "snapshots" and resolved.parent == root.parent.parent / "blobs"


def safe_file(root: Path, path: Path) -> Path:
    """``path`` resolved, if it is a regular file the doctor may read; raises UnsafePath otherwise."""
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError) as exc:  # dangling or looping link
        raise UnsafePath(f"{path.name}: cannot be resolved ({exc.__class__.__name__})") from None
    if path.is_symlink() and root not in resolved.parents and not is_hub_blob(root, resolved):
        raise UnsafePath(f"{path.name} is a symlink to {resolved}, outside the draft directory: not followed")
    mode = os.stat(resolved).st_mode
    if not stat.S_ISREG(mode):
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else \
            "a socket" if stat.S_ISSOCK(mode) else "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise UnsafePath(f"{path.name} is {kind}: not opened")
    return resolved


def read_json(root: Path, path: Path) -> object:
    """A bounded JSON file; UnsafePath / OSError / ValueError on anything else."""
    real = safe_file(root, path)
    size = os.stat(real).st_size
    if size > MAX_JSON_BYTES:
        raise ValueError(f"{path.name} is {size} bytes, more than the {MAX_JSON_BYTES} a config may have")
    with open(real, "rb") as f:
        return json.loads(f.read(MAX_JSON_BYTES + 1).decode("utf-8"))


def read_header(path: Path) -> tuple[dict, int]:
    """The safetensors JSON header (validated) and the offset where the data starts."""
    size = os.stat(path).st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ValueError("file is shorter than a safetensors header")
        (n,) = struct.unpack("<Q", head)
        if n > MAX_HEADER_BYTES or 8 + n > size:
            raise ValueError(f"header length {n} does not fit the file ({size} bytes): truncated or not safetensors")
        header = json.loads(f.read(n).decode("utf-8"))
    if not isinstance(header, dict):
        raise ValueError("header is not a JSON object")
    data_size = size - 8 - n
    spans = []
    for name, entry in header.items():
        if name == "__metadata__":
            if not (entry is None or isinstance(entry, dict)):
                raise ValueError("__metadata__ is not an object")
            continue
        _check_entry(name, entry, data_size)
        spans.append(tuple(entry["data_offsets"]))
    end = 0  # as the safetensors library requires: the tensors tile the data exactly
    for start, stop in sorted(spans):
        if start != end:
            raise ValueError(f"tensor data overlaps or leaves a gap at byte {min(start, end)}")
        end = stop
    if end != data_size:
        raise ValueError(f"{data_size - end} bytes after the last tensor (truncated or damaged file)")
    return header, 8 + n


def _check_entry(name: str, entry: object, data_size: int) -> None:
    if not isinstance(entry, dict):
        raise ValueError(f"{name}: header entry is not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"{name}: unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise ValueError(f"{name}: shape {shape!r} is not a list of non-negative integers")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)):
        raise ValueError(f"{name}: data_offsets {offsets!r} is not two integers")
    start, end = offsets
    if not 0 <= start <= end <= data_size:
        raise ValueError(f"{name}: data_offsets {offsets} lie outside the file's {data_size} data bytes (truncated?)")
    if end - start != math.prod(shape) * DTYPE_BYTES[dtype]:
        raise ValueError(f"{name}: {end - start} data bytes for shape {shape} of {dtype}")


def open_checkpoint(path: str | Path) -> Checkpoint:
    root = Path(path)
    ckpt = Checkpoint(root)
    if not root.exists():
        ckpt.errors.append(f"{root} does not exist")
        return ckpt
    if not root.is_dir():
        ckpt.errors.append(f"{root} is not a directory")
        return ckpt
    root = ckpt.path = root.resolve()
    try:
        listing = sorted(root.iterdir())
    except OSError as exc:
        ckpt.errors.append(f"{root} cannot be listed: {exc.strerror or exc}")
        return ckpt
    safe: dict[str, Path] = {}
    for entry in listing:
        if entry.is_dir() and not entry.is_symlink():
            continue
        try:
            safe[entry.name] = safe_file(root, entry)
        except UnsafePath as exc:
            ckpt.unsafe.append(str(exc))
        except OSError as exc:
            ckpt.unsafe.append(f"{entry.name}: {exc.strerror or exc}")
    _read_config(ckpt, root, safe)
    ckpt.pickles = sorted(n for n in safe if n in PICKLE_NAMES or Path(n).suffix in (".bin", ".pt", ".pth"))
    weight_map = _read_index(ckpt, root, safe)
    ckpt.files = [root / n for n in safe if n.endswith(".safetensors")]
    ckpt.entries = [root / n for n in safe if not n.endswith(".safetensors") and n not in (INDEX_NAME, "config.json")]
    for file in ckpt.files:
        try:
            header, data_start = read_header(safe[file.name])
        except (OSError, ValueError, struct.error) as exc:
            ckpt.errors.append(f"{file.name} is not a readable safetensors file: {exc}")
            continue
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            if name in ckpt.tensors:
                ckpt.duplicates.append(name)
            start, end = entry["data_offsets"]
            ckpt.tensors[name] = TensorInfo(safe[file.name], tuple(entry["shape"]), entry["dtype"],
                                            data_start + start, data_start + end, file.name)
    for name, file in weight_map.items():
        info = ckpt.tensors.get(name)
        if file in safe and (info is None or info.shard != file):
            ckpt.errors.append(f"{INDEX_NAME} places {name} in {file}, but it is not there")
    return ckpt


def _read_config(ckpt: Checkpoint, root: Path, safe: dict[str, Path]) -> None:
    if "config.json" not in safe:
        refused = [u for u in ckpt.unsafe if u.startswith("config.json")]
        ckpt.config_error = refused[0] if refused else "config.json is missing"
        return
    try:
        config = read_json(root, root / "config.json")
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        ckpt.config_error = f"config.json is not valid JSON: {exc}"
        return
    except OSError as exc:
        ckpt.config_error = f"config.json cannot be read: {exc.strerror or exc}"
        return
    if not isinstance(config, dict):
        ckpt.config_error = f"config.json holds a JSON {type(config).__name__}, not an object"
        return
    ckpt.config = config


def _read_index(ckpt: Checkpoint, root: Path, safe: dict[str, Path]) -> dict[str, str]:
    """The shard index's weight map (name -> file), checked; {} when there is none or it is unusable."""
    if INDEX_NAME not in safe:
        return {}
    try:
        index = read_json(root, root / INDEX_NAME)
        weight_map = index["weight_map"] if isinstance(index, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                       for k, v in weight_map.items()):
            raise ValueError("weight_map is not an object of tensor name -> file name")
    except (ValueError, KeyError, UnicodeDecodeError, RecursionError, OSError) as exc:
        ckpt.errors.append(f"{INDEX_NAME} is unreadable: {exc}")
        return {}
    ckpt.index = index
    for file in sorted(set(weight_map.values())):
        if Path(file).name != file:
            ckpt.errors.append(f"{INDEX_NAME} names {file!r}, which is not a file in the draft directory")
        elif file not in safe:
            ckpt.errors.append(f"{INDEX_NAME} names {file}, which does not exist")
    return weight_map


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
