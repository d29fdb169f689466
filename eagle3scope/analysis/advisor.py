"""What to run instead: predicted accept length and throughput for other ``--speculative-num-steps``.

A chain draft (top-k 1) proposes the same token at position i whatever the number of steps, and
verification accepts the longest matching prefix (greedy) or judges each position given the earlier
ones (SGLang's target-only rejection sampling): a request-step that accepted ``a`` drafts at ``K``
steps would have accepted ``min(a, k)`` at ``k <= K``. So the recorded histogram predicts every
shallower setting exactly, up to sampling error; deeper settings were never observed and are not
predicted. Throughput needs a time model: fitted here from the rounds' own times (draft time per
draft step against batch size, verify and draft-extend time against the tokens they process), with
its fit error. The device times a CUDA shim records (``*_device_ms``) are used where the rounds carry
them; host times otherwise, except on a server that replays CUDA graphs or runs the overlap loop:
there the host times are launch times, so only acceptance is advised, and the reason says so. A
model that does not fit (:data:`MAX_FIT_ERROR`) gives no throughput advice either, and a fitting
one's error widens the gain's interval beside the bootstrap's. Trees (top-k > 1) are not predicted:
pruning a tree needs the per-node scores, which the step frame does not carry.

Pure functions over :class:`RoundLog`: ``eagle3scope advise`` feeds one a frame at a time (memory
bounded by :data:`ROUNDS_KEPT` rounds per publisher); the analysis state keeps one per publisher
view (fewer rounds), which the TUI's advisor line and panel advise from.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field

import msgspec

from eagle3scope.wire import Frame
from eagle3scope.wire.bodies import Observable, ServerArgs, Step

#: request-steps needed before a recommendation is made (the rates' standard error is then ~0.02)
MIN_REQUEST_STEPS = 400
#: bootstrap resamples behind the gain's confidence interval (seeded: the same file, the same advice)
BOOTSTRAP = 200
#: rounds a log keeps per publisher (the newest); the bootstrap draws from at most this many
ROUNDS_KEPT = 16384
#: consecutive blocks of rounds the bootstrap resamples
BLOCKS = 40
#: gains inside the interval's noise are not worth a restart
MIN_GAIN = 0.02
#: a time model whose fit error (a round's RMS residual over the mean round time) exceeds this
#: predicts nothing: its residuals are as large as the times it models (bursts, mixed prompts,
#: chunked prefill). The real CPU engine's host times on a loaded 2-core VM fitted at 78 % (BENCHMARKS.md).
MAX_FIT_ERROR = 1.0


class Round(msgspec.Struct, frozen=True, gc=False):
    """What the advisor keeps of one decode step: its acceptance and its times per clock (a Struct:
    built once per decode step on ingest, in C)."""

    accepted: list[int]
    bonus: list[int]
    draft_ms: float | None
    verify_ms: float | None
    extend_ms: float | None
    num_steps: int | None
    draft_device_ms: float | None
    verify_device_ms: float | None
    extend_device_ms: float | None

    @classmethod
    def untimed(cls, accepted: list[int], bonus: list[int], num_steps: int | None) -> Round:
        """A round without times (a baseline comparison needs no time model)."""
        return cls(accepted, bonus, None, None, None, num_steps, None, None, None)

    @classmethod
    def of(cls, step: Step) -> Round:
        return cls(step.accepted, step.bonus, step.draft_ms, step.verify_ms, step.extend_ms, step.num_steps,
                   step.draft_device_ms, step.verify_device_ms, step.extend_device_ms)

    def times(self, device: bool) -> tuple:
        """(draft, verify, draft-extend) ms on one clock."""
        if device:
            return self.draft_device_ms, self.verify_device_ms, self.extend_device_ms
        return self.draft_ms, self.verify_ms, self.extend_ms

    @property
    def device_timed(self) -> bool:
        return self.draft_device_ms is not None or self.verify_device_ms is not None or self.extend_device_ms is not None


@dataclass
class RoundLog:
    """The newest decode rounds of one publisher and the setting they ran at.

    Each round is kept as a :class:`Round` of the validated step's own values: building it is all
    that ingest pays (the analysis state feeds one per step); :meth:`Sums.add` reads it when advising. ``cuda_graph``, ``overlap`` and ``device_timings`` are
    what the hello said (None: it did not say), which decide whether host times can be trusted.
    """

    num_steps: int | None = None
    topk: int | None = None
    num_draft_tokens: int | None = None
    rounds: deque = field(default_factory=lambda: deque(maxlen=ROUNDS_KEPT))
    seen: int = 0  # rounds ever added (the deque keeps the newest ones)
    cuda_graph: bool | None = None
    overlap: bool | None = None
    device_timings: bool | None = None

    def add_frame(self, frame: Frame) -> None:
        """Take a validated frame: a hello sets the setting, a decode step adds a round."""
        if frame.kind == "hello":
            hello = frame.record
            self.add_hello(hello.args, hello.observable)
        elif frame.kind == "step" and frame.record.is_decode_step:
            self.add_step(frame.record)

    def add_hello(self, args: ServerArgs, observable: Observable) -> None:
        """The setting from a hello's server arguments and what its ``observable`` says of the timings."""
        self.num_steps = _positive(args.num_steps) or self.num_steps
        self.topk = _positive(args.topk) or self.topk
        self.num_draft_tokens = _positive(args.num_draft_tokens) or self.num_draft_tokens
        self.cuda_graph = _flag(args.cuda_graph, self.cuda_graph)
        self.overlap = _flag(args.overlap_schedule, self.overlap)
        self.device_timings = _flag(observable.device_timings, self.device_timings)

    def add_step(self, step: Step) -> None:
        """A validated decode step's round."""
        self.rounds.append(Round.of(step))
        self.seen += 1

    def copy(self) -> "RoundLog":
        """A snapshot to advise from outside the lock its feeder holds (the rounds' values are never changed)."""
        return RoundLog(self.num_steps, self.topk, self.num_draft_tokens,
                        deque(self.rounds, maxlen=self.rounds.maxlen), self.seen, self.cuda_graph, self.overlap,
                        self.device_timings)

    def launch_bound(self) -> str | None:
        """Why host times would time launches rather than work (graph replays, the overlap loop), or None."""
        why = [name for name, on in (("replays CUDA graphs", self.cuda_graph), ("runs the overlap loop", self.overlap))
               if on]
        return " and ".join(why) or None

    @property
    def budgets(self) -> set:
        """The kept rounds' own num_steps (adaptive steps vary it; validated <= 1024)."""
        return {r.num_steps for r in self.rounds if r.num_steps is not None}


def _positive(value: object) -> int | None:
    return value if type(value) is int and value > 0 else None


def _flag(value: object, held: bool | None) -> bool | None:
    return value if type(value) is bool else held


def _timed(ms: object) -> bool:
    return type(ms) in (int, float) and 0 <= ms < 1e7


# -- sufficient statistics -----------------------------------------------------------------------


@dataclass
class LineSums:
    """Sums behind a least-squares line ``y = a + b * x``: adding two is pooling their points."""

    n: int = 0
    x: float = 0.0
    y: float = 0.0
    xx: float = 0.0
    xy: float = 0.0
    yy: float = 0.0

    def add(self, x: float, y: float) -> None:
        self.n += 1
        self.x += x
        self.y += y
        self.xx += x * x
        self.xy += x * y
        self.yy += y * y

    def __iadd__(self, other: "LineSums") -> "LineSums":
        self.n += other.n
        self.x += other.x
        self.y += other.y
        self.xx += other.xx
        self.xy += other.xy
        self.yy += other.yy
        return self


@dataclass(frozen=True)
class Line:
    """``y = a + b * x`` by least squares, with the residuals' RMS relative to the mean of ``y``."""

    a: float
    b: float
    rel_error: float | None  # None: fewer than 3 points, or a zero mean
    points: int

    @classmethod
    def fit(cls, s: LineSums) -> "Line":
        """Least squares; a constant when ``x`` never varies (the slope cannot be told then)."""
        if not s.n:
            return cls(0.0, 0.0, None, 0)
        mx, my = s.x / s.n, s.y / s.n
        sxx = s.xx - s.n * mx * mx
        b = (s.xy - s.n * mx * my) / sxx if sxx > 1e-9 * max(1.0, s.xx) else 0.0
        a = my - b * mx
        sse = s.yy - 2 * a * s.y - 2 * b * s.xy + s.n * a * a + 2 * a * b * s.x + b * b * s.xx
        rms = math.sqrt(max(0.0, sse) / s.n)
        return cls(a, b, rms / my if s.n >= 3 and my > 0 else None, s.n)


@dataclass
class Sums:
    """What every prediction needs from a set of rounds, as sums (so blocks of rounds pool by adding)."""

    depth: int
    device: bool = False  # time from the rounds' device fields (else their host fields)
    rounds: int = 0
    request_steps: int = 0  # the batch sizes summed
    accepted: list = None  # accepted[a]: request-steps that accepted a drafts (a = depth: at least depth)
    bonus: int = 0
    draft: LineSums = field(default_factory=LineSums)  # x: batch size, y: draft ms per step
    verify: LineSums = field(default_factory=LineSums)  # x: tokens verified, y: verify ms
    extend: LineSums = field(default_factory=LineSums)  # x: tokens extended, y: draft-extend ms

    def __post_init__(self) -> None:
        if self.accepted is None:
            self.accepted = [0] * (self.depth + 1)

    def add(self, kept: Round) -> None:
        """One round as :meth:`RoundLog.add_step` kept it (times outside 0..1e7 ms count as untimed)."""
        accepted, bonus = kept.accepted, kept.bonus
        draft_ms, verify_ms, extend_ms = kept.times(self.device)
        k, bs = self.depth, len(accepted)
        self.rounds += 1
        self.request_steps += bs
        self.bonus += sum(bonus)
        counts = self.accepted
        for a in accepted:
            counts[a if a < k else k] += 1
        tokens = bs * (k + 1)
        if _timed(draft_ms):
            self.draft.add(bs, draft_ms / k)
        if _timed(verify_ms):
            self.verify.add(tokens, verify_ms)
        if _timed(extend_ms):
            self.extend.add(tokens, extend_ms)

    def __iadd__(self, other: "Sums") -> "Sums":
        self.rounds += other.rounds
        self.request_steps += other.request_steps
        self.accepted = [a + b for a, b in zip(self.accepted, other.accepted)]
        self.bonus += other.bonus
        self.draft += other.draft
        self.verify += other.verify
        self.extend += other.extend
        return self

    def committed(self, k: int) -> int:
        """Tokens the rounds would have committed at ``k`` steps: each request-step's ``min(a, k)``, plus the bonus."""
        return self.bonus + sum(count * min(a, k) for a, count in enumerate(self.accepted))

    def accept_length(self, k: int) -> float | None:
        """Mean tokens committed per request-step had the chain been ``k`` deep (bonus included)."""
        return self.committed(k) / self.request_steps if self.request_steps else None


# -- time model --------------------------------------------------------------------------------


@dataclass(frozen=True)
class TimeModel:
    """Milliseconds (device or host: ``clock``) of rounds at ``k`` steps, linear in the batch.

    draft: per draft step, against the batch size (the draft runs ``k`` forwards of ``bs`` rows);
    verify and draft-extend: against the tokens they take (``bs * (k + 1)`` at ``k`` steps).
    A term the recording never timed is left out (and named in ``missing``).
    """

    draft_per_step: Line
    verify: Line
    extend: Line
    missing: tuple[str, ...]
    clock: str = "host"

    @classmethod
    def fit(cls, s: Sums) -> "TimeModel":
        missing = tuple(name for name, line in (("draft", s.draft), ("verify", s.verify), ("extend", s.extend))
                        if not line.n)
        return cls(Line.fit(s.draft), Line.fit(s.verify), Line.fit(s.extend), missing,
                   "device" if s.device else "host")

    def total_ms(self, k: int, rounds: int, batch: int) -> float:
        """Host time of ``rounds`` rounds holding ``batch`` request-steps in all, at ``k`` steps
        (the lines are linear, so the sum over rounds needs only these two totals)."""
        d, v, e = self.draft_per_step, self.verify, self.extend
        return (k * (d.a * rounds + d.b * batch) + v.a * rounds + v.b * batch * (k + 1)
                + e.a * rounds + e.b * batch * (k + 1))

    def tokens_per_s(self, s: Sums, k: int) -> float | None:
        """Committed tokens per second of host time, replaying the recorded batches at ``k`` steps."""
        ms = self.total_ms(k, s.rounds, s.request_steps)
        return s.committed(k) / ms * 1e3 if ms > 0 else None

    @property
    def rel_error(self) -> float | None:
        """Largest relative RMS error of the model's terms on the recorded rounds."""
        errors = [line.rel_error for line in (self.draft_per_step, self.verify, self.extend) if line.points]
        return max(errors) if errors and None not in errors else None

    def describe(self) -> str:
        """The fitted lines and their fit error, in one line (``advise`` and the TUI's advisor panel)."""
        d, v, e = self.draft_per_step, self.verify, self.extend
        error = "-" if self.rel_error is None else f"{self.rel_error:.0%}"
        return (f"time model ({self.clock} ms): draft {d.a:.3f} + {d.b:.3f}/request per step, verify {v.a:.3f} + "
                f"{v.b:.4f}/token, extend {e.a:.3f} + {e.b:.4f}/token; fit error {error}"
                + (f"; untimed: {', '.join(self.missing)}" if self.missing else ""))


# -- advice ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    """One candidate ``--speculative-num-steps`` (``num_draft_tokens`` = steps + 1 for a chain)."""

    num_steps: int
    accept_length: float | None
    accept_length_ci: tuple[float, float] | None
    tokens_per_s: float | None
    gain: float | None  # predicted tok/s relative to the recorded setting's (model on both sides)
    gain_ci: tuple[float, float] | None


@dataclass(frozen=True)
class Advice:
    """The advisor's answer; ``reason`` says why there is no recommendation when there is none."""

    recorded_steps: int | None
    topk: int | None
    request_steps: int
    rounds: int
    settings: tuple[Setting, ...]
    model: TimeModel | None
    recommended: int | None
    reason: str
    needs_request_steps: int
    not_predicted: tuple[str, ...]
    #: the model's share of the gain's interval: its fit error over the bootstrap's independent blocks
    #: (None where throughput is not predicted)
    prediction_error: float | None = None

    def recommendation(self) -> Setting | None:
        return next((s for s in self.settings if s.num_steps == self.recommended), None)

    def headline(self) -> str:
        """One line, e.g. ``steps 3 -> 2: +7% tok/s (+4%..+10%)`` or why there is none."""
        best = self.recommendation()
        if best is None or self.recorded_steps is None:
            return self.reason
        if best.num_steps == self.recorded_steps:
            return f"steps {self.recorded_steps}: best of 1..{self.recorded_steps} ({self.reason})"
        lo, hi = best.gain_ci or (best.gain, best.gain)
        return (f"steps {self.recorded_steps} -> {best.num_steps}: {best.gain:+.0%} tok/s "
                f"({lo:+.0%}..{hi:+.0%})")

    def to_dict(self) -> dict:
        model = self.model
        return {
            "recorded_num_steps": self.recorded_steps, "topk": self.topk, "request_steps": self.request_steps,
            "rounds": self.rounds, "recommended_num_steps": self.recommended, "reason": self.reason,
            "needs_request_steps": self.needs_request_steps, "not_predicted": list(self.not_predicted),
            "headline": self.headline(), "throughput_predicted": self.prediction_error is not None,
            "settings": [{
                "num_steps": s.num_steps, "num_draft_tokens": s.num_steps + 1,
                "accept_length": s.accept_length, "accept_length_ci": list(s.accept_length_ci or ()) or None,
                "tokens_per_s": s.tokens_per_s, "gain": s.gain, "gain_ci": list(s.gain_ci or ()) or None,
            } for s in self.settings],
            "time_model": None if model is None else {
                "draft_ms_per_step": {"at_bs0": model.draft_per_step.a, "per_request": model.draft_per_step.b,
                                      "rel_error": model.draft_per_step.rel_error},
                "verify_ms": {"at_0": model.verify.a, "per_token": model.verify.b, "rel_error": model.verify.rel_error},
                "extend_ms": {"at_0": model.extend.a, "per_token": model.extend.b, "rel_error": model.extend.rel_error},
                "rel_error": model.rel_error, "missing": list(model.missing), "clock": model.clock,
                "max_rel_error": MAX_FIT_ERROR, "prediction_error": self.prediction_error,
            },
        }


def interval95(values: list[float]) -> tuple[float, float] | None:
    """The central 95 % of bootstrap values."""
    if len(values) < 2:
        return None
    values = sorted(values)
    return values[int(0.025 * (len(values) - 1))], values[math.ceil(0.975 * (len(values) - 1))]


def _widened(ci: tuple[float, float] | None, gain: float | None, error: float) -> tuple[float, float] | None:
    """The bootstrap's interval of a gain, widened by the time model's relative ``error`` on both
    predicted times: the model errs beside the sampling the bootstrap sees."""
    if gain is None or (ci is None and not error):
        return ci
    lo, hi = ci or (gain, gain)
    return (1 + lo) / (1 + error) - 1, (1 + hi) * (1 + error) - 1


def block_sums(rounds: list[Round], depth: int, count: int, device: bool = False) -> list[Sums]:
    """The rounds cut into ``count`` consecutive blocks, summed: the bootstrap resamples blocks, which
    keeps the correlation of neighbouring rounds (the same requests, the same batch) inside a block
    (``advise`` and the baseline comparison, :mod:`eagle3scope.analysis.baseline`, both draw from these)."""
    size = max(1, math.ceil(len(rounds) / count))
    blocks = []
    for start in range(0, len(rounds), size):
        block = Sums(depth, device)
        for r in rounds[start:start + size]:
            block.add(r)
        blocks.append(block)
    return blocks


def pooled(blocks: list[Sums], depth: int, device: bool = False) -> Sums:
    total = Sums(depth, device)
    for block in blocks:
        total += block
    return total


def resamples(parts: list[Sums], depth: int, count: int, rng: random.Random, device: bool = False) -> list[Sums]:
    """``count`` block-bootstrap resamples of ``parts``, each pooled; none from one block (no spread to draw)."""
    return [pooled([rng.choice(parts) for _ in parts], depth, device) for _ in range(count)] if len(parts) > 1 else []


def advise(log: RoundLog, *, min_request_steps: int = MIN_REQUEST_STEPS, bootstrap: int = BOOTSTRAP,
           blocks: int = BLOCKS, seed: int = 0) -> Advice:
    """Predict every setting 1..K from the recorded rounds and recommend the fastest, if it is clearly so."""
    rounds = list(log.rounds)
    request_steps = sum(len(r.accepted) for r in rounds)
    depth = log.num_steps or max((a for r in rounds for a in r.accepted), default=0) or None
    not_predicted = (f"num_steps > {depth}: deeper than recorded",) if depth else ()

    def answer(settings=(), model=None, recommended=None, reason="", needs=0, extra=(), error=None) -> Advice:
        return Advice(depth, log.topk, request_steps, len(rounds), tuple(settings), model, recommended, reason,
                      needs, not_predicted + extra, error)

    if log.topk and log.topk > 1:
        return answer(reason="tree drafts cannot be predicted yet (record a chain, top-k 1)",
                      extra=(f"top-k {log.topk} trees: pruning needs per-node scores the frames do not carry",))
    budgets = log.budgets
    if budgets - {depth}:  # min(a, k) holds for a round drafted at the full depth only
        return answer(reason="adaptive steps cannot be predicted (rounds ran at num_steps "
                      f"{sorted(budgets)}; record with --speculative-adaptive off)")
    if not rounds or not depth:
        return answer(reason="no decode rounds recorded", needs=min_request_steps)
    device = any(r.device_timed for r in rounds)
    parts = block_sums(rounds, depth, blocks, device)
    total = pooled(parts, depth, device)
    model = TimeModel.fit(total)
    timed = model.missing in ((), ("extend",))
    launch = None if device else log.launch_bound()
    fit = model.rel_error
    error = fit / math.sqrt(len(parts)) if timed and launch is None and fit is not None and fit <= MAX_FIT_ERROR else None
    rng = random.Random(seed)
    samples = resamples(parts, depth, bootstrap, rng, device)
    sample_models = [TimeModel.fit(sample) for sample in samples] if error is not None else []
    base = model.tokens_per_s(total, depth) if error is not None else None
    settings = []
    for k in range(1, depth + 1):
        tps = model.tokens_per_s(total, k) if error is not None else None
        gain = tps / base - 1 if tps is not None and base else None
        gains = []
        if gain is not None:
            for sample, m in zip(samples, sample_models):
                b, t = m.tokens_per_s(sample, depth), m.tokens_per_s(sample, k)
                if b and t is not None:
                    gains.append(t / b - 1)
        settings.append(Setting(k, total.accept_length(k), interval95([x.accept_length(k) for x in samples]),
                                tps, gain, _widened(interval95(gains), gain, error if k != depth and error else 0.0)))
    needs = max(0, min_request_steps - request_steps)
    if needs:
        return answer(settings, model, reason=f"needs {needs} more request-steps before advising", needs=needs)
    if not timed:
        return answer(settings, model, reason=f"the rounds carry no {'/'.join(model.missing)} times: throughput "
                      "cannot be predicted")
    if launch is not None:
        return answer(settings, model, reason=f"acceptance only: the server {launch} and the rounds carry host "
                      "times only, which time the launches, not the device's work, so no throughput advice "
                      "(a shim that records device times, hello observable.device_timings, gives it)")
    if error is None:
        told = "unknown (too few timed rounds)" if fit is None else f"{fit:.0%}"
        return answer(settings, model, reason=f"acceptance only: the time model's fit error is {told}, above "
                      f"{MAX_FIT_ERROR:.0%}: the rounds' times do not follow it (bursts, mixed prompt lengths, "
                      "chunked prefill), so no throughput advice")
    best = max(settings, key=lambda x: x.tokens_per_s or 0.0)
    if best.num_steps == depth:
        return answer(settings, model, depth, "no shallower setting is predicted faster", error=error)
    if best.gain_ci is not None and best.gain_ci[0] <= 0:
        return answer(settings, model, depth, f"steps {best.num_steps} predicted {best.gain:+.0%}, within the noise "
                      f"(fit error {fit:.0%})", error=error)
    if best.gain < MIN_GAIN:
        return answer(settings, model, depth, f"steps {best.num_steps} predicted only {best.gain:+.1%}", error=error)
    return answer(settings, model, best.num_steps, f"steps {best.num_steps} predicted {best.gain:+.0%} tok/s",
                  error=error)
