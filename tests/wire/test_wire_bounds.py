"""Every label or table a frame names is bounded in one place, the session state.

The hello's ``seams`` map used to bypass the state's 64-seam bound straight into the exporter's
``hook_status`` labels (and the hook-failed rule): 3,000 long seam names per publisher gave 790k
series at 256 publishers. Now the state folds the hello's seams into the same bounded table hook
frames fill, counts the rest, and the rules, the exporter and the TUI read only that table.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, generate_latest

from benchmarks.support.analysis_streams import session
from eagle3scope.analysis import SessionState, facts
from eagle3scope.analysis.state import MAX_SEAMS
from eagle3scope.analysis.views import publisher_rows
from eagle3scope.exporter.fleet import Fleet
from eagle3scope.exporter.metrics import FleetCollector
from eagle3scope.wire import Frame


def _seamy(src: str, n_seams: int, name_len: int = 200) -> list[Frame]:
    frames = [Frame(f.kind, src, f.n, f.t, f.body) for f in session(80, bs=1)]
    seams = {f"seam-{i:05d}-" + "x" * name_len: "failed" if i % 2 else "attached" for i in range(n_seams)}
    frames[0].body["seams"] = seams
    return frames + [Frame("hello", src, len(frames), frames[-1].t + 1, frames[0].body)]  # re-sent, as the shim does


def test_hello_seams_are_bounded_and_counted_in_the_state():
    state = SessionState()
    for f in _seamy("h:1:dp0", 3000):
        state.ingest(f)
    state.evaluate_rules()
    pub = state.publishers["h:1:dp0"]
    assert len(pub.hooks) == MAX_SEAMS
    assert pub.unlisted_hello_seams == 2 * (3000 - MAX_SEAMS)  # both hellos' excess, counted
    assert sum(f"names more than {MAX_SEAMS} seams" in e.text for e in state.events) == 1  # said once
    hook = next(v for v in state.violations() if v.id == "hook-failed")  # still fires on the listed ones
    assert len(hook.evidence["seams"]) == MAX_SEAMS // 2
    assert publisher_rows(state)[0].hooks_total == MAX_SEAMS


def test_hook_frames_win_over_the_hellos_startup_status():
    state = SessionState()
    frames = _seamy("h:1:dp0", 4)
    seam = next(iter(frames[0].body["seams"]))
    state.ingest(frames[0])
    state.ingest(Frame("hook", "h:1:dp0", 1, frames[0].t, {"seam": seam, "status": "failed", "detail": "boom"}))
    state.ingest(Frame("hello", "h:1:dp0", 2, frames[0].t, frames[0].body))  # re-sent: says "attached"
    assert facts.seam_statuses(state.publishers["h:1:dp0"])[seam] == "failed"


def test_exporter_series_stay_bounded_with_thousands_of_long_seams():
    fleet = Fleet(forget_after_s=None)
    for p in range(32):
        fleet.ingest(_seamy(f"h:{p}:dp0", 3000))
    registry = CollectorRegistry()
    registry.register(FleetCollector(fleet))
    started = time.perf_counter()
    text = generate_latest(registry)
    elapsed = time.perf_counter() - started
    series = text.count(b"\neagle3scope_hook_status{")
    assert series == 32 * MAX_SEAMS, series  # before: 32 x 3,000
    assert len(text) < 8 << 20 and elapsed < 5.0, (len(text), elapsed)
