"""Untrusted-text figures (RELIABILITY.md): every output over recordings whose every string is hostile.

For each text of ``benchmarks/support/untrusted_support.py`` (and all of them at once) a recording is made and
run through ``check`` (text and JUnit), ``replay --headless``, ``export --format csv`` and ``report
--format markdown``; an output *leaks* when a raw control character, a forged line, a formula
cell, markup outside a code fence or invalid XML reaches it. Uses only what every checkout has, so
``PYTHONPATH=/path/to/older/checkout`` gives the "before" figures.
"""

from __future__ import annotations

import csv
import io
import re
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the checkout: benchmarks.support

from click.testing import CliRunner  # noqa: E402

from eagle3scope.cli import main as cli  # noqa: E402
from eagle3scope.store import SessionWriter  # noqa: E402
from eagle3scope.wire import encode_frame  # noqa: E402
from benchmarks.support.untrusted_support import ATTACKS, FORGED, UNSAFE_OUT, hostile_frames  # noqa: E402

XML_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _record(path: Path, frames) -> str:
    with SessionWriter(path) as w:
        for f in frames:
            w.add(encode_frame(f.kind, f.body, src=f.src, n=f.n, t=f.t), f)
    return str(path)


def _terminal_leaks(out: str) -> bool:
    return bool(UNSAFE_OUT.search(out)) or any(line.startswith(FORGED) for line in out.splitlines())


def run(tmp: Path) -> tuple[Counter, Counter]:
    cases, leaks = Counter(), Counter()
    for name, text in {**ATTACKS, "all": "".join(ATTACKS.values())}.items():
        path = _record(tmp / f"{name}.e3s", hostile_frames(text, n_steps=100))
        r = CliRunner()
        junit = tmp / f"{name}.xml"
        out = r.invoke(cli, ["check", path, "--junit", str(junit)])
        cases["check"] += 1
        leaks["check"] += _terminal_leaks(out.stdout + out.stderr)
        cases["junit"] += 1
        try:
            raw = junit.read_text(encoding="utf-8")
            ET.fromstring(raw.encode())
            leaks["junit"] += bool(XML_FORBIDDEN.search(raw))
        except (ET.ParseError, OSError, UnicodeDecodeError):
            leaks["junit"] += 1
        out = r.invoke(cli, ["replay", path, "--headless", "--no-pace"])
        cases["replay --headless"] += 1
        leaks["replay --headless"] += _terminal_leaks(out.stdout + out.stderr)
        r.invoke(cli, ["export", path, "--format", "csv", "--out", str(tmp / f"{name}.csv")])
        rows = list(csv.DictReader(io.StringIO((tmp / f"{name}.csv").read_text(encoding="utf-8"), newline="")))
        cases["export csv"] += 1
        leaks["export csv"] += any(row[k].startswith(("=", "+", "-", "@", "\t", "\r")) or UNSAFE_OUT.search(row[k])
                                   for row in rows for k in ("src", "mode", "rid"))
        r.invoke(cli, ["report", path, "--format", "markdown", "--out", str(tmp / f"{name}.md")])
        md = (tmp / f"{name}.md").read_text(encoding="utf-8")
        outside = re.sub(r"^(`{3,})[a-z]*\n.*?\n\1$", "", md, flags=re.M | re.S)
        outside = re.sub(r"\\.", "", outside)
        cases["report markdown"] += 1
        leaks["report markdown"] += bool(UNSAFE_OUT.search(md)) or any(
            frag in outside for frag in ("](https", "<img", "<script", "[bold", "![i]"))
    return cases, leaks


async def _tui_case(path: str) -> tuple[int, int]:
    """(screens with a raw control character, 1 if the app crashed) over panel keys and screens."""
    from benchmarks.support.tui_support import paused_app, screen_text

    app = paused_app(path, speed=64.0)
    dirty = 0
    async with app.run_test(size=(140, 44)) as pilot:
        await pilot.press("space")
        for _ in range(200):
            await pilot.pause(0.05)
            if app.feed.position()["finished"] or app.return_code is not None:
                break
        for keys in (("1",), ("2",), ("3",), ("4",), ("l",), ("escape", "1", "tab", "enter")):
            if app.return_code is not None:
                break
            await pilot.press(*keys)
            await pilot.pause()
            if app.return_code is None:
                dirty += bool(UNSAFE_OUT.search(screen_text(app).replace("\n", " ")))
    return dirty, int(app.return_code not in (None, 0))


def tui(tmp: Path) -> str:
    import asyncio

    crashed = dirty = 0
    names = [*ATTACKS, "all"]
    for name in names:
        text = ATTACKS.get(name) or "".join(ATTACKS.values())
        try:
            d, c = asyncio.run(_tui_case(_record(tmp / f"tui-{name}.e3s", hostile_frames(text, n_steps=100))))
        except Exception:  # Textual re-raises what killed the app (a MarkupError before this change)
            d, c = 0, 1
        dirty, crashed = dirty + d, crashed + c
    return f"TUI: {crashed} of {len(names)} hostile recordings crashed the app; {dirty} screens showed a raw control"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cases, leaks = run(Path(tmp))
        if "--tui" in sys.argv:
            print(tui(Path(tmp)))
    for output in cases:
        print(f"{output}: {leaks[output]} of {cases[output]} hostile recordings leaked")
    print(f"all: {sum(leaks.values())} of {sum(cases.values())}")


if __name__ == "__main__":
    main()
