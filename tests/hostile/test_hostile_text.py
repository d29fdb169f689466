"""Untrusted text: no output path writes a raw control character or live markup from an untrusted string.

Every string field of a session (``src``, hello, server_args, load report, seams, hooks, configs,
request ids, forward modes, unknown keys; benchmarks/support/untrusted_support.py) is set to a hostile text, and
every output runs over it through the real CLI: ``check`` (text, ``--json``, ``--junit``), ``gate``
and ``record`` over a real PUB socket, ``replay --headless`` (text and ``--json``), ``export``
(csv, jsonl to stdout), ``report`` (markdown, HTML) and ``salvage``; the TUI plays the same
recording with every panel and screen opened (tests/hostile/test_hostile_text_tui.py). The boundary's own
functions are fuzzed with hypothesis.
"""

from __future__ import annotations

import csv
import io
import json
import re
import xml.etree.ElementTree as ET

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from rich.markup import escape as rich_escape
from rich.text import Text

from eagle3scope.wire import untrusted
from support.hostile_support import Tally
from support.cli import invoke
from support.recordings import record
from benchmarks.support.untrusted_support import ATTACKS, FORGED, UNSAFE_OUT, hostile_frames

TEXT = Tally("text", "every command over hostile strings")


def _leak(ok: bool, message: str) -> None:
    """Count an output that let an untrusted string through, then fail on it."""
    if not ok:
        TEXT.add(leaks=1)
    assert ok, message

ALL = "".join(ATTACKS.values())
CASES = {**ATTACKS, "all": ALL}
#: characters XML 1.0 forbids
XML_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
hostile_text = st.text(st.characters(codec="utf-8") | st.sampled_from(list("\x1b\x9b\x07\n\r\t\u202e[]\\=@<>`|")),
                       max_size=40)


def _assert_terminal_safe(out: str, what: str) -> None:
    bad = UNSAFE_OUT.search(out)
    _leak(bad is None, bad and f"{what}: raw {bad.group()!r} at {bad.start()}: {out[max(0, bad.start() - 60):bad.start() + 20]!r}")
    forged = [line for line in out.splitlines() if line.startswith(FORGED)]
    _leak(not forged, f"{what}: a newline in a field forged lines: {forged}")


def _run(*args) -> tuple[int, str]:
    TEXT.add(cases=1)
    try:
        done = invoke(*args, catch_exceptions=False)
    except Exception:
        TEXT.add(crashes=1)
        raise
    out = done.stdout + done.stderr
    if "Traceback" in out:
        TEXT.add(tracebacks=1)
    return done.exit_code, out


# -- the functions ---------------------------------------------------------------------------------

@given(hostile_text)
@example("\\[")  # Rich reads any "\[" as "[" and halves backslashes before a tag
@example("a\\\\")
@example("\\\\[b]\\")
@settings(max_examples=300, deadline=None)
def test_each_function_keeps_its_output_kind_clean(text):
    line = untrusted.terminal(text)
    assert UNSAFE_OUT.search(line) is None and "\n" not in line
    assert untrusted.terminal(line) == line  # printable text passes as it is
    # Rich reads markup() as exactly the safe line, whatever brackets and backslashes it holds, and
    # the tags around it stay tags (a trailing backslash is doubled, as Rich's own escape does)
    assert Text.from_markup(f"[bold]{untrusted.markup(text)}[/bold]").plain == line
    assert Text.from_markup(f"{untrusted.markup(text)}[i]x[/i]").plain == line + "x"
    element = ET.Element("t", a=untrusted.xml(text))
    element.text = untrusted.xml(text)
    back = ET.fromstring(ET.tostring(element))
    assert XML_FORBIDDEN.search(back.text or "") is None
    cell = untrusted.csv_cell(text)
    assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")) and "\n" not in cell
    md = untrusted.markdown(text)
    assert re.search(r"(?<!\\)[\[\]<>`*_|!~&]", md.replace("\\\\", "")) is None  # every opener escaped
    assert "<" not in untrusted.html(text) and XML_FORBIDDEN.search(untrusted.html(text)) is None
    json_line = untrusted.json_line({"k": text})
    assert json.loads(json_line) == {"k": text} and all(" " <= ch < "\x7f" for ch in json_line)


def test_printable_text_is_unchanged_and_escapes_are_visible():
    assert untrusted.terminal("host-1:4242:dp0 /models/Llama 3 ✓ é 日本") == "host-1:4242:dp0 /models/Llama 3 ✓ é 日本"
    assert untrusted.terminal("a\x1b[2Jb\nc\u202ed\x00") == "a\\x1b[2Jb\\nc\\u202ed\\x00"
    assert untrusted.csv_cell("=1+1") == "'=1+1" and untrusted.csv_cell("req-1") == "req-1"
    assert untrusted.markup("[b]x[/b]") == rich_escape("[b]x[/b]")


# -- every command over a hostile recording -------------------------------------------------------

@pytest.fixture(scope="module", params=sorted(CASES), ids=sorted(CASES))
def hostile(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("hostile") / "h.e3s"
    return request.param, record(path, hostile_frames(CASES[request.param]))


def test_check_text_json_and_junit_stay_clean(hostile, tmp_path):
    name, path = hostile
    junit = tmp_path / "c.xml"
    code, out = _run("check", path, "--min-accept-length", "2.5", "--junit", str(junit))
    assert code == 1, out  # aux-off: the rules fire, naming the hostile publisher
    _assert_terminal_safe(out, f"check ({name})")
    assert "aux-capture-off" in out
    raw = junit.read_text(encoding="utf-8")
    _leak(XML_FORBIDDEN.search(raw) is None, "JUnit XML holds a character XML 1.0 forbids")
    cases = ET.fromstring(raw.encode()).iter("testcase")
    assert {c.get("name") for c in cases} >= {"aux-capture-off", "min-accept-length"}
    code, out = _run("check", path, "--json")
    result = json.loads(out)  # --json stays exact: the strings as sent
    assert CASES[name] in result["summary"]["publishers"]
    assert all(" " <= ch < "\x7f" for ch in out.strip())


def test_replay_headless_export_report_and_salvage_stay_clean(hostile, tmp_path):
    name, path = hostile
    code, out = _run("replay", path, "--headless", "--no-pace")
    assert code == 0, out
    _assert_terminal_safe(out, f"replay --headless ({name})")
    code, out = _run("replay", path, "--headless", "--no-pace", "--json")
    assert code == 0 and all(" " <= ch < "\x7f" for ch in out.replace("\n", ""))
    assert json.loads(out.splitlines()[0])["src"] == CASES[name]
    code, out = _run("export", path, "--format", "jsonl", "--out", "-")
    assert code == 0 and all(" " <= ch < "\x7f" for ch in out.replace("\n", ""))
    code, out = _run("export", path, "--format", "csv", "--out", str(tmp_path / "x.csv"))
    assert code == 0
    _assert_terminal_safe(out, f"export ({name})")
    rows = list(csv.DictReader(io.StringIO((tmp_path / "x.csv").read_text(encoding="utf-8"), newline="")))
    assert rows
    for row in rows:
        for key in ("src", "mode", "rid", "pass_widths"):
            _leak(not row[key].startswith(("=", "+", "-", "@", "\t", "\r")), f"formula cell {key}={row[key]!r}")
            _leak(UNSAFE_OUT.search(row[key]) is None and "\n" not in row[key], f"control in csv {key}")
    md_path = tmp_path / "r.md"
    code, out = _run("report", path, "--format", "markdown", "--out", str(md_path))
    assert code == 0, out
    md = md_path.read_text(encoding="utf-8")
    _leak(UNSAFE_OUT.search(md) is None, "control character in the markdown report")
    # outside code fences (whose fence is longer than any backtick run inside) nothing is markup
    outside = re.sub(r"^(`{3,})[a-z]*\n.*?\n\1$", "", md, flags=re.M | re.S)
    _leak(not re.search(r"^`{3,}", outside, re.M), "a fence was closed early")
    outside = re.sub(r"\\.", "", outside)  # what is left once every backslash escape is taken out
    for fragment in ("](https", "<img", "<script", "[bold", "[l]", "![i]", "*x*"):
        _leak(fragment not in outside, f"markdown from data: {fragment}")
    html_path = tmp_path / "r.html"
    code, out = _run("report", path, "--format", "html", "--out", str(html_path))
    assert code == 0, out
    page = html_path.read_text(encoding="utf-8")
    _leak("<script" not in page and "<img" not in page and XML_FORBIDDEN.search(page) is None, "HTML from data")
    code, out = _run("salvage", path, "--out", str(tmp_path / "s.e3s"))
    assert code == 0, out
    _assert_terminal_safe(out, f"salvage ({name})")


@given(hostile_text.filter(bool))
@settings(max_examples=25, deadline=None)
def test_check_and_replay_stay_clean_for_any_text(tmp_path_factory, text):
    path = record(tmp_path_factory.mktemp("h") / "h.e3s", hostile_frames(text, n_steps=70))
    for args in (("check", path), ("replay", path, "--headless", "--no-pace")):
        _code, out = _run(*args)
        _assert_terminal_safe(out, f"{args[0]} ({text!r})")


def test_gate_and_record_over_a_live_socket_stay_clean(tmp_path):
    import subprocess
    import sys

    from support.gating import Publisher, gate

    frames = hostile_frames(ALL, n_steps=300)
    junit = tmp_path / "g.xml"
    with Publisher(frames) as pub:
        TEXT.add(cases=1)
        done = gate("--connect", pub.endpoint, "--steps", "100", "--timeout", "60", "--min-accept-length", "2.5",
                    "--junit", str(junit))
    out = done.stdout + done.stderr
    assert done.returncode == 1, out  # aux-off from a hostile publisher: the rules fire, the floor fails
    _assert_terminal_safe(out, "gate")
    assert "aux-capture-off" in out and "Traceback" not in out
    _leak(XML_FORBIDDEN.search(junit.read_text(encoding="utf-8")) is None, "gate's JUnit XML")
    with Publisher(frames) as pub:
        TEXT.add(cases=1)
        rec = subprocess.run([sys.executable, "-m", "eagle3scope", "record", "--connect", pub.endpoint, "--out",
                              str(tmp_path / "r.e3s"), "--decode-steps", "100", "--duration", "60"],
                             capture_output=True, text=True, timeout=120)
    assert rec.returncode == 0, rec.stderr
    _assert_terminal_safe(rec.stdout + rec.stderr, "record")
    assert "receiving from" in rec.stderr and "Traceback" not in rec.stderr
