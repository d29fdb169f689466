"""``--baseline OLD`` of ``check``, ``gate`` and ``report``: read the reference recording once, then judge
a session's kept rounds against it (:func:`eagle3scope.analysis.baseline.compare`).

The comparison goes into the result object as ``baseline`` (``Comparison.to_dict`` plus the
reference's path); :func:`eagle3scope.gate.decide.judge` turns each judged value into a check.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eagle3scope.analysis import SessionState, analyse
from eagle3scope.analysis.baseline import compare
from eagle3scope.analysis.facts import server_args


@dataclass(frozen=True)
class Reference:
    """What a comparison needs of the baseline recording."""

    path: str
    rounds: list[dict]
    k: int
    drafts: frozenset  # the draft model paths its publishers announced
    read_errors: int


def _drafts(state: SessionState) -> frozenset:
    return frozenset(str(p) for pub in state.publishers.values() if (p := server_args(pub).draft_model_path))


def read_reference(path: str | Path) -> Reference:
    """Analyse the baseline recording; raises :class:`~eagle3scope.store.StoreError` when it is no session."""
    from eagle3scope.store import SessionReader

    with SessionReader(path) as reader:
        state = analyse((frame for _, frame in reader.frames()), keep_rounds=True)
        errors = len(reader.errors)
    return Reference(str(path), list(state.kept_rounds), state.acceptance.k, _drafts(state), errors)


def judged_against(reference: Reference, state: SessionState) -> tuple[dict, str | None]:
    """(the result's ``baseline`` object, why the comparison is incomplete or None): ``state`` must
    have kept its rounds (``keep_rounds=True``)."""
    if not reference.rounds:
        return ({"path": reference.path, "overall": [], "slices": [], "regressed": [], "notes": []},
                f"the baseline {reference.path} has no decode step to compare with")
    comparison = compare(reference.rounds, list(state.kept_rounds), k_baseline=reference.k, k_current=state.acceptance.k)
    out = {"path": reference.path, **comparison.to_dict()}
    drafts = _drafts(state)
    if reference.drafts and drafts and reference.drafts != drafts:
        out["notes"].append(f"the baseline served draft {', '.join(sorted(reference.drafts))}, this run "
                            f"{', '.join(sorted(drafts))}: not the same draft")
    if reference.read_errors:
        out["notes"].append(f"{reference.read_errors} damaged part(s) of the baseline were skipped")
    mean = comparison.overall[0]
    if not mean.judged:
        return out, f"the baseline comparison could not judge the mean accept length: {mean.reason}"
    return out, None
