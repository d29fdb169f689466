"""``aux cycle``: apply presets one after another on a live server, measure acceptance under each.

Each preset is applied through the control channel; its measurement starts at the shim's own
``config`` event for that request (the shim queues it before the first step that uses the new
set, so frame order separates the segments exactly), skips ``settle`` decode steps whose draft KV
still holds states from the old layers, then counts ``steps`` decode steps (or ``seconds``) of
the same publisher. Mean acceptance length = committed tokens (accepted drafts + bonus) per
request-step, as SGLang's ``accept len`` counts it (:class:`~eagle3scope.analysis.stats.Tally`).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict, dataclass
from typing import Callable

from eagle3scope.analysis.stats import Tally
from eagle3scope.control.client import ControlClient, ControlError
from eagle3scope.wire.aux_layers import Preset
from eagle3scope.live.subscriber import Subscriber


@dataclass
class Measurement:
    preset: str
    label: str
    layers: list | None
    captured: list | None
    steps: int = 0
    request_steps: int = 0
    mean_accept_length: float | None = None
    status: str = "measured"  # "measured" | "refused" | "no-steps" | "unavailable"
    note: str = ""
    pause_ms: float | None = None  # serving paused this long to recapture the target's graphs

    def to_dict(self) -> dict:
        return asdict(self)


class CycleError(Exception):
    pass


def wait_for_stream(sub: Subscriber, timeout_s: float = 6.0) -> None:
    """Block until the subscription delivers a frame (heartbeats come every second)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if sub.poll(timeout_ms=200):
            return
    raise CycleError(f"no frames from {', '.join(sub.endpoints)} within {timeout_s:.0f}s: is the shim publishing there?")


def measure_preset(client: ControlClient, sub: Subscriber, preset: Preset, *, steps: int | None, seconds: float | None,
                   settle: int = 2, idle_s: float = 20.0, recapture: bool = False) -> Measurement:
    """Apply ``preset`` and measure it (see the module docstring)."""
    m = Measurement(preset.name, preset.label, preset.layers, preset.captured)
    if not preset.available:
        m.status, m.note = "unavailable", preset.reason
        return m
    rid = f"cycle-{preset.name}-{uuid.uuid4().hex[:6]}"
    try:
        client.set(preset.layers, request_id=rid, wait_s=5.0, recapture=recapture)
    except ControlError as exc:
        m.status, m.note = "refused", str(exc)
        return m
    src, m.pause_ms = _await_config(sub, rid, idle_s + (300.0 if recapture else 0.0))
    if src is None:
        m.status, m.note = "no-steps", f"the change was not applied within {idle_s:.0f}s: is the server getting requests?"
        return m
    tally, skipped = Tally(), 0
    t0 = last = time.monotonic()
    while True:
        now = time.monotonic()
        if steps is not None and tally.steps >= steps:
            break
        if seconds is not None and now - t0 >= seconds:
            break
        if now - last > idle_s:
            m.note = f"no decode steps for {idle_s:.0f}s"
            break
        for frame in sub.poll(timeout_ms=100):
            if frame.src != src or frame.kind != "step" or not frame.record.is_decode_step:
                continue
            last = time.monotonic()
            if skipped < settle:
                skipped += 1
                continue
            tally.add(frame.record.accepted, frame.record.committed)
    m.steps, m.request_steps, m.mean_accept_length = tally.steps, tally.n, tally.mean_accept_length
    if not tally.steps:
        m.status = "no-steps"
    return m


def _await_config(sub: Subscriber, rid: str, timeout_s: float) -> tuple[str | None, float | None]:
    """The publisher that reported applying request ``rid`` (None: not within ``timeout_s``) and
    the serving pause its graph recapture cost (None: none)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for frame in sub.poll(timeout_ms=100):
            if frame.kind == "config" and frame.record.request_id == rid:
                if not frame.record.applied:
                    raise CycleError(f"the server refused request {rid}: {frame.record.reason}")
                return frame.src, frame.record.pause_ms
    return None, None


def run_cycle(client: ControlClient, sub: Subscriber, presets: list[Preset], *, steps: int | None = 40,
              seconds: float | None = None, settle: int = 2, idle_s: float = 20.0,
              progress: Callable[[Measurement], None] | None = None, recapture: bool = False) -> list[Measurement]:
    """Measure every preset that captures a layer set not measured yet (duplicates are listed
    with ``note`` naming the preset they equal, and reuse its figures)."""
    results: list[Measurement] = []
    by_capture: dict[tuple, Measurement] = {}
    for preset in presets:
        key = tuple(preset.captured or ())
        if preset.available and key in by_capture:
            first = by_capture[key]
            m = Measurement(preset.name, preset.label, preset.layers, preset.captured, first.steps, first.request_steps,
                            first.mean_accept_length, first.status, f"same layers as {first.preset}")
        else:
            m = measure_preset(client, sub, preset, steps=steps, seconds=seconds, settle=settle, idle_s=idle_s,
                               recapture=recapture)
            if m.status == "measured":
                by_capture[key] = m
        results.append(m)
        if progress is not None:
            progress(m)
    return results


def best(results: list[Measurement]) -> Measurement | None:
    measured = [m for m in results if m.status == "measured" and m.mean_accept_length is not None]
    return max(measured, key=lambda m: m.mean_accept_length) if measured else None
