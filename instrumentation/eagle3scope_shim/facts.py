"""Load-time facts: what the hooks learn while SGLang builds its workers, loads the draft and
captures graphs, gathered in whatever process does so (the scheduler's) and read later by the
load report, the hello, the aux channel and the caller reads of replayed passes. Apart from the
process state (:mod:`eagle3scope_shim.state`): nothing here changes per step."""

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
        #: no draft pass can replay a graph and the draft-forward hook was taken out: the callers add
        #: every pass as eager (hooks._detach_counting_forwards)
        self.forwards_at_callers = False
        #: ... and the v2 draft hook too: verify's hook reads the draft's tokens and adds its passes at the
        #: width the step's hook read, the draft timed from the step's start to verify's
        self.draft_at_verify = False
        #: ... and the v2 draft-extend hook: verify's hook reads the width the extend gets and adds its
        #: pass, the extend timed from verify's end to the step's
        self.extend_at_verify = False
        #: pipeline parallelism: the last stage verifies the draft relayed with the batch, then drafts
        #: the next round (SGLang's PP tail draft), so verify's hook snapshots the draft and the draft
        #: hook does not (read at the first step)
        self.tail_draft = False
        #: the scheduler runs no overlap loop, so no round is discarded and the commit hook was taken
        #: out: a step is published as it ends (hooks._detach_commit)
        self.published_at_step = False
        # graphs (eagle3scope_shim.graphs): what each draft graph captured, the target's graph aux set
        self.graphs: dict[tuple[str, int], list] = {}  # (mode, bs) -> [width, fc]
        self.graph_for: dict[tuple[str, int], int] = {}  # (mode, raw bs) -> bs of the graph it replays
        self.target_graph_aux: dict | None = None  # {"on", "layers"} at the target's last graph capture


FACTS = LoadFacts()
