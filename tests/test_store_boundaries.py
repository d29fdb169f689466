"""Seeks that land exactly on a batch's edge, and the recorder's loss count kept in the session file.

A batch row carries the running maxima ``seq_hi`` / ``t_hi`` of its frames; a seek to exactly
that value must find the batch's own last frame, not the next batch's first.
"""

from __future__ import annotations

import pytest

from eagle3scope.store import SessionReader, SessionWriter
from eagle3scope.wire import decode_frame
from synthetic import session_frames


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    raws = list(session_frames(1200, bs=2, heartbeat_every=50))
    frames = [decode_frame(r) for r in raws]
    path = tmp_path_factory.mktemp("edges") / "s.e3s"
    with SessionWriter(path, batch_frames=100) as writer:
        for raw, frame in zip(raws, frames):
            writer.add(raw, frame)
    return path, frames


def first_at_or_after_time(frames, t: int) -> int | None:
    return next((i for i, f in enumerate(frames) if f.t >= t), None)


def first_step_at_or_after(frames, seq: int) -> int | None:
    return next((i for i, f in enumerate(frames) if f.kind == "step" and f.body["seq"] >= seq), None)


def test_seek_time_to_each_batch_edge(recorded):
    path, frames = recorded
    with SessionReader(path) as reader:
        assert len(reader.batches) > 10
        for info in reader.batches:
            for t in (info.t_lo - 1, info.t_lo, info.t_hi - 1, info.t_hi, info.t_hi + 1):
                assert reader.seek_time(t) == first_at_or_after_time(frames, t), (info, t)
        assert reader.seek_time(frames[-1].t) == first_at_or_after_time(frames, frames[-1].t)


def test_seek_seq_to_each_batch_edge(recorded):
    path, frames = recorded
    with SessionReader(path) as reader:
        for info in reader.batches:
            for seq in (info.seq_hi - 1, info.seq_hi, info.seq_hi + 1):
                assert reader.seek_seq(seq) == first_step_at_or_after(frames, seq), (info, seq)

