"""Docs and code comments are reference, not a diary: none names a work period or an issue number.

BENCHMARKS.md, TESTING.md, RELIABILITY.md and README.md give the current figure with its command,
machine and date, and comments cite a stable heading or say the behaviour; history lives in git. The
check matches the team's before-stop hook (a session, round or draw followed by a number) and adds
issue numbers and ordinal work periods ("the fifth" mutation draw). Legitimate uses are allowed by
name: a decode/speculative/verify/draft round numbered within a step, a ``--rounds N`` flag, an
upstream project's issue, the project named ("EAGLE issue 222"). What is scanned in code: comments and docstrings
everywhere, and every string literal in the two packages the hook reads (``eagle3scope``,
``instrumentation``); the mutation script's labels are data, not prose.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "BENCHMARKS.md", "TESTING.md", "RELIABILITY.md")
#: Where every string literal counts (what the hook scans whole), and where only comments and docstrings do.
PACKAGES = ("eagle3scope", "instrumentation")
PROSE_ONLY = ("tests", "benchmarks", "cpu_engine", "scripts")

ORDINAL = r"first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|final|latest|previous|next"
HISTORY = re.compile(
    r"\b(?:session|round|draw|work\ period)\ \#?\d+\b"  # the hook's pattern, plus work periods
    r"|\bissue\ \#?\d+\b"
    rf"|\b(?:{ORDINAL})\ (?:mutation\ )?(?:draw|session|work\ period)\b",
    re.IGNORECASE | re.VERBOSE,
)
#: A hit inside one of these spans is a legitimate use, not history.
ALLOWED = re.compile(
    r"\b(?:decode|speculative|verify|draft)\ round\ \#?\d+\b"  # a round numbered within a run
    r"|--rounds?\ \d+"  # a command-line flag
    r"|\b(?:EAGLE|SGLang|sglang|vLLM|vllm|PyTorch|pytorch|torch|transformers|speculators|SpecForge|msgspec"
    r"|pyzmq|Textual)\ issue\ \#?\d+\b",  # an upstream project's issue: "EAGLE issue 222"
    re.VERBOSE,
)


def history_mentions(text: str) -> list[str]:
    """Every work-period or issue mention in ``text`` that no allowed use covers."""
    allowed = [m.span() for m in ALLOWED.finditer(text)]
    return [m.group(0) for m in HISTORY.finditer(text)
            if not any(a <= m.start() and m.end() <= b for a, b in allowed)]


def _docstrings(tree: ast.AST) -> dict[int, str]:
    """Docstrings by the line their string starts on."""
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = node.body[0] if node.body else None
            if isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant) and isinstance(doc.value.value, str):
                found[doc.lineno] = doc.value.value
    return found


def prose_of(source: str, all_strings: bool) -> list[tuple[int, str]]:
    """(line, text) of a module's comments and docstrings, or of every string literal too."""
    docs = _docstrings(ast.parse(source))
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out.append((tok.start[0], tok.string))
        elif tok.type == tokenize.STRING and (all_strings or tok.start[0] in docs):
            out.append((tok.start[0], tok.string))
    return out


def _python_files(top: str):
    return sorted(p for p in (ROOT / top).rglob("*.py") if "__pycache__" not in p.parts)


# -- the pattern itself ------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "measured in session 12", "Round 5's figures", "the draw 4 survivors", "(BENCHMARKS.md, issue 28)",
    "issue #43", "the fifth draw's survivors", "the latest work period", "see work period 3",
    "Issue 14's check", "the final mutation draw",
])
def test_a_work_period_or_issue_number_is_found(text):
    assert history_mentions(text), text


@pytest.mark.parametrize("text", [
    "decode round 3 accepted two drafts", "bench_shim.py --batch 8 --rounds 2", "EAGLE issue 222",
    "25 rounds of 3 requests", "a recording session's metadata", "each round's hooks", "the issue's bound",
    "draws 30 mutants", "SessionState holds 256 publishers", "verify round 1 of the step",
])
def test_legitimate_uses_are_let_through(text):
    assert history_mentions(text) == [], text


def test_only_comments_and_docstrings_count_outside_the_packages():
    source = 'LABEL = "round 4 shim: a planted bug"\n# issue 9 was here\ndef f():\n    """Since session 2."""\n'
    assert [t for _, t in prose_of(source, all_strings=False) if history_mentions(t)] == [
        "# issue 9 was here", '"""Since session 2."""']
    assert len([t for _, t in prose_of(source, all_strings=True) if history_mentions(t)]) == 3


# -- the repository ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", DOCS)
def test_the_reference_documents_name_no_work_period_or_issue(name):
    hits = [f"{name}:{n}: {found}" for n, line in enumerate((ROOT / name).read_text().splitlines(), 1)
            for found in history_mentions(line)]
    assert hits == [], "\n".join(hits)


@pytest.mark.parametrize("top", PACKAGES + PROSE_ONLY)
def test_code_comments_name_no_work_period_or_issue(top):
    hits = []
    for path in _python_files(top):
        source = path.read_text()
        if not HISTORY.search(source):  # most files: nothing to tokenize
            continue
        for line, text in prose_of(source, all_strings=top in PACKAGES):
            hits += [f"{path.relative_to(ROOT)}:{line}: {found}" for found in history_mentions(text)]
    assert hits == [], "\n".join(hits)
