"""``eagle3scope report``: markdown with PNG plots, self-contained HTML with inline SVG, same numbers as ``check``."""

from __future__ import annotations

import json
import re
import struct


from benchmarks.support.analysis_streams import H, session
from eagle3scope.cli import main
from support.recordings import record
from support.cli import invoke

BROKEN = dict(accept_p=0.0, algorithm="EAGLE", step_kw={"feature_width": H, "fc": False,
                                                         "capture": {"on": False, "layers": None}})


def check(path) -> dict:
    return json.loads(invoke("check", str(path), "--json").output)


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_html_is_self_contained_with_plots_numbers_and_violations(tmp_path):
    path = record(tmp_path / "bad.e3s", session(300, **BROKEN))
    done = invoke("report", path, "--format", "html")
    assert done.exit_code == 0, done.output
    out = tmp_path / "bad.report.html"
    assert done.output.strip() == str(out)
    page = out.read_text()
    assert page.count("<svg") == 3  # over time, per position, histogram
    # nothing to fetch: no script, no stylesheet or image from elsewhere
    assert "<script" not in page and "<link" not in page and "<img" not in page
    assert not re.search(r"""(src|href)=["']https?:""", page)
    result = check(path)
    for v in result["violations"]:
        assert f"<code>{v['id']}</code>" in page
        assert v["fix"].replace('"', "&quot;").replace("'", "&#x27;")[:40] in page
    assert "aux-capture-off" in page and "fc-bypassed" in page
    assert f"{result['summary']['mean_accept_length']:.3f}" in page


def test_markdown_tables_match_check_and_link_the_png_plots(tmp_path):
    path = record(tmp_path / "ok.e3s", session(800, bs=2, accept_p=0.7))
    out = tmp_path / "share" / "run.md"
    out.parent.mkdir()
    done = invoke("report", path, "--format", "markdown", "--out", str(out))
    assert done.exit_code == 0, done.output
    text = out.read_text()
    summary = check(path)["summary"]
    for i, rate in enumerate(summary["per_position"], start=1):
        hist = summary["histogram"]
        assert f"| {i} | {sum(hist[i - 1:])} | {sum(hist[i:])} | {rate:.3f} |" in text
    assert f"| mean acceptance length (bonus included) | {summary['mean_accept_length']:.3f} |" in text
    assert "No contract rule fired." in text
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert len(links) == 3
    for link in links:
        width, height = png_size(out.parent / link)
        assert width > 300 and height > 200


def test_unreadable_file_exits_2(tmp_path):
    bad = tmp_path / "not-a-session.e3s"
    bad.write_bytes(b"garbage" * 100)
    assert invoke("report", str(bad)).exit_code == 2


def test_a_live_aux_change_shows_as_two_configurations(tmp_path):
    from benchmarks.support.analysis_streams import Stream, hello, healthy_load, step

    s = Stream()
    frames = [s.frame("hello", hello()), s.frame("load", healthy_load())]
    frames += [s.frame("step", step(seq, s.t, [3, 2])) for seq in range(300)]
    frames.append(s.frame("config", {"layers": [0, 1, 2], "captured": [1, 2, 3], "applied": True, "reason": None,
                                     "origin": "control", "request_id": "r1"}))
    frames += [s.frame("step", step(seq, s.t, [0, 1], capture={"on": True, "layers": [1, 2, 3]}))
               for seq in range(300, 600)]
    path = record(tmp_path / "ab.e3s", frames)
    out = tmp_path / "ab.md"
    assert invoke("report", path, "--format", "markdown", "--out", str(out)).exit_code == 0
    text = out.read_text()
    assert "## Aux-layer configurations" in text
    assert "| 0,1,2 | 1,2,3 | control | 300 | 300 | 1.500 |" in text  # (0 + 1) / 2 + bonus
    assert "| startup | 0 | 300 | 3.500 |" in text


NO_MATPLOTLIB = """
import sys
sys.modules["matplotlib"] = None  # what a [viewer]-only install has: importing it fails
from eagle3scope.cli import main
sys.exit(main(sys.argv[1:], standalone_mode=True))
"""


def test_report_without_matplotlib_is_written_without_plots_and_says_how_to_get_them(tmp_path):
    import subprocess
    import sys

    path = record(tmp_path / "run.e3s", session(300, **BROKEN))
    fired = check(path)["violations"][0]["id"]
    for fmt, suffix in (("html", ".html"), ("markdown", ".md")):
        out = tmp_path / f"r{suffix}"
        done = subprocess.run([sys.executable, "-c", NO_MATPLOTLIB, "report", str(path), "--format", fmt,
                               "--out", str(out)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "pip install 'eagle3scope[report]'" in done.stderr
        text = out.read_text()
        assert "matplotlib is not installed" in text and fired in text
        assert "<svg" not in text and ".png" not in text
        assert not (tmp_path / "r-plots").exists()
