"""Load-time facts: what the hooks learn while SGLang builds its workers, loads the draft and
captures graphs, gathered in whatever process does so (the scheduler's) and read later by the
load report, the hello, the aux channel and the caller reads of replayed passes. Apart from the
hook plan (:class:`eagle3scope_shim.shim_state.HookPlan`): nothing here says which hook does what, and
nothing changes per step."""

from __future__ import annotations

import collections
from typing import Any


class LoadFacts:
    def __init__(self) -> None:
        self.draft_loads: dict[int, Any] = {}  # id(draft model) -> its loadreport.LoadWatch
        self.aux_calls: collections.deque = collections.deque(maxlen=64)  # set_eagle3 calls, latest last
        self.aux_config: dict[int, dict] = {}  # id(model) -> SGLang's resolved aux settings
        self.workers: list[tuple[str, Any, Any, Any]] = []  # (kind, worker, target model, draft model)
        self.draft_embed_width: int | None = None  # fc applies iff the incoming width differs from it
        self.draft_fc_always = False  # an EAGLE-1/2 draft: fc applies on every pass (seams.FC_ALWAYS)
        # graphs (eagle3scope_shim.graph_capture): what each draft graph captured, the target's graph aux set
        self.graphs: dict[tuple[str, int], list] = {}  # (mode, bs) -> [width, fc]
        self.graph_for: dict[tuple[str, int], int] = {}  # (mode, raw bs) -> bs of the graph it replays
        self.target_graph_aux: dict | None = None  # {"on", "layers"} at the target's last graph capture

