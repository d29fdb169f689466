"""A steady stream of requests against a running server, so the demo always has steps to show.

Each worker thread sends one request at a time (``server.generate``: SGLang's ``/generate``, vLLM's
``/v1/completions``); ``concurrency`` workers make the scheduler batch. Requests cycle through the
prompts, through ``temperatures`` (greedy only unless told; temperature > 0 takes the engine's sampling
verify) and through ``constraints`` (grammar kinds of :mod:`eagle3scope.demo.constraints`; ``None``: a
free request). Results (the engine's per-request report, SGLang's ``meta_info`` or vLLM's ``metrics``,
with the temperature and constraint asked) are kept, bounded, so tests can compare the shim's events
with what the engine itself reports.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from typing import Sequence

from eagle3scope.demo import constraints as grammars
from eagle3scope.demo.server import EngineServer, ServerError


class Workload:
    def __init__(self, server: EngineServer, prompts: Sequence[str], *, concurrency: int = 2,
                 max_new_tokens: int = 64, keep: int = 4096,
                 temperatures: Sequence[float] = (0.0,), constraints: Sequence[str | None] = (None,)) -> None:
        if not prompts or not temperatures or not constraints:
            raise ValueError("the workload needs at least one prompt, one temperature and one constraint (None: free)")
        self.server = server
        self.prompts = list(prompts)
        self.concurrency = concurrency
        self.max_new_tokens = max_new_tokens
        self.temperatures = list(temperatures)
        self.constraints = list(constraints)
        self.results: deque[dict] = deque(maxlen=keep)
        self.errors: deque[str] = deque(maxlen=16)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._next = itertools.count()
        self._lock = threading.Lock()

    def start(self) -> "Workload":
        for i in range(self.concurrency):
            thread = threading.Thread(target=self._run, name=f"eagle3scope-workload-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                i = next(self._next)
            prompt = self.prompts[i % len(self.prompts)]
            # The temperature cycle is offset once per round of prompts, so that every prompt is
            # asked at every temperature.
            turn = i + i // len(self.prompts)
            temperature = self.temperatures[turn % len(self.temperatures)]
            # and the constraint changes once per round of temperatures: every kind at every temperature
            constraint = self.constraints[turn // len(self.temperatures) % len(self.constraints)]
            sampling = grammars.sampling_params(constraint, prompt) if constraint else None
            try:
                out = self.server.generate(prompt, max_new_tokens=self.max_new_tokens, temperature=temperature,
                                           timeout=120, sampling=sampling)
                self.results.extend({**r, "temperature": temperature, "prompt": prompt, "constraint": constraint}
                                    for r in out)
            except ServerError as exc:
                self.errors.append(str(exc).splitlines()[0])
                if self.server.proc is None or self.server.proc.poll() is not None:
                    return
                self._stop.wait(1.0)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)

    def __enter__(self) -> "Workload":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
