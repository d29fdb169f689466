"""Start, query and stop a real engine's server (SGLang here, vLLM in ``vllm_server``) on a CPU, for tests
and the demo.

The server runs in the isolated engine venv (scripts/build-engine-env.sh), so
this module only spawns it and talks HTTP: it imports neither torch nor sglang
and is safe in the viewer install. The server gets its own process group, and
stop() ends that whole group (launcher, scheduler, detokenizer, helpers),
including when the caller is interrupted with Ctrl-C.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from eagle3scope.wire.endpoints import free_port

ENGINE_SGLANG_VERSION = "0.5.23"
#: Relaunches of a server whose port was taken between choosing and binding it (SGLangServer.wait_ready).
PORT_RETRIES = 2

# What SGLang needs to serve on a CPU without AMX (cpu_engine/ and README "The real engine on a CPU").
# One OpenMP thread: the tiny models gain nothing from more, and on a loaded 2-core
# machine spinning OpenMP workers made an EAGLE-3 request 5-10x slower (BENCHMARKS.md).
CPU_ENV = {"SGLANG_USE_CPU_ENGINE": "1", "TORCHDYNAMO_DISABLE": "1", "PYTHONUNBUFFERED": "1",
           "OMP_NUM_THREADS": "1"}
#: Environment switch of the CPU engine's graph stand-in (cpu_engine/.../graphs.py): the draft's decode
#: and draft-extend passes replay CPU graphs with CUDA-graph semantics instead of running their Python.
CPU_GRAPHS_ENV = {"EAGLE3SCOPE_CPU_GRAPHS": "1"}
# --sleep-on-idle: an idle CPU scheduler otherwise busy-polls a whole core (1.01 cores measured,
# 0.03 with the flag; BENCHMARKS.md), on a laptop running the demo and under every test server.
CPU_FLAGS = (
    "--device", "cpu",
    "--disable-cuda-graph",
    "--attention-backend", "intel_amx",
    "--skip-server-warmup",
    "--random-seed", "0",
    "--sleep-on-idle",
)


def parallel_launch(tp: int = 1, dp: int = 1, dp_attention: bool = False, cpus: int | None = None) -> tuple[tuple, dict]:
    """Server arguments and environment for tensor / data / attention-data parallelism on a CPU.

    SGLang binds each rank's OpenMP threads to one NUMA node unless ``SGLANG_CPU_OMP_THREADS_BIND``
    names cores per rank (``utils/numa_utils.py: init_threads_binding``, one ``|``-separated entry per
    rank of dp x tp x pp, indexed by the rank's global device id); a one-node machine needs it from
    two ranks on. Ranks share the cores round-robin when there are more ranks than cores.
    """
    args: list[str] = []
    if tp > 1:
        args += ["--tp-size", str(tp)]
    if dp > 1:
        args += ["--dp-size", str(dp)]
    if dp_attention:
        args.append("--enable-dp-attention")
    ranks = tp * (1 if dp_attention else dp)  # DP attention splits the TP group instead of adding ranks
    env = {}
    if ranks > 1:
        cpus = cpus or os.cpu_count() or 1
        env["SGLANG_CPU_OMP_THREADS_BIND"] = "|".join(str(i % cpus) for i in range(ranks))
    return tuple(args), env


class ServerError(RuntimeError):
    """The server could not start or answer; the message quotes the end of its log."""


def cache_dir() -> Path:
    """Where engine venvs and generated models live ($EAGLE3SCOPE_CACHE, else ~/.cache/eagle3scope)."""
    return Path(os.environ.get("EAGLE3SCOPE_CACHE") or Path.home() / ".cache" / "eagle3scope")


def engine_python(version: str = ENGINE_SGLANG_VERSION) -> Path:
    """The engine venv's python: <cache>/venv-sglang-<version>/bin/python, or for the default
    version $EAGLE3SCOPE_ENGINE_PYTHON when set."""
    override = os.environ.get("EAGLE3SCOPE_ENGINE_PYTHON")
    if override and version == ENGINE_SGLANG_VERSION:
        return Path(override)
    return cache_dir() / f"venv-sglang-{version}" / "bin" / "python"


def checkout_pythonpath(environ: Mapping[str, str]) -> dict[str, str]:
    """PYTHONPATH putting this source checkout's packages first, when this module runs from one.

    The engine venv is shared and holds an editable install of whichever checkout last ran
    `make engine-env`; a server started from another branch or clone must run that checkout's shim
    and CPU engine, not the installed tree's. From a wheel install nothing changes ({}).
    """
    root = Path(__file__).resolve().parents[2]
    if not (root / "instrumentation" / "eagle3scope_shim").is_dir():
        return {}
    paths = [str(root), str(root / "instrumentation"), str(root / "cpu_engine" / "src")]
    if environ.get("PYTHONPATH"):
        paths.append(environ["PYTHONPATH"])
    return {"PYTHONPATH": os.pathsep.join(paths)}


def log_tail(path: Path, lines: int = 40) -> str:
    """The last `lines` lines of a log file ('' when it does not exist)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return ""


class EngineServer:
    """One engine's OpenAI-or-native HTTP server on 127.0.0.1, as a context manager: spawn, wait, stop.

    The lifecycle is the engine's-neutral part; an engine adapter (a subclass) says how to launch
    (:meth:`command`, :attr:`CPU_ENV`), how to know it is ready (:attr:`HEALTH_PATH`) and how to ask it
    for tokens (:meth:`generate`).
    """

    #: Shown in errors ("SGLang server exited ...").
    NAME = "engine"
    #: GET path that answers 200 once the server generates.
    HEALTH_PATH = "/health"
    #: Environment the engine needs on a CPU, under the caller's ``env``.
    CPU_ENV: Mapping[str, str] = {}
    #: How to get the engine's python (said when it is missing).
    BUILD_HINT = "build its venv"

    def __init__(self, *, python: str | Path, env: Mapping[str, str] | None = None,
                 log_path: str | Path | None = None, startup_timeout: float = 300.0):
        self.env = dict(env or {})
        self.python = Path(python)
        self.log_path = Path(log_path) if log_path else Path(
            tempfile.mkdtemp(prefix=f"eagle3scope-{self.NAME.lower()}-")) / "server.log"
        self.startup_timeout = startup_timeout
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None
        self.startup_s: float | None = None
        self._t0 = 0.0
        self._log_offset = 0

    def command(self) -> list[str]:
        """The launch command line (port chosen at start())."""
        raise NotImplementedError

    def generate(self, prompts: str | Iterable[str], max_new_tokens: int = 32, temperature: float = 0.0, *,
                 timeout: float = 300.0, sampling: Mapping[str, object] | None = None) -> list[dict]:
        """Generate for a batch of prompts; one dict per prompt, in the engine's own reply shape."""
        raise NotImplementedError

    def own_mean_acceptance(self) -> float | None:
        """The engine's own mean acceptance length over the server's life, where it publishes one (None)."""
        return None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "EngineServer":
        """Spawn the server and wait until it generates."""
        return self.launch().wait_ready()

    def launch(self) -> "EngineServer":
        """Spawn the server in its own process group without waiting (see wait_ready)."""
        if not self.python.exists():
            raise ServerError(
                f"{self.NAME} python not found at {self.python}; {self.BUILD_HINT}"
            )
        self.port = free_port()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.CPU_ENV, **self.env}
        env.update(checkout_pythonpath(env))
        self._t0 = time.monotonic()
        with open(self.log_path, "ab") as log:
            self._log_offset = log.tell()
            self.proc = subprocess.Popen(
                self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=env, start_new_session=True,
            )
        atexit.register(self.stop)
        return self

    def wait_ready(self) -> "EngineServer":
        """Block until HEALTH_PATH answers 200; on death or timeout stop and raise ServerError.

        A server that died because its port was taken before it bound it (the port is chosen a
        minute before the engine binds it) is relaunched on another port, up to PORT_RETRIES times."""
        for retry in range(PORT_RETRIES + 1):
            try:
                self._poll_health()
                break
            except ServerError:
                lost_port = retry < PORT_RETRIES and self._lost_its_port()
                self.stop()
                if not lost_port:
                    raise
                self.launch()
            except BaseException:
                self.stop()
                raise
        self.startup_s = time.monotonic() - self._t0
        return self

    def _lost_its_port(self) -> bool:
        """Whether this launch's log says its HTTP port was already bound (uvicorn logs the OSError)."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self._log_offset)
                return b"address already in use" in log.read().lower()
        except OSError:
            return False

    def _poll_health(self) -> None:
        while True:
            if self.proc.poll() is not None:
                raise ServerError(
                    f"{self.NAME} server exited with code {self.proc.returncode} during startup "
                    f"(log {self.log_path}):\n{log_tail(self.log_path)}"
                )
            if time.monotonic() - self._t0 > self.startup_timeout:
                raise ServerError(
                    f"{self.NAME} server not ready after {self.startup_timeout:.0f}s "
                    f"(log {self.log_path}):\n{log_tail(self.log_path)}"
                )
            try:
                with urllib.request.urlopen(self.url + self.HEALTH_PATH, timeout=60) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.5)

    def post(self, path: str, body: dict, timeout: float = 300.0):
        """POST JSON to the server and return the decoded JSON answer."""
        req = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            raise ServerError(f"{path} answered {e.code}: {e.read()[:2000]!r}") from e
        except (urllib.error.URLError, ConnectionError) as e:
            alive = self.proc is not None and self.proc.poll() is None
            raise ServerError(
                f"{path} failed ({e}); server {'running' if alive else 'dead'}; "
                f"log {self.log_path}:\n{log_tail(self.log_path)}"
            ) from e

    def stop(self, grace: float = 10.0) -> None:
        """End the server's whole process group: SIGTERM, then SIGKILL after `grace` seconds."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        atexit.unregister(self.stop)
        pgid = proc.pid  # start_new_session: the launcher leads its own group
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
        # Children (scheduler, detokenizer, resource tracker) may outlive the launcher.
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()

    def __enter__(self) -> "EngineServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class SGLangServer(EngineServer):
    """One `python -m sglang.launch_server` on 127.0.0.1, as a context manager.

    With `draft_dir` it serves speculative decoding (`algorithm`, default
    EAGLE3); without it, plain decoding of the target. `max_running_requests=None`
    leaves the flag out, so SGLang sizes the request pool itself.
    """

    NAME = "SGLang"
    HEALTH_PATH = "/health_generate"
    CPU_ENV = CPU_ENV
    BUILD_HINT = "build it with scripts/build-engine-env.sh or set EAGLE3SCOPE_ENGINE_PYTHON"

    def __init__(
        self,
        target_dir: str | Path,
        draft_dir: str | Path | None = None,
        *,
        algorithm: str = "EAGLE3",
        num_steps: int = 3,
        topk: int = 1,
        num_draft_tokens: int = 4,
        dtype: str = "float32",
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        python: str | Path | None = None,
        log_path: str | Path | None = None,
        startup_timeout: float = 300.0,
        max_total_tokens: int = 4096,
        max_running_requests: int | None = 8,
    ):
        super().__init__(python=python if python is not None else engine_python(), env=env, log_path=log_path,
                         startup_timeout=startup_timeout)
        self.target_dir = Path(target_dir)
        self.draft_dir = Path(draft_dir) if draft_dir is not None else None
        self.algorithm = algorithm
        self.num_steps, self.topk, self.num_draft_tokens = num_steps, topk, num_draft_tokens
        self.dtype = dtype
        self.extra_args = tuple(extra_args)
        self.max_total_tokens, self.max_running_requests = max_total_tokens, max_running_requests

    def command(self) -> list[str]:
        """The launch command line (port chosen at start())."""
        cmd = [
            str(self.python), "-m", "sglang.launch_server",
            "--model-path", str(self.target_dir),
            "--dtype", self.dtype,
            "--host", "127.0.0.1", "--port", str(self.port),
            "--max-total-tokens", str(self.max_total_tokens),
            *(("--max-running-requests", str(self.max_running_requests)) if self.max_running_requests is not None else ()),
            *CPU_FLAGS,
        ]
        if self.draft_dir is not None:
            cmd += [
                "--speculative-algorithm", self.algorithm,
                "--speculative-draft-model-path", str(self.draft_dir),
                "--speculative-num-steps", str(self.num_steps),
                "--speculative-eagle-topk", str(self.topk),
                "--speculative-num-draft-tokens", str(self.num_draft_tokens),
            ]
        return cmd + list(self.extra_args)

    def generate(
        self,
        prompts: str | Iterable[str] | None = None,
        max_new_tokens: int = 32,
        temperature: float = 0.0,
        *,
        input_ids: Sequence[Sequence[int]] | None = None,
        timeout: float = 300.0,
        sampling: Mapping[str, object] | None = None,
    ) -> list[dict]:
        """Generate for a batch of prompts (or token-id lists); one dict per item with
        `text`, `output_ids` and SGLang's `meta_info` (spec_verify_ct, spec_accept_length, ...).
        `sampling`: more SGLang sampling parameters (e.g. a `regex`, `json_schema` or `ebnf` grammar)."""
        if (prompts is None) == (input_ids is None):
            raise ValueError("give exactly one of prompts or input_ids")
        request: dict = {"sampling_params": {"max_new_tokens": max_new_tokens, "temperature": temperature,
                                             **(sampling or {})}}
        if prompts is not None:
            request["text"] = [prompts] if isinstance(prompts, str) else list(prompts)
        else:
            request["input_ids"] = [list(ids) for ids in input_ids]
        out = self.post("/generate", request, timeout=timeout)
        return out if isinstance(out, list) else [out]
