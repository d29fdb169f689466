"""A recording as a timeline: Chrome trace-event JSON, which ui.perfetto.dev and ``chrome://tracing`` open.

Per publisher one process (named by its ``src``) with a "rounds" track: each decode round's draft,
verify and draft-extend times as complete (``X``) events, laid end to end and ending at the step's
time (the shim stamps a step when its round returns). A phase's device time is drawn where the step
carries it (``*_device_ms``, a CUDA shim's timing events), its host wall time around the call
otherwise; each span's ``args.clock`` says which ("device" or "host": under graphs or the overlap
loop a host span is the launch, not the work). Prefill passes go
on a "prefill" track. Counters (``C``): batch size and the round's mean accept length. Instants
(``i``): every violation where it first fired and every aux-layer configuration change.

Format: the Trace Event Format (Google, "Trace Event Format" document; Perfetto's JSON importer
reads the same): a JSON object ``{"traceEvents": [...], "displayTimeUnit": "ms"}``, times in
microseconds. Events are written as they are read, so memory holds only one seq -> time map.
"""

from __future__ import annotations

import json
from array import array
from bisect import bisect_left
from typing import IO, Iterable

from eagle3scope.analysis import SessionState
from eagle3scope.wire import Frame
from eagle3scope.wire.bodies import Config, Step

ROUNDS_TID, PREFILL_TID, EVENTS_TID = 1, 2, 3
#: (span name, device field, host field); the device field is drawn where the step carries it
_PHASES = (("draft", "draft_device_ms", "draft_ms"), ("verify", "verify_device_ms", "verify_ms"),
           ("extend", "extend_device_ms", "extend_ms"))


class _Publisher:
    """A publisher's trace process id and the seq -> time map that places its violations."""

    __slots__ = ("pid", "seqs", "times")

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.seqs = array("q")
        self.times = array("q")

    def time_of(self, seq: int | None) -> int | None:
        if seq is None or not self.seqs:
            return None
        i = min(bisect_left(self.seqs, seq), len(self.seqs) - 1)
        return self.times[i]


def _us(t_ns: int) -> float:
    return t_ns / 1e3


def _step_events(pub: _Publisher, step: Step, t_ns: int) -> Iterable[dict]:
    seq = step.seq
    if not pub.seqs or seq >= pub.seqs[-1]:  # the map must stay sorted for bisect; a reset seq is skipped
        pub.seqs.append(seq)
        pub.times.append(t_ns)
    prefill = step.mode != "decode"
    spans = []
    for name, device, host in _PHASES:
        for clock, field in (("device", device), ("host", host)):
            ms = getattr(step, field)
            if ms is not None and 0 <= ms < 1e7:
                spans.append((name, float(ms), clock))
                break
    end = _us(t_ns)
    start = end - sum(ms for _, ms, _ in spans) * 1e3
    for name, ms, clock in spans:
        yield {"ph": "X", "name": name, "cat": "prefill" if prefill else "round", "pid": pub.pid,
               "tid": PREFILL_TID if prefill else ROUNDS_TID, "ts": start, "dur": ms * 1e3,
               "args": {"seq": seq, "bs": step.bs, "clock": clock}}
        start += ms * 1e3
    if prefill:
        return
    yield {"ph": "C", "name": "batch size", "pid": pub.pid, "ts": end, "args": {"bs": step.bs}}
    if step.accepted:
        yield {"ph": "C", "name": "accept length", "pid": pub.pid, "ts": end,
               "args": {"mean": step.committed / len(step.accepted)}}


def _config_event(pub: _Publisher, config: Config, t_ns: int) -> dict:
    applied = "applied" if config.applied else "refused"
    return {"ph": "i", "s": "p", "name": f"aux layers {config.layers} {applied}", "cat": "config",
            "pid": pub.pid, "tid": EVENTS_TID, "ts": _us(t_ns),
            "args": {"layers": config.layers, "captured": config.captured, "applied": config.applied,
                     "reason": config.reason, "origin": config.origin}}


def write_trace(frames: Iterable[Frame], out: IO[str]) -> int:
    """Write the trace of ``frames`` to ``out``; returns the number of events written.

    The frames are analysed on the way (the same SessionState as ``check``), so the violations
    land at the step ``check`` reports as their ``first_seq``.
    """
    state = SessionState()
    pubs: dict[str, _Publisher] = {}
    count = 0
    out.write('{"displayTimeUnit":"ms","traceEvents":[\n')

    def emit(event: dict) -> None:
        nonlocal count
        out.write(("," if count else "") + json.dumps(event, separators=(",", ":")) + "\n")
        count += 1

    for frame in frames:
        state.ingest(frame)
        if frame.src not in state.publishers:  # past the publisher cap: counted by the state, not drawn
            continue
        pub = pubs.get(frame.src)
        if pub is None:
            pub = pubs[frame.src] = _Publisher(len(pubs) + 1)
            emit({"ph": "M", "name": "process_name", "pid": pub.pid, "args": {"name": frame.src}})
            for tid, name in ((ROUNDS_TID, "rounds"), (PREFILL_TID, "prefill"), (EVENTS_TID, "events")):
                emit({"ph": "M", "name": "thread_name", "pid": pub.pid, "tid": tid, "args": {"name": name}})
        if frame.kind == "step":
            for event in _step_events(pub, frame.record, frame.record.t_ns or frame.t):
                emit(event)
        elif frame.kind == "config":
            emit(_config_event(pub, frame.record, frame.t))
    state.evaluate_rules()
    for v in state.violations():
        pub = pubs.get(v.src)
        t_ns = pub.time_of(v.first_seq) if pub else None
        if pub is None or t_ns is None:
            continue
        emit({"ph": "i", "s": "p", "name": f"{v.severity}: {v.id}", "cat": "violation", "pid": pub.pid,
              "tid": EVENTS_TID, "ts": _us(t_ns),
              "args": {"title": v.title, "evidence": v.evidence, "first_seq": v.first_seq, "active": v.active,
                       "fix": v.fix}})
    out.write("]}\n")
    return count
