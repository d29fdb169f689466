"""Grammar-constrained requests through the real SGLang 0.5.23 CPU engine, with the shim on.

Two servers, launched together so that their startups overlap: the tiny pair (a byte-level BPE
tokenizer, so a regex, a JSON schema and an EBNF grammar can all be spelled) drafting chains (topk 1),
and the trained demo pair drafting trees (topk 2, 6 draft tokens) with the demo's own grammars over
its words (eagle3scope.demo.constraints; its word-level vocabulary has no punctuation, so no JSON).
Each serves a concurrent batch mixing every grammar with free requests, greedy and sampled, then a
few requests one at a time (batching can move float32 results, so only lone requests are compared
token for token): a constrained request whose grammar allows what the free request wrote gets the
same tokens, drafts and accepted counts.
"""

from __future__ import annotations

import json
import re
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from support.servers import bodies, check_agreement, launch, until_quiet

from eagle3scope.analysis import analyse
from eagle3scope.demo import constraints as demo_grammars
from eagle3scope.demo.language import prompts as demo_prompts

pytestmark = pytest.mark.engine

# Bounded so that a random target completes it. A pattern, not maxLength: under maxLength xgrammar 0.2.7
# lets raw control characters into the string ({"name": "a\x01"}), which strict JSON refuses.
SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "n"],
          "properties": {"name": {"type": "string", "pattern": "^[a-z]{1,6}$"},
                         "n": {"type": "integer", "minimum": 0, "maximum": 99}}}
REGEX = "[a-z]{1,6}( [a-z]{1,6}){2,3}"  # at most 27 characters: done within 32 tokens
EBNF = 'root ::= answer "," answer "," answer\nanswer ::= "yes" | "no" | "maybe"'
#: the tiny pair's grammars: sampling parameters, and what a reply must be (a regex's own: any regex)
TINY = {"regex": ({"regex": REGEX}, lambda text, params: re.fullmatch(params["regex"], text)),
        "json_schema": ({"json_schema": json.dumps(SCHEMA)}, lambda text, _: _fits_schema(text)),
        "ebnf": ({"ebnf": EBNF}, lambda text, _: re.fullmatch("(yes|no|maybe)(,(yes|no|maybe)){2}", text))}
TEMPERATURES = (0.0, 0.8)
DEMO_PROMPTS = demo_prompts(4, seed=3)


def _fits_schema(text: str) -> bool:
    value = json.loads(text)
    return (set(value) == {"name", "n"} and re.fullmatch("[a-z]{1,6}", value["name"]) is not None
            and type(value["n"]) is int and 0 <= value["n"] <= 99)


def _request(prompt, temperature, sampling=None, max_new=32):
    """A /generate body; a free request runs to max_new (ignore_eos), a constrained one until its grammar ends."""
    params = {"max_new_tokens": max_new, "temperature": temperature, **(sampling or {"ignore_eos": True})}
    return {"text": prompt, "sampling_params": params}


def _serve(launched, batch, then=()):
    """Run ``batch`` concurrently on a launched server once it is ready, then the callables of ``then``
    one at a time (each gets the server, returns responses); stop it and return (frames, responses)."""
    sub, srv = launched
    frames, responses = [], []
    try:
        srv.wait_ready()
        deadline = time.monotonic() + 30
        while not any(f.kind == "hello" for f in frames) and time.monotonic() < deadline:
            frames += sub.poll(timeout_ms=200)
        with ThreadPoolExecutor(8) as pool:
            responses += pool.map(lambda body: (body, srv.post("/generate", body)), batch)
        for step in then:
            responses += step(srv)
        frames += until_quiet(sub)
    finally:
        srv.stop()
        sub.close()
    return frames, responses


def _free_then_allowed(prompt, grammar_of, max_new=16):
    """A lone free greedy request, then a lone greedy request under the grammar ``grammar_of(text)``."""
    def step(srv):
        free = _request(prompt, 0.0, max_new=max_new)
        free_out = srv.post("/generate", free)
        constrained = _request(prompt, 0.0, grammar_of(free_out["text"]), max_new=max_new + 8)
        return [(free, free_out), (constrained, srv.post("/generate", constrained))]
    return step


@pytest.fixture(scope="module")
def served(tiny_models, demo_models):
    """Both servers launched at once, then driven in turn: {"chain": (frames, responses), "tree": ...}."""
    chain_batch = [_request("hello world", t, TINY[kind][0] if kind else None)
                   for kind in (*TINY, None) for t in TEMPERATURES]
    tree_batch = [_request(p, t, demo_grammars.sampling_params(kind, p) if kind else None)
                  for p in DEMO_PROMPTS for kind in (*demo_grammars.KINDS, None) for t in TEMPERATURES]
    # compact JSON: with any whitespace allowed, the random target's favourite is the next newline
    launches = {"chain": launch(*tiny_models, {}, extra_args=["--constrained-json-disable-any-whitespace"]),
                "tree": None}
    try:
        launches["tree"] = launch(demo_models.target, demo_models.draft, {}, topk=2, num_draft_tokens=6)
        literal = _free_then_allowed("the quick brown fox", lambda text: {"regex": re.escape(text)})
        in_family = [_free_then_allowed(p, lambda _, p=p: demo_grammars.sampling_params("regex", p), max_new=24)
                     for p in DEMO_PROMPTS[:2]]
        return {"chain": _serve(launches.pop("chain"), chain_batch, [literal]),
                "tree": _serve(launches.pop("tree"), tree_batch, in_family)}
    finally:
        for sub, srv in filter(None, launches.values()):
            srv.stop()
            sub.close()


def _grammar(body) -> str | None:
    return next((k for k in ("regex", "json_schema", "ebnf") if k in body["sampling_params"]), None)


def _steps_of(frames, rid):
    """(draft_ids, accepted) of a request's decode steps, in order."""
    steps = sorted((b for b in bodies(frames, "step") if b["mode"] == "decode"), key=lambda b: b["seq"])
    return [(b["draft_ids"][i], b["accepted"][i]) for b in steps for i, r in enumerate(b["rids"]) if r == rid]


@pytest.mark.parametrize("job", ["chain", "tree"])
def test_every_constrained_reply_keeps_to_its_grammar(served, job):
    """Regex, JSON schema and EBNF (tiny pair); the demo's regex and EBNF over its words (trees): every
    request answered (none aborted by a refused token), every constrained reply in its grammar."""
    _, responses = served[job]
    kinds = set()
    for body, out in responses:
        kind = _grammar(body)
        assert out["meta_info"]["finish_reason"]["type"] in ("stop", "length"), out["meta_info"]["finish_reason"]
        if kind is None:
            continue
        kinds.add(kind)
        if job == "chain":
            assert TINY[kind][1](out["text"], body["sampling_params"]), (kind, out["text"])
        else:
            assert demo_grammars.obeys(kind, body["text"], out["text"]), (kind, out["text"])
    assert kinds == ({"regex", "json_schema", "ebnf"} if job == "chain" else {"regex", "ebnf"})


@pytest.mark.parametrize("job", ["chain", "tree"])
def test_per_request_counts_equal_meta_info_and_steps_name_the_constrained_requests(served, job):
    """The shim's steps add up to SGLang's own meta_info for constrained and free requests alike (chains
    and trees, greedy and sampled verify), and each step says which of its requests a grammar constrains."""
    frames, responses = served[job]
    check_agreement(frames, [out for _, out in responses], proposals=3 if job == "chain" else 5)
    constrained = {out["meta_info"]["id"] for body, out in responses if _grammar(body)}
    free = {out["meta_info"]["id"] for body, out in responses if not _grammar(body)}
    mixed = 0
    for body in bodies(frames, "step"):
        flags = [rid in constrained for rid in body["rids"]]
        if any(flags):
            assert body["constrained"] == flags, (body["rids"], body.get("constrained"))
            mixed += not all(flags)
        else:
            assert "constrained" not in body
    assert mixed > 0  # constrained and free requests shared steps
    assert constrained and free


def test_no_rule_fires_on_the_healthy_draft_under_grammars(served):
    frames, _ = served["tree"]
    assert [(v.id, v.severity) for v in analyse(frames).violations()] == []


def test_a_grammar_that_allows_the_free_reply_changes_no_token_draft_or_acceptance(served):
    """Greedy, lone: under a grammar that allows what the free request wrote (its text as a literal
    regex; the demo prompt's family words) the target's masked argmax is its free argmax, so the
    reply, the draft's proposals and the accepted counts are the free request's."""
    for job in ("chain", "tree"):
        frames, responses = served[job]
        lone = responses[-4:] if job == "tree" else responses[-2:]
        for (_, free), (_, constrained) in zip(lone[::2], lone[1::2]):
            n = len(free["output_ids"])
            assert constrained["output_ids"][:n] == free["output_ids"], job
            free_steps = _steps_of(frames, free["meta_info"]["id"])
            assert _steps_of(frames, constrained["meta_info"]["id"])[: len(free_steps) - 1] == free_steps[:-1]


def test_a_grammar_the_target_does_not_follow_lowers_acceptance(served):
    """The demo EBNF makes replies alternate the family's halves; the draft, which knows no grammar,
    keeps proposing the target's free choice, which the mask refuses: fewer drafts are accepted."""
    frames, responses = served["tree"]
    by_kind: dict = {}
    for body, out in responses:
        for _, accepted in _steps_of(frames, out["meta_info"]["id"]):
            by_kind.setdefault(_grammar(body), []).append(accepted)
    mean = {kind: sum(acc) / len(acc) for kind, acc in by_kind.items()}
    print(f"mean accepted drafts per step by grammar: {mean}")
    assert mean["ebnf"] < mean[None] - 0.3, mean
