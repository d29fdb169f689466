"""What tests of the real vLLM engine share: its venv's python, checked, and a session-wide pool of
servers, one per configuration, each with a subscriber that keeps every frame its shim published.

vLLM takes 40 s to a few minutes to start on the shared 2-core machine, so a configuration is started
once, when a test first asks for it, and shared by every test that names it; the pool stops them all at
the end of the session. Servers run eager, float32, with small budgets, and (unless a test asks for vLLM's
usual layout) with the scheduler and the model in one engine-core process.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from support.engine import engine_missing, run_engine_python

from eagle3scope.demo.vllm_server import VLLMServer, vllm_python
from eagle3scope.wire.endpoints import ENV_ENDPOINT, fresh_ipc_endpoint

#: Startup budget of one server: vLLM's cold start (model probes in subprocesses) on a loaded machine.
STARTUP_TIMEOUT = 600.0


def checked_vllm_python() -> Path:
    """The vLLM venv's python, built (its stamp written) and importing vLLM's OpenAI server; skipped
    when missing, a failure under EAGLE3SCOPE_REQUIRE_ENGINE=1."""
    python = vllm_python()
    if not (python.parent.parent / ".eagle3scope-built").exists():
        engine_missing(f"no vLLM venv at {python.parent.parent} (scripts/build-vllm-env.sh builds it)")
    probe = run_engine_python(python, "-c", "import vllm.entrypoints.openai.api_server", timeout=300)
    if probe.returncode != 0:
        engine_missing(f"vLLM venv at {python.parent.parent} is incomplete:\n{probe.stderr[-2000:]}")
    return python


@dataclass
class PooledServer:
    """A started vLLM server and every (raw, frame) its shim published since before it started."""

    server: VLLMServer
    endpoint: str
    received: list = field(default_factory=list)
    #: What the test that first drove the server got back (vLLM's replies), for the tests sharing it.
    responses: list = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None

    def collect(self, subscriber) -> None:
        def run():
            try:
                while not self._stop.is_set():
                    got = subscriber.poll_raw(timeout_ms=200)
                    with self._lock:
                        self.received.extend(got)
            finally:
                subscriber.close()

        self._thread = threading.Thread(target=run, name="vllm-pool-subscriber", daemon=True)
        self._thread.start()

    def frames(self) -> list:
        with self._lock:
            return [frame for _, frame in self.received]

    def mark(self) -> int:
        """A position in the frames: :meth:`frames_since` gives what came after it."""
        with self._lock:
            return len(self.received)

    def frames_since(self, mark: int) -> list:
        with self._lock:
            return [frame for _, frame in self.received[mark:]]

    def settle(self, quiet_s: float = 1.5, timeout_s: float = 30.0) -> None:
        """Wait until no frame has arrived for ``quiet_s`` (the steps of answered requests are in)."""
        deadline = time.monotonic() + timeout_s
        seen, since = self.mark(), time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - since < quiet_s:
            time.sleep(0.2)
            now = self.mark()
            if now != seen:
                seen, since = now, time.monotonic()

    def wait_for(self, kind: str, timeout_s: float = 30.0) -> list:
        """The bodies of frames of ``kind`` so far, waiting (bounded) for a first one."""
        deadline = time.monotonic() + timeout_s
        while True:
            bodies = [f.body for f in self.frames() if f.kind == kind]
            if bodies or time.monotonic() > deadline:
                return bodies
            time.sleep(0.2)

    def write_session(self, path: str | Path) -> Path:
        """Everything received so far as a session file, as ``eagle3scope record`` writes it."""
        from eagle3scope.store import SessionWriter

        with self._lock:
            received = list(self.received)
        with SessionWriter(str(path)) as writer:
            for raw, frame in received:
                writer.add(raw, frame)
        return Path(path)

    def close(self) -> None:
        self.server.stop()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)


class VLLMServerPool:
    """Session-wide: ``pool.get(name, target, draft, ...)`` starts the server ``name`` the first time
    and returns the same :class:`PooledServer` after; :meth:`close` stops them all."""

    def __init__(self, python: Path, log_dir: Path):
        self.python, self.log_dir = python, Path(log_dir)
        self.servers: dict[str, PooledServer] = {}
        self.startup_s: dict[str, float] = {}

    def get(self, name: str, target: Path, draft: Path | None, *, single_process: bool = True,
            env: dict | None = None, **server) -> PooledServer:
        if name in self.servers:
            return self.servers[name]
        from eagle3scope.live.subscriber import Subscriber

        endpoint = fresh_ipc_endpoint("events")
        subscriber = Subscriber([endpoint])  # before the server: its hello and load report come at startup
        srv = VLLMServer(target, draft, python=self.python, env={ENV_ENDPOINT: endpoint, **(env or {})},
                         log_path=self.log_dir / f"{name}.log", startup_timeout=STARTUP_TIMEOUT,
                         single_process=single_process, **server)
        pooled = PooledServer(srv, endpoint)
        pooled.collect(subscriber)
        try:
            srv.start()
        except BaseException:
            pooled.close()
            raise
        self.servers[name] = pooled
        self.startup_s[name] = srv.startup_s
        return pooled

    def close(self) -> None:
        for pooled in self.servers.values():
            pooled.close()
        self.servers.clear()

