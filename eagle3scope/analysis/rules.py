"""Contract rules: every known silent EAGLE-3 break, named, with evidence in numbers and a fix.

Each rule is a small pure function over one publisher's facts (:class:`PublisherView` and what
:mod:`~eagle3scope.analysis.facts` derives from its hello, load report, hook states and step aggregates). It returns an evidence dict when the
contract is broken and ``None`` otherwise. An evidence key ``first_seq`` (the step where the break
was first observed) is lifted into :attr:`Violation.first_seq`. Rule ids are stable: CI
configurations and the TUI refer to them.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass, field
from typing import Callable

from eagle3scope.analysis import facts
from eagle3scope.analysis.facts import PublisherView, fc_trained, is_eagle3_draft, load_of, wrong_algorithm
from eagle3scope.wire.announcements import D2t
from eagle3scope.wire import FEATURE_CARRYING_MODES
from eagle3scope.wire.aux_layers import (
    UNSTATED_FACT,
    UNSTATED_NEXT,
    default_capture,
    specforge_defaults,
    unstated_severity,
    unstated_title,
)
from eagle3scope.wire.severity import SEVERITY_ORDER

#: Rolling mean acceptance length at or below 1 + this margin counts as "nothing accepted".
ZERO_ACCEPTANCE_MARGIN = 0.05
#: Request-steps the rolling window must hold before zero-acceptance may fire.
ZERO_ACCEPTANCE_MIN_REQUEST_STEPS = 64


@dataclass
class Violation:
    id: str
    severity: str  # "error" | "warning" | "info"
    title: str
    evidence: dict
    explanation: str
    fix: str
    src: str
    first_seq: int | None
    active: bool = True  # the condition still holds at the last evaluation
    last_seq: int | None = None
    run: int = 1  # the publisher's run (2, 3, ... after restarts under the same src)

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "severity": self.severity,
            "title": self.title,
            "evidence": self.evidence,
            "explanation": self.explanation,
            "fix": self.fix,
            "src": self.src,
            "first_seq": self.first_seq,
            "active": self.active,
            "run": self.run,
        }


@dataclass(frozen=True)
class Rule:
    id: str
    severity: str | Callable[[dict], str]  # fixed, or chosen from the evidence
    title: str
    fn: Callable[["PublisherView"], dict | None] = field(repr=False)
    explanation: str = ""
    fix: str = ""
    #: (title, explanation, fix) for evidence that needs other words than the rule's; None: the rule's.
    worded: Callable[[dict], tuple[str, str, str] | None] | None = field(default=None, repr=False)


# -- helpers -------------------------------------------------------------------------------


def _first_seq_of(passes: dict, modes, attr: str) -> int | None:
    seqs = [getattr(passes[m], attr) for m in modes if getattr(passes[m], attr) is not None]
    return min(seqs) if seqs else None


# -- rules -----------------------------------------------------------------------------------


def aux_capture_off(pub: PublisherView) -> dict | None:
    if not is_eagle3_draft(pub):
        return None
    algorithm = facts.server_args(pub).algorithm
    capture_now = facts.capture_on(pub)
    if not (wrong_algorithm(algorithm) or capture_now is False):
        return None
    return {
        "algorithm": algorithm,
        "capture_on": capture_now,
        "use_aux_hidden_state": load_of(pub).aux.use_aux,
        "fc_in": load_of(pub).fc_in,
        "fc_from_checkpoint": fc_trained(pub),
        "steps_with_capture_off": pub.capture_off_steps,
        "first_seq": pub.capture_off_first_seq,
    }


def fc_bypassed(pub: PublisherView) -> dict | None:
    load = load_of(pub)
    fc_in = load.fc_in
    if fc_in is None or not is_eagle3_draft(pub):
        # no fc to bypass, an EAGLE-1/2 fc (it takes H-wide target states by design), or no load
        # report yet (steps may arrive before it): what "fc skipped" means depends on the draft's class
        return None
    modes = [m for m, ps in pub.passes.items() if m in FEATURE_CARRYING_MODES and ps.fc_skipped]
    if not modes:
        return None
    skipped = {m: pub.passes[m].fc_skipped for m in modes}
    widths = sorted({w for m in modes for w in pub.passes[m].widths if w != fc_in})
    replayed = {m: pub.passes[m].replayed for m in modes if pub.passes[m].replayed}
    return {
        "skipped_calls": sum(skipped.values()),
        "skipped_by_mode": skipped,
        **({"replayed_by_mode": replayed} if replayed else {}),  # passes seen at their caller, graphs replaying
        "width_seen": widths,
        "fc_in": fc_in,
        "use_aux_hidden_state": load.aux.use_aux,
        "fc_from_checkpoint": fc_trained(pub),
        "algorithm": facts.server_args(pub).algorithm,
        "hidden_size": load.hidden_size,
        "first_seq": _first_seq_of(pub.passes, modes, "first_skip_seq"),
    }


def hidden_width_mismatch(pub: PublisherView) -> dict | None:
    load = load_of(pub)
    hidden = load.hidden_size
    if not hidden:
        return None
    expected = {hidden} | ({load.fc_in} - {None})
    bad = {m: {w: n for w, n in ps.widths.items() if w not in expected} for m, ps in pub.passes.items()}
    bad = {m: ws for m, ws in bad.items() if ws}
    if not bad:
        return None
    first = min(pub.passes[m].width_first_seq[w] for m, ws in bad.items() for w in ws)
    return {"widths_by_mode": bad, "expected": sorted(expected), "fc_in": load.fc_in, "hidden_size": hidden, "first_seq": first}


def graph_aux_reset(pub: PublisherView) -> dict | None:
    """The target's graphs hold other aux layers than its eager passes (and the shim's capture
    field) show: SGLang <= 0.5.10 sets the default set right before capturing and the configured
    ids after it (cuda_graph_runner.py / model_runner.py), so every replayed verify feeds the draft
    the default layers."""
    in_graphs = facts.target_graph_aux(pub.hello)
    if not in_graphs:
        return None
    on_now, shown = facts.capture_on(pub), list(facts.aux_layers(pub).captured or [])
    held = list(in_graphs.get("layers") or [])
    if on_now is None or (bool(on_now) == bool(in_graphs.get("on")) and sorted(shown) == sorted(held)):
        return None
    return {"graph_layers": held, "graph_capture_on": in_graphs.get("on"), "shown_layers": shown,
            "shown_capture_on": on_now, "configured": load_of(pub).aux.configured,
            "sglang_version": pub.hello.sglang_version}


def passes_unobserved(pub: PublisherView) -> dict | None:
    """Draft passes whose width and fc this server hides from the shim: fc-bypassed and
    hidden-width-mismatch cannot judge them, so say so instead of staying silent."""
    seen = facts.pass_visibility(pub.hello)
    hidden = [name for name, how in seen.items() if how == "unseen"]
    if not hidden:
        return None
    return {"unobserved": hidden, "replay_graphs": facts.replayed_passes(pub.hello), "seams": dict(pub.hello.seams)}


def weights_dropped(pub: PublisherView) -> dict | None:
    weights = load_of(pub).weights
    if weights is None:
        return None
    skipped = list(weights.skipped)
    unwritten = [n for n in weights.unwritten if "lm_head" not in n]  # lm-head-mismatch covers the head
    if not (skipped or unwritten):
        return None
    return {
        "skipped": len(skipped),
        "unwritten": len(unwritten),
        "consumed": len(weights.consumed),
        "skipped_examples": skipped[:5],
        "unwritten_examples": unwritten[:5],
    }


def d2t_absolute(pub: PublisherView) -> dict | None:
    d2t = load_of(pub).d2t
    if d2t is None or not d2t.present:
        return None
    broken = d2t.looks_absolute or (d2t.out_of_range or 0) > 0 or d2t.injective is False or d2t.t2d_consistent is False
    if not broken:
        return None
    evidence = dict(zip(D2t.__slots__[1:], astuple(d2t)[1:]))  # every field but present
    evidence["target_vocab_size"] = load_of(pub).target_vocab_size
    return evidence


def d2t_missing(pub: PublisherView) -> dict | None:
    load = load_of(pub)
    d2t, draft_vocab, target_vocab = load.d2t, load.draft_vocab_size, load.target_vocab_size
    if pub.load is not None and not load.d2t_reported:
        return None  # the shim did not report on d2t at all
    if (d2t is not None and d2t.present) or not (draft_vocab and target_vocab and draft_vocab < target_vocab):
        return None
    return {"draft_vocab_size": draft_vocab, "target_vocab_size": target_vocab, "d2t_present": False}


def lm_head_mismatch(pub: PublisherView) -> dict | None:
    load = load_of(pub)
    head = load.lm_head
    if head is None:
        return None
    # shape is the full head on a TP-N server (older recordings: the publishing rank's own shard);
    # SGLang pads the rows (vocab_parallel_embedding.py), org_vocab_size is what was asked for
    source, shape = head.source, list(head.shape or [None, None]) + [None, None]
    rows = head.org_vocab_size if head.org_vocab_size is not None else shape[0]
    draft_vocab, target_vocab, hidden = load.draft_vocab_size, load.target_vocab_size, load.hidden_size
    consumed = load.weights.consumed if load.weights is not None else ()
    problems = []
    if source == "init":
        problems.append("random (never loaded)")
    if source == "target" and any("lm_head" in n for n in consumed):
        problems.append("checkpoint head overwritten by the target's")
    if source == "target" and draft_vocab and target_vocab and draft_vocab != target_vocab:
        problems.append("target head used with a smaller draft vocabulary")
    if draft_vocab and rows is not None and rows != draft_vocab:
        problems.append("rows differ from draft_vocab_size")
    if hidden and shape[1] is not None and shape[1] != hidden:
        problems.append("columns differ from hidden_size")
    if not problems:
        return None
    evidence = {"source": source, "shape": shape[:2], "draft_vocab_size": draft_vocab, "target_vocab_size": target_vocab,
                "hidden_size": hidden, "problems": problems}
    evidence.update({k: getattr(head, k) for k in ("org_vocab_size", "shard_shape", "parallel_size")
                     if getattr(head, k) is not None})
    return evidence


def aux_layers_mismatch(pub: PublisherView) -> dict | None:
    load = load_of(pub)
    n = load.num_target_layers
    layers = facts.aux_layers(pub)  # a live change (issue 7) sets what is intended from then on
    intended, expected, captured = layers.configured, layers.expected, layers.captured
    if captured is None or facts.capture_on(pub) is False:
        return None  # nothing captured: aux-capture-off's business
    captured = list(captured)
    evidence = {"configured": intended, "expected_captured": expected, "captured": captured, "num_target_layers": n,
                "offset_rule": load.aux.offset_rule}
    if expected is not None and sorted(captured) != sorted(expected):
        return {**evidence, "kind": "captured-differs-from-configured"}
    if layers.applied:
        return None  # the user picked this set live: the numbering heuristics below are about the draft's config
    if n:
        if captured == [i + 1 for i in default_capture(n)]:
            return {**evidence, "kind": "input-of-layer-ids-shifted-by-one",
                    "input_of_layer_defaults": default_capture(n), "output_of_layer_defaults": specforge_defaults(n)}
        if captured == specforge_defaults(n):
            return {**evidence, "kind": "output-of-layer-ids-used-as-input-of-layer",
                    "input_of_layer_defaults": default_capture(n), "output_of_layer_defaults": specforge_defaults(n)}
    if intended is None and is_eagle3_draft(pub) and pub.load is not None and load.aux.reports_configured:
        acc = pub.acceptance
        first = acc.per_position[0] if acc.k >= 1 and acc.per_position else None
        return {**evidence, "kind": "no-configured-ids-default-used", "default": default_capture(n) if n else None,
                "position_1_acceptance": None if first is None else round(first, 4),
                "window_request_steps": acc.window.n}
    return None


def zero_acceptance(pub: PublisherView) -> dict | None:
    acc = pub.acceptance
    mean = acc.mean_accept_length
    if mean is None or acc.window.n < ZERO_ACCEPTANCE_MIN_REQUEST_STEPS or acc.k < 1:
        return None
    if mean > 1.0 + ZERO_ACCEPTANCE_MARGIN:
        return None
    return {
        "rolling_mean_accept_length": round(mean, 4),
        "window_request_steps": acc.window.n,
        "per_position": [None if r is None else round(r, 4) for r in acc.per_position],
        "cumulative_mean_accept_length": round(acc.cumulative_mean_accept_length or 0.0, 4),
        "max_accept_length": acc.k + 1,
    }


def draft_token_out_of_vocab(pub: PublisherView) -> dict | None:
    vocab = load_of(pub).target_vocab_size
    if pub.draft_id_max is None:
        return None
    too_high = vocab is not None and pub.draft_id_max >= vocab
    negative = pub.draft_id_min is not None and pub.draft_id_min < 0
    if not (too_high or negative):
        return None
    seqs = []
    if too_high:  # the first rise past the vocabulary; past the rises kept, where the maximum was reached
        seqs = [s for s, hi in pub.draft_max_rises if hi >= vocab] or [pub.draft_max_seq]
    if negative:
        seqs.append(pub.draft_min_seq)
    return {"max_draft_id": pub.draft_id_max, "min_draft_id": pub.draft_id_min, "target_vocab_size": vocab,
            "draft_ids_seen": pub.draft_ids, "first_seq": min(seqs)}


def hook_failed(pub: PublisherView) -> dict | None:
    bad = facts.failed_seams(pub)
    failures = pub.loss.hook_failures
    if not bad and not failures:
        return None
    return {"seams": bad, "hook_failures": failures, "details": {seam: facts.hook_detail(pub, seam) for seam in bad}}


def worker_unobserved(pub: PublisherView) -> dict | None:
    parts = facts.unobserved(pub)
    if not parts:
        return None
    hello = pub.hello
    return {"unobserved": list(parts), "worker_class": hello.worker_class if hello is not None else None,
            "algorithm": facts.server_args(pub).algorithm, "details": parts}


def _unobserved_severity(evidence: dict) -> str:
    return "error" if "worker" in evidence["unobserved"] else "warning"


def frames_lost(pub: PublisherView) -> dict | None:
    loss = facts.loss(pub)
    if not loss.lost:
        return None
    return {"lost_in_transit": loss.lost_in_transit, "dropped_by_shim": loss.dropped_by_shim, "frames_received": loss.frames}


def _opted_out_severity(evidence: dict) -> str:
    """use_aux_hidden_state false under EAGLE3 with no trained fc in the checkpoint: the draft may
    well have been trained without aux states, so only a warning. A trained fc proves otherwise."""
    opted_out = evidence.get("use_aux_hidden_state") is False and evidence.get("fc_from_checkpoint") is False
    return "warning" if opted_out and not wrong_algorithm(evidence.get("algorithm")) else "error"


def _aux_severity(evidence: dict) -> str:
    kind = evidence.get("kind")
    if kind == "no-configured-ids-default-used":
        return unstated_severity(evidence.get("position_1_acceptance"), evidence.get("window_request_steps") or 0)
    return "error" if kind == "captured-differs-from-configured" else "warning"


def _aux_worded(evidence: dict) -> tuple[str, str, str] | None:
    """Unstated layers are a fact until acceptance says otherwise: the doctor's words (wire.aux_layers)."""
    if evidence.get("kind") != "no-configured-ids-default-used":
        return None
    return unstated_title(_aux_severity(evidence)), UNSTATED_FACT, UNSTATED_NEXT


CONTRACT_RULES: tuple[Rule, ...] = (
    Rule(
        "aux-capture-off", _opted_out_severity, "EAGLE-3 draft, but the target captures no aux hidden states",
        aux_capture_off,
        "The draft's fc expects the concatenated aux hidden states of k target layers, but the target is not "
        "capturing them (typically --speculative-algorithm EAGLE with an EAGLE-3 draft). The draft then sees only "
        "the last hidden state, fc is skipped because the widths match, and almost nothing is accepted, without "
        "any error or warning from the server. (A warning only when the draft's eagle_config sets "
        "use_aux_hidden_state false and the checkpoint has no trained fc: then it may be trained that way.)",
        "Launch with --speculative-algorithm EAGLE3; make sure the draft's config.json has an eagle_config with "
        "use_aux_hidden_state true (or leave it out) and eagle_aux_hidden_state_layer_ids set.",
    ),
    Rule(
        "fc-bypassed", _opted_out_severity, "Target features reach the draft H-wide: fc skipped", fc_bypassed,
        "A draft forward that should carry the target's k x H aux features (extend / draft-extend) arrived with "
        "the width of a single hidden state, so SGLang's `hidden_states.shape[-1] != embeds.shape[-1]` test skipped "
        "fc. The draft is running on features it was never trained on. (Draft decode passes that feed back the "
        "draft's own H-wide state are normal and not counted; a warning only when the draft's eagle_config sets "
        "use_aux_hidden_state false and the checkpoint has no trained fc.)",
        "Enable aux capture: --speculative-algorithm EAGLE3, and check eagle_config / "
        "eagle_aux_hidden_state_layer_ids in the draft's config.json.",
    ),
    Rule(
        "hidden-width-mismatch", "error", "Hidden state entering the draft has an unexpected width", hidden_width_mismatch,
        "The width of the hidden states entering the draft is neither the draft's hidden size H (draft decode) nor "
        "what its fc expects (k x target H). Either the number of captured aux layers differs from what fc was "
        "trained for, or the target's hidden size differs from the draft's target_hidden_size.",
        "Make eagle_aux_hidden_state_layer_ids have as many entries as fc.in / target_hidden_size, and set "
        "target_hidden_size in the draft config to the target's hidden_size.",
    ),
    Rule(
        "graph-aux-reset", "error", "The target's graphs replay other aux layers than the ones shown",
        graph_aux_reset,
        "The target's CUDA graphs were captured with one aux-layer set, while its eager passes (and the capture "
        "field the shim shows) use another. SGLang up to 0.5.10 resets aux capture to the model default right "
        "before capturing graphs and applies the configured eagle_aux_hidden_state_layer_ids only after, so every "
        "replayed verify hands the draft the default layers, whatever the draft was trained on.",
        "Serve with SGLang 0.5.11 or later (it captures the configured set), or with --disable-cuda-graph; or make "
        "eagle_aux_hidden_state_layer_ids the target's default set.",
    ),
    Rule(
        "passes-unobserved", "info", "Some draft passes cannot be seen on this server", passes_unobserved,
        "The width and fc of these draft passes are not visible: they replay captured graphs (or run compiled) and "
        "the eager caller that hands them their hidden states is not hooked in this release. fc-bypassed and "
        "hidden-width-mismatch say nothing about them.",
        "See hook-failed for the seam that is missing; serve with --disable-cuda-graph to see every pass eagerly.",
    ),
    Rule(
        "weights-dropped", "error", "Draft weights were silently dropped at load", weights_dropped,
        "Checkpoint tensors were never consumed by the loader (their names are unknown to this SGLang release, which "
        "skips them without a warning) or draft parameters were never written (they keep their random init).",
        "Run `eagle3scope doctor DRAFT_DIR --sglang-version V` to see the key layout this release expects, then "
        "`eagle3scope fix DRAFT_DIR --out NEW_DIR --for-sglang V` to rename the keys.",
    ),
    Rule(
        "d2t-absolute", "error", "d2t looks like absolute ids, not offsets", d2t_absolute,
        "SGLang maps draft id i to target id i + d2t[i]. This d2t maps ids out of the target vocabulary, is not "
        "injective, or disagrees with t2d, which is what an absolute-id table (e.g. arange) looks like: draft id "
        "i then maps to 2i.",
        "Convert d2t to offsets (d2t_abs - arange(draft_vocab)): `eagle3scope fix DRAFT_DIR --out NEW_DIR`.",
    ),
    Rule(
        "d2t-missing", "error", "Draft vocabulary is smaller than the target's but d2t is missing", d2t_missing,
        "With a reduced draft vocabulary the draft's ids must be mapped to target ids through d2t. Without it draft "
        "id i is read as target id i, so nearly every proposal is a different token.",
        "Add the d2t tensor (offsets, target id = i + d2t[i]) the draft was trained with to the checkpoint.",
    ),
    Rule(
        "lm-head-mismatch", "error", "Draft lm_head is missing, random, replaced or the wrong size", lm_head_mismatch,
        "The draft's lm_head did not come from the draft checkpoint with the right shape. With draft_vocab_size set "
        "and no lm_head in the checkpoint, SGLang keeps a randomly initialised head and warns about nothing.",
        "Ship the draft's trained lm_head (shape [draft_vocab_size, hidden_size]) in the checkpoint, or set "
        "draft_vocab_size to null only if the draft was trained on the target's head.",
    ),
    Rule(
        "aux-layers-mismatch", _aux_severity, "Captured aux layers differ from the draft's trained layers",
        aux_layers_mismatch,
        "The target layers whose hidden states feed the draft are not the ones it was trained on: the captured set "
        "differs from the configured ids, or it matches the other numbering convention's defaults shifted by one "
        "(SGLang treats configured ids as output-of-layer and adds +1; speculators writes input-of-layer ids). "
        "Typical cost: 0.1 or more acceptance length.",
        "Set eagle_config.eagle_aux_hidden_state_layer_ids in output-of-layer numbering (SGLang adds +1), e.g. "
        "subtract 1 from speculators' input-of-layer ids; try the presets live with `eagle3scope aux cycle`.",
        _aux_worded,
    ),
    Rule(
        "zero-acceptance", "error", "Draft tokens are (almost) never accepted", zero_acceptance,
        f"The rolling mean acceptance length (bonus token included) is within {ZERO_ACCEPTANCE_MARGIN} of 1.0: the "
        "target rejects nearly every draft token, so speculative decoding only costs time.",
        "Look at the other violations first (aux capture, d2t, lm_head, weights); then check that the draft was "
        "trained for this target and chat template. `eagle3scope doctor DRAFT_DIR` checks the checkpoint.",
    ),
    Rule(
        "draft-token-out-of-vocab", "error", "Draft proposes token ids outside the target vocabulary",
        draft_token_out_of_vocab,
        "The draft's proposals, after the d2t mapping, are not valid target token ids: d2t is wrong (absolute "
        "ids) or the draft's vocabulary does not belong to this target.",
        "Check d2t (offsets, not absolute ids) and draft_vocab_size; `eagle3scope doctor DRAFT_DIR --target TARGET`.",
    ),
    Rule(
        "hook-failed", "warning", "An instrumentation hook failed: visibility degraded", hook_failed,
        "The shim could not attach to (or raised inside) one of its seams in this SGLang build; the server keeps "
        "running, but the numbers that seam feeds are missing or incomplete.",
        "Check the shim's supported SGLang versions; report the seam and detail shown in the evidence.",
    ),
    Rule(
        "worker-unobserved", _unobserved_severity, "SGLang runs a speculative worker or draft the shim does not observe",
        worker_unobserved,
        "The shim hooks the EAGLE workers' rounds (EAGLEWorkerV2, EAGLEWorker) and the EAGLE-3 draft models' forward. "
        "This server chose another worker (multi-layer EAGLE, MTP, NGRAM, DFlash, ...: no steps or acceptance "
        "reach the viewer, an error, since every step rule is then blind) or another draft class (STANDALONE's "
        "plain model, NEXTN layers, EAGLE-1: steps and acceptance are seen, hidden-state widths and fc are not, "
        "a warning). Nothing here is broken in the server; the evidence is incomplete.",
        "Judge this server by SGLang's own metrics (spec_accept_length, spec_verify_ct); for the full evidence, "
        "serve the draft with --speculative-algorithm EAGLE3 (or EAGLE) and without --enable-multi-layer-eagle.",
    ),
    Rule(
        "frames-lost", "warning", "Frames were lost between the server and the viewer", frames_lost,
        "The shim dropped frames (its queue was full) or frames went missing in transit; statistics are computed "
        "on what arrived.",
        "Use a faster viewer host, record headless with `eagle3scope record`, or raise the shim's queue size.",
    ),
)

RULE_IDS = tuple(r.id for r in CONTRACT_RULES)


def evaluate(rule: Rule, pub: PublisherView, previous: Violation | None) -> Violation | None:
    """Run one rule; a violation that fired once stays, marked inactive when it no longer holds."""
    evidence = rule.fn(pub)
    if evidence is None:
        if previous is not None:
            previous.active = False
        return previous
    first_seq = evidence.pop("first_seq", None)
    if first_seq is None:
        first_seq = pub.last_seq
    severity = rule.severity(evidence) if callable(rule.severity) else rule.severity
    title, explanation, fix = (rule.worded and rule.worded(evidence)) or (rule.title, rule.explanation, rule.fix)
    if previous is not None:
        previous.evidence, previous.active, previous.last_seq = evidence, True, pub.last_seq
        if SEVERITY_ORDER[severity] < SEVERITY_ORDER[previous.severity]:  # a severity only rises
            previous.severity, previous.title, previous.explanation, previous.fix = severity, title, explanation, fix
        return previous
    return Violation(rule.id, severity, title, evidence, explanation, fix, pub.src, first_seq, True,
                     pub.last_seq, pub.run)
