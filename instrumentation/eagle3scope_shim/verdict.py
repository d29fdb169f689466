"""The verdict where the server's users already look: SGLang's own log and, with ``--enable-metrics``,
its own ``/metrics``.

The rules of :mod:`eagle3scope.wire.contracts` (the viewer judges the same functions) are judged
here over this server's load report, hello, applied aux-layer change and step bodies: once the load
report is known (scheduler init, :func:`eagle3scope_shim.loadreport.publish_startup`) and again after
the first :data:`FIRST_STEPS` decode steps, on the publisher thread as it builds their bodies; never in
a hook on the scheduler's thread. Each broken contract is one line on the ``eagle3scope`` logger (SGLang's
handlers and format): rule, severity, title, the evidence in one line, the fix and the viewer command;
"no contract broken" once while all hold. Later judgements, at most one per :data:`REJUDGE_S`, write
only what changed. Strings from checkpoints and configs pass :func:`eagle3scope.wire.untrusted.terminal`
(controls and newlines as visible escapes). ``EAGLE3SCOPE_VERDICT_LOG=0`` keeps the lines out.

The gauges live in SGLang's prometheus registry the multiprocess way SGLang's own scheduler collectors
do (``PROMETHEUS_MULTIPROC_DIR``, set by SGLang before it spawns the schedulers; its ``/metrics`` reads
every process's files), with bounded labels: rule and severity, ``fc`` applied or skipped.
"""

from __future__ import annotations

import json
import logging
import os
import time

from eagle3scope.wire import contracts, env, untrusted
from eagle3scope.wire import bodies
from eagle3scope.wire.bodies import is_decode_step
from eagle3scope.wire.contracts import NO_LOAD, Contract, FcTally
from eagle3scope.wire.schema import FEATURE_CARRYING_MODES

log = logging.getLogger("eagle3scope")

#: decode steps after which the verdict is given again, with what the steps showed
FIRST_STEPS = 8
#: the least time between two later judgements (each writes only what changed)
REJUDGE_S = 60.0
#: the least time between two refreshes of the gauges
GAUGES_S = 1.0
#: evidence longer than this is cut (the line stays one readable line)
EVIDENCE_CHARS = 400
VALUE_CHARS = 120
#: widths kept per mode (fc-bypassed names the widths seen; a hostile server cannot grow the set)
MAX_WIDTHS = 8
_LEVELS = {"error": logging.ERROR, "warning": logging.WARNING}


class PassCounts(FcTally):
    """A feature-carrying mode's draft passes, with the widths seen (at most :data:`MAX_WIDTHS`)."""

    __slots__ = ("widths",)

    def __init__(self) -> None:
        super().__init__()
        self.widths: dict[int, int] = {}

    def add(self, seq: int, width, fc: bool, n: int, replayed: bool) -> None:
        self.count(seq, fc, n, replayed)
        if width in self.widths or len(self.widths) < MAX_WIDTHS:
            self.widths[width] = self.widths.get(width, 0) + n


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def evidence_line(evidence: dict) -> str:
    """``key=value, ...`` on one line (values as JSON), cut to :data:`EVIDENCE_CHARS`; not yet escaped."""
    parts = []
    for key, value in evidence.items():
        text = value if isinstance(value, str) else json.dumps(value, default=str, separators=(",", ":"), ensure_ascii=False)
        parts.append(f"{key}={_clip(text, VALUE_CHARS)}")
    return _clip(", ".join(parts), EVIDENCE_CHARS)


class Verdict:
    """This process's verdict (``Shim.verdict``). Every entry point fails closed (a log line at most)."""

    def __init__(self) -> None:
        self.logging = os.environ.get(env.VERDICT_LOG, "").strip().lower() not in ("0", "false", "no", "off")
        self.load = None  # wire.bodies.Load, once known
        self.algorithm = None
        self.applied: bodies.Config | None = None  # the latest applied aux-layer change
        self.capture: bodies.Capture | None = None  # the latest step's {on, layers} since that change
        self.passes: dict[str, PassCounts] = {}
        self.decode_steps = 0
        self.more = ""  # the viewer command, with this publisher's endpoint
        self.said: dict[str, str] = {}  # rule -> severity of the violations written and not healed since
        self.clean_said = False
        self.judged = False  # given at load
        self.next_judgement: float | None = None  # monotonic; None until the first decode steps' verdict
        self.gauges = None  # _Gauges with --enable-metrics
        self.next_gauges = 0.0
        self.publisher = None

    # -- entry points -------------------------------------------------------------------------
    def at_load(self, hello: dict, load: dict | None, config: dict | None, *, publisher, metrics: bool) -> None:
        """Scheduler init, once the startup bodies are built: the first verdict, and the gauges."""
        try:
            self.algorithm = bodies.read("hello", hello).args.algorithm
            self.load = bodies.read("load", load) if load else None
            self.applied = bodies.read("config", config) if config and config.get("applied") else None
            self.publisher = publisher
            self.more = f"eagle3scope watch --connect {publisher.endpoint}" if publisher is not None else "eagle3scope watch"
            if metrics and "PROMETHEUS_MULTIPROC_DIR" in os.environ:
                self.gauges = _gauges()
            self.judge("at load")
            self.judged = True
        except Exception as exc:
            log.warning("eagle3scope: no verdict at load: %s", untrusted.terminal(f"{type(exc).__name__}: {exc}"))

    def applied_change(self, config: dict) -> None:
        """An aux-layer change applied (scheduler thread): what steps captured before says nothing now."""
        self.applied, self.capture = bodies.read("config", config), None

    def observe(self, body: dict) -> None:
        """Publisher thread, each step body as it is built: count, and judge when it is time."""
        try:
            seq = body.get("seq", 0)
            for p in body.get("passes") or ():
                mode = p.get("mode")
                if mode in FEATURE_CARRYING_MODES:
                    counts = self.passes.get(mode) or self.passes.setdefault(mode, PassCounts())
                    counts.add(seq, p.get("width"), bool(p.get("fc")), p.get("n", 1), p.get("replayed") is True)
            capture = body.get("capture")
            if capture is not None:
                self.capture = bodies.Capture(on=capture.get("on"), layers=capture.get("layers"))
            if is_decode_step(body):  # what check and --steps count as a decode step
                self.decode_steps += 1
            if not self.judged:
                return
            now = time.monotonic()
            if self.next_judgement is None:
                if self.decode_steps >= FIRST_STEPS:
                    self.judge(f"after {self.decode_steps} decode steps")
                    self.next_judgement = now + REJUDGE_S
            elif now >= self.next_judgement:
                self.judge(f"after {self.decode_steps} decode steps", changes_only=True)
                self.next_judgement = now + REJUDGE_S
            if self.gauges is not None and now >= self.next_gauges:
                self.next_gauges = now + GAUGES_S
                self.gauges.counts(self)
        except Exception:
            pass  # the step is published whatever happens here

    # -- the judgement ------------------------------------------------------------------------
    def capture_on(self) -> bool | None:
        return contracts.capture_in_effect(self.load, self.capture)

    def judgements(self) -> tuple[tuple[Contract, dict | None], ...]:
        """Each contract judged here, in the viewer's order, with its evidence (None: it holds)."""
        load, known = self.load or NO_LOAD, self.load
        capture_on = self.capture_on()
        layers = contracts.aux_layers_in_effect(known, None if self.capture is None else self.capture.layers, self.applied)
        return (
            (contracts.AUX_CAPTURE_OFF, contracts.aux_capture_off(load, self.algorithm, capture_on)),
            (contracts.FC_BYPASSED, contracts.fc_bypassed(load, self.algorithm, self.passes)),
            (contracts.WEIGHTS_DROPPED, contracts.weights_dropped(load)),
            (contracts.D2T_ABSOLUTE, contracts.d2t_absolute(load)),
            (contracts.D2T_MISSING, contracts.d2t_missing(known)),
            (contracts.LM_HEAD_MISMATCH, contracts.lm_head_mismatch(load)),
            (contracts.AUX_LAYERS_MISMATCH, contracts.aux_layers_mismatch(known, layers, capture_on)),
        )

    def judge(self, when: str, changes_only: bool = False) -> None:
        judged = self.judgements()
        # an info finding (layers the draft's config leaves unstated) is a fact, not a broken contract
        found = [(c, severity, e) for c, e in judged if e is not None
                 for severity in (c.severity_of(e),) if severity != "info"]
        now = {c.id: severity for c, severity, _ in found}
        if self.gauges is not None:
            self.gauges.violations(self.said, now)
            self.gauges.counts(self)
        for contract, severity, evidence in found:
            if changes_only and self.said.get(contract.id) == severity:
                continue
            self.write(_LEVELS.get(severity, logging.INFO),
                       f"eagle3scope: CONTRACT BROKEN {contract.id} ({severity}, {when}): {contract.title}. "
                       f"Evidence: {evidence_line(evidence)}. Fix: {contract.fix} More: {self.more}")
        if not found and not self.clean_said:
            self.write(logging.INFO, f"eagle3scope: no contract broken ({when}: "
                                     f"{', '.join(c.id for c, _ in judged)}). More: {self.more}")
        self.clean_said = not found
        self.said = now

    def write(self, level: int, line: str) -> None:
        if self.logging:
            log.log(level, "%s", untrusted.terminal(line))


class _Gauges:
    """The shim's gauges in SGLang's registry (multiprocess files: ``live*`` modes combine the DP
    schedulers' values, a dead one's files aside)."""

    def __init__(self) -> None:
        from prometheus_client import Gauge  # late: only after SGLang set PROMETHEUS_MULTIPROC_DIR, as its collectors do

        self.violation = Gauge(
            "eagle3scope_server_violation_active",
            "Contract rules the shim judges in the server: 1 while broken, 0 once healed (rule, severity).",
            labelnames=("rule", "severity"), multiprocess_mode="livemax")
        self.capture_on = Gauge(
            "eagle3scope_server_aux_capture_on",
            "1 while the target captures aux hidden states for the draft, 0 when not.", multiprocess_mode="livemin")
        self.fc = Gauge(
            "eagle3scope_server_fc_forwards",
            "Draft forwards that should carry the target's aux features, by whether fc was applied or skipped.",
            labelnames=("fc",), multiprocess_mode="livesum")
        self.dropped = Gauge("eagle3scope_server_frames_dropped",
                             "Frames the shim dropped (its queue full or the socket refusing).", multiprocess_mode="livesum")

    def violations(self, before: dict[str, str], now: dict[str, str]) -> None:
        for rule, severity in before.items():
            if now.get(rule) != severity:
                self.violation.labels(rule, severity).set(0)
        for rule, severity in now.items():
            self.violation.labels(rule, severity).set(1)

    def counts(self, verdict: Verdict) -> None:
        self.fc.labels("applied").set(sum(p.fc_applied for p in verdict.passes.values()))
        self.fc.labels("skipped").set(sum(p.fc_skipped for p in verdict.passes.values()))
        capture_on = verdict.capture_on()
        if capture_on is not None:
            self.capture_on.set(1 if capture_on else 0)
        if verdict.publisher is not None:
            self.dropped.set(verdict.publisher.dropped)


def _gauges() -> _Gauges | None:
    try:
        return _Gauges()
    except Exception as exc:  # the log line does not depend on them
        log.warning("eagle3scope: no verdict in /metrics: %s", untrusted.terminal(f"{type(exc).__name__}: {exc}"))
        return None

