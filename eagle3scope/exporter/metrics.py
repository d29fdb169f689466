"""The exporter's metrics: a prometheus-client collector that reads the fleet's analysis state.

Every value is computed at scrape time from the same :class:`SessionState` figures ``check`` and
the TUI show (nothing is counted twice in two places), and written by ``prometheus-client``.

Labels: every per-publisher series carries ``publisher`` (the shim's ``host:pid:dpN``), ``dp_rank``,
``model`` (SGLang's ``model_path``, as SGLang's own ``model_name`` label) and ``sglang_version``,
all from the publisher's ``hello``; a publisher is exported once its hello arrived (the shim re-sends
it every few seconds). Further labels are bounded by the shim's vocabulary: ``position`` (1..k),
``mode`` (forward modes), ``fc``, ``rule`` / ``severity`` (the rule ids), ``seam`` / ``status``,
``cause``. Nothing is labelled per request.

Per-position acceptance: ``eagle3scope_draft_accepted_total{position=i}`` counts request-steps
whose draft at position i was accepted, ``eagle3scope_draft_reached_total{position=i}`` those where
it was judged at all (every earlier draft accepted), so ``rate(accepted) / rate(reached)`` is the
conditional rate ``check`` and the TUI print, and ``rate(accepted) / rate(request_steps)`` the
unconditional one vLLM's ``num_accepted_tokens_per_pos / num_drafts`` gives.
"""

from __future__ import annotations

from typing import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from eagle3scope.analysis import PublisherView, SessionState, facts
from eagle3scope.exporter.fleet import Fleet

PUBLISHER_LABELS = ("publisher", "dp_rank", "model", "sglang_version")


def publisher_labels(pub: PublisherView) -> list[str] | None:
    """The label values of one publisher, or None before its hello."""
    hello = pub.hello
    if hello is None:
        return None
    return [pub.src, str(hello.publisher_index or 0), str(hello.args.model_path or ""), str(hello.sglang_release or "")]


def _ids(layers) -> str:
    if layers is None:
        return "default"
    return ",".join(map(str, layers)) or "none"


def _aux_layers(pub: PublisherView) -> tuple[str, str]:
    """(configured ids, captured layers) in effect."""
    layers = facts.aux_layers(pub)
    return _ids(layers.configured), _ids(layers.captured)


class _Families:
    """The metric families of one scrape, filled publisher by publisher."""

    def __init__(self) -> None:
        L = list(PUBLISHER_LABELS)
        self.info = InfoMetricFamily("eagle3scope_publisher", "What each publisher said in its hello.",
                                     labels=L)
        self.steps = CounterMetricFamily("eagle3scope_steps", "Decode steps (speculative rounds) seen.", labels=L)
        self.request_steps = CounterMetricFamily(
            "eagle3scope_request_steps", "Request-steps seen: one request in one decode step (one draft chain).",
            labels=L)
        self.reached = CounterMetricFamily(
            "eagle3scope_draft_reached",
            "Request-steps whose draft at this position was judged (every earlier draft accepted).",
            labels=L + ["position"])
        self.accepted = CounterMetricFamily(
            "eagle3scope_draft_accepted", "Request-steps whose draft at this position was accepted.",
            labels=L + ["position"])
        self.accept_length = HistogramMetricFamily(
            "eagle3scope_accept_length",
            "Tokens committed per request-step, bucketed by accepted drafts + 1 (the bonus token); "
            "_sum counts the bonus tokens actually committed, so _sum/_count is check's mean acceptance length.",
            labels=L)
        self.rolling = GaugeMetricFamily(
            "eagle3scope_accept_length_rolling", "Mean acceptance length over the last 512 request-steps.", labels=L)
        self.forwards = CounterMetricFamily(
            "eagle3scope_draft_forwards", "Draft-model forwards by forward mode, with fc applied or skipped.",
            labels=L + ["mode", "fc"])
        self.capture_on = GaugeMetricFamily(
            "eagle3scope_aux_capture_on", "1 while the target captures aux hidden states for the draft, 0 when not.",
            labels=L)
        self.capture_off_steps = CounterMetricFamily(
            "eagle3scope_aux_capture_off_steps", "Steps that ran with aux capture off.", labels=L)
        self.aux_layers = InfoMetricFamily(
            "eagle3scope_aux_layers", "Aux-layer ids configured and target layers captured, now.",
            labels=L + ["configured", "captured"])
        self.violation = GaugeMetricFamily(
            "eagle3scope_violation_active",
            "Contract rules that fired for this publisher: 1 while the violation holds, 0 once it healed.",
            labels=L + ["rule", "severity"])
        self.fired = CounterMetricFamily(
            "eagle3scope_violations_fired", "Times a contract rule went from holding to violated.",
            labels=L + ["rule", "severity"])
        self.frames = CounterMetricFamily("eagle3scope_frames_received", "Frames received from the publisher.",
                                          labels=L)
        self.lost = CounterMetricFamily(
            "eagle3scope_frames_lost",
            "Frames that never arrived: cause=transit (holes in the frame counter), cause=shim (dropped by the shim).",
            labels=L + ["cause"])
        self.hook_failures = CounterMetricFamily(
            "eagle3scope_hook_failures", "Failures inside the shim's hooks (the server kept running).", labels=L)
        self.shim_seconds = CounterMetricFamily(
            "eagle3scope_shim_seconds",
            "Wall time the shim's hooks spent on the scheduler thread, per seam (SGLang's wrapped calls excluded).",
            labels=L + ["seam"])
        self.round_seconds = CounterMetricFamily(
            "eagle3scope_shim_round_seconds",
            "Wall time of the step seams' calls, their hooks included (the rounds eagle3scope_shim_seconds relates to).",
            labels=L)
        self.hooks = GaugeMetricFamily("eagle3scope_hook_status", "1 for each seam's current hook status.",
                                       labels=L + ["seam", "status"])
        self.last_frame = GaugeMetricFamily(
            "eagle3scope_publisher_last_frame_timestamp_seconds", "Send time of the publisher's latest frame.",
            labels=L)

    def add(self, state: SessionState, pub: PublisherView, labels: list[str]) -> None:
        hello = pub.hello  # publisher_labels: not None
        args = hello.args
        self.info.add_metric(labels, {
            "draft": str(args.draft_model_path or ""), "algorithm": str(args.algorithm or ""),
            "num_steps": str(args.num_steps or ""), "topk": str(args.topk or ""),
            "num_draft_tokens": str(args.num_draft_tokens or ""), "worker": str(hello.worker or ""),
            "shim_version": str(hello.shim_version or ""), "host": str(hello.host or ""),
        })
        acc = pub.acceptance
        total = acc.total
        self.steps.add_metric(labels, total.steps)
        self.request_steps.add_metric(labels, total.n)
        k = max(facts.num_steps(pub) or 0, acc.k)
        hist = total.hist
        at_least = [sum(hist[j:]) for j in range(k + 2)]  # request-steps with >= j drafts accepted
        reached, accepted = total.positions(k)
        for i in range(1, k + 1):
            self.reached.add_metric(labels + [str(i)], reached[i - 1])
            self.accepted.add_metric(labels + [str(i)], accepted[i - 1])
        buckets = [(str(length), total.n - at_least[length]) for length in range(1, k + 2)]
        self.accept_length.add_metric(labels, buckets + [("+Inf", total.n)], sum_value=total.tokens)
        if acc.mean_accept_length is not None:
            self.rolling.add_metric(labels, acc.mean_accept_length)
        for mode, passes in pub.passes.items():
            self.forwards.add_metric(labels + [str(mode), "applied"], passes.fc_applied)
            self.forwards.add_metric(labels + [str(mode), "skipped"], passes.fc_skipped)
        capture_on = facts.capture_on(pub)
        if capture_on is not None:
            self.capture_on.add_metric(labels, 1 if capture_on else 0)
        self.capture_off_steps.add_metric(labels, pub.capture_off_steps)
        if pub.load is not None:
            self.aux_layers.add_metric(labels + list(_aux_layers(pub)), {})
        for v in state.violations():
            if v.run != pub.run:  # a run ended by a restart under the same src: its series ended with it
                continue
            self.violation.add_metric(labels + [v.id, v.severity], 1 if v.active else 0)
        loss = facts.loss(pub)
        self.frames.add_metric(labels, loss.frames)
        self.lost.add_metric(labels + ["transit"], loss.lost_in_transit)
        self.lost.add_metric(labels + ["shim"], loss.dropped_by_shim)
        self.hook_failures.add_metric(labels, loss.hook_failures)
        cost = facts.shim_cost(pub)
        for seam, seconds in cost.seconds.items():
            self.shim_seconds.add_metric(labels + [str(seam)], seconds)
        if cost.seconds:
            self.round_seconds.add_metric(labels, cost.round_seconds)
        for seam, status in facts.seam_statuses(pub).items():
            self.hooks.add_metric(labels + [str(seam), str(status)], 1)
        if pub.last_seen_t is not None:
            self.last_frame.add_metric(labels, pub.last_seen_t / 1e9)

    def add_fired(self, fleet: Fleet, labels_of: dict[str, list[str]]) -> None:
        for (src, rule, severity), times in fleet.fired.items():
            if src in labels_of:
                self.fired.add_metric(labels_of[src] + [rule, severity], times)

    def __iter__(self) -> Iterator:
        return iter(vars(self).values())


class FleetCollector(Collector):
    """Registered on the exporter's own registry; ``collect`` runs once per scrape."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet

    def collect(self):
        fleet = self.fleet
        families = _Families()
        publishers = GaugeMetricFamily("eagle3scope_exporter_publishers",
                                       "Publishers known to the exporter (with and without a hello yet).")
        forgotten = CounterMetricFamily("eagle3scope_exporter_forgotten_publishers",
                                        "Publishers dropped after staying silent longer than --forget-after.")
        bad = CounterMetricFamily("eagle3scope_exporter_bad_frames", "Frames that could not be decoded.")
        refused = CounterMetricFamily("eagle3scope_exporter_refused_frames",
                                      "Frames from new publishers not tracked: --max-publishers were tracked already.")
        with fleet.lock:
            fleet.expire()
            labels_of = {}
            for src, state in fleet.states.items():
                pub = state.publishers.get(src)
                labels = publisher_labels(pub) if pub is not None else None
                if labels is None:
                    continue
                labels_of[src] = labels
                families.add(state, pub, labels)
            families.add_fired(fleet, labels_of)
            publishers.add_metric([], len(fleet.states))
            forgotten.add_metric([], fleet.forgotten)
            bad.add_metric([], fleet.bad_frames)
            refused.add_metric([], fleet.refused_frames)
        yield from families
        yield publishers
        yield forgotten
        yield bad
        yield refused
