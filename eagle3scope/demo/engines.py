"""The engines the demo serves through: per engine, how to launch its server and what it can serve.

An :class:`Engine` is the one place that knows an engine's venv, its build script, the scenarios it
offers per model family and how a scenario's :class:`~eagle3scope.demo.scenarios.ServerSpec` becomes a
running server (command line, readiness probe and environment live in the server class). The demo
command and :class:`~eagle3scope.demo.runner.ScenarioRun` go through it instead of branching on the name.
Pure Python, like the modules it names.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from eagle3scope.demo import families
from eagle3scope.demo.constraints import WORKLOADS
from eagle3scope.demo.scenarios import VLLM_SCENARIOS, Scenario, ServerSpec
from eagle3scope.demo.server import CPU_GRAPHS_ENV, EngineServer, SGLangServer, engine_python, parallel_launch
from eagle3scope.demo.vllm_server import VLLMServer, vllm_python


@dataclass(frozen=True)
class Launch:
    """How the demo wants a scenario served, before an engine says how: draft chain and parallelism."""

    num_steps: int = 3
    topk: int = 1
    num_draft_tokens: int | None = None  # None: num_steps + 1, the chain
    tp: int = 1
    dp: int = 1
    dp_attention: bool = False
    server_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Engine:
    name: str
    #: As people write it ("SGLang", "vLLM").
    label: str
    #: Builds the engine venv (relative to the checkout).
    build_script: str
    python: Callable[[], Path]
    #: family -> scenarios offered (KeyError for a family the engine does not serve).
    scenarios_of: Callable[[str], dict[str, Scenario]]
    #: (spec, launch, env, python, log_path) -> the server, not started.
    make_server: Callable[[ServerSpec, Launch, Mapping[str, str], Path | None, Path | None], EngineServer]
    #: Said while the server starts.
    startup_hint: str
    #: Workloads (:data:`eagle3scope.demo.constraints.WORKLOADS`) its request format can carry.
    workloads: tuple[str, ...] = ("free",)
    #: Environment that runs the draft's passes from captured graphs (None: the engine has no such mode here).
    graphs_env: Mapping[str, str] | None = None
    #: The demo workload's temperatures unless asked (None: the family's, else greedy and 0.8 alternating).
    temperatures: tuple[float, ...] | None = None
    #: launch -> what of it the engine cannot serve, one phrase each ([]: all of it).
    refusals: Callable[[Launch], list[str]] = lambda launch: []

    def refusal(self, launch: Launch) -> str | None:
        """Why the engine cannot serve ``launch`` (None: it can)."""
        refused = self.refusals(launch)
        return f"{self.label} on CPU does not take " + "; ".join(refused) if refused else None

    def server(self, spec: ServerSpec, launch: Launch, env: Mapping[str, str], python: Path | None = None,
               log_path: Path | None = None) -> EngineServer:
        """The server for ``spec`` (not started); ValueError naming what the engine cannot do."""
        refused = self.refusal(launch)
        if refused:
            raise ValueError(refused)
        return self.make_server(spec, launch, env, python, log_path)


def _sglang_server(spec: ServerSpec, launch: Launch, env: Mapping[str, str], python, log_path) -> SGLangServer:
    parallel_args, parallel_env = parallel_launch(launch.tp, launch.dp, launch.dp_attention)
    return SGLangServer(spec.target_dir, spec.draft_dir, algorithm=spec.algorithm,
                        extra_args=spec.extra_args + parallel_args + launch.server_args,
                        env={**parallel_env, **env}, python=python, log_path=log_path,
                        num_steps=launch.num_steps, topk=launch.topk,
                        num_draft_tokens=launch.num_draft_tokens or launch.num_steps + 1)


#: Greedy only: on CPU, vLLM 0.32's sampled verify accepts about 1.4 with the demo pair at temperature 0.8, and
#: greedy requests batched with sampled ones drop to about 1.3 (greedy alone: 3.15).
VLLM_TEMPERATURES = (0.0,)


def _vllm_refusals(launch: Launch) -> list[str]:
    return [flag for flag, asked in (
        ("--topk above 1 (vLLM's EAGLE here drafts a chain)", launch.topk > 1),
        ("--num-draft-tokens other than --num-steps + 1 (a chain)",
         launch.num_draft_tokens not in (None, launch.num_steps + 1)),
        ("--tp / --dp / --dp-attention (one CPU worker)", launch.tp > 1 or launch.dp > 1 or launch.dp_attention),
    ) if asked]


def _vllm_server(spec: ServerSpec, launch: Launch, env: Mapping[str, str], python, log_path) -> VLLMServer:
    return VLLMServer(spec.target_dir, spec.draft_dir, algorithm=spec.algorithm, num_steps=launch.num_steps,
                      extra_args=spec.extra_args + launch.server_args, env=env, python=python, log_path=log_path)


def _vllm_scenarios(family: str) -> dict[str, Scenario]:
    if family != "llama":
        raise KeyError(f"the vLLM demo serves the llama family only, not {family!r}")
    return VLLM_SCENARIOS


ENGINES: dict[str, Engine] = {
    e.name: e
    for e in (
        Engine("sglang", "SGLang", "scripts/build-engine-env.sh", engine_python, families.scenarios_of,
               _sglang_server, "about 25 s", workloads=tuple(WORKLOADS), graphs_env=CPU_GRAPHS_ENV),
        Engine("vllm", "vLLM", "scripts/build-vllm-env.sh", vllm_python, _vllm_scenarios, _vllm_server,
               "about 40 s; two minutes the first time", refusals=_vllm_refusals,
               temperatures=VLLM_TEMPERATURES),
    )
}


def serves(engine: Engine, family: str) -> bool:
    """Whether ``engine`` offers scenarios for ``family``."""
    try:
        engine.scenarios_of(family)
    except KeyError:
        return False
    return True
