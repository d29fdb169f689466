"""The one boundary between untrusted strings and every output: one function per output kind.

Every string a frame, a file or a server names (``src``, request ids, seam names, paths, hook
details, config reasons, token texts, hello and load-report strings) may hold anything. Each
output passes it through the function of its kind, at the place it is written:

* :func:`terminal`: a terminal line (``check``, ``gate``, ``replay --headless``, ``record``, the shim's
  verdict lines in the server's log, and
  the TUI through ``rich.text.Text``, never as markup). C0/C1 controls (ESC, so every CSI, OSC and
  DCS sequence with it), DEL, NUL, bidi overrides/isolates/marks, line and paragraph separators,
  BOM and lone surrogates are written as visible escapes (``\\x1b``, ``\\u202e``); a newline is
  ``\\n``, so one field stays on one line and cannot forge a ``PASS`` line.
* :func:`lines`: several terminal lines, each sanitised on its own.
* :func:`json_line`: one JSON object per line (``--json``, jsonl): ASCII only, DEL escaped too.
* :func:`markup`: for the few places that must build a Rich markup string.
* :func:`xml`: JUnit XML text and attributes: as :func:`terminal`, but newlines and tabs kept;
  nothing XML 1.0 forbids remains (the serializer escapes ``& < > "`` itself).
* :func:`markdown`: inline markdown: as :func:`terminal`, plus a backslash before every character
  that opens code, emphasis, a link, an image, HTML or a table cell, and (``starts_line``) before a
  leading block marker (CommonMark escapes), so the text reads as written and does nothing else.
* :func:`csv_cell`: as :func:`terminal`, plus a leading ``'`` before ``= + - @`` (and tab/CR,
  which :func:`terminal` already escapes), as OWASP advises against formula injection.
* :func:`html`: escaped HTML text (as :func:`xml`, then ``html.escape``).

Pure functions of ``str(value)``; wire imports nothing else, so every layer can call them.
"""

from __future__ import annotations

import html as _html
import json
import re
from typing import Iterable

# C0, DEL, C1; ALM; LRM/RLM; line/paragraph separators; LRE..RLO embeddings and overrides; LRI..PDI
# isolates; BOM; interlinear annotations; lone surrogates; the two XML-forbidden noncharacters.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069"
                     "\ufeff\ufff9-\ufffb\ud800-\udfff\ufffe\uffff]")
_UNSAFE_KEEP_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069"
                                "\ufeff\ufff9-\ufffb\ud800-\udfff\ufffe\uffff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_MD_INLINE = re.compile(r"([\\`*_\[\]<>!|~&])")  # what opens code, emphasis, links, images, HTML, cells
_MD_BLOCK = re.compile(r"^(\s*)([#+=>-]|\d+[.)])")  # what a line may start a heading, list or quote with
_RICH_TAG = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])")  # what Rich's markup parser reads as a tag
_RICH_ESCAPED_BRACKET = re.compile(r"(\\+)(?=\[(?![a-z#/@][^[]*?]))")  # Rich turns any other "\[" into "["
_FORMULA = ("=", "+", "-", "@")


def _visible(match: re.Match) -> str:
    ch = match.group()
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal(value: object) -> str:
    """``value`` as one safe terminal line (controls, bidi and newlines written as escapes)."""
    text = value if type(value) is str else str(value)
    return _UNSAFE.sub(_visible, text) if _UNSAFE.search(text) else text


def lines(rows: Iterable[object]) -> str:
    """Rows joined by newlines, each row made one safe terminal line."""
    return "\n".join(map(terminal, rows))


def json_line(obj: object, **kwargs) -> str:
    """``obj`` as one line of JSON with nothing but printable ASCII (json escapes the rest but DEL)."""
    return json.dumps(obj, ensure_ascii=True, **kwargs).replace("\x7f", "\\u007f")


def markup(value: object) -> str:
    """``value`` for a Rich markup string: a safe line whose brackets are not tags and whose
    backslashes survive Rich's parser, which turns any ``\\[`` into ``[`` and halves the backslashes
    before a tag (so a trailing run is doubled: the markup goes on with one)."""
    text = _RICH_ESCAPED_BRACKET.sub(lambda m: m.group(1) + "\\", terminal(value))
    text = _RICH_TAG.sub(lambda m: f"{m.group(1)}{m.group(1)}\\{m.group(2)}", text)
    trailing = len(text) - len(text.rstrip("\\"))  # markup goes on with a tag: Rich halves these
    return text + "\\" * trailing


def xml(value: object) -> str:
    """``value`` as XML 1.0 text: newlines and tabs kept, every other control escaped visibly."""
    text = value if type(value) is str else str(value)
    return _UNSAFE_KEEP_LINES.sub(_visible, text) if _UNSAFE_KEEP_LINES.search(text) else text


def markdown(value: object, *, starts_line: bool = False) -> str:
    """``value`` as inline markdown text: one line, no markup of its own (CommonMark backslash
    escapes); ``starts_line``: it begins a line, where ``#``, ``-``, ``1.`` ... would open a block."""
    text = _MD_INLINE.sub(r"\\\1", terminal(value))
    if starts_line:
        text = _MD_BLOCK.sub(lambda m: f"{m.group(1)}{m.group(2)[:-1]}\\{m.group(2)[-1]}", text)
    return text


def csv_cell(value: object) -> str:
    """``value`` as a CSV cell no spreadsheet runs as a formula."""
    text = terminal(value)
    return "'" + text if text.startswith(_FORMULA) else text


def html(value: object) -> str:
    """``value`` as HTML text (newlines kept: HTML folds them)."""
    return _html.escape(xml(value))
