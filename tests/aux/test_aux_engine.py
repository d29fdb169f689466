"""Live aux-layer A/B on the real SGLang 0.5.23 CPU engine: which layers was this draft trained on?

The trained demo draft (aux ids [1, 3, 4] on an 8-layer target) is served as the ``aux-offset``
scenario: its config carries speculators' input-of-layer numbering [2, 4, 5], which SGLang shifts
by one more. Skips unless the demo models are built (or EAGLE3SCOPE_BUILD_MODELS=1 builds them). One server, started through the control channel, under a steady greedy workload:

* ``eagle3scope aux cycle`` (the CLI, as a user runs it) applies the presets live, one segment
  each, records them in the draft's profile and restores the served ids; its per-preset mean
  acceptance length should single out the trained set, clearly above the served one and the one
  a layer deeper still;
* a wrong token, bad id lists and unknown commands are refused with a reason and change nothing;
* a storm of concurrent requests during switches breaks nothing: the server keeps answering, and
  greedy output is identical before and after (speculative decoding is lossless whatever the aux
  layers, so any difference would be a real break).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from eagle3scope.control.client import ControlClient, ControlError
from eagle3scope.wire.token import create_token_file, read_token
from eagle3scope.demo.server import SGLangServer
from eagle3scope.wire.endpoints import free_port
from eagle3scope.demo.workload import Workload

from support.aux_support import aux_cli, aux_offset_scenario

pytestmark = pytest.mark.engine

@pytest.fixture(scope="module")
def demo(engine_python, tmp_path_factory):
    """The trained demo pair and the ``aux-offset`` scenario's draft (speculators numbering)."""
    paths, spec, offset = aux_offset_scenario(tmp_path_factory.mktemp("aux-offset"))
    trained = list(paths.aux_layer_ids)
    assert offset == [i + 1 for i in trained]
    return {"target": str(spec.target_dir), "offset_draft": str(spec.draft_dir), "aux": trained, "offset": offset,
            "n": paths.num_target_layers, "extra_args": list(spec.extra_args)}


@pytest.fixture(scope="module")
def served(demo, tmp_path_factory):
    from eagle3scope.demo.models import demo_prompts

    token = create_token_file(tmp_path_factory.mktemp("token"))
    events, control = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    env = {"EAGLE3SCOPE_ENDPOINT": events, "EAGLE3SCOPE_CONTROL": control, "EAGLE3SCOPE_CONTROL_TOKEN_FILE": str(token)}
    with SGLangServer(demo["target"], demo["offset_draft"], env=env,
                      extra_args=[*demo["extra_args"], "--disable-radix-cache"]) as server:
        yield {"server": server, "events": events, "control": control, "token": str(token),
               "client": ControlClient(control, read_token(token), timeout_s=10), "prompts": demo_prompts(8)}


@pytest.fixture(scope="module")
def cycled(demo, served, tmp_path_factory):
    """``eagle3scope aux cycle`` as a user runs it, under a steady greedy workload."""
    s = served
    listed = json.loads(aux_cli("list", "--control", s["control"], "--token-file", s["token"], "--json").stdout)
    config_home = tmp_path_factory.mktemp("config")
    with Workload(s["server"], s["prompts"], concurrency=2, max_new_tokens=48) as load:
        out = aux_cli("cycle", "--control", s["control"], "--token-file", s["token"], "-c", s["events"],
                   "--presets", "configured,configured-1,configured+1,custom", "--custom", "0,1,2",
                   "--steps", "30", "--json", env={"XDG_CONFIG_HOME": str(config_home)})
        errors = list(load.errors)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    by = {m["preset"]: m for m in report["results"]}
    means = {k: (m["layers"], round(m["mean_accept_length"], 3), m["steps"]) for k, m in by.items()}
    return {"listed": listed, "report": report, "by": by, "means": means, "errors": errors,
            "profile": json.loads((config_home / "eagle3scope" / "aux-profiles.json").read_text())}


def test_cycle_applies_every_preset_live_and_profiles_it(demo, served, cycled):
    listed, by = cycled["listed"], cycled["by"]
    assert listed["configured"] == demo["offset"] and listed["current"] == demo["offset"]
    assert listed["captured"] == [i + 1 for i in demo["offset"]] and listed["changeable"], listed
    assert listed["graphs"]["captured"] is False  # the CPU engine serves eagerly: no recapture ever needed
    assert listed["num_layers"] == demo["n"] and listed["expected"] == 3 and listed["rule"] == "+1"
    assert cycled["errors"] == []  # the workload never saw an error while the layers changed under it
    assert list(by) == ["configured", "configured-1", "configured+1", "custom"]
    assert all(m["status"] == "measured" and m["steps"] >= 30 for m in by.values()), by
    assert by["configured-1"]["layers"] == demo["aux"] and by["custom"]["captured"] == [1, 2, 3]
    (entry,) = cycled["profile"].values()
    assert entry["draft"] == str(Path(demo["offset_draft"]).resolve()) and set(entry["presets"]) == set(by)
    assert entry["best"]["layers"] == cycled["report"]["best"]["layers"]
    assert served["client"].list()["current"] == demo["offset"]  # --keep restore (the default)


def test_cycle_singles_out_the_trained_layers(demo, cycled):
    by, means = cycled["by"], cycled["means"]
    trained = by["configured-1"]["mean_accept_length"]
    assert cycled["report"]["best"]["layers"] == demo["aux"], means
    assert trained > by["configured"]["mean_accept_length"] + 0.25, means
    assert trained > by["configured+1"]["mean_accept_length"] + 0.25, means


def test_bad_requests_are_refused_and_change_nothing(demo, served):
    s = served
    client = s["client"]
    before = client.list()
    wrong = ControlClient(s["control"], "not-the-token-at-all-0123456789", timeout_s=10)
    with pytest.raises(ControlError, match="wrong token"):
        wrong.set(demo["aux"])
    for layers, reason in (([5, 6, 7], "input of layer 8"), ([1, 3], "takes 3"), ([4, 3, 1], "ascending"),
                           ([1, 1, 4], "duplicate")):
        with pytest.raises(ControlError, match=reason):
            client.set(layers)
    assert client.raw(client.sign({"cmd": "reload_weights"}))["error"].startswith("unknown command")
    out = aux_cli("set", "6,7,8", "--control", s["control"], "--token-file", s["token"])
    assert out.returncode == 1 and "refused" in out.stderr
    after = client.list()
    assert (after["current"], after["captured"], after["pending"]) == (before["current"], before["captured"], None)
    assert s["server"].generate(s["prompts"][0], max_new_tokens=8)[0]["meta_info"]["completion_tokens"] == 8


def test_concurrent_requests_during_switches_break_nothing(demo, served):
    s = served
    client, server = s["client"], s["server"]
    prompt = s["prompts"][1]
    reference = server.generate(prompt, max_new_tokens=40)[0]["text"]
    errors = []

    def storm(i):
        try:
            for j in range(6):
                kind = (i + j) % 3
                if kind == 0:
                    try:  # sets of several clients wait side by side: a newer one may supersede this one
                        client.set(demo["aux"] if j % 2 else [i + 1 for i in demo["aux"]], wait_s=1.0)
                    except ControlError as exc:
                        assert "superseded by request" in str(exc)
                elif kind == 1:
                    client.list()
                else:
                    with pytest.raises(ControlError):
                        client.set([0, 7, 8], wait_s=0.5)
        except Exception as exc:  # asserted below
            errors.append(repr(exc))

    with Workload(server, s["prompts"], concurrency=2, max_new_tokens=24) as load:
        threads = [threading.Thread(target=storm, args=(i,)) for i in range(5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not load.errors, list(load.errors)
    assert errors == []
    client.set(demo["offset"], wait_s=5.0)
    assert server.generate(prompt, max_new_tokens=40)[0]["text"] == reference
    assert server.proc.poll() is None
