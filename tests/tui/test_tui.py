"""The TUI driven headless with Textual's Pilot: numbers on screen, keys, replay seeks, themes.

The stream comes from the ``recording`` fixture: by default a synthetic two-publisher session
written to a real session file (one healthy publisher, one with aux capture off); set
``EAGLE3SCOPE_TUI_RECORDING`` to a real-engine recording to run the same tests against it.
Expected values are computed from the recording's frames here, not by the analysis code.
"""

from __future__ import annotations

import os
import random
import re
from pathlib import Path

import pytest

pytest.importorskip("textual")

from benchmarks.support.synthetic import hello_body, load_body, session_frames, step_body  # noqa: E402
from benchmarks.support.tui_support import (  # noqa: E402
    cumulative_mean, paused_app, play_to_end, recorded_frames, run_async, screen_text, steps_of, write_recording,
)

from eagle3scope.tui import themes  # noqa: E402
from eagle3scope.tui.app import SPEEDS, ScopeApp  # noqa: E402
from eagle3scope.tui.feed import LiveFeed, ReplayFeed  # noqa: E402
from eagle3scope.tui.screens import HelpScreen, LoadReportScreen, ViolationScreen  # noqa: E402
from eagle3scope.tui.panels import Timeline  # noqa: E402


@pytest.fixture(autouse=True)
def config_home(tmp_path, monkeypatch):
    """Never touch the user's ~/.config: the remembered theme goes to a temporary folder."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "config"


@pytest.fixture(scope="module")
def recording(tmp_path_factory) -> Path:
    given = os.environ.get("EAGLE3SCOPE_TUI_RECORDING")
    if given:
        return Path(given)
    path = tmp_path_factory.mktemp("rec") / "two-publishers.e3s"
    return write_recording(path, session_frames(1500, src="dp0", bs=2, seed=1), session_frames(400, src="dp1", aux_off=True, seed=2))


@pytest.fixture(scope="module")
def frames(recording):
    return recorded_frames(recording)


@run_async
async def test_step_by_step_numbers_match_the_stream(recording, frames):
    app = paused_app(recording)
    steps = steps_of(frames)
    async with app.run_test(size=(120, 40)) as pilot:
        app.seek(str(steps[0].body["seq"]))
        for _ in range(7):
            await pilot.press("s")
        await pilot.pause()
        text = screen_text(app)
        shown = steps[:8]
        assert f"step {shown[-1].body['seq']} " in text
        assert f"cumulative {cumulative_mean(shown):.2f}" in text
        assert f"{len([f for f in shown if f.body.get('mode', 'decode') == 'decode']):,} steps" in text


@run_async
async def test_replay_to_the_end_shows_the_whole_session(recording, frames):
    app = paused_app(recording, speed=64.0)
    async with app.run_test(size=(120, 40)) as pilot:
        text = await play_to_end(app, pilot)
        assert f"cumulative {cumulative_mean(steps_of(frames)):.2f}" in text
        assert f"{len(steps_of(frames)):,} steps" in text


@pytest.mark.parametrize("how", ["method", "keys"])
@run_async
async def test_seek_to_step_lands_on_that_step(recording, frames, how):
    steps = steps_of(frames)
    target = steps[len(steps) // 2].body["seq"]
    app = paused_app(recording)
    async with app.run_test(size=(120, 40)) as pilot:
        if how == "keys":
            await pilot.press("g", *str(target), "enter")
        else:
            app.seek(str(target))
        await pilot.press("3")  # draft-vs-target panel: newest row first
        await pilot.pause()
        assert app.feed.position()["seq"] == target
        assert app.query_one(Timeline).info["seq"] == target
        first_row = app.query_one("#draft-table").get_row_at(0)
        assert first_row[0] == str(target)
        assert f"step {target} " in screen_text(app)


@run_async
async def test_seek_to_time_lands_on_the_first_step_at_or_after_it(recording, frames):
    t0 = frames[0].t
    expected = next(f for f in steps_of(frames) if f.t >= t0 + 7_500_000_000)
    app = paused_app(recording)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("g", *"7.5s", "enter")
        await pilot.pause()
        assert app.feed.position()["seq"] == expected.body["seq"]
        # a seek is not a loss: no frames-lost violation, no "lost in transit" event
        assert all(v.id != "frames-lost" for v in app.query_one("#violations").violations)


@run_async
async def test_keys(recording, frames, config_home):
    app = paused_app(recording, remember=True)
    async with app.run_test(size=(120, 40)) as pilot:
        app.seek("0")
        # pause / resume act on the replay
        await pilot.press("space")
        assert not app.feed.paused
        await pilot.press("space")
        assert app.feed.paused
        assert "PAUSED" in screen_text(app)
        # panels
        switcher = app.query_one("#panels")
        for key, panel in (("2", "aux"), ("3", "draft"), ("4", "events"), ("1", "overview"), ("v", "aux"), ("a", "aux"), ("e", "events"),
                           ("5", "advisor"), ("v", "overview"), ("n", "advisor")):
            await pilot.press(key)
            assert switcher.current == panel, key
        # speed: bounded 0.25x..64x
        for _ in range(12):
            await pilot.press("plus")
        assert app.feed.speed == SPEEDS[-1] == 64.0
        for _ in range(12):
            await pilot.press("minus")
        assert app.feed.speed == SPEEDS[0] == 0.25
        # load report
        await pilot.press("l")
        assert isinstance(app.screen, LoadReportScreen)
        assert frames[1].body["draft_class"] in screen_text(app)
        await pilot.press("escape")
        # help lists every binding
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        text = screen_text(app)
        for binding in app.BINDINGS:
            usable = app.check_action(binding.action.split("(")[0], ())
            assert (binding.description in text) == usable, binding.description
        await pilot.press("escape")
        # theme cycles and is remembered
        before = app.theme
        await pilot.press("t")
        assert app.theme != before
        assert themes.remembered_theme() == app.theme_name
        assert (config_home / "eagle3scope" / "tui.json").is_file()
        await pilot.press("q")
    assert app.return_code == 0


@run_async
async def test_filter_by_request(recording, frames):
    steps = steps_of(frames)
    app = paused_app(recording)
    async with app.run_test(size=(120, 40)) as pilot:
        app.seek(str(steps[-60].body["seq"]))
        for _ in range(40):
            await pilot.press("s")
        rid = steps[-30].body["rids"][0]
        await pilot.press("f", *rid, "enter")
        await pilot.pause()
        assert app.query_one("#panels").current == "draft"
        table = app.query_one("#draft-table")
        assert table.row_count > 0
        assert all(rid[-16:] in str(table.get_row_at(i)[2]) for i in range(table.row_count))
        assert f"filter {rid}" in screen_text(app)


@run_async
async def test_draft_panel_src_tells_two_servers_on_one_host_apart(tmp_path):
    """Both servers are DP rank 0 on the same host: the column shows the pid tail that differs, where the
    first 8 characters of ``host:pid:dp0`` showed the same host twice."""
    host = "gpu-node-17.cluster.example"
    srcs = [f"{host}:4711:dp0", f"{host}:4712:dp0"]
    path = write_recording(tmp_path / "two-servers.e3s", *(session_frames(30, src=src, seed=i) for i, src in enumerate(srcs)))
    app = paused_app(path, speed=64.0)
    async with app.run_test(size=(120, 40)) as pilot:
        await play_to_end(app, pilot)
        await pilot.press("3")
        table = app.query_one("#draft-table")
        shown = {str(table.get_row_at(i)[1]) for i in range(table.row_count)}
        assert shown == {"4711:dp0", "4712:dp0"}, shown


async def past_aux_off(app, pilot, frames, steps: int = 3) -> None:
    """Seek to the aux-off publisher's sixth step, then a few steps on: its rules have fired."""
    app.seek(str(steps_of(frames, "dp1")[5].body["seq"]))
    for _ in range(steps):
        await pilot.press("s")
    await pilot.pause()


@run_async
async def test_violation_enter_opens_explanation_and_fix(recording, frames):
    app = paused_app(recording)
    async with app.run_test(size=(120, 40)) as pilot:
        await past_aux_off(app, pilot, frames)
        panel = app.query_one("#violations")
        assert panel.violations, "the aux-off publisher must trip a rule"
        first = panel.violations[0]
        assert first.id in screen_text(app)
        app.query_one("#violations-table").focus()
        await pilot.press("enter")
        assert isinstance(app.screen, ViolationScreen)
        text = screen_text(app)
        assert first.title in text and first.fix[:40] in text.replace("\n", " ") and "Evidence" in text
        await pilot.press("escape")
        assert not isinstance(app.screen, ViolationScreen)


@pytest.mark.parametrize("size", [(80, 24), (120, 30), (120, 40), (160, 48)], ids=lambda s: f"{s[0]}x{s[1]}")
@run_async
async def test_every_size_keeps_the_essentials(recording, frames, size):
    """Acceptance mean, per-position rates, every violation and each publisher's hook failures stay
    on screen; the violations table never scrolls sideways; Enter explains without a Tab first;
    tall screens show the whole evidence of a violation."""
    app = paused_app(recording)
    async with app.run_test(size=size) as pilot:
        await past_aux_off(app, pilot, frames)
        text = screen_text(app)
        violations = app.query_one("#violations").violations
        assert violations, "the aux-off publisher must trip a rule"
        assert re.search(r"accept length \d+\.\d\d", text) and "p1 " in text
        assert f"Violations {len(violations)}" in text
        assert all(v.id in text for v in violations)
        publisher_lines = [line for line in text.splitlines() if line.startswith(" ● ")]
        assert len(publisher_lines) == 2 and all("hook" in line for line in publisher_lines)
        table = app.query_one("#violations-table")
        assert table.virtual_size.width <= table.scrollable_content_region.width
        if size[1] >= 36:
            first = violations[0]
            flat = re.sub(r"\s+", " ", text)
            assert all(f"{key}=" in flat for key in first.evidence), first.evidence
        await pilot.press("enter")
        assert isinstance(app.screen, ViolationScreen)


@run_async
async def test_violations_follow_a_terminal_resize(recording, frames):
    """Whole evidence on a tall terminal; one line each for id, title, evidence once it shrinks."""
    app = paused_app(recording)
    async with app.run_test(size=(160, 48)) as pilot:
        await past_aux_off(app, pilot, frames, steps=1)
        table = app.query_one("#violations-table")
        tall = [row.height for row in table.ordered_rows]
        await pilot.resize_terminal(160, 30)
        await pilot.pause()
        await pilot.pause()
        short = [row.height for row in table.ordered_rows]
        assert tall and all(h > 3 for h in tall), tall
        assert len(short) == len(tall) and all(h == 3 for h in short), short


@run_async
async def test_panel_keys_focus_the_panels_table(recording, frames):
    app = paused_app(recording)
    async with app.run_test(size=(120, 40)) as pilot:
        await past_aux_off(app, pilot, frames, steps=1)
        for key, focused in (("3", "draft-table"), ("4", "events"), ("2", "aux"), ("5", "advisor-table"),
                             ("1", "violations-table")):
            await pilot.press(key)
            assert app.focused is not None and app.focused.id == focused, key
        await pilot.press("3", "down", "down")
        assert app.query_one("#draft-table").cursor_row == 2


def test_themes_ship_and_define_every_variable():
    used = set(re.findall(r"\$(e3s-[a-z-]+)", (Path(themes.__file__).parent / "app.tcss").read_text()))
    found = themes.available_themes()
    assert {"dark", "light", "high-contrast"} <= set(found)
    for name, theme_file in found.items():
        theme = theme_file.to_textual()
        assert used <= set(theme.variables), name
    assert found["light"].to_textual().dark is False


def test_themes_install_with_a_wheel(tmp_path, monkeypatch):
    """pyproject maps themes/*.tcss to <prefix>/share/eagle3scope/themes, and that is where an
    installed (non-editable) package finds them when there is no source checkout beside it."""
    import shutil
    import tomllib

    root = Path(__file__).resolve().parents[2]
    mapping = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["data-files"]
    assert mapping["share/eagle3scope/themes"] == ["themes/*.tcss"]
    prefix = tmp_path / "prefix"
    installed = prefix / "share" / "eagle3scope" / "themes"
    installed.mkdir(parents=True)
    for path in (root / "themes").glob("*.tcss"):
        shutil.copy(path, installed)
    fake_module = tmp_path / "site" / "eagle3scope" / "tui" / "themes.py"  # no themes/ two levels up
    monkeypatch.setattr(themes, "__file__", str(fake_module))
    monkeypatch.setattr(themes.sysconfig, "get_path", lambda name: str(prefix))
    monkeypatch.setattr(themes.sys, "prefix", str(prefix))
    assert themes.theme_dirs() == [installed]
    assert {"dark", "light", "high-contrast"} <= set(themes.available_themes())


def test_theme_by_path_and_remembered_choice(tmp_path, config_home, recording):
    custom = tmp_path / "mine.tcss"
    custom.write_text("$primary: #123456;\n$e3s-bad: #ff0000;\n")
    assert themes.load_theme(str(custom)).to_textual().primary == "#123456"
    assert themes.remembered_theme() == themes.DEFAULT_THEME
    themes.remember_theme("light")
    assert themes.remembered_theme() == "light"
    assert ScopeApp(ReplayFeed(recording), remember=False).theme == "e3s-light"  # never run: theme only


@run_async
async def test_live_feed_shows_a_violation_within_a_second():
    """A real Publisher over ZeroMQ; the violation must be on screen < 1 s after the step."""
    import time

    from eagle3scope.live.subscriber import Subscriber
    from eagle3scope_shim.publisher import Publisher

    pub = Publisher("tcp://127.0.0.1:0", "live0", sticky_interval_s=0.2)
    pub.start()
    app = ScopeApp(LiveFeed(Subscriber([pub.endpoint])), theme="dark", remember=False)
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            pub.set_sticky("hello", hello_body(sglang_version="0.5.23-live"))
            pub.set_sticky("load", load_body())
            for _ in range(100):
                await pilot.pause(0.05)
                if "0.5.23-live" in screen_text(app):
                    break
            assert "0.5.23-live" in screen_text(app)
            assert "aux-capture-off" not in screen_text(app)
            rng = random.Random(5)
            sent = time.monotonic()
            for seq in range(20):
                pub.submit("step", step_body(seq, rng=rng, aux_off=True, t_ns=time.time_ns()))
            seen = None
            while time.monotonic() - sent < 3.0:
                await pilot.pause(0.02)
                if "aux-capture-off" in screen_text(app):
                    seen = time.monotonic() - sent
                    break
            assert seen is not None and seen < 1.0, seen
            # live pause freezes the screen (ingest goes on); s advances the frozen view once
            await pilot.press("space")
            for seq in range(20, 60):
                pub.submit("step", step_body(seq, rng=rng, t_ns=time.time_ns()))
            for _ in range(200):
                await pilot.pause(0.05)
                if app.feed.read(lambda s: s.acceptance.n_steps) == 60:
                    break
            assert app.feed.read(lambda s: s.acceptance.n_steps) == 60  # ingest went on
            assert "20 steps" in screen_text(app) and "PAUSED" in screen_text(app)
            await pilot.press("s")
            await pilot.pause()
            assert "60 steps" in screen_text(app)
    finally:
        pub.close(0)


@run_async
async def test_draft_panel_decodes_with_the_targets_tokenizer(tmp_path):
    """hello names the model dir; its tokenizer.json turns ids into text, first rejected highlighted."""
    tokenizers = pytest.importorskip("tokenizers")
    from eagle3scope.wire import encode_frame

    words = ["the", "cat", "sat", "on", "mat", "[UNK]"]
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.save(str(tmp_path / "tokenizer.json"))
    hello = hello_body()
    hello["server_args"] = dict(hello["server_args"], model_path=str(tmp_path))
    step = step_body(0, t_ns=2)
    step["draft_ids"], step["accepted"], step["accepted_ids"] = [[0, 1, 2]], [1], [[0, 3]]
    raw = [encode_frame("hello", hello, src="tok", n=0, t=1), encode_frame("step", step, src="tok", n=1, t=2)]
    app = paused_app(write_recording(tmp_path / "tok.e3s", raw))
    async with app.run_test(size=(120, 30)) as pilot:
        app.seek("0")
        await pilot.press("3")
        for _ in range(50):  # the tokenizer loads in a worker thread
            await pilot.pause(0.05)
            if "cat" in str(app.query_one("#draft-table").get_row_at(0)[4]):
                break
        row = app.query_one("#draft-table").get_row_at(0)
        proposed, committed = row[4], row[5]
        assert proposed.plain.split() == ["the", "cat", "sat"] and committed.plain.split() == ["the", "on"]
        rejected = [proposed.plain[span.start : span.end] for span in proposed.spans if "reverse" in str(span.style)]
        assert rejected == ["cat"]  # position 2 (the first rejected) is the highlighted one


@run_async
async def test_draft_panel_colours_a_trees_accepted_path_not_its_first_nodes(tmp_path):
    """topk > 1: draft_ids are tree nodes in score order; the accepted one is node 2 (accepted_path),
    so node 2 is coloured accepted, nodes 0 and 1 off-path, and no node is marked first-rejected."""
    from eagle3scope.wire import encode_frame

    step = step_body(0, t_ns=2)
    step["draft_ids"], step["accepted"], step["accepted_ids"] = [[10, 11, 12]], [1], [[12, 13]]
    step["accepted_path"], step["num_steps"] = [[2]], 3
    raw = [encode_frame("hello", hello_body(), src="tree", n=0, t=1), encode_frame("step", step, src="tree", n=1, t=2)]
    app = paused_app(write_recording(tmp_path / "tree.e3s", raw))
    async with app.run_test(size=(120, 30)) as pilot:
        app.seek("0")
        await pilot.press("3")
        await pilot.pause()
        proposed = app.query_one("#draft-table").get_row_at(0)[4]
        styles = {proposed.plain[span.start : span.end]: str(span.style) for span in proposed.spans}
        assert proposed.plain.split() == ["10", "11", "12"]
        assert styles["10"] == styles["11"] != styles["12"] and not any("reverse" in v for v in styles.values())


@run_async
async def test_history_plot_marks_where_an_aux_config_segment_starts(tmp_path):
    """A live aux-layer change starts a new segment; the acceptance history shows where (┊)."""
    from eagle3scope.wire import Frame, decode_frame, encode_frame

    frames = [decode_frame(raw) for raw in session_frames(300, src="dp0", bs=2, seed=7)]
    at = next(i for i, f in enumerate(frames) if f.kind == "step" and f.body["seq"] == 150)
    config = {"layers": [1, 14, 28], "captured": [2, 15, 29], "applied": True, "reason": "", "origin": "control",
              "request_id": "r1"}
    frames.insert(at, Frame("config", "dp0", 0, frames[at].t, config))
    raws = [encode_frame(f.kind, f.body, src=f.src, n=n, t=f.t) for n, f in enumerate(frames)]
    app = paused_app(write_recording(tmp_path / "segments.e3s", raws), speed=64.0)
    async with app.run_test(size=(160, 48)) as pilot:
        await play_to_end(app, pilot)
        plot = app.query_one("#acc-history")
        assert len(plot.marks) == 1 and 0 < plot.marks[0] < len(plot.points)
        decode_steps = [f for f in frames if f.kind == "step"]
        assert plot.marks[0] == len(plot.points) - sum(1 for f in decode_steps if f.body["seq"] >= 150)
        assert any(role == "segment" for row in plot.rows(plot.size.width, plot.size.height) for _, role in row)
        assert "┊" in screen_text(app)


@run_async
async def test_the_readmes_other_keys_and_aliases(recording, frames):
    """README "Keys": `]` / `[` move 100 steps, each alias (`p h d n =`) does what its first key does, `tab` moves the
    focus and `ctrl+p` opens Textual's command palette."""
    steps = steps_of(frames)
    target = steps[len(steps) // 2].body["seq"]
    app = paused_app(recording)
    async with app.run_test(size=(120, 40)) as pilot:
        app.seek(str(target))
        await pilot.press("right_square_bracket")
        assert app.feed.position()["seq"] == target + 100
        await pilot.press("left_square_bracket", "left_square_bracket")
        assert app.feed.position()["seq"] == target - 100
        await pilot.press("p")
        assert not app.feed.paused
        await pilot.press("p")
        assert app.feed.paused
        await pilot.press("n")
        assert app.query_one("#panels").current == "advisor"
        await pilot.press("d")
        assert app.query_one("#panels").current == "draft"
        speed = app.feed.speed
        await pilot.press("equals_sign")
        assert app.feed.speed > speed
        for panel, own in (("2", "aux"), ("4", "events"), ("3", "draft-table")):
            await pilot.press(panel)
            for _ in range(3):  # tab never takes the focus into a hidden panel
                await pilot.press("tab")
                assert app.focused is not None and app.focused.id == own, panel
        from textual.command import CommandPalette

        await pilot.press("ctrl+p")
        assert isinstance(app.screen, CommandPalette)
        await pilot.press("escape")
        await pilot.press("h")
        assert isinstance(app.screen, HelpScreen)
