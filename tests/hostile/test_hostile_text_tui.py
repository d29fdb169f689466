"""Untrusted text in the TUI: hostile strings in every field, every panel, screen and key; no crash,
no markup read from data, no control character on screen.

Before, 20 of 24 fields crashed the app with a ``MarkupError`` on some panel key (a request id
alone, which any API client of the server chooses, did it in the draft panel). The recording is
benchmarks/support/untrusted_support.py's: ``src``, hello, server_args, load report, seams, hooks, configs,
request ids, forward modes and unknown keys all hostile; the draft panel decodes token ids with a
real ``tokenizers`` tokenizer whose every token is hostile.
"""

from __future__ import annotations

import pytest

pytest.importorskip("textual")

from support.hostile_support import Tally  # noqa: E402
from support.recordings import record  # noqa: E402
from benchmarks.support.tui_support import paused_app, play_to_end, run_async, screen_text  # noqa: E402
from benchmarks.support.untrusted_support import ATTACKS, UNSAFE_OUT, hostile_frames  # noqa: E402

from eagle3scope.tui.panels import DraftPanel  # noqa: E402
from eagle3scope.tui.screens import HelpScreen, LoadReportScreen, ViolationScreen  # noqa: E402
from eagle3scope.tui.tokens import Decoder  # noqa: E402

ALL = "".join(ATTACKS.values())
TUI = Tally("text", "TUI panels and screens over hostile strings")


def _hostile_decoder(text: str) -> Decoder:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    vocab = {f"{text}{i}": i for i in range(128256)}  # the synthetic steps' target vocabulary
    return Decoder(Tokenizer(WordLevel(vocab, unk_token=f"{text}0")))


def _clean(app, what: str) -> str:
    TUI.add(cases=1)
    text = screen_text(app)
    bad = UNSAFE_OUT.search(text.replace("\n", " "))
    if bad is not None:
        TUI.add(leaks=1)
    if app.return_code not in (None, 0):
        TUI.add(crashes=1)
    assert bad is None, f"{what}: {bad.group()!r} on screen near {text[max(0, bad.start() - 40):bad.start() + 10]!r}"
    assert app.return_code in (None, 0), f"{what}: the app ended with {app.return_code}"
    return text


@pytest.mark.parametrize("name", ["all", "markup", "newline"])
@run_async
async def test_every_panel_and_screen_survives_hostile_strings(tmp_path, name):
    text = ALL if name == "all" else ATTACKS[name]
    path = record(tmp_path / "h.e3s", hostile_frames(text, n_steps=150))
    app = paused_app(path, speed=64.0)
    async with app.run_test(size=(140, 44)) as pilot:
        await play_to_end(app, pilot)
        app.w[DraftPanel].decoder = _hostile_decoder(text)
        for key in ("1", "2", "3", "4", "v", "1"):
            await pilot.press(key)
            await pilot.pause()
            app.refresh_view(force=True)
            await pilot.pause()
            _clean(app, f"panel key {key}")
        shown = _clean(app, "overview")
        assert "aux-capture-off" in shown  # the rules fired and name the hostile publisher
        app.query_one("#violations-table").focus()
        await pilot.press("enter")
        assert isinstance(app.screen, ViolationScreen)
        _clean(app, "violation screen")
        await pilot.press("escape")
        await pilot.press("l")
        assert isinstance(app.screen, LoadReportScreen)
        _clean(app, "load report")
        await pilot.press("escape")
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.press("3")
        await pilot.press("f")  # a filter typed by the user is shown too (timeline)
        for ch in "[b]":
            await pilot.press(ch)
        await pilot.press("enter")
        await pilot.pause()
        _clean(app, "draft panel, filtered")
        await pilot.press("g")
        for ch in "[x":
            await pilot.press(ch)
        await pilot.press("enter")  # not a step or a time: a notification quoting it
        await pilot.pause()
        _clean(app, "seek refused")
        await pilot.press("t")
        await pilot.pause()
        _clean(app, "theme")
    assert app.return_code in (None, 0)
