"""The demo language: two prompt families with real uncertainty, in pure Python (no torch).

Each family has its own words and its own rule: the next word is ``table[previous][current]``
with probability ``1 - noise``, otherwise the second choice ``alt[previous][current]`` (as real
text has a likely and a less likely phrasing; a uniformly random word instead left the target
unsure of the word after it, so a sampled request's draft failed after every rejection).
``code`` is small and nearly deterministic (like code, a draft predicts it well); ``chat`` has
more words and more noise (like chat, more of it is a guess, and its bigger rule is harder for a
small draft to learn).

A model that follows the rule greedily walks (previous, current) -> (current, next) until it
cycles; every such cycle is at least MIN_CYCLE words long, so greedy text does not repeat within a
reply and a draft cannot predict it by copying an earlier turn.

A demo target trains on ``corpus`` and is prompted with ``prompts``; ``vocabulary`` is its
tokenizer's word list. Every function takes the target's vocabulary size, so targets of other
sizes reuse them.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass

SEED = 20260
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]
#: (name, number of words, noise) of each family.
FAMILY_SPECS = (("code", 20, 0.04), ("chat", 32, 0.10))
#: Family of each training text, in turn: chat's bigger, noisier rule gets twice the data.
TRAINING_MIX = ("code", "chat", "chat")
#: Greedy text repeats only after this many words: more than a demo prompt (16) and reply (64).
MIN_CYCLE = 96


@dataclass(frozen=True)
class Family:
    name: str
    #: Token id of each of the family's words.
    word_ids: tuple[int, ...]
    #: table[a][b]: index (into word_ids) of the word that follows words a, b.
    table: tuple[tuple[int, ...], ...]
    noise: float
    #: alt[a][b]: the second choice after a, b (never table[a][b]), taken with probability ``noise``.
    alt: tuple[tuple[int, ...], ...]

    def walk(self, rng: random.Random, length: int) -> list[int]:
        """``length`` word indices of one text."""
        n = len(self.word_ids)
        seq = [rng.randrange(n), rng.randrange(n)]
        while len(seq) < length:
            noisy = rng.random() < self.noise
            seq.append((self.alt if noisy else self.table)[seq[-2]][seq[-1]])
        return seq[:length]


def vocabulary(vocab_size: int = 1024) -> list[str]:
    """Token strings by id: specials, then two-syllable words with a SentencePiece marker."""
    syllables = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
    words = ["\u2581" + a + b for a in syllables for b in syllables]
    random.Random(SEED).shuffle(words)
    return SPECIALS + words[: vocab_size - len(SPECIALS)]


def _cycles(table) -> list[int]:
    """Lengths of the cycles of greedy rule-following, the map (a, b) -> (b, table[a][b])."""
    n, done, out = len(table), set(), []
    for start in ((a, b) for a in range(n) for b in range(n)):
        path: dict = {}
        state = start
        while state not in done and state not in path:
            path[state] = len(path)
            state = (state[1], table[state[0]][state[1]])
        if state in path:
            out.append(len(path) - path[state])
        done.update(path)
    return out


def _table(rng: random.Random, n: int) -> list[list[int]]:
    """A random rule table whose rule-following cycles are all at least MIN_CYCLE words long.

    A random table's cycles are short (a few to 30 words): greedy text would repeat within a reply,
    and a draft could copy the earlier turn instead of knowing the rule. Swapping two entries of a
    column keeps what may follow each word (the bigram statistics a model learns first; a table
    without them, such as a de Bruijn circuit, the demo target does not learn in its budget) while
    it merges or lengthens cycles; swaps are kept while the shortest cycle grows.
    """
    table = [[rng.randrange(n) for _ in range(n)] for _ in range(n)]
    score = lambda cs: (min(cs), -len(cs), max(cs))  # noqa: E731
    cycles = _cycles(table)
    while min(cycles) < MIN_CYCLE:
        b, (a1, a2) = rng.randrange(n), rng.sample(range(n), 2)
        table[a1][b], table[a2][b] = table[a2][b], table[a1][b]
        swapped = _cycles(table)
        if score(swapped) < score(cycles):
            table[a1][b], table[a2][b] = table[a2][b], table[a1][b]
        else:
            cycles = swapped
    return table


@functools.lru_cache(maxsize=8)
def families(vocab_size: int = 1024, specs: tuple | None = None) -> dict[str, Family]:
    """The families by name (drawn once per arguments: the training loop asks for every batch); words live below ``vocab_size // 2`` (a ``d2t`` read as absolute ids
    still lands inside the vocabulary), disjoint between families."""
    specs = specs or FAMILY_SPECS
    rng = random.Random(SEED + 1)
    pool = rng.sample(range(len(SPECIALS), vocab_size // 2), sum(n for _, n, _ in specs))
    out, used = {}, 0
    for name, n, noise in specs:
        ids = tuple(sorted(pool[used : used + n]))
        used += n
        table = _table(rng, n)
        alt = tuple(tuple((t + 1 + rng.randrange(n - 1)) % n for t in row) for row in table)
        out[name] = Family(name, ids, tuple(tuple(row) for row in table), noise, alt)
    return out


def corpus(n: int, length: int, rng: random.Random | int, vocab_size: int = 1024) -> list[list[int]]:
    """``n`` texts of ``length`` token ids, families in TRAINING_MIX order (training data for a demo
    target)."""
    rng = rng if isinstance(rng, random.Random) else random.Random(rng)
    fams = families(vocab_size)
    out = []
    for i in range(n):
        fam = fams[TRAINING_MIX[i % len(TRAINING_MIX)]]
        out.append([fam.word_ids[w] for w in fam.walk(rng, length)])
    return out


def prompts(n: int = 8, seed: int = 0, words: int = 16, vocab_size: int = 1024,
            family: str | None = None) -> list[str]:
    """Prompt texts (noisy, like the training text), families alternating unless one is named."""
    fams = families(vocab_size)
    chosen = [fams[family]] if family else list(fams.values())
    vocab, rng = vocabulary(vocab_size), random.Random(seed)
    out = []
    for i in range(n):
        fam = chosen[i % len(chosen)]
        out.append(" ".join(vocab[fam.word_ids[w]][1:] for w in fam.walk(rng, words)))
    return out


def family_of(prompt: str, vocab_size: int = 1024) -> str | None:
    """The family whose words a prompt text uses (None for foreign text)."""
    vocab = vocabulary(vocab_size)
    for fam in families(vocab_size).values():
        if set(prompt.split()) <= {vocab[i][1:] for i in fam.word_ids}:
            return fam.name
    return None
