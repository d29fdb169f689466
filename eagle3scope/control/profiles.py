"""Per-draft aux-layer profiles: what ``aux cycle`` measured, so the next launch can use the best.

One JSON file (``$XDG_CONFIG_HOME/eagle3scope/aux-profiles.json``, default
``~/.config/eagle3scope``), keyed by ``<draft path>#<fingerprint>``. The fingerprint hashes the
weight files' names, sizes and first and last MiB, not ``config.json``: rewriting the ids with
``aux write --in-place`` keeps the profile, new weights start a new one. Written atomically.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
_EDGE = 1 << 20


def profiles_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "eagle3scope" / "aux-profiles.json"


def fingerprint(draft_dir: str | os.PathLike) -> str:
    """A cheap identity of the draft's weights ("unreadable" when the directory is not local)."""
    root = Path(draft_dir)
    try:
        files = sorted(p for p in root.iterdir() if p.suffix in _WEIGHT_SUFFIXES and p.is_file())
    except OSError:
        return "unreadable"
    digest = hashlib.sha256()
    for path in files:
        size = path.stat().st_size
        digest.update(f"{path.name}\0{size}\0".encode())
        with open(path, "rb") as fh:
            digest.update(fh.read(_EDGE))
            if size > 2 * _EDGE:
                fh.seek(-_EDGE, os.SEEK_END)
                digest.update(fh.read(_EDGE))
    return digest.hexdigest()[:16]


def draft_key(draft_dir: str | os.PathLike) -> str:
    return f"{Path(draft_dir).resolve()}#{fingerprint(draft_dir)}"


def load_all(path: Path | None = None) -> dict:
    path = path or profiles_path()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def lookup(draft_dir: str | os.PathLike, path: Path | None = None) -> dict | None:
    return load_all(path).get(draft_key(draft_dir))


def record(draft_dir: str | os.PathLike, results: list[dict], path: Path | None = None) -> dict:
    """Merge one cycle's ``results`` ({preset, layers, captured, steps, mean_accept_length}) into the
    draft's profile; ``best`` is the measured preset with the highest mean so far."""
    path = path or profiles_path()
    data = load_all(path)
    key = draft_key(draft_dir)
    entry = data.get(key) or {"draft": str(Path(draft_dir).resolve()), "presets": {}}
    now = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    for result in results:
        if result.get("mean_accept_length") is not None:
            entry["presets"][result["preset"]] = {**result, "measured_at": now}
    measured = [r for r in entry["presets"].values() if r.get("mean_accept_length") is not None]
    entry["best"] = max(measured, key=lambda r: r["mean_accept_length"]) if measured else None
    entry["updated"] = now
    data[key] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return entry
