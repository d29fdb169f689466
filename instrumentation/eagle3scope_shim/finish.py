"""SGLang's own speculative counts of each request it finishes, published as a ``finish`` frame, so
the viewer can check its per-request tallies of the steps against them (the ``accounting-mismatch``
rule): on a server no test reaches, the tool proves its own counts every request.

The seam is where SGLang emits a generation request's output and marks it finished once
(``req.finished_output``; on the overlap loop's extra tick it skips the request): 0.5.23
``managers/scheduler_components/output_streamer.py`` ``SchedulerOutputStreamer._stream_output_generation``
(every path reaches it: ``stream_output``, aborts, the idle batch), and up to 0.5.10 (v1 and v2 workers
alike) ``managers/scheduler_output_processor_mixin.py`` ``SchedulerOutputProcessorMixin.stream_output_generation``.
The counts are the ``Req``'s host integers and its short histogram list, which SGLang copies into
``meta_info`` at the same call; names per release in :data:`COUNTS`. Nothing is read from a device, and
nothing is built on a round where no request finishes beyond one empty list.
"""

from __future__ import annotations

from eagle3scope.wire import bodies
from eagle3scope_shim.guard import around

#: wire field -> the ``Req`` attributes holding it, newest release first (0.5.23 schedule_batch.py;
#: 0.5.9-0.5.10 spec_accepted_tokens and spec_acceptance_histogram; releases before 0.5.9 keep no histogram)
COUNTS = {
    "verify_ct": ("spec_verify_ct",),
    "correct_drafts": ("spec_num_correct_drafts", "spec_accepted_tokens"),
    "histogram": ("spec_correct_drafts_histogram", "spec_acceptance_histogram"),
}
#: a histogram longer than this (hostile or corrupt state) is not sent: the wire bound
MAX_HISTOGRAM = bodies.MAX_DRAFT_TOKENS + 1


def make_finish(shim, seam):
    def pre(self, reqs, *args, **kwargs):
        if shim.publisher is None:
            return None
        # Req.finished() is this test (0.5.10-0.5.23 schedule_batch.py), read without a call per request
        ending = [req for req in reqs if req.finished_reason is not None and not req.finished_output]
        return ending or None

    def post(ending, result, *args, **kwargs):
        if ending is None:
            return
        done = [counts(req) for req in ending if req.finished_output]  # SGLang emitted it (not a skipped req)
        if done:
            pub = shim.publisher
            pub.submit("finish", dict(seq=shim.seq, dropped=pub.dropped, requests=done))

    return around(shim, seam, pre, post, hot=True, traceable=False)


def counts(req) -> dict:
    """One finished request's counts as SGLang reports them in ``meta_info`` (fields it lacks left out)."""
    out = dict(rid=str(req.rid))
    for field, names in COUNTS.items():
        value = next((getattr(req, name) for name in names if hasattr(req, name)), None)
        if field == "histogram":
            if isinstance(value, list) and len(value) <= MAX_HISTOGRAM:
                out[field] = [int(x) for x in value]
        elif value is not None:
            out[field] = int(value)
    return out
