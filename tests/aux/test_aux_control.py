"""Aux-layer control without the engine: id semantics and presets, token files, the shim's REP
channel (validation, token, queueing, application between steps, concurrency) over real sockets.

The target here is a stand-in with SGLang's 0.5.23 Llama semantics (``layers_to_capture = [i + 1
for i in ids]``); the real engine is exercised in ``test_aux_engine.py``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from types import SimpleNamespace

import pytest

from eagle3scope.wire import aux_layers as L
from eagle3scope.control.client import ControlClient, ControlError
from eagle3scope.wire.control_protocol import ENV_CONTROL, ENV_TOKEN_FILE, authentic, sign
from eagle3scope.wire.token import TokenError, create_token_file, read_token
from eagle3scope.wire.endpoints import free_port
from eagle3scope_shim import aux_channel, control_facts, seams
from eagle3scope_shim import graph_capture as shim_graphs

from support.aux_support import DecodeCudaGraphRunner, EagerRunner, StandInTarget, TargetRunner, looping


# -- id semantics and presets ----------------------------------------------------------------
def test_plus_one_rule_and_range():
    assert L.check_layers([1, 3, 4], num_layers=8, expected=3, rule="+1") == [2, 4, 5]
    assert L.check_layers([4, 5, 6], num_layers=8, expected=3, rule="+1") == [5, 6, 7]
    with pytest.raises(L.LayerError, match="input of layer 8"):
        L.check_layers([5, 6, 7], num_layers=8, expected=3, rule="+1")


@pytest.mark.parametrize("layers, message", [
    ([1, 3], "takes 3 aux states"),
    ([1, 3, 3], "duplicate"),
    ([4, 1, 3], "not ascending"),
    ([-1, 3, 4], "negative"),
    ([True, 3, 4], "integers"),
    ([1.0, 3, 4], "integers"),
    ("1,3,4", "integers"),
    (None, "integers"),
])
def test_bad_lists_are_refused_with_a_reason(layers, message):
    with pytest.raises(L.LayerError, match=message):
        L.check_layers(layers, num_layers=8, expected=3, rule="+1")


def test_unknown_family_and_pipeline_rank():
    with pytest.raises(L.LayerError, match="unknown model family"):
        L.check_layers([1, 3, 4], num_layers=8, expected=3, rule=None)
    with pytest.raises(L.LayerError, match="layers 4..7"):
        L.check_layers([1, 3, 4], num_layers=8, expected=3, rule="+1", first_layer=4)


def test_deepseek_rule_adds_one_only_when_first_id_is_one():
    assert L.family_rule("DeepseekV3ForCausalLM", "0.5.23") == "+1-if-first-1"
    assert L.family_rule("DeepseekV2ForCausalLM", "0.5.12") == "+1"
    assert L.family_rule("LlamaForCausalLM", "0.5.23") == "+1"
    assert L.family_rule("SomethingNewForCausalLM", "0.5.23") is None
    assert L.captured_for([1, 30, 58], "+1-if-first-1", 61) == [2, 31, 59]
    assert L.captured_for([2, 30, 58], "+1-if-first-1", 61) == [2, 30, 58]
    assert L.ids_for([2, 30, 58], "+1-if-first-1") == [2, 30, 58]
    assert L.ids_for([1, 30, 58], "+1-if-first-1") is None
    assert L.captured_for(None, "+1", 8) == [2, 4, 5]  # the default gets no +1


def test_presets_for_the_aux_offset_case():
    """Draft trained on [1, 3, 4] of an 8-layer target, served with speculators' [2, 4, 5]."""
    by = {p.name: p for p in L.presets(8, 3, "+1", [2, 4, 5], custom=[0, 1, 2])}
    assert list(by) == ["configured", "sglang-default", "configured-1", "configured+1", "specforge-default",
                        "speculators-default", "custom"]
    assert by["configured"].captured == [3, 5, 6]
    assert by["configured-1"].layers == [1, 3, 4] and by["configured-1"].captured == [2, 4, 5]
    assert by["sglang-default"].layers == [1, 3, 4]  # SGLang's default expressed as configured ids
    assert by["configured-1"].same_as == "sglang-default"
    assert by["speculators-default"].same_as == "configured"
    assert by["configured+1"].captured == [4, 6, 7] and by["configured+1"].available
    assert by["custom"].captured == [1, 2, 3]
    assert all(p.available for p in by.values())
    assert L.Preset.from_dict(by["custom"].to_dict()) == by["custom"]


def test_presets_out_of_range_are_unavailable_with_reason():
    by = {p.name: p for p in L.presets(4, 3, "+1", [1, 2, 3])}
    assert not by["configured"].available and "input of layer 4" in by["configured"].reason
    assert not by["configured+1"].available
    assert by["configured-1"].available and by["configured-1"].captured == [1, 2, 3]
    assert not by["sglang-default"].available and "duplicate" in by["sglang-default"].reason
    none = {p.name: p for p in L.presets(8, 3, "+1", None)}
    assert not none["configured"].available and "names no ids" in none["configured"].reason
    wrong_k = {p.name: p for p in L.presets(8, 2, "+1", [1, 4])}
    assert wrong_k["configured"].available and not wrong_k["specforge-default"].available


def test_parse_ids():
    assert L.parse_ids("1,3,4") == L.parse_ids(" [1, 3 ,4] ") == L.parse_ids("1 3 4") == [1, 3, 4]
    with pytest.raises(L.LayerError):
        L.parse_ids("1,x,4")


# -- token files --------------------------------------------------------------------------------
def test_token_file_created_private_and_read_back(tmp_path):
    path = create_token_file(tmp_path / "tokens")
    assert (path.stat().st_mode & 0o777) == 0o600
    assert (path.parent.stat().st_mode & 0o777) == 0o700
    token = read_token(path)
    signed = sign({"cmd": "list"}, token)
    assert len(token) >= 32 and authentic(signed, token) and not authentic(signed, token + "x")
    assert not authentic(signed | {"mac": None}, token) and not authentic(signed | {"mac": 123}, token)
    assert read_token(create_token_file(tmp_path / "tokens")) != token  # a fresh one each time


def test_token_file_refusals(tmp_path):
    path = create_token_file(tmp_path)
    os.chmod(path, 0o644)
    with pytest.raises(TokenError, match="must be 0600"):
        read_token(path)
    with pytest.raises(TokenError, match="does not exist"):
        read_token(tmp_path / "nope")
    empty = tmp_path / "empty"
    empty.write_text("short\n")
    os.chmod(empty, 0o600)
    with pytest.raises(TokenError, match="no usable token"):
        read_token(empty)
    with pytest.raises(TokenError, match="not a regular file"):
        read_token(tmp_path)


# -- the shim's channel -------------------------------------------------------------------------
def test_list_reports_ids_and_presets(channel):
    ctl, target, client, _ = channel
    reply = client.list()
    assert reply["configured"] == [2, 4, 5] and reply["current"] == [2, 4, 5] and reply["captured"] == [3, 5, 6]
    assert reply["num_layers"] == 8 and reply["expected"] == 3 and reply["rule"] == "+1" and reply["changeable"]
    assert [p["name"] for p in reply["presets"]][:4] == ["configured", "sglang-default", "configured-1", "configured+1"]


def test_list_marks_presets_unavailable_while_the_server_refuses_every_change(channel, tmp_path):
    """The demo's aux-off target (capture off) and a graph-replaying one: ``aux list`` once said "ok" beside each
    preset that the channel then refused; it marks them with the channel's own reason, as ``cycle`` and the TUI's
    aux screen do (control/offer.py)."""
    import json

    from click.testing import CliRunner

    from eagle3scope.commands.aux import command as aux

    ctl, target, client, _ = channel
    (token,) = tmp_path.glob("control-*.token")
    runner = CliRunner()
    opts = ["--control", ctl.endpoint, "--token-file", str(token)]

    def listed():
        text = runner.invoke(aux, ["list", *opts])
        data = runner.invoke(aux, ["list", *opts, "--json"])
        assert text.exit_code == 0 and data.exit_code == 0, text.output + data.output
        return text.output, json.loads(data.output)["presets"]

    text, presets = listed()
    offered_ok = [p["name"] for p in presets if p["available"]]
    assert offered_ok and "  ok" in text  # a server that takes changes: presets as the ids allow
    target.capture_aux_hidden_states = False  # aux capture off, as the aux-off scenario serves
    why = client.list()["why_not"]
    assert "does not capture aux states" in why
    with pytest.raises(ControlError, match="does not capture aux states"):
        client.set(next(p["layers"] for p in presets if p["available"]))  # what "ok" would have led to
    text, presets = listed()
    assert all(not p["available"] for p in presets) and {p["reason"] for p in presets if p["name"] in offered_ok} == {why}
    rows = [line for line in text.splitlines() if line.startswith("  ") and line.split()[0] in offered_ok]
    assert len(rows) == len(offered_ok) and all("unavailable: the target does not capture" in r for r in rows), text
    cycle = runner.invoke(aux, ["cycle", *opts, "-c", "tcp://127.0.0.1:9", "--steps", "1"])
    assert cycle.exit_code == 1 and why in " ".join(cycle.output.split()), cycle.output  # refused before subscribing


def test_offered_presets_need_a_recapture_on_a_graph_server():
    from eagle3scope.control.offer import GRAPHS_NEED_RECAPTURE, change_refusal, offered

    presets = L.presets(8, 3, "+1", [2, 4, 5])
    info = {"changeable": True, "why_not": "", "graphs": {"captured": True, "recapture": True}}
    assert change_refusal(info) == GRAPHS_NEED_RECAPTURE and change_refusal(info, recapture=True) == ""
    assert offered(presets, info, recapture=True) == presets
    marked = offered(presets, info)
    assert [p.available for p in marked] == [False] * len(presets)
    assert {p.reason for p, q in zip(marked, presets) if q.available} == {GRAPHS_NEED_RECAPTURE}
    assert [p.reason for p, q in zip(marked, presets) if not q.available] == [q.reason for q in presets if not q.available]


def test_set_is_queued_then_applied_between_steps_on_the_stepping_thread(channel):
    ctl, target, client, recorder = channel
    reply = client.set([1, 3, 4], request_id="r1", wait_s=0)
    assert reply["status"] == "queued" and reply["captured"] == [2, 4, 5]
    assert target.calls == [] and target.model.layers_to_capture == [3, 5, 6]  # the REP thread touched nothing
    stepper = threading.Thread(target=ctl.apply_pending, name="scheduler")
    stepper.start()
    stepper.join()
    assert target.calls == [[1, 3, 4]] and target.thread.name == "scheduler"
    assert target.model.layers_to_capture == [2, 4, 5]
    kind, body = recorder.events[-1]
    assert kind == "config" and body == {"layers": [1, 3, 4], "captured": [2, 4, 5], "applied": True, "reason": "",
                                         "origin": "control", "request_id": "r1"}
    assert client.list()["current"] == [1, 3, 4]


def test_set_waits_for_the_next_step_and_reports_applied(channel):
    ctl, target, client, _ = channel
    with looping(ctl.apply_pending):
        reply = client.set([3, 5, 6], wait_s=3)
    assert reply["status"] == "applied" and reply["captured"] == [4, 6, 7]
    assert target.model.layers_to_capture == [4, 6, 7]


@pytest.mark.parametrize("message, error", [
    ({"cmd": "set", "layers": [1, 3, 4], "token": "wrong-token-wrong-token"}, "signed requests"),
    ({"cmd": "set", "layers": [1, 3, 4]}, "wrong token"),
    ({"cmd": "set", "layers": [1, 3, 4], "nonce": "n" * 32, "ts": 0.0, "mac": "0" * 64}, "wrong token"),
    ({"cmd": "shutdown", "TOKEN": None}, "unknown command 'shutdown'"),
    ({"cmd": "set", "layers": [1, 3, 4], "TOKEN": None, "force": True}, "unknown field"),
    ({"cmd": "set", "layers": [5, 6, 7], "TOKEN": None}, "input of layer 8"),
    ({"cmd": "set", "layers": [1, 3], "TOKEN": None}, "takes 3 aux states"),
    ({"cmd": "set", "layers": "1,3,4", "TOKEN": None}, "integers"),
    ({"cmd": "set", "layers": [1, 3, 4], "TOKEN": None, "wait_s": 99}, "wait_s"),
])
def test_refusals_have_a_reason_and_change_nothing(channel, message, error):
    ctl, target, client, recorder = channel
    if "TOKEN" in message:
        message = client.sign({k: v for k, v in message.items() if k != "TOKEN"})
    reply = client.raw(message)
    assert reply["ok"] is False and error in reply["error"]
    ctl.apply_pending()
    assert target.calls == [] and target.model.layers_to_capture == [3, 5, 6] and ctl._pending is None
    assert client.list()["current"] == [2, 4, 5]
    if "token" not in error and "signed" not in error and "unknown" not in error and "wait_s" not in error:
        assert recorder.events[-1][1]["applied"] is False and error in recorder.events[-1][1]["reason"]


def test_garbage_bytes_get_a_refusal(channel):
    ctl, target, client, _ = channel
    import zmq

    sock = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 3000)
    sock.connect(ctl.endpoint)
    sock.send(b"\xc1\xff not msgpack")
    from eagle3scope.wire.control_protocol import unpack

    assert unpack(sock.recv())["ok"] is False
    sock.close(0)
    assert client.list()["ok"]


def test_blocked_server_refuses_every_set(channel):
    ctl, target, client, _ = channel
    ctl.facts.why_not = "CUDA graphs were captured with the current aux set"
    with pytest.raises(ControlError, match="CUDA graphs"):
        client.set([1, 3, 4])
    reply = client.list()
    assert reply["changeable"] is False and "CUDA graphs" in reply["why_not"]
    assert target.calls == []


def test_newer_set_supersedes_a_queued_one(channel):
    ctl, target, client, recorder = channel
    client.set([1, 3, 4], request_id="old", wait_s=0)
    client.set([3, 5, 6], request_id="new", wait_s=0)
    ctl.apply_pending()
    assert target.calls == [[3, 5, 6]]
    configs = [b for k, b in recorder.events if k == "config"]
    assert [(b["request_id"], b["applied"]) for b in configs] == [("old", False), ("new", True)]
    assert "superseded by request new" in configs[0]["reason"]


def test_concurrent_requests_while_stepping(channel):
    ctl, target, client, _ = channel
    stop = threading.Event()
    errors = []

    def scheduler():
        while not stop.is_set():
            ctl.apply_pending()
            time.sleep(0.002)

    def hammer(i):
        try:
            for j in range(10):
                if (i + j) % 3 == 0:
                    client.list()
                elif (i + j) % 3 == 1:
                    try:  # sets of several clients wait side by side: a newer one may supersede this one
                        client.set([1, 3, 4] if j % 2 else [3, 5, 6], wait_s=0.5)
                    except ControlError as exc:
                        assert "superseded by request" in str(exc)
                else:
                    with pytest.raises(ControlError):
                        client.set([6, 7, 8], wait_s=0.5)
        except Exception as exc:  # collected and asserted below
            errors.append(exc)

    sched = threading.Thread(target=scheduler)
    sched.start()
    workers = [threading.Thread(target=hammer, args=(i,)) for i in range(6)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stop.set()
    sched.join()
    assert errors == []
    assert target.model.layers_to_capture in ([2, 4, 5], [4, 6, 7])
    assert all(call in ([1, 3, 4], [3, 5, 6]) for call in target.calls)


def test_client_never_hangs_without_a_server(tmp_path):
    client = ControlClient(f"tcp://127.0.0.1:{free_port()}", "x" * 32, timeout_s=0.5)
    t0 = time.monotonic()
    with pytest.raises(ControlError, match="no answer"):
        client.list()
    assert time.monotonic() - t0 < 3


def test_channel_refuses_to_start_on_a_readable_token_file(shim, tmp_path, monkeypatch, caplog):
    path = create_token_file(tmp_path)
    os.chmod(path, 0o640)
    monkeypatch.setenv(ENV_CONTROL, f"tcp://127.0.0.1:{free_port()}")
    monkeypatch.setenv(ENV_TOKEN_FILE, str(path))
    with caplog.at_level(logging.WARNING, logger="eagle3scope"):
        assert aux_channel.start(shim, SimpleNamespace(server_args=None), 0) is None
    assert "must be 0600" in caplog.text and shim.aux_channel is None
    monkeypatch.setenv(ENV_TOKEN_FILE, str(tmp_path / "missing"))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="eagle3scope"):
        assert aux_channel.start(shim, SimpleNamespace(server_args=None), 0) is None
    assert "does not exist" in caplog.text
    monkeypatch.setenv(ENV_TOKEN_FILE, str(create_token_file(tmp_path)))
    wide = f"tcp://0.0.0.0:{free_port()}"
    monkeypatch.setenv(ENV_CONTROL, wide)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="eagle3scope"):
        assert aux_channel.start(shim, SimpleNamespace(server_args=None), 0) is None
    assert caplog.messages == [f"eagle3scope: control channel not started: {wide} is not a loopback endpoint"
                               " (use an SSH tunnel)"]


def test_client_from_options_reads_the_token_file(tmp_path, monkeypatch):
    path = create_token_file(tmp_path)
    monkeypatch.delenv(ENV_CONTROL, raising=False)
    with pytest.raises(ControlError, match="no control endpoint"):
        ControlClient.from_options(None, str(path))
    client = ControlClient.from_options("5599", str(path))
    assert client.endpoint == "tcp://127.0.0.1:5599" and client.token == read_token(path)


# -- the TUI's aux screen -----------------------------------------------------------------------
@contextlib.asynccontextmanager
async def aux_screen_app(client, frames, size):
    """The live app over ``frames`` with the control client, its aux screen (key c) open."""
    from eagle3scope.live.subscriber import Subscriber
    from eagle3scope.tui.app import ScopeApp
    from eagle3scope.tui.feed import LiveFeed

    app = ScopeApp(LiveFeed(Subscriber([f"tcp://127.0.0.1:{free_port()}"])), theme="dark", remember=False)
    app.aux_client = client
    async with app.run_test(size=size) as pilot:
        app.feed.ingest(frames)
        await pilot.press("c")
        yield app, pilot


def test_tui_aux_screen_applies_a_preset_and_shows_segments(channel, tmp_path, monkeypatch):
    pytest.importorskip("textual")
    from benchmarks.support.analysis_streams import Stream, healthy_load, hello, step
    from benchmarks.support.tui_support import run_async, screen_text

    from eagle3scope.tui.screens import AuxScreen

    ctl, target, client, _ = channel
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    stop = threading.Event()

    def scheduler():
        while not stop.is_set():
            ctl.apply_pending()
            time.sleep(0.01)

    s = Stream()
    frames = [s.frame("hello", hello()), s.frame("load", healthy_load())]
    frames += [s.frame("step", step(i, s.t, [1, 1])) for i in range(10)]  # mean 2.0 under the startup set
    frames.append(s.frame("config", {"layers": [1, 3, 4], "captured": [2, 4, 5], "applied": True, "reason": "",
                                     "origin": "control", "request_id": "x"}))
    frames += [s.frame("step", step(10 + i, s.t, [3, 2])) for i in range(6)]  # mean 3.5 after the switch

    @run_async
    async def run():
        async with aux_screen_app(client, frames, (140, 40)) as (app, pilot):
            assert isinstance(app.screen, AuxScreen)
            table = app.screen.query_one("#aux-presets")
            for _ in range(50):
                await pilot.pause(0.05)
                if table.row_count:
                    break
            assert table.row_count >= 6
            text = screen_text(app)
            assert "configured-1" in text and "[1, 3, 4]" in text and "in effect" in text
            assert "3.500 best" in text and "2.000" in text  # segments: mean and steps side by side
            await pilot.press("down", "down", "enter")  # configured-1: the trained set
            for _ in range(60):
                await pilot.pause(0.05)
                if "applied" in screen_text(app):
                    break
            assert "configured-1 [1, 3, 4] applied" in screen_text(app)
            await pilot.press("escape")
            await pilot.press("q")

    sched = threading.Thread(target=scheduler)
    sched.start()
    try:
        run()
    finally:
        stop.set()
        sched.join()
    assert target.model.layers_to_capture == [2, 4, 5] and target.thread.name != "MainThread"


# -- aux write and profiles ---------------------------------------------------------------------
def test_aux_write_out_and_in_place(tmp_path):
    pytest.importorskip("safetensors")
    import json

    from click.testing import CliRunner
    from benchmarks.support.draft_checkpoints import specforge, target

    from eagle3scope.commands.aux import command as aux

    draft, tgt = specforge(tmp_path / "draft"), target(tmp_path / "target")
    original = (draft / "config.json").read_text()
    runner = CliRunner()
    out = runner.invoke(aux, ["write", str(draft), "2,4,5", "--out", str(tmp_path / "new"), "--target", str(tgt), "--json"])
    assert out.exit_code == 0, out.output
    result = json.loads(out.output)
    assert result["old"] == [1, 3, 4] and result["new"] == [2, 4, 5] and result["captured"] == [3, 5, 6]
    written = json.loads((tmp_path / "new" / "config.json").read_text())
    assert written["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]
    assert (tmp_path / "new" / "model.safetensors").read_bytes() == (draft / "model.safetensors").read_bytes()
    assert (draft / "config.json").read_text() == original  # the source is untouched
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]
    # refusals: past the end of the 8-layer target, wrong count for fc, existing --out
    for ids, extra, message in (("5,6,7", ["--out", str(tmp_path / "x")], "input of layer 8"),
                                ("1,3", ["--out", str(tmp_path / "y")], "takes 3 aux states"),
                                ("1,3,4", ["--out", str(tmp_path / "new")], "already exists"),
                                ("1,3,4", [], "exactly one of")):
        out = runner.invoke(aux, ["write", str(draft), ids, "--target", str(tgt), *extra])
        assert out.exit_code == 1 and message in out.output, out.output
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
    out = runner.invoke(aux, ["write", str(draft), "0,2,3", "--in-place"])
    assert out.exit_code == 0, out.output
    backups = list(draft.glob("config.json.bak-*"))
    assert len(backups) == 1 and backups[0].read_text() == original
    assert json.loads((draft / "config.json").read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 2, 3]


def test_aux_write_refuses_hostile_configs_with_one_line(tmp_path):
    """config.json read the doctor's way: no FIFO opened, no link out of the directory followed,
    no non-object or layerless target config turned into a traceback; nothing written."""
    pytest.importorskip("safetensors")
    import json
    import os

    from click.testing import CliRunner
    from benchmarks.support.draft_checkpoints import specforge, target

    from eagle3scope.commands.aux import command as aux

    runner = CliRunner()
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"eagle_config": {}}))

    def draft_with(name, make_config):
        draft = specforge(tmp_path / name)
        (draft / "config.json").unlink()
        make_config(draft / "config.json")
        return draft

    cases = {
        "fifo": (draft_with("fifo", os.mkfifo), None, "FIFO"),
        "link-out": (draft_with("link", lambda p: p.symlink_to(outside)), None, "outside the draft directory"),
        "list": (draft_with("list", lambda p: p.write_text("[1, 2]")), None, "not a JSON object"),
        "bad-json": (draft_with("bad", lambda p: p.write_text("{")), None, "Expecting"),
    }
    layerless = target(tmp_path / "target")
    (layerless / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "text_config": 3}))
    cases["target-without-layers"] = (specforge(tmp_path / "ok"), layerless, "num_hidden_layers")
    for name, (draft, tgt, message) in cases.items():
        extra = ["--target", str(tgt)] if tgt else []
        out = runner.invoke(aux, ["write", str(draft), "1,3,4", "--out", str(tmp_path / f"new-{name}"), *extra])
        assert out.exit_code == 1 and message in out.output and "Traceback" not in out.output, (name, out.output)
        assert len(out.output.strip().splitlines()) == 1, (name, out.output)
        assert not (tmp_path / f"new-{name}").exists()


def test_profiles_keep_the_best_per_draft(tmp_path, monkeypatch):
    from eagle3scope.control import profiles

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "model.safetensors").write_bytes(b"weights-v1")
    profiles.record(draft, [{"preset": "configured", "layers": [2, 4, 5], "captured": [3, 5, 6], "steps": 40,
                             "mean_accept_length": 1.6},
                            {"preset": "configured-1", "layers": [1, 3, 4], "captured": [2, 4, 5], "steps": 40,
                             "mean_accept_length": 2.9}])
    profiles.record(draft, [{"preset": "configured+1", "layers": [3, 5, 6], "captured": [4, 6, 7], "steps": 40,
                             "mean_accept_length": 1.2}])
    entry = profiles.lookup(draft)
    assert entry["best"]["preset"] == "configured-1" and set(entry["presets"]) == {"configured", "configured-1", "configured+1"}
    (draft / "config.json").write_text("{}")  # rewriting the config keeps the profile
    assert profiles.lookup(draft) == entry
    (draft / "model.safetensors").write_bytes(b"weights-v2")  # new weights start a new one
    assert profiles.lookup(draft) is None


# -- what the shim refuses up front ---------------------------------------------------------------
class LlamaForCausalLM(StandInTarget):
    """Named like SGLang's class, which defines the method itself: the family table applies."""

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        super().set_eagle3_layers_to_capture(layer_ids)


def _gather(shim, monkeypatch, target, *, runner=None, tp=1, pp=1, device="cpu", calls=(), tp_rank=0):
    fc = SimpleNamespace(weight=SimpleNamespace(shape=(128, 384)))
    draft = SimpleNamespace(config=SimpleNamespace(eagle_config={"eagle_aux_hidden_state_layer_ids": [2, 4, 5]},
                                                   target_hidden_size=128), model=SimpleNamespace(fc=fc))
    worker = SimpleNamespace(target_worker=SimpleNamespace(model_runner=runner))
    shim.load.workers = [("v2", worker, target, draft)]
    shim.load.aux_calls = list(calls)
    sa = SimpleNamespace(tp_size=tp, pp_size=pp, device=device, speculative_draft_model_path="/d")
    return control_facts.gather(shim, SimpleNamespace(server_args=sa), tp_rank)


def test_gather_facts_and_blockers(shim, monkeypatch):
    target = LlamaForCausalLM(8)
    target.config.hidden_size = 128
    eager = SimpleNamespace(decode_cuda_graph_runner=EagerRunner(), prefill_cuda_graph_runner=EagerRunner())
    facts = _gather(shim, monkeypatch, target, runner=eager, calls=[{"requested": [2, 4, 5], "captured": [3, 5, 6], "on": True}])
    assert (facts.family, facts.rule, facts.num_layers, facts.expected, facts.configured, facts.why_not) == \
        ("LlamaForCausalLM", "+1", 8, 3, [2, 4, 5], "")
    graphs = SimpleNamespace(decode_cuda_graph_runner=DecodeCudaGraphRunner(), prefill_cuda_graph_runner=EagerRunner())
    for facts in (_gather(shim, monkeypatch, target, runner=graphs), _gather(shim, monkeypatch, target, runner=SimpleNamespace(), device="cuda")):
        assert facts.why_not == "" and facts.graphs.captured  # a set is refused unless it asks for a recapture
        assert "CUDA graphs" in facts.graphs.refusal(recapture=False)
    assert not _gather(shim, monkeypatch, target, runner=eager).graphs.captured
    assert "pipeline" in _gather(shim, monkeypatch, target, runner=eager, pp=2).why_not
    odd = [{"requested": [2, 4, 5], "captured": [2, 4, 5], "on": True}]  # not what the +1 rule predicts
    assert "unknown id semantics" in _gather(shim, monkeypatch, target, runner=eager, calls=odd).why_not
    assert "unknown model family" in _gather(shim, monkeypatch, StandInTarget(8), runner=eager).why_not


def test_each_refusal_to_start_the_channel_is_logged_whole(shim, monkeypatch, caplog):
    """Without a token file named, and when starting raises: one warning each, naming the variable,
    or the exception's type and text (start never raises into the publisher's startup)."""
    monkeypatch.setenv(ENV_CONTROL, f"tcp://127.0.0.1:{free_port()}")
    monkeypatch.delenv(ENV_TOKEN_FILE, raising=False)
    with caplog.at_level(logging.WARNING, logger="eagle3scope"):
        assert aux_channel.start(shim, SimpleNamespace(server_args=None), 0) is None
    assert caplog.messages == [f"eagle3scope: control channel not started: {ENV_CONTROL} is set but {ENV_TOKEN_FILE} is not"]

    def broken(*args):
        raise RuntimeError("no sockets left")

    monkeypatch.setattr(aux_channel, "_start", broken)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="eagle3scope"):
        assert aux_channel.start(shim, SimpleNamespace(server_args=None), 0) is None
    assert caplog.messages == ["eagle3scope: control channel not started: RuntimeError: no sockets left"]


def test_a_channel_starts_from_the_latest_set_the_shim_saw_and_has_dropped_nothing(shim, monkeypatch):
    """``current``: the ids of the last set_eagle3_layers_to_capture call the shim saw (before the
    channel existed), else the configured ones; ``dropped`` counts from 0."""
    shim.load.aux_calls = [{"requested": [1, 3, 4], "captured": [2, 4, 5], "on": True}]
    facts = control_facts.ControlFacts()
    facts.configured = [2, 4, 5]
    assert aux_channel.AuxChannel(shim, "tcp://127.0.0.1:1", "t" * 64, facts).current == [1, 3, 4]
    shim.load.aux_calls = []
    ctl = aux_channel.AuxChannel(shim, "tcp://127.0.0.1:1", "t" * 64, facts)
    assert (ctl.current, ctl.dropped, ctl.refused_tokens) == ([2, 4, 5], 0, 0)


class _Parts:
    """A ROUTER socket holding one message: ``recv`` hands out its frames, RCVMORE says what is left."""

    def __init__(self, *parts: bytes) -> None:
        self.parts = list(parts)

    def recv(self, flags: int = 0) -> bytes:
        return self.parts.pop(0)

    def getsockopt(self, option) -> int:
        return int(bool(self.parts))


@pytest.mark.parametrize("parts", [(b"peer", b"x"), (b"peer", b"", b"x", b"more"), (b"peer", b"no-delimiter", b"x")])
def test_a_message_not_sent_from_a_req_socket_is_refused_saying_so(shim, monkeypatch, parts):
    ctl = aux_channel.AuxChannel(shim, "tcp://127.0.0.1:1", "t" * 64, control_facts.ControlFacts())
    sent = []
    monkeypatch.setattr(ctl, "_send", lambda sock, peer, reply: sent.append((peer, reply)))
    ctl._serve_one(_Parts(*parts))
    assert sent == [(b"peer", {"ok": False, "error": "a control request is one frame sent from a REQ socket"})]


def test_gather_without_an_eagle_worker_says_so_in_the_words_a_client_shows(shim, monkeypatch):
    sa = SimpleNamespace(tp_size=1, pp_size=1, device="cpu", speculative_draft_model_path="/d")
    assert control_facts.gather(shim, SimpleNamespace(server_args=sa)).why_not == \
        "no EAGLE worker in this process (is speculative decoding on?)"


def test_a_refused_set_is_answered_with_its_request_id(shim):
    """The requester matches a refusal to its request by ``id``, as it does an outcome."""
    facts = control_facts.ControlFacts()
    facts.target = facts.inner = StandInTarget(8)  # captures nothing: every set is refused
    facts.family, facts.rule, facts.num_layers, facts.expected, facts.configured = "LlamaForCausalLM", "+1", 8, 3, [2, 4, 5]
    ctl = aux_channel.AuxChannel(shim, "tcp://127.0.0.1:1", "t" * 64, facts)
    reply = ctl.handle(aux_channel.pack(sign({"cmd": "set", "layers": [1, 3, 4], "id": "r7"}, "t" * 64)))
    assert (reply["ok"], reply["id"]) == (False, "r7") and "does not capture aux states" in reply["error"]


def test_gather_reads_an_eagle_config_given_as_an_object_too(shim, monkeypatch):
    """A draft config whose eagle_config is an object (a config class's attribute), not a dict: the
    configured aux ids are read from it all the same."""
    target = LlamaForCausalLM(8)
    target.config.hidden_size = 128
    fc = SimpleNamespace(weight=SimpleNamespace(shape=(128, 384)))
    eagle = SimpleNamespace(eagle_aux_hidden_state_layer_ids=[1, 3, 4])
    draft = SimpleNamespace(config=SimpleNamespace(eagle_config=eagle, target_hidden_size=128), model=SimpleNamespace(fc=fc))
    worker = SimpleNamespace(target_worker=SimpleNamespace(model_runner=None))
    shim.load.workers = [("v2", worker, target, draft)]
    shim.load.aux_calls = []
    sa = SimpleNamespace(tp_size=1, pp_size=1, device="cpu", speculative_draft_model_path="/d")
    facts = control_facts.gather(shim, SimpleNamespace(server_args=sa))
    assert (facts.configured, facts.expected) == ([1, 3, 4], 3)


def test_an_applied_change_is_logged_with_its_ids_and_request(channel, caplog):
    ctl, target, client, _ = channel
    assert client.set([1, 3, 4], request_id="logged", wait_s=0)["status"] == "queued"
    with caplog.at_level(logging.INFO, logger="eagle3scope"):
        ctl.apply_pending()
    assert "eagle3scope: aux layers set to [1, 3, 4] (captured [2, 4, 5]) by control request logged" in caplog.messages


def test_gather_allows_tp_only_with_the_broadcast_seam_attached(shim, monkeypatch):
    target = LlamaForCausalLM(8)
    target.config.hidden_size = 128
    assert _gather(shim, monkeypatch, target, tp=2).why_not.startswith("tensor parallelism (tp_size 2): this release has no")
    shim.seams.status.update({seams.BROADCAST: "attached"})
    facts = _gather(shim, monkeypatch, target, tp=2)
    assert facts.why_not == "" and facts.tp_size == 2
    # DP attention: every attention-DP group's entry rank has a channel; only TP rank 0's broadcast reaches all
    assert "this is TP rank 2: changes ride the broadcast from TP rank 0" in _gather(shim, monkeypatch, target, tp=4,
                                                                                    tp_rank=2).why_not
    shim.seams.disabled.update({seams.BROADCAST})
    assert "no request broadcast" in _gather(shim, monkeypatch, target, tp=2).why_not
    assert "pipeline" in _gather(shim, monkeypatch, target, tp=2, pp=2).why_not


# -- CUDA graphs: refused, or recaptured between steps on request -----------------------------------
def _plan(runner, version="0.5.23", device="cuda", adaptive=None):
    worker = SimpleNamespace(target_worker=SimpleNamespace(model_runner=runner), adaptive_controller=adaptive)
    return shim_graphs.plan(worker, SimpleNamespace(device=device), version)


def test_graph_plan_names_the_blocker_of_each_release_and_setup():
    target = StandInTarget(8)
    target.set_eagle3_layers_to_capture([2, 4, 5])
    assert _plan(TargetRunner(target)).describe() == {"captured": True, "recapture": True, "why_not": "",
                                                     "last_pause_ms": None}
    assert "default set" in _plan(TargetRunner(target), version="0.5.10").why_not  # sglang-compat D4
    no_entry = SimpleNamespace(decode_cuda_graph_runner=DecodeCudaGraphRunner(), prefill_cuda_graph_runner=None)
    assert "no ModelRunner.recapture_decode_cuda_graph" in _plan(no_entry).why_not
    assert "only on cuda/musa, not on npu" in _plan(TargetRunner(target), device="npu").why_not
    prefill = TargetRunner(target)
    prefill.prefill_cuda_graph_runner = DecodeCudaGraphRunner()
    assert "prefill (piecewise) graphs" in _plan(prefill).why_not
    assert "adaptive speculative steps" in _plan(TargetRunner(target), adaptive=object()).why_not
    eager = SimpleNamespace(decode_cuda_graph_runner=EagerRunner(), prefill_cuda_graph_runner=EagerRunner())
    plan = _plan(eager, device="cpu")
    assert not plan.captured and plan.refusal(recapture=False) == "" and plan.refusal(recapture=True) == ""


@pytest.fixture
def graph_channel(channel):
    ctl, target, client, recorder = channel
    runner = TargetRunner(target)
    ctl.facts.graphs = _plan(runner)
    with looping(ctl.apply_pending):
        yield ctl, target, client, recorder, runner


def test_with_graphs_a_set_needs_recapture_and_then_replays_the_new_set(graph_channel):
    ctl, target, client, recorder, runner = graph_channel
    listed = client.list()
    assert listed["changeable"] and listed["graphs"]["captured"] and listed["graphs"]["recapture"]
    with pytest.raises(ControlError, match="pass --recapture"):
        client.set([1, 3, 4], wait_s=3)
    assert target.calls == [] and runner.decode_cuda_graph_runner.replays == [3, 5, 6]
    reply = client.set([1, 3, 4], wait_s=3, recapture=True)
    assert reply["status"] == "applied" and reply["captured"] == [2, 4, 5] and reply["pause_ms"] >= 0
    assert runner.decode_cuda_graph_runner.replays == [2, 4, 5] and runner.captures == 2
    kind, body = recorder.events[-1]
    assert kind == "config" and body["applied"] and body["pause_ms"] == reply["pause_ms"]
    assert client.list()["graphs"]["last_pause_ms"] == reply["pause_ms"]


def test_a_failed_recapture_restores_the_previous_set_and_its_graphs(graph_channel):
    ctl, target, client, recorder, runner = graph_channel
    runner.fail = 1
    with pytest.raises(ControlError, match="recapturing the target's graphs failed .*out of memory.*restored "
                                           r"\[2, 4, 5\], its graphs recaptured"):
        client.set([1, 3, 4], wait_s=3, recapture=True)
    assert target.model.layers_to_capture == [3, 5, 6] and runner.decode_cuda_graph_runner.replays == [3, 5, 6]
    assert client.list()["current"] == [2, 4, 5] and recorder.events[-1][1]["applied"] is False
    runner.fail = 1  # the refusal of a change that failed names the request, as its outcome does
    reply = client.raw(client.sign({"cmd": "set", "layers": [1, 3, 4], "id": "f1", "wait_s": 3, "recapture": True}))
    assert (reply["ok"], reply["id"]) == (False, "f1") and "restored [2, 4, 5]" in reply["error"]


def test_recapture_field_and_its_longer_wait(channel):
    ctl, target, client, _ = channel
    base = {"cmd": "set", "layers": [1, 3, 4]}
    assert "recapture must be true or false" in client.raw(sign(base | {"recapture": 1}, client.token))["error"]
    assert "wait_s" in client.raw(sign(base | {"wait_s": 60}, client.token))["error"]
    reply = client.raw(sign(base | {"wait_s": 0, "recapture": True}, client.token))
    assert reply["status"] == "queued"  # no graphs here: a plain set
    ctl.apply_pending()
    assert target.model.layers_to_capture == [2, 4, 5]


def test_tui_aux_screen_recaptures_only_when_allowed_and_shows_the_pause(shim, graph_channel, tmp_path, monkeypatch):
    pytest.importorskip("textual")
    from benchmarks.support.analysis_streams import Stream, healthy_load, hello
    from benchmarks.support.tui_support import run_async, screen_text

    ctl, target, client, recorder, runner = graph_channel
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    s = Stream()
    frames = [s.frame("hello", hello()), s.frame("load", healthy_load())]

    async def wait_for(app, pilot, text):
        for _ in range(80):
            await pilot.pause(0.05)
            if text in screen_text(app):
                return
        raise AssertionError(f"{text!r} not on screen:\n{screen_text(app)}")

    @run_async
    async def run():
        async with aux_screen_app(client, frames, (160, 44)) as (app, pilot):
            await wait_for(app, pilot, "not allowed yet")
            await pilot.press("down", "down", "enter")  # configured-1: unavailable without recapture, not sent
            await wait_for(app, pilot, "configured-1 is unavailable: this server replays CUDA graphs")
            assert runner.captures == 1 and target.calls == []
            await pilot.press("g", "enter")
            await wait_for(app, pilot, "graphs recaptured")
            assert "configured-1 [1, 3, 4] applied" in screen_text(app) and runner.captures == 2
            app.feed.ingest([s.frame("config", recorder.events[-1][1])])  # the shim's own config event
            await pilot.press("escape", "4")
            await wait_for(app, pilot, "recaptured, serving paused")  # in the event log too
            await pilot.press("q")

    run()
    assert runner.decode_cuda_graph_runner.replays == [2, 4, 5]


def test_a_server_args_without_pp_size_is_no_pipeline(shim, monkeypatch):
    """SGLang's server_args may lack ``pp_size`` (older releases): that is one pipeline stage, not a blocker."""
    target = LlamaForCausalLM(8)
    target.config.hidden_size = 128
    _gather(shim, monkeypatch, target)  # FACTS as a one-rank Llama server has them
    sa = SimpleNamespace(tp_size=1, device="cpu", speculative_draft_model_path="/d")
    assert control_facts.gather(shim, SimpleNamespace(server_args=sa)).why_not == ""


def test_start_judges_the_facts_of_its_own_tp_rank_and_names_its_thread(shim, tmp_path, monkeypatch):
    target = LlamaForCausalLM(8)
    target.config.hidden_size = 128
    _gather(shim, monkeypatch, target)
    shim.seams.status.update({seams.BROADCAST: "attached"})
    shim.seams.disabled.clear()
    shim.aux_channel = None
    monkeypatch.setenv(ENV_CONTROL, f"tcp://127.0.0.1:{free_port()}")
    monkeypatch.setenv(ENV_TOKEN_FILE, str(create_token_file(tmp_path)))
    sa = SimpleNamespace(tp_size=4, pp_size=1, device="cpu", speculative_draft_model_path="/d")
    ctl = aux_channel.start(shim, SimpleNamespace(server_args=sa), 0, tp_rank=2)
    try:
        assert ctl is not None and shim.aux_channel is ctl
        assert ctl.facts.why_not.startswith("tensor parallelism (tp_size 4): this is TP rank 2")
        assert ctl._thread.name == "eagle3scope-control" and ctl._thread.daemon
    finally:
        ctl.close()


def test_a_parked_reply_is_sent_at_its_deadline_exactly(shim, monkeypatch):
    """``wait_s`` ran out at ``now >= deadline``: the queued reply goes out then, not one poll later."""
    ctl = aux_channel.AuxChannel(shim, "tcp://127.0.0.1:1", "t" * 64, control_facts.ControlFacts())
    sent = []
    monkeypatch.setattr(ctl, "_send", lambda sock, peer, reply: sent.append((peer, reply)))
    monkeypatch.setattr(aux_channel.time, "monotonic", lambda: 100.0)
    ctl._parked = [(b"p", "r1", 100.0, {"status": "queued"}), (b"q", "r2", 100.5, {"status": "queued"})]
    ctl._answer_parked(None)
    assert sent == [(b"p", {"status": "queued"})] and [p[1] for p in ctl._parked] == ["r2"]


@pytest.mark.parametrize("wait_s", [0.5, 5.0, None])
def test_a_set_is_answered_queued_when_its_own_wait_s_runs_out(shim, monkeypatch, wait_s):
    """No step applies the change: the requester hears "queued" ``wait_s`` after asking (on the
    channel's monotonic clock; a set without one, 2 s), and not a moment before."""
    target = StandInTarget(8)
    target.set_eagle3_layers_to_capture([2, 4, 5])
    facts = control_facts.ControlFacts()
    facts.target = facts.inner = target
    facts.family, facts.rule, facts.num_layers, facts.expected, facts.configured = "LlamaForCausalLM", "+1", 8, 3, [2, 4, 5]
    ctl = aux_channel.AuxChannel(shim, "tcp://127.0.0.1:1", "t" * 64, facts)
    sent, now = [], [100.0]
    monkeypatch.setattr(ctl, "_send", lambda sock, peer, reply: sent.append((peer, reply)))
    monkeypatch.setattr(aux_channel.time, "monotonic", lambda: now[0])
    asked = {"cmd": "set", "layers": [1, 3, 4], "id": "w"} | ({} if wait_s is None else {"wait_s": wait_s})
    assert ctl.handle(aux_channel.pack(sign(asked, "t" * 64)), b"peer") is None
    wait_s = 2.0 if wait_s is None else wait_s
    for now[0] in (100.0, 100.0 + wait_s - 0.01):
        ctl._answer_parked(None)
        assert sent == [], now[0]
    now[0] = 100.0 + wait_s
    ctl._answer_parked(None)
    assert [(peer, reply["status"], reply["id"]) for peer, reply in sent] == [(b"peer", "queued", "w")]


def test_without_target_hidden_size_fc_is_judged_by_the_targets_hidden_size(shim, monkeypatch):
    target = LlamaForCausalLM(8)
    target.config.hidden_size = 128
    _gather(shim, monkeypatch, target)
    (kind, worker, _, draft), = shim.load.workers
    del draft.config.target_hidden_size  # fc [128, 384] over the target's 128: 3 aux states
    sa = SimpleNamespace(tp_size=1, pp_size=1, device="cpu", speculative_draft_model_path="/d")
    facts = control_facts.gather(shim, SimpleNamespace(server_args=sa))
    assert (facts.expected, facts.why_not) == (3, "")


# -- the channel's gather arithmetic, its answer budget, and a bind that fails --------------------------
def test_gather_counts_the_fcs_aux_layers_as_an_int_and_starts_at_layer_0_without_pp(shim, monkeypatch):
    """expected = fc input width // the target's hidden size (an int on the wire); a target model
    without ``start_layer`` (no pipeline stage) starts at layer 0."""
    target = LlamaForCausalLM(8)
    target.config.hidden_size = 128
    facts = _gather(shim, monkeypatch, target, runner=SimpleNamespace(decode_cuda_graph_runner=EagerRunner()))
    assert type(facts.expected) is int and facts.expected == 3
    assert not hasattr(target.model, "start_layer") and facts.first_layer == 0
    target.model.start_layer = 4  # a later pipeline stage's slice
    assert _gather(shim, monkeypatch, target).first_layer == 4


def test_the_unauthenticated_answer_budget_refills_with_time(monkeypatch):
    """20 answers a second, a burst of 40: spent, then one more for each 50 ms that passes."""
    now = [100.0]
    monkeypatch.setattr(aux_channel.time, "monotonic", lambda: now[0])
    budget = aux_channel._Budget(20.0)
    assert sum(budget.take() for _ in range(50)) == 40
    now[0] += 0.06  # 1.2 answers' worth
    assert budget.take() and not budget.take()
    now[0] += 10.0
    assert sum(budget.take() for _ in range(50)) == 40  # refilled to the burst, never past it


def test_a_control_endpoint_that_cannot_be_bound_says_why(shim, monkeypatch, tmp_path, caplog):
    import zmq

    from eagle3scope.wire.control_protocol import ENV_CONTROL, ENV_TOKEN_FILE

    taken = zmq.Context.instance().socket(zmq.ROUTER)
    taken.setsockopt(zmq.LINGER, 0)
    port = taken.bind_to_random_port("tcp://127.0.0.1")
    try:
        monkeypatch.setenv(ENV_CONTROL, f"tcp://127.0.0.1:{port}")  # another socket holds the port
        monkeypatch.setenv(ENV_TOKEN_FILE, str(tmp_path / "token"))
        monkeypatch.setattr(aux_channel, "read_token", lambda path: "t" * 64)
        with caplog.at_level("WARNING", logger="eagle3scope"):
            channel = aux_channel.start(shim, SimpleNamespace(server_args=None), 0)
        if channel is not None:
            channel.close()
        assert channel is None
    finally:
        taken.close()
    said = [m for m in caplog.messages if m.startswith(f"eagle3scope: control channel not started: cannot bind tcp://127.0.0.1:{port}: ")]
    assert said and not said[0].endswith(": None"), caplog.messages
