"""``check``'s result object: what a run came to (summary, violations, read errors), and whether it
had the evidence to judge at all.

``check FILE``, ``gate --connect E`` and ``report`` build the same object here, so the three print
the same numbers; :mod:`eagle3scope.gate.decide` judges it.
"""

from __future__ import annotations

from eagle3scope.analysis import SessionState, Violation
from eagle3scope.analysis.facts import pass_visibility


def no_evidence(summary: dict) -> str | None:
    """Why a run without a decode step passes nothing (exit 3 whatever the flags), or None when it had one."""
    if summary["steps"]:
        return None
    if not summary["frames"]:
        return ("no decode step: nothing was published (look for the shim's 'eagle3scope: NOT PUBLISHING' "
                "line in the server's log)")
    return (f"no decode step among {summary['frames']} frame(s): no request was decoded while it ran, or the "
            "shim published nothing of it (look for 'eagle3scope: NOT PUBLISHING' in the server's log)")


def check_result(state: SessionState, violations: list[Violation], errors: list[str], complete: bool = True) -> dict:
    """The ``--json`` object: summary plus every violation that fired."""
    summary = state.acceptance.summary()
    summary["publishers"] = sorted(state.publishers)
    summary["frames"] = state.frames
    summary["refused_frames"] = state.refused_frames  # from publishers past MAX_PUBLISHERS: not analysed
    runs = state.runs()
    summary["restarts"] = len(runs) - len(state.publishers) + state.forgotten_runs  # new runs under the same src
    summary["duplicate_frames"] = sum(p.loss.duplicates for p in runs)  # dropped, not counted twice
    summary["counter_resets"] = sum(p.loss.resets for p in runs)  # impossible jumps of n, not counted as loss
    summary["complete"] = complete  # False: the recorder never closed the file (killed, or still running)
    summary["draft_passes"] = {src: pass_visibility(pub.hello) for src, pub in sorted(state.publishers.items())}
    summary["slices"] = state.slices.summary(state.acceptance.k)
    accounts = [pub.accounting for pub in runs]  # finished requests' counts against SGLang's (accounting-mismatch)
    summary["requests_checked"] = {"compared": sum(a.compared for a in accounts),
                                   "mismatched": sum(a.mismatched for a in accounts),
                                   "not_compared": sum(a.unverifiable + a.start_unseen for a in accounts)}
    return {"summary": summary, "violations": [v.to_dict() for v in violations], "read_errors": errors}
