"""Per-request accounting: the viewer's own tallies of each request's rounds against what SGLang
counted for it, from the shim's ``finish`` frames (``meta_info``'s ``spec_verify_ct``,
``spec_num_correct_drafts`` and ``spec_correct_drafts_histogram``). The ``accounting-mismatch`` rule
reads it: where a server cannot be tested, the tool still proves its counts every request.

A request is tallied from its start only, as the viewer saw it: its first ``prefill`` step. One whose
start was not seen (the recording began later, a seek, a lost or dropped prefill step) is never
judged, and neither is one during whose life a frame of its publisher may have been lost: the frames
lost in transit and the frames the shim dropped (the finish frame's ``dropped``, else the
heartbeats') must be the same at its finish as at its start. Requests still running when the stream
ends have no finish and are not judged. A round a decode step counts for a request after its finish
(a finished request's extra overlap tick, which SGLang from 0.5.12 discards) is counted apart: the
rule judges it by release. Frames are untrusted: at most :data:`MAX_OPEN` requests are
tallied at once (the oldest are forgotten, and counted), :data:`MAX_KEPT` mismatches kept as evidence.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from eagle3scope.wire.bodies import Finish, Finished

#: requests tallied at once per publisher (a server's running requests; far above a real batch)
MAX_OPEN = 4096
#: mismatching requests kept as evidence (the first ones); the rest are counted
MAX_KEPT = 8
#: characters of a request id kept in the evidence
MAX_RID = 128

class Tally(list):
    """One request's rounds as the steps showed them: its histogram (rounds per number of accepted
    drafts, as SGLang keeps it), from which the rounds and accepted drafts follow, so a step adds one
    count per request; ``lost``: what had been lost when it started."""

    __slots__ = ("lost",)

    def __init__(self, lost: tuple[int, int]) -> None:
        super().__init__()
        self.lost = lost

    def counts(self) -> dict:
        return {"verify_ct": sum(self), "correct_drafts": sum(i * n for i, n in enumerate(self)), "histogram": list(self)}


@dataclass
class Accounting:
    """One publisher's open tallies and the verdicts on the requests that finished."""

    open: dict = field(default_factory=dict)  # rid -> Tally, oldest first
    compared: int = 0  # finished requests judged
    mismatched: int = 0  # ... whose counts differ
    unverifiable: int = 0  # finished while a frame may have been lost
    start_unseen: int = 0  # finished without their start seen
    forgotten: int = 0  # tallies dropped past MAX_OPEN
    examples: list = field(default_factory=list)  # the first MAX_KEPT mismatches: {rid, sglang, eagle3scope}
    first_seq: int | None = None  # the last step before the first mismatching finish
    shim_dropped: int = 0  # the shim's dropped frames as last told (finish frames and heartbeats)
    closed: dict = field(default_factory=dict)  # rids judged or met at their finish, newest MAX_OPEN (oldest first)
    after_finish: int = 0  # rounds steps counted for a request after its finish
    late: list = field(default_factory=list)  # the first MAX_KEPT of them: {rid, seq}
    late_first_seq: int | None = None

    def start(self, rids: list, lost: tuple[int, int]) -> None:
        """A prefill step: tally its requests from here (a request already tallied keeps its tally:
        chunked prefill, a retraction's second prefill)."""
        tallies = self.open
        for rid in rids:
            if rid in tallies:
                continue
            self.closed.pop(rid, None)  # a client may use its own rid again
            if len(tallies) >= MAX_OPEN:
                del tallies[next(iter(tallies))]
                self.forgotten += 1
            tallies[rid] = Tally(lost)

    def count(self, rids: list, accepted: list, seq: int) -> None:
        """A decode step: one round per request, ``accepted`` drafts each (bonus excluded). Inline, no
        call per request: it runs for every request of every step the viewer ingests."""
        if not self.open and not self.closed:
            return
        get, closed = self.open.get, self.closed
        for rid, n in zip(rids, accepted):
            hist = get(rid)
            if hist is None:
                if rid in closed:
                    self._late(rid, seq)
                continue
            if n < len(hist):
                hist[n] += 1
            else:  # SGLang's own way: the list grows to the highest count seen
                hist.extend([0] * (n - len(hist)))
                hist.append(1)

    def finish(self, report: Finish, lost_in_transit: int, dropped: int) -> bool:
        """A finish frame's record; ``lost_in_transit`` and ``dropped``: the publisher's loss
        counters now. True when it brought this publisher's first mismatch."""
        self.shim_dropped = max(self.shim_dropped, dropped, report.dropped or 0)
        now = (lost_in_transit, self.shim_dropped)
        first = not self.mismatched
        for request in report.requests or ():
            rid = request.rid
            tally = self.open.pop(rid, None)
            self._close(rid)
            if tally is None:
                self.start_unseen += 1
            elif now[0] != tally.lost[0] or now[1] > tally.lost[1]:
                self.unverifiable += 1
            else:
                self._judge(request, tally, report.seq)
        return first and self.mismatched > 0

    def lost_marker(self, lost_in_transit: int, dropped: int) -> tuple[int, int]:
        """What a request starting now records: frames lost in transit, frames the shim dropped."""
        self.shim_dropped = max(self.shim_dropped, dropped)
        return lost_in_transit, self.shim_dropped

    def _close(self, rid) -> None:
        closed = self.closed
        if len(closed) >= MAX_OPEN:
            del closed[next(iter(closed))]
        closed[rid] = None

    def _late(self, rid, seq: int) -> None:
        self.after_finish += 1
        if self.late_first_seq is None:
            self.late_first_seq = seq
        if len(self.late) < MAX_KEPT:
            self.late.append({"rid": str(rid)[:MAX_RID], "seq": seq})

    def _judge(self, request: Finished, tally: Tally, seq: int | None) -> None:
        self.compared += 1
        mine = tally.counts()
        theirs = request.counts
        if all(_same(name, theirs[name], mine[name]) for name in theirs):
            return
        self.mismatched += 1
        if self.first_seq is None and type(seq) is int:
            self.first_seq = seq
        if len(self.examples) < MAX_KEPT:
            self.examples.append({"rid": str(request.rid)[:MAX_RID], "sglang": theirs,
                                  "eagle3scope": {name: mine[name] for name in theirs}})


def _same(name: str, theirs, mine) -> bool:
    if name == "histogram":  # trailing zeros say nothing (SGLang's list ends at its highest count)
        return _trimmed(theirs) == _trimmed(mine)
    return theirs == mine


def _trimmed(hist: list) -> list:
    end = len(hist)
    while end and hist[end - 1] == 0:
        end -= 1
    return list(hist[:end])
