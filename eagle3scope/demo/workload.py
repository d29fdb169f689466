"""A steady stream of requests against a running server, so the demo always has steps to show.

Each worker thread sends one ``/generate`` at a time; ``concurrency`` workers make the scheduler
batch. Requests cycle through the prompts and through ``temperatures`` (greedy only unless told;
temperature > 0 takes SGLang's sampling verify). Results (SGLang's ``meta_info`` per request, with
the temperature asked) are kept, bounded, so tests can compare the shim's events with what SGLang
itself reports.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from typing import Sequence

from eagle3scope.demo.server import SGLangServer, ServerError


class Workload:
    def __init__(self, server: SGLangServer, prompts: Sequence[str], *, concurrency: int = 2,
                 max_new_tokens: int = 64, keep: int = 4096,
                 temperatures: Sequence[float] = (0.0,)) -> None:
        if not prompts or not temperatures:
            raise ValueError("the workload needs at least one prompt and one temperature")
        self.server = server
        self.prompts = list(prompts)
        self.concurrency = concurrency
        self.max_new_tokens = max_new_tokens
        self.temperatures = list(temperatures)
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
            temperature = self.temperatures[(i + i // len(self.prompts)) % len(self.temperatures)]
            try:
                out = self.server.generate(prompt, max_new_tokens=self.max_new_tokens, temperature=temperature,
                                           timeout=120)
                self.results.extend({**r, "temperature": temperature, "prompt": prompt} for r in out)
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
