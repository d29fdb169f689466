"""The suite's fixtures and hooks; the helpers they use live in ``tests/support/``.

Tests that need the real SGLang engine venv and the tiny models are marked ``engine``. They skip when the engine venv is absent,
unless EAGLE3SCOPE_REQUIRE_ENGINE=1 (CI's full run, ``make test``), where absence fails.
Under that variable *every* skip fails, whatever raised it (a missing tool, wheel, scratch venv
or test dependency): ``make test`` provides all of them, so a skip there is a hole in the run.
"""

import atexit
import os
import shutil
import tempfile
import urllib.request
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Hypothesis' timing checks measure the machine, not the code: on a shared 2-core box under load an
# input draw can take a second (tests/aux/test_aux_tp.py failed so at load 6), and no property here has
# a deadline to keep. The examples drawn, and their number, are unchanged.
settings.register_profile("shared-box", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("shared-box")

# The suite's own private runtime directory: the default endpoint (ipc:// in $XDG_RUNTIME_DIR) of
# one run never meets another run's or the user's own server on the same machine.
os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="e3s-test-run-")
atexit.register(shutil.rmtree, os.environ["XDG_RUNTIME_DIR"], True)
# Many tests feed hostile frames from raw plain-TCP PUB sockets on loopback; tests of the private
# stream and of CURVE (tests/neighbours/test_private_stream.py) remove this and check what happens without it.
os.environ.setdefault("EAGLE3SCOPE_TRUSTED_NETWORK", "1")

# Shared helpers are the package ``tests/support`` (``from support.x import ...``): pytest's prepend
# import mode puts this file's folder, tests/, on sys.path when it loads it, so nothing more is added.
# Test modules never import one another (tests/test_architecture.py).
from eagle3scope.demo.server import cache_dir
from eagle3scope.demo.tiny import MODELS_DIRNAME
from support.engine import FLEET_SCENARIOS, SCENARIO_NEW_TOKENS, SCENARIO_PROMPTS_SEED, SCENARIO_STEPS
from support.engine import built_models, checked_engine_python, required, run_engine_python
from support.aux_support import started_channel
from support.publisher import SyntheticPublisher

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
    """The trained Llama demo target + drafts."""
    return built_models("llama", engine_python)


@pytest.fixture(scope="session")
def deepseek_models(engine_python):
    """The seeds' family: trained DeepseekV3 target (also as Kimi-K2.5) + its drafts (Llama-style and MLA)."""
    return built_models("deepseek", engine_python)


@pytest.fixture(scope="session")
def shared_prometheus(tmp_path_factory):
    """() -> a real Prometheus server, started on first use (once per session), or the reason there is none."""
    from support.fleet_support import PrometheusServer, prometheus_binary

    box: dict = {}

    def get():
        if not box:
            binary = prometheus_binary()
            if binary is None:
                box["missing"] = "no prometheus on PATH (make prometheus installs Debian's package)"
            else:
                try:
                    box["server"] = PrometheusServer(binary, tmp_path_factory.mktemp("prometheus"))
                except RuntimeError as exc:
                    box["missing"] = str(exc)
        return box.get("server"), box.get("missing")

    yield get
    if box.get("server") is not None:
        box["server"].close()


@pytest.fixture(scope="session")
def scenario_result(request, engine_python, tmp_path_factory, shared_prometheus):
    """(name, family="llama", repeat=1) -> dict(recording, results, outputs, log[, fleet, metrics]): one real
    server per scenario, family and repeat for the whole session, with the shim publishing (``repeat`` 2: a
    second server of the same scenario, the same draft's next run, as a baseline comparison needs; no fleet).
    ``recording`` holds SCENARIO_STEPS decode steps of a steady
    workload; ``results`` is SGLang's own meta_info for those requests; ``outputs`` are greedy
    answers to four fixed prompts, asked once the workload has stopped (so batching cannot change
    them); ``log`` is the server's log file. FLEET_SCENARIOS run with --enable-metrics: ``fleet`` is what the
    fleet observers saw (tests/support/fleet_support.py), ``metrics`` the server's own /metrics after the recording."""
    from contextlib import ExitStack

    from support.fleet_support import FleetObservers

    from eagle3scope.demo.models import demo_prompts
    from eagle3scope.demo.runner import ScenarioRun

    root = tmp_path_factory.mktemp("scenario-runs")
    done: dict[tuple, dict] = {}
    models_fixture = {"llama": "demo_models", "deepseek": "deepseek_models"}

    def get(name: str, family: str = "llama", repeat: int = 1) -> dict:
        if (family, name, repeat) not in done:
            models = request.getfixturevalue(models_fixture[family])
            stem = f"{family}-{name}" + (f"-{repeat}" if repeat > 1 else "")
            path, log = root / f"{stem}.e3s", root / f"{stem}.log"
            fleet_scenario = family == "llama" and name in FLEET_SCENARIOS and repeat == 1
            run = ScenarioRun(name, models, control=False, python=engine_python, family=family, log_path=log,
                              server_args=("--enable-metrics",) if fleet_scenario else ())
            entry: dict = {"recording": path, "log": log}
            with ExitStack() as stack:
                fleet = None
                if fleet_scenario:
                    prometheus, missing = shared_prometheus()
                    fleet = stack.enter_context(FleetObservers(name, run.endpoint, root / f"{name}-fleet", prometheus))
                    run.before_traffic = fleet.wait_for_idle_publisher
                    entry["fleet"] = dict(fleet.result, prometheus=prometheus, prometheus_missing=missing)
                with run:
                    if fleet is not None:
                        fleet.start_gate()
                    run.record(path, SCENARIO_STEPS)
                    if fleet_scenario:
                        with urllib.request.urlopen(run.server.url + "/metrics", timeout=60) as answer:
                            entry["metrics"] = answer.read().decode()
                    run.workload.stop()
                    entry["results"] = list(run.workload.results)
                    entry["outputs"] = run.server.generate(demo_prompts(4, seed=SCENARIO_PROMPTS_SEED),
                                                           max_new_tokens=SCENARIO_NEW_TOKENS)
            if fleet is not None:
                entry["fleet"].update(fleet.result)
            done[family, name, repeat] = entry
        return done[family, name, repeat]

    return get


@pytest.fixture
def synthetic_publisher():
    """A real XPUB socket on loopback TCP standing in for a shim (tests/support/publisher.py)."""
    with SyntheticPublisher() as pub:
        yield pub


@pytest.fixture
def channel(shim, tmp_path):
    """A started AuxChannel over a stand-in target (support.aux_support.started_channel), for the
    aux-control tests and the hostile ones that speak to it."""
    with started_channel(shim, tmp_path) as parts:
        yield parts


@pytest.fixture
def shim():
    """A fresh shim state for the hooks a test makes (tests/support/shim_state.py; imported here, not at
    the top: the shim's modules read the environment as they are imported)."""
    from support.shim_state import make_shim

    return make_shim()
