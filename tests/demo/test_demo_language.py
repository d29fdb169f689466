"""The demo language (eagle3scope/demo/language.py): two prompt families, deterministic, no short
greedy loops, and a corpus generator other demo targets can reuse. Pure Python, no engine."""

from __future__ import annotations

import random

from support.demo_support import shortest_period

from eagle3scope.demo import language


def test_prompts_are_deterministic_and_alternate_families():
    assert language.prompts(4, seed=1) == language.prompts(4, seed=1) != language.prompts(4, seed=2)
    assert [language.family_of(p) for p in language.prompts(4, seed=7)] == ["code", "chat", "code", "chat"]
    assert {language.family_of(p) for p in language.prompts(5, family="chat")} == {"chat"}
    assert language.family_of("not demo words") is None


def test_families_are_disjoint_and_greedy_rule_following_never_loops_short():
    fams = language.families()
    code, chat = fams["code"], fams["chat"]
    assert not set(code.word_ids) & set(chat.word_ids)
    assert max(code.word_ids + chat.word_ids) < 1024 // 2  # a d2t read as absolute ids stays in range
    assert code.noise < chat.noise and len(code.word_ids) < len(chat.word_ids)
    assert language.MIN_CYCLE > 16 + 64  # a demo prompt and its reply never repeat
    for fam in fams.values():
        # follow the rule from any pair: the walk ends in a cycle of at least MIN_CYCLE words
        assert min(language._cycles([list(row) for row in fam.table])) >= language.MIN_CYCLE
        text = fam.walk(random.Random(0), 400)
        assert shortest_period(text[-200:]) >= language.MIN_CYCLE
        # the noise is the second choice, never the rule's word
        assert all(a != t for ra, rt in zip(fam.alt, fam.table) for a, t in zip(ra, rt))


def test_noisy_words_are_the_second_choice():
    fam = language.families()["chat"]
    text = fam.walk(random.Random(4), 3000)
    steps = list(zip(text, text[1:], text[2:]))
    noisy = [(a, b, c) for a, b, c in steps if c != fam.table[a][b]]
    assert all(c == fam.alt[a][b] for a, b, c in noisy)
    assert abs(len(noisy) / len(steps) - fam.noise) < 0.02


def test_cycles_finds_a_planted_loop():
    table = [[(a + b) % 5 for b in range(5)] for a in range(5)]  # Fibonacci mod 5: cycle 20 from (0, 1)
    table[0][0] = 0  # and (0, 0) -> (0, 0): a loop of one
    assert min(language._cycles(table)) == 1 and 20 in language._cycles(table)


def test_corpus_is_reusable_for_other_targets():
    texts = language.corpus(6, 20, 3, vocab_size=4096)
    assert texts == language.corpus(6, 20, 3, vocab_size=4096)
    assert all(len(t) == 20 for t in texts)
    mix = [language.family_of(" ".join(language.vocabulary(4096)[i][1:] for i in t), 4096) for t in texts]
    assert mix == list(language.TRAINING_MIX) * 2
    assert len(language.vocabulary(4096)) == 4096
