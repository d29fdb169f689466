"""Shared fixtures for tests that need the real SGLang engine venv and the tiny models.

Those tests are marked ``engine``. They skip when the engine venv is absent,
unless EAGLE3SCOPE_REQUIRE_ENGINE=1 (CI's full run, ``make test``), where absence fails.
Under that variable *every* skip fails, whatever raised it (a missing tool, wheel, scratch venv
or test dependency): ``make test`` provides all of them, so a skip there is a hole in the run.
"""

import os
import subprocess
from pathlib import Path

import pytest

from eagle3scope.demo.server import cache_dir, engine_python as locate_engine_python
from eagle3scope.demo.tiny import MODELS_DIRNAME

REPO = Path(__file__).resolve().parents[1]


def required() -> bool:
    return os.environ.get("EAGLE3SCOPE_REQUIRE_ENGINE") == "1"


def engine_missing(reason: str):
    """Skip, or fail when the run demands the engine (EAGLE3SCOPE_REQUIRE_ENGINE=1)."""
    if required():
        pytest.fail(f"engine required but unavailable: {reason}")
    pytest.skip(reason)


_NO_SKIPS = "skipped under EAGLE3SCOPE_REQUIRE_ENGINE=1, where nothing may be missing"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if required() and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome, report.longrepr = "failed", f"{_NO_SKIPS}: {report.longrepr}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    report = (yield).get_result()
    if required() and report.skipped:  # a module-level importorskip
        report.outcome, report.longrepr = "failed", f"{_NO_SKIPS}: {report.longrepr}"


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


@pytest.fixture(scope="session")
def engine_python() -> Path:
    """The SGLang 0.5.23 engine venv's python (the full CPU engine)."""
    return checked_engine_python("0.5.23")


@pytest.fixture(scope="session")
def engine_python_0510() -> Path:
    """The SGLang 0.5.10 venv's python: v1 EAGLEWorker and `midlayer` naming; in-process draft only."""
    return checked_engine_python("0.5.10")


@pytest.fixture(scope="session")
def tiny_models(engine_python) -> tuple[Path, Path]:
    """(target_dir, draft_dir): the tiny random target and random EAGLE-3 draft, generated once."""
    root = cache_dir() / "models" / MODELS_DIRNAME
    done = run_engine_python(engine_python, "-m", "eagle3scope.demo.tiny", str(root))
    if done.returncode != 0:
        pytest.fail(f"tiny model generation failed:\n{done.stderr[-3000:]}")
    return root / "target", root / "draft-random"



@pytest.fixture(scope="session")
def demo_models(engine_python):
    """The trained demo target + drafts (built once, cached under the cache dir by code hash)."""
    from eagle3scope.demo import models

    if models.cached() is None and not required() and os.environ.get("EAGLE3SCOPE_BUILD_MODELS") != "1":
        pytest.skip("demo models not built (python -m eagle3scope.demo.models, or EAGLE3SCOPE_BUILD_MODELS=1)")
    return models.ensure_demo_models(python=engine_python)


SCENARIO_STEPS = 120
SCENARIO_PROMPTS_SEED = 7
SCENARIO_NEW_TOKENS = 64


@pytest.fixture(scope="session")
def scenario_result(demo_models, engine_python, tmp_path_factory):
    """name -> dict(recording, results, outputs): one real server per scenario for the whole session,
    with the shim publishing. ``recording`` holds SCENARIO_STEPS decode steps of a steady workload;
    ``results`` is SGLang's own meta_info for those requests; ``outputs`` are greedy answers to four
    fixed prompts, asked once the workload has stopped (so batching cannot change them)."""
    from eagle3scope.demo.models import demo_prompts
    from eagle3scope.demo.runner import ScenarioRun

    root = tmp_path_factory.mktemp("scenario-runs")
    done: dict[str, dict] = {}

    def get(name: str) -> dict:
        if name not in done:
            path = root / f"{name}.e3s"
            with ScenarioRun(name, demo_models, control=False, python=engine_python,
                             log_path=root / f"{name}.log") as run:
                run.record(path, SCENARIO_STEPS)
                run.workload.stop()
                results = list(run.workload.results)
                outputs = run.server.generate(demo_prompts(4, seed=SCENARIO_PROMPTS_SEED),
                                             max_new_tokens=SCENARIO_NEW_TOKENS)
            done[name] = {"recording": path, "results": results, "outputs": outputs}
        return done[name]

    return get
