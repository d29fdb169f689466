"""Structured-output requests for the demo language: SGLang grammars over a prompt's family words.

Production clients constrain many requests (JSON mode, tool calls): the target then commits its best
token *the grammar allows*, while the draft, which knows nothing of the grammar, proposes its
unconstrained guess. The demo's ``constrained`` workload sends such requests beside free ones.

The demo tokenizer is word-level: its pieces are ``▁word`` (SentencePiece's word-start marker), and
SGLang's grammar backend (xgrammar) reads them as raw strings, so a grammar spells a word as
``▁word`` and matches the pieces, not the decoded text (" word"). The demo vocabulary has no
punctuation, so JSON cannot be spelled; the two grammars stand for the two ways a format meets a
model: ``regex`` allows only the family's own words (what the target writes anyway, as JSON mode
asks a JSON-trained model for JSON), ``ebnf`` makes the reply alternate between the two halves of the
family's words (a layout the target does not follow, so the grammar overrides it often).
"""

from __future__ import annotations

import re

from eagle3scope.demo.language import families, family_of, vocabulary

#: The constraint kinds the ``constrained`` workload cycles through, beside free requests.
KINDS = ("regex", "ebnf")
#: What the workloads send per request, in turn: ``None`` is a free request.
WORKLOADS = {"free": (None,), "constrained": (None, "regex", None, "ebnf")}


def family_pieces(prompt: str, vocab_size: int = 1024) -> list[str]:
    """The tokenizer pieces (``▁word``) of the family a demo prompt is written in."""
    name = family_of(prompt, vocab_size)
    if name is None:
        raise ValueError("not a demo prompt: its words belong to no family")
    vocab = vocabulary(vocab_size)
    return [vocab[i] for i in families(vocab_size)[name].word_ids]


def sampling_params(kind: str, prompt: str, vocab_size: int = 1024) -> dict:
    """SGLang ``sampling_params`` entries constraining a reply to ``prompt`` by grammar ``kind``."""
    pieces = family_pieces(prompt, vocab_size)
    if kind == "regex":
        return {"regex": "(" + "|".join(map(re.escape, pieces)) + ")+"}
    if kind == "ebnf":
        half = len(pieces) // 2
        first, second = (" | ".join(f'"{p}"' for p in part) for part in (pieces[:half], pieces[half:]))
        return {"ebnf": f"root ::= (first second)+ first?\nfirst ::= {first}\nsecond ::= {second}"}
    raise ValueError(f"unknown constraint kind {kind!r} (known: {', '.join(KINDS)})")


def pieces_of(text: str) -> str:
    """A demo reply as the grammar saw it: decoded words back to their ``▁word`` pieces."""
    return "".join("\u2581" + word for word in text.split())


def obeys(kind: str, prompt: str, text: str, vocab_size: int = 1024) -> bool:
    """Whether a reply keeps to the grammar ``kind`` for ``prompt`` (reading it as the grammar did)."""
    pieces, words = family_pieces(prompt, vocab_size), re.findall("\u2581[^\u2581]+", pieces_of(text))
    if not words or not set(words) <= set(pieces):
        return False
    if kind == "regex":
        return True
    half = set(pieces[: len(pieces) // 2])
    return all((word in half) == (i % 2 == 0) for i, word in enumerate(words))
