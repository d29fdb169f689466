"""One demo scenario served for real: its draft prepared, the engine (SGLang or vLLM) started with the
shim publishing, and a steady workload driving it. The ``demo`` command and the real-engine tests share it.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Callable

from eagle3scope.demo.constraints import WORKLOADS
from eagle3scope.demo.engines import ENGINES, Launch
from eagle3scope.demo.families import TEMPERATURES
from eagle3scope.demo.server import cache_dir
from eagle3scope.wire.endpoints import ENV_ENDPOINT, fresh_ipc_endpoint

#: The demo's traffic, as production mixes it: greedy and sampled requests alternate.
DEMO_TEMPERATURES = (0.0, 0.8)


class ScenarioRun:
    """Context manager: ``with ScenarioRun("aux-off", models) as run: run.record(path, steps=200)``.

    ``run.endpoint`` is the shim's event endpoint, ``run.control_endpoint`` / ``run.token_file`` the aux
    control channel (when ``control=True``), ``run.workload.results`` the engine's own per-request
    report (SGLang's ``meta_info``, vLLM's ``metrics``) for comparison with the shim's events.
    ``temperatures`` are cycled through by the workload's requests (default DEMO_TEMPERATURES); ``workload`` names the requests' grammars
    (:data:`eagle3scope.demo.constraints.WORKLOADS`: ``free``, or ``constrained`` beside free ones).
    ``server_args``: more server arguments (e.g. SGLang's ``--enable-metrics``). ``engine``: a name in
    :data:`eagle3scope.demo.engines.ENGINES` (its scenarios, its server; ValueError for what it cannot do).
    """

    def __init__(self, name: str, models, *, control: bool = True, concurrency: int = 2, max_new_tokens: int = 64,
                 python: str | Path | None = None, log_path: str | Path | None = None, extra_env: dict | None = None,
                 temperatures: tuple[float, ...] | None = None, family: str = "llama",
                 draft_dir: str | Path | None = None, num_steps: int = 3, topk: int = 1,
                 num_draft_tokens: int | None = None, tp: int = 1, dp: int = 1, dp_attention: bool = False,
                 workload: str = "free", server_args: tuple[str, ...] = (), engine: str = "sglang"):
        self.engine = ENGINES[engine]
        self.scenario = self.engine.scenarios_of(family)[name]
        self.models = models
        self.spec = self.scenario.prepare(
            models, cache_dir() / "scenarios" / f"{family}-{name}-{engine}-{os.getpid()}")
        if draft_dir is not None:  # the scenario's target and arguments with another draft (a repaired copy)
            self.spec = dataclasses.replace(self.spec, draft_dir=Path(draft_dir))
        self.endpoint = fresh_ipc_endpoint("events")
        env = {ENV_ENDPOINT: self.endpoint, **(extra_env or {})}
        self.control_endpoint = self.token_file = None
        if control:
            from eagle3scope.wire.token import create_token_file

            self.token_file = create_token_file()
            self.control_endpoint = fresh_ipc_endpoint("control")
            env.update(EAGLE3SCOPE_CONTROL=self.control_endpoint, EAGLE3SCOPE_CONTROL_TOKEN_FILE=str(self.token_file))
        launch = Launch(num_steps, topk, num_draft_tokens, tp, dp, dp_attention, tuple(server_args))
        self.server = self.engine.server(self.spec, launch, env, python, log_path)
        self.concurrency, self.max_new_tokens = concurrency, max_new_tokens
        self.temperatures = temperatures or self.engine.temperatures or TEMPERATURES.get(family)
        self.constraints = WORKLOADS[workload]
        self.workload = None
        #: Called once the server is up, before the workload sends its first request (an observer
        #: that must see the server idle first, e.g. a metrics scrape starting from zero).
        self.before_traffic: Callable[[], None] | None = None
        self._stack = ExitStack()

    def __enter__(self) -> "ScenarioRun":
        from eagle3scope.demo.models import demo_prompts
        from eagle3scope.demo.workload import Workload

        try:
            self._stack.enter_context(self.server)
            if self.before_traffic is not None:
                self.before_traffic()
            self.workload = self._stack.enter_context(
                Workload(self.server, demo_prompts(16), concurrency=self.concurrency, max_new_tokens=self.max_new_tokens,
                         temperatures=self.temperatures or DEMO_TEMPERATURES, constraints=self.constraints))
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._stack.close()
        if self.token_file is not None:  # its private 0700 directory goes too, as `launch` does
            shutil.rmtree(Path(self.token_file).parent, ignore_errors=True)
            self.token_file = None

    def record(self, out: str | Path, steps: int, timeout_s: float | None = None) -> None:
        """Record until ``steps`` decode steps (what ``check`` counts as steps) with the ``record``
        command in a child process (its own signals)."""
        timeout_s = timeout_s or max(120.0, steps * 0.6)
        cmd = [sys.executable, "-m", "eagle3scope", "record", "--connect", self.endpoint, "--out", str(out),
               "--decode-steps", str(steps), "--duration", str(timeout_s), "--quiet"]
        child = subprocess.Popen(cmd)
        try:
            code = child.wait(timeout_s + 30)
        finally:
            if child.poll() is None:
                child.terminate()
                child.wait(10)
        if code != 0:
            raise RuntimeError(f"recording {out} failed (exit {code})")

    def finished_requests(self, at_least: int = 1, timeout_s: float = 180.0) -> list[dict]:
        """The engine's replies so far, waiting (bounded) until ``at_least`` requests have finished: a
        short recording can end before any request does when acceptance is near 1."""
        deadline = time.monotonic() + timeout_s
        while len(self.workload.results) < at_least and time.monotonic() < deadline:
            if self.server.proc is None or self.server.proc.poll() is not None:
                break
            time.sleep(0.2)
        return list(self.workload.results)
