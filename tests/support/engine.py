"""What tests of the real SGLang engine share: its venv's python, checked, and the rule that under
EAGLE3SCOPE_REQUIRE_ENGINE=1 (CI's full run, ``make test``) nothing may be missing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from eagle3scope.demo.server import engine_python as locate_engine_python

REPO = Path(__file__).resolve().parents[2]


def required() -> bool:
    return os.environ.get("EAGLE3SCOPE_REQUIRE_ENGINE") == "1"


def engine_missing(reason: str):
    """Skip, or fail when the run demands the engine (EAGLE3SCOPE_REQUIRE_ENGINE=1)."""
    if required():
        pytest.fail(f"engine required but unavailable: {reason}")
    pytest.skip(reason)


def run_engine_python(python: Path, *args: str, timeout: float = 600, env: dict | None = None):
    """Run the engine venv's python from the repo root (so this checkout's modules win)."""
    return subprocess.run(
        [str(python), *args], cwd=REPO, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def checked_engine_python(version: str) -> Path:
    """The python of the engine venv for SGLang `version`, checked to import torch, the CPU kernels and sglang."""
    python = locate_engine_python(version)
    if not python.exists():
        engine_missing(f"no SGLang {version} engine venv at {python} (scripts/build-engine-env.sh builds it)")
    probe = run_engine_python(python, "-c", "import torch, sgl_kernel, sglang")
    if probe.returncode != 0:
        engine_missing(f"engine venv at {python} is incomplete:\n{probe.stderr[-2000:]}")
    return python


def built_models(family: str, engine_python):
    """A demo family's trained models, built once and cached by code hash; skipped when not built,
    unless the run demands the engine (EAGLE3SCOPE_REQUIRE_ENGINE=1) or EAGLE3SCOPE_BUILD_MODELS=1."""
    from eagle3scope.demo import deepseek_mla, families, models

    module = {"llama": models, "deepseek": deepseek_mla}[family]
    if module.cached() is None and not required() and os.environ.get("EAGLE3SCOPE_BUILD_MODELS") != "1":
        pytest.skip(f"{family} demo models not built (python -m {module.__name__}, or EAGLE3SCOPE_BUILD_MODELS=1)")
    return families.ensure_models(family, python=engine_python)


SCENARIO_STEPS = 120
SCENARIO_PROMPTS_SEED = 7
SCENARIO_NEW_TOKENS = 64


#: Scenarios whose shared server also feeds the fleet observers (exporter, Prometheus, live gate).
FLEET_SCENARIOS = ("healthy", "aux-off")

#: scenario -> (rule ids of which at least one must fire, the severity it must have). aux-offset is a
#: warning: captured == configured + 1 is self-consistent, only the numbering convention is suspect.
SCENARIO_RULES = {
    "aux-off": ({"aux-capture-off", "fc-bypassed"}, "error"),
    "wrong-algorithm": ({"aux-capture-off", "fc-bypassed"}, "error"),
    "dropped-weights": ({"weights-dropped"}, "error"),
    "d2t-absolute": ({"d2t-absolute"}, "error"),
    "lm-head-missing": ({"lm-head-mismatch"}, "error"),
    "aux-offset": ({"aux-layers-mismatch"}, "warning"),
}
