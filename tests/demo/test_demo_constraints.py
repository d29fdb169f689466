"""The demo's structured-output requests: grammars over a prompt's family words, and the workload that
sends them beside free requests. The grammars' effect inside SGLang is tests/engine/test_grammar_engine.py's."""

from __future__ import annotations

import re
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eagle3scope.demo import constraints
from eagle3scope.demo.language import families, prompts, vocabulary
from eagle3scope.demo.workload import Workload

PROMPTS = prompts(4)
VOCAB = vocabulary()
WORDS = {name: [VOCAB[i][1:] for i in fam.word_ids] for name, fam in families().items()}


def _family(prompt):
    return next(name for name, words in WORDS.items() if prompt.split()[0] in words)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(PROMPTS), st.data())
def test_the_regex_takes_exactly_replies_in_the_prompts_family(prompt, data):
    own = WORDS[_family(prompt)]
    other = [w for name, words in WORDS.items() if name != _family(prompt) for w in words]
    reply = data.draw(st.lists(st.sampled_from(own), min_size=1, max_size=12))
    regex = constraints.sampling_params("regex", prompt)["regex"]
    assert re.fullmatch(regex, constraints.pieces_of(" ".join(reply)))
    assert constraints.obeys("regex", prompt, " " + " ".join(reply))
    spoiled = list(reply)
    spoiled.insert(data.draw(st.integers(0, len(reply))), data.draw(st.sampled_from(other)))
    assert not re.fullmatch(regex, constraints.pieces_of(" ".join(spoiled)))
    assert not constraints.obeys("regex", prompt, " ".join(spoiled))


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(PROMPTS), st.data())
def test_the_ebnf_alternates_the_two_halves_of_the_family(prompt, data):
    own = WORDS[_family(prompt)]
    first, second = own[: len(own) // 2], own[len(own) // 2:]
    n = data.draw(st.integers(1, 10))
    reply = [data.draw(st.sampled_from(first if i % 2 == 0 else second)) for i in range(n)]
    ebnf = constraints.sampling_params("ebnf", prompt)["ebnf"]
    rules = dict(line.split(" ::= ") for line in ebnf.splitlines())
    assert rules["root"] == "(first second)+ first?"
    assert rules["first"].split(" | ") == [f'"\u2581{w}"' for w in first]
    assert rules["second"].split(" | ") == [f'"\u2581{w}"' for w in second]
    assert constraints.obeys("ebnf", prompt, " ".join(reply))
    i = data.draw(st.integers(0, n - 1))
    swapped = reply[:i] + [data.draw(st.sampled_from(second if i % 2 == 0 else first))] + reply[i + 1:]
    assert not constraints.obeys("ebnf", prompt, " ".join(swapped))


def test_a_foreign_prompt_or_kind_is_refused_and_an_empty_reply_obeys_nothing():
    with pytest.raises(ValueError, match="no family"):
        constraints.sampling_params("regex", "hello world")
    with pytest.raises(ValueError, match="unknown constraint kind"):
        constraints.sampling_params("json", PROMPTS[0])
    assert not constraints.obeys("regex", PROMPTS[0], "")


class _Server:
    """Answers /generate at once and remembers what it was asked."""

    proc = None

    def __init__(self, stop_after: int):
        self.asked, self.done, self.stop_after = [], threading.Event(), stop_after

    def generate(self, prompt, max_new_tokens, temperature, timeout, sampling=None):
        self.asked.append((prompt, temperature, sampling))
        if len(self.asked) >= self.stop_after:
            self.done.set()
        return [{"text": "", "meta_info": {}}]


def test_the_constrained_workload_sends_every_kind_at_every_temperature_beside_free_requests():
    server = _Server(stop_after=4 * len(PROMPTS) * 2)
    load = Workload(server, PROMPTS, concurrency=1, temperatures=(0.0, 0.8),
                    constraints=constraints.WORKLOADS["constrained"])
    with load:
        assert server.done.wait(10)
    seen = set()
    for prompt, temperature, sampling in server.asked:
        kind = next(iter(sampling)) if sampling else None
        assert sampling is None or sampling == constraints.sampling_params(kind, prompt)
        seen.add((kind, temperature))
    assert seen == {(kind, t) for kind in (None, "regex", "ebnf") for t in (0.0, 0.8)}
    assert {r["constraint"] for r in load.results} == {None, "regex", "ebnf"}  # results say which was asked


def test_the_default_workload_sends_free_requests_only():
    server = _Server(stop_after=8)
    with Workload(server, PROMPTS, concurrency=1):
        assert server.done.wait(10)
    assert all(sampling is None for *_, sampling in server.asked)
