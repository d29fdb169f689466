"""What a report says: one recording analysed as ``check`` analyses it, and the rows of its tables.

Both formats (:mod:`eagle3scope.report.render`) show these same rows, so markdown and HTML cannot
disagree on a number, and ``check --json`` and the report come from one result object
(:func:`eagle3scope.gate.result.check_result`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eagle3scope.analysis import SessionState
from eagle3scope.analysis import views
from eagle3scope.gate.decide import delta_verdict
from eagle3scope.gate.result import check_result

#: Decode steps of rolling acceptance kept for the over-time plot (the newest ones when longer).
HISTORY_STEPS = 20_000


@dataclass
class Analysed:
    """One recording as ``check`` saw it: the session state (for the plots and the aux-layer
    configurations) and its result object (for every number printed)."""

    path: Path
    state: SessionState
    result: dict  # check's --json object

    @property
    def title(self) -> str:
        return f"eagle3scope report: {self.path.name}"


def analyse_file(path: str | Path, baseline: str | Path | None = None) -> Analysed:
    """``path`` analysed as ``check`` does; with ``baseline``, judged against that recording too."""
    from eagle3scope.gate.baseline import judged_against, read_reference
    from eagle3scope.store import SessionReader

    reference = read_reference(baseline) if baseline is not None else None
    with SessionReader(path) as reader:
        state = SessionState(history=HISTORY_STEPS, keep_rounds=reference is not None)
        for _, frame in reader.frames():
            state.ingest(frame)
        state.evaluate_rules()  # once more on the last frame, as check's analyse() does
        errors = [str(e) for e in reader.errors]
        complete = reader.complete
    result = check_result(state, state.violations(), errors, complete)
    if reference is not None:
        result["baseline"], short = judged_against(reference, state)
        if short:
            result["baseline"]["notes"].append(short)
    return Analysed(Path(path), state, result)


def fmt(value, digits: int = 3) -> str:
    """A table cell: ``-`` for a value the run did not have, floats to ``digits`` places."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def summary_rows(a: Analysed) -> list[tuple[str, str]]:
    s, state = a.result["summary"], a.state
    hellos = [p.hello for p in state.publishers.values() if p.hello]
    args = hellos[0].args if hellos and hellos[0].args else None
    rows = [
        ("recording", a.path.name),
        ("publishers", ", ".join(s["publishers"]) or "-"),
        ("engine", ", ".join(sorted({h.engine_label for h in hellos})) or "-"),
        ("target", str(args.model_path or "-") if args else "-"),
        ("draft", str(args.draft_model_path or "-") if args else "-"),
        ("algorithm / steps / topk / draft tokens",
         f"{args.algorithm} / {args.num_steps} / {args.topk} / {args.num_draft_tokens}" if args else "-"),
        ("decode steps", str(s["steps"])),
        ("request-steps", str(s["request_steps"])),
        ("mean acceptance length (bonus included)", fmt(s["mean_accept_length"])),
        ("violations", str(len(a.result["violations"]))),
    ]
    if not s["complete"]:
        rows.append(("note", "the recording was not closed by its recorder (killed or still running)"))
    return rows


def position_rows(a: Analysed) -> list[list[str]]:
    """Per draft position over the whole run: request-steps that reached it, accepted it, and the rate."""
    s = a.result["summary"]
    hist = s["histogram"]
    rows = []
    for i, rate in enumerate(s["per_position"], start=1):
        reached, accepted = sum(hist[i - 1:]), sum(hist[i:])
        rows.append([str(i), str(reached), str(accepted), fmt(rate)])
    return rows


def aux_config_rows(a: Analysed) -> list[list[str]]:
    rows = []
    for seg in views.segment_rows(a.state):
        ids = "default" if seg.layers is None else ",".join(map(str, seg.layers))
        captured = "-" if seg.captured is None else ",".join(map(str, seg.captured))
        rows.append([ids, captured, seg.origin, fmt(seg.start_seq), str(seg.steps), fmt(seg.mean)])
    return rows


def slice_rows(a: Analysed) -> list[list[str]]:
    """Acceptance per slice, for the dimensions with more than one label (one label is the whole run)."""
    rows = []
    for dim, entries in a.result["summary"]["slices"].items():
        if len(entries) > 1:
            for e in entries:
                rates = ", ".join(fmt(r, 2) for r in e["per_position"])
                rows.append([dim.replace("_", " "), e["label"], str(e["request_steps"]),
                             fmt(e["mean_accept_length"]), rates])
    return rows


POSITION_HEADER = ["position", "reached", "accepted", "acceptance"]
AUX_CONFIG_HEADER = ["aux ids", "captured", "origin", "from step", "steps", "mean acceptance"]
SLICE_HEADER = ["by", "slice", "request-steps", "mean acceptance", "per position"]
BASELINE_HEADER = ["value", "baseline", "this run", "change", "95% interval", "lower in", "verdict"]


def baseline_rows(a: Analysed) -> list[list[str]]:
    comparison = a.result["baseline"]
    rows = []
    for d in (*comparison["overall"], *comparison["slices"]):
        interval = "-" if not d["interval"] else f"{d['interval'][0]:+.3f}..{d['interval'][1]:+.3f}"
        change = "-" if d["change"] is None else f"{d['change']:+.3f}"
        lower = "-" if d["confidence"] is None else f"{d['confidence']:.0%}"
        rows.append([d["name"], fmt(d["baseline"]), fmt(d["current"]), change, interval, lower, delta_verdict(d)])
    return rows


def baseline_intro(a: Analysed) -> str:
    comparison = a.result["baseline"]
    return (f"Against {comparison['path']} ({comparison.get('baseline_rounds', 0)} decode rounds; this run "
            f"{comparison.get('current_rounds', 0)}): block bootstrap over rounds, 95 % intervals.")


def where(v: dict) -> str:
    where = "before the first step" if v["first_seq"] is None else f"from step {v['first_seq']}"
    return f"{v['src']}, {where}" + ("" if v["active"] else ", no longer active at the end")
