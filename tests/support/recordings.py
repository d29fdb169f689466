"""Session files written from decoded frames, as the recorder writes them (each frame's bytes
encoded again through the wire codec), for tests of everything that reads recordings."""

from __future__ import annotations

from pathlib import Path

from eagle3scope.store import SessionWriter
from eagle3scope.wire import Frame, encode_frame


def record(path: str | Path, frames: list[Frame]) -> Path:
    with SessionWriter(path) as writer:
        for f in frames:
            writer.add(encode_frame(f.kind, f.body, src=f.src, n=f.n, t=f.t), f)
    return Path(path)
