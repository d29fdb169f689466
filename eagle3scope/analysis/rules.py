"""Contract rules: every known silent EAGLE-3 break, named, with evidence in numbers and a fix.

Each rule is a small pure function over one publisher's facts (:class:`PublisherView` and what
:mod:`~eagle3scope.analysis.facts` derives from its hello, load report, hook states and step aggregates). It returns an evidence dict when the
contract is broken and ``None`` otherwise. An evidence key ``first_seq`` (the step where the break
was first observed) is lifted into :attr:`Violation.first_seq`. Rule ids are stable: CI
configurations and the TUI refer to them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from eagle3scope.analysis import facts
from eagle3scope.analysis.facts import PublisherView, load_of
from eagle3scope.wire import contracts
from eagle3scope.wire.aux_layers import Engine
from eagle3scope.wire.contracts import Contract
from eagle3scope.wire.releases import before, release
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

    @classmethod
    def of(cls, contract: Contract, fn: Callable[["PublisherView"], dict | None]) -> "Rule":
        """A rule whose words are shared with the shim (wire/contracts.py), judged here by ``fn``."""
        return cls(contract.id, contract.severity, contract.title, fn, contract.explanation, contract.fix,
                   contract.worded)


# -- rules -----------------------------------------------------------------------------------
# Those of wire/contracts.py get this publisher's facts; the shim judges them alike in the server.


def aux_capture_off(pub: PublisherView) -> dict | None:
    evidence = contracts.aux_capture_off(load_of(pub), facts.server_args(pub).algorithm, facts.capture_on(pub))
    if evidence is None:
        return None
    return {**evidence, "steps_with_capture_off": pub.capture_off_steps, "first_seq": pub.capture_off_first_seq}


def fc_bypassed(pub: PublisherView) -> dict | None:
    return contracts.fc_bypassed(load_of(pub), facts.server_args(pub).algorithm, pub.passes)


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
    if in_graphs is None or (in_graphs.on is None and in_graphs.layers is None):
        return None
    on_now, shown = facts.capture_on(pub), list(facts.aux_layers(pub).captured or [])
    held = list(in_graphs.layers or [])
    if on_now is None or (bool(on_now) == bool(in_graphs.on) and sorted(shown) == sorted(held)):
        return None
    return {"graph_layers": held, "graph_capture_on": in_graphs.on, "shown_layers": shown,
            "shown_capture_on": on_now, "configured": load_of(pub).aux.configured,
            "sglang_version": pub.hello.sglang_release}


def passes_unobserved(pub: PublisherView) -> dict | None:
    """Draft passes whose width and fc this server hides from the shim: fc-bypassed and
    hidden-width-mismatch cannot judge them, so say so instead of staying silent."""
    seen = facts.pass_visibility(pub.hello)
    hidden = [name for name, how in seen.items() if how == "unseen"]
    if not hidden:
        return None
    return {"unobserved": hidden, "replay_graphs": facts.replayed_passes(pub.hello), "seams": dict(pub.hello.seams)}


def weights_dropped(pub: PublisherView) -> dict | None:
    return contracts.weights_dropped(load_of(pub))


def d2t_absolute(pub: PublisherView) -> dict | None:
    return contracts.d2t_absolute(load_of(pub))


def d2t_missing(pub: PublisherView) -> dict | None:
    return contracts.d2t_missing(pub.load)


def lm_head_mismatch(pub: PublisherView) -> dict | None:
    return contracts.lm_head_mismatch(load_of(pub))


def aux_layers_mismatch(pub: PublisherView) -> dict | None:
    evidence = contracts.aux_layers_mismatch(pub.load, facts.aux_layers(pub), facts.capture_on(pub))
    engine = pub.hello.engine_id if pub.hello is not None else Engine.SGLANG  # absent = SGLang
    if evidence is not None and engine == Engine.VLLM:
        evidence["engine"] = Engine.VLLM.value  # the numbering words name this engine's rule
    if evidence is not None and evidence["kind"] == "no-configured-ids-default-used":
        acc = pub.acceptance  # unstated layers: a fact until acceptance at position 1 says otherwise
        first = acc.per_position[0] if acc.k >= 1 and acc.per_position else None
        evidence.update(position_1_acceptance=None if first is None else round(first, 4),
                        window_request_steps=acc.window.n)
    return evidence


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


#: the first release whose scheduler discards (does not count) a finished request's extra overlap tick
#: (the commit seam's note in eagle3scope_shim/seams.py); before it a round after the finish is SGLang's own
DISCARDS_EXTRA_TICK = "0.5.12"


def accounting_mismatch(pub: PublisherView) -> dict | None:
    """SGLang's own counts of a finished request (meta_info's, from the shim's finish frame) differ
    from this viewer's tallies of the same request's steps (analysis/accounting.py), or, where SGLang
    discards it, a step counted a round for a request after its finish."""
    acct = pub.accounting
    version = pub.hello.sglang_release if pub.hello is not None else None
    late = acct.after_finish if release(version) is not None and not before(version, DISCARDS_EXTRA_TICK) else 0
    if not (acct.mismatched or late):
        return None
    evidence = {"requests_mismatched": acct.mismatched, "requests_compared": acct.compared,
                "examples": list(acct.examples),
                "not_compared": {"frame_lost_while_running": acct.unverifiable, "start_not_seen": acct.start_unseen,
                                 "forgotten": acct.forgotten},
                "first_seq": min((s for s in (acct.first_seq, acct.late_first_seq if late else None) if s is not None),
                                 default=None)}
    if late:
        evidence.update(rounds_after_finish=late, after_finish_examples=list(acct.late), sglang_version=version)
    return evidence


CONTRACT_RULES: tuple[Rule, ...] = (
    Rule.of(contracts.AUX_CAPTURE_OFF, aux_capture_off),
    Rule.of(contracts.FC_BYPASSED, fc_bypassed),
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
    Rule.of(contracts.WEIGHTS_DROPPED, weights_dropped),
    Rule.of(contracts.D2T_ABSOLUTE, d2t_absolute),
    Rule.of(contracts.D2T_MISSING, d2t_missing),
    Rule.of(contracts.LM_HEAD_MISMATCH, lm_head_mismatch),
    Rule.of(contracts.AUX_LAYERS_MISMATCH, aux_layers_mismatch),
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
        "accounting-mismatch", "error", "eagle3scope's per-request counts differ from SGLang's own",
        accounting_mismatch,
        "For every request SGLang finishes, the shim sends SGLang's own counts (meta_info's spec_verify_ct, "
        "spec_num_correct_drafts and spec_correct_drafts_histogram); for these requests the rounds, accepted drafts "
        "or accepted-per-round histogram tallied from the steps differ, or (from SGLang 0.5.12, which discards a "
        "finished request's extra overlap tick) a step counted a round for a request after SGLang finished it. "
        "Every acceptance figure shown here is then off on this server: a round went unobserved or mislabelled, "
        "or a round SGLang discarded was counted. "
        "Requests during which frames were lost are not compared.",
        "Look at hook-failed first (a failed verify or step hook misses rounds). Otherwise the shim miscounts on "
        "this SGLang release or configuration: report the evidence with the server's flags and SGLang version, and "
        "judge acceptance meanwhile by SGLang's own meta_info and spec_verify_ct metrics.",
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
