"""The seeds' investigation replayed on their own model family, through the real engine, in minutes.

Four acts on the DeepseekV3 target served as Kimi-K2.5 (:mod:`eagle3scope.demo.deepseek`):

1. the broken setup as it was served: the speculators draft with ``use_aux_hidden_state`` false;
   SGLang says nothing, acceptance sits near 1, and the shim's stream names the cause (rules
   ``aux-capture-off`` / ``fc-bypassed`` with their evidence: capture off, 128-wide features where
   ``fc`` takes 384, ``fc`` skipped);
2. ``doctor`` on the same checkpoint, before serving anything, says the same and what to change;
3. `eagle3scope fix` writes the change the doctor names into a copy of the draft, which the doctor
   then passes;
4. the fixed draft served: no rule fires and acceptance is what training promised.

With a screen, acts 1 and 4 open the live TUI on the running server (``q`` goes on to the next
act) while the act is recorded; headless, each act records ``steps`` steps and prints the verdict.
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import threading
from pathlib import Path
from typing import Callable

from eagle3scope.demo.runner import ScenarioRun
from eagle3scope.demo.server import ENGINE_SGLANG_VERSION

Say = Callable[[str], None]


def _violations(recording: Path) -> list:
    """The contract rules that fired over a recording (what ``eagle3scope check`` reports)."""
    from eagle3scope.analysis import analyse
    from eagle3scope.store import SessionReader

    with SessionReader(str(recording)) as reader:
        return analyse(frame for _, frame in reader.frames()).violations()


def _served(run: ScenarioRun, recording: Path, steps: int, screen: bool, say: Say) -> dict:
    """Record ``steps`` steps of the running act (watching it live with a screen); its facts."""
    if screen:
        recorder = threading.Thread(target=run.record, args=(recording, steps), daemon=True)
        recorder.start()
        from eagle3scope.tui.app import run_watch

        say("live TUI: the violations panel names the cause; Enter on it shows the evidence and fix; q goes on")
        run_watch([run.endpoint])
        recorder.join()
    else:
        run.record(recording, steps)
    results = [r["meta_info"]["spec_accept_length"] for r in run.finished_requests(run.concurrency)
               if "spec_accept_length" in r["meta_info"]]
    return {"violations": _violations(recording), "accept": statistics.mean(results) if results else None}


def _act_report(facts: dict, say: Say) -> None:
    accept = facts["accept"]
    say(f"  SGLang's own meta_info: mean acceptance length {accept:.2f}" if accept else "  no request finished")
    if not facts["violations"]:
        say("  rules fired: none")
    for v in facts["violations"]:
        evidence = ", ".join(f"{k}={json.dumps(x)}" for k, x in v.evidence.items() if x is not None)
        say(f"  {v.severity.upper()} {v.id}: {v.title}")
        say(f"    evidence: {evidence}")


def verdict_line(report: dict) -> str:
    """A doctor report's verdict and headline in one line: ``broken: <title>``, ``warnings: <title>``, or
    the clean headline alone (it begins with ``clean:`` itself; the verdict before it said it twice)."""
    headline = report["headline"]
    return headline if headline.startswith(f"{report['verdict']}:") else f"{report['verdict']}: {headline}"


def run_story(models, *, python=None, screen: bool = False, steps: int = 60, say: Say = print,
              workdir: Path | None = None) -> dict:
    """Play the four acts; returns each act's facts (violations, acceptance, doctor verdicts)."""
    from eagle3scope.commands.doctor import render
    from eagle3scope.doctor.run_checks import diagnose
    from eagle3scope.doctor.repair import fix_checkpoint

    work = Path(workdir or tempfile.mkdtemp(prefix="eagle3scope-story-"))
    out: dict = {}
    say("act 1/4: the seeds' setup - Kimi-K2.5 target, speculators draft, use_aux_hidden_state false")
    with ScenarioRun("seeds", models, family="deepseek", python=python, log_path=work / "act1.log") as run:
        say(f"  serving {run.spec.target_dir.name} with {run.spec.draft_dir} (SGLang logs no error)")
        out["broken"] = _served(run, work / "act1.e3s", steps, screen, say)
        broken_draft = run.spec.draft_dir
        draft_copy = work / "draft-as-served"
        shutil.copytree(broken_draft, draft_copy)
    _act_report(out["broken"], say)

    say("act 2/4: eagle3scope doctor on that checkpoint (no server needed)")
    before = diagnose(draft_copy, target_dir=models.target_kimi).to_dict()
    say(render(before))
    out["doctor_before"] = before

    say("act 3/4: `eagle3scope fix`, the repair the doctor names (a corrected copy, never in place)")
    fixed = work / "draft-fixed"
    repaired = fix_checkpoint(draft_copy, fixed, sglang_version=ENGINE_SGLANG_VERSION, target_dir=models.target_kimi)
    for change in repaired.changes:
        say(f"  {change}")
    out["fix_changes"] = repaired.changes
    after = diagnose(fixed, target_dir=models.target_kimi).to_dict()
    say(f"  doctor on the fixed copy: {verdict_line(after)}")
    out["doctor_after"] = after

    say("act 4/4: the fixed draft served on the same target")
    with ScenarioRun("healthy-kimi", models, family="deepseek", python=python, log_path=work / "act4.log",
                     draft_dir=fixed) as run:
        out["fixed"] = _served(run, work / "act4.e3s", steps, screen, say)
    _act_report(out["fixed"], say)
    if out["broken"]["accept"] and out["fixed"]["accept"]:
        say(f"acceptance length {out['broken']['accept']:.2f} -> {out['fixed']['accept']:.2f}; recordings and "
            f"logs in {work}")
    return out
