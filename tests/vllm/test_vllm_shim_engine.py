"""The vLLM shim inside the real vLLM (offline ``LLM``, eager, float32, the demo models): the shim is
found through vLLM's own ``vllm.general_plugins`` lookup (a distribution on PYTHONPATH declaring this
checkout's plugin, since the shared venv's editable install is another checkout), and its frames are
checked against vLLM's own counters. Three engine runs, each shared by the tests that read it: the
speculators-numbered draft in one process, the same in vLLM's usual EngineCore + Worker processes, and
the SGLang-numbered draft with a weight dropped from its checkpoint and a fault injected into the
draft-pass hook."""

from __future__ import annotations

import json
import os

import pytest
from support.engine import REPO, run_engine_python

from eagle3scope.analysis.accounting import Accounting
from eagle3scope.commands.launch import control_env
from eagle3scope.wire import bodies, env

pytestmark = pytest.mark.engine

DRIVER = "tests/engine_side/vllm_offline.py"
DROPPED = "layers.0.mlp.down_proj.weight"
REQUESTS = 4


@pytest.fixture(scope="session")
def shim_runs(vllm_python, vllm_models, tmp_path_factory):
    """name -> the driver's result for that run, each run started when a test first asks for it."""
    done: dict = {}

    def run(name: str) -> dict:
        if name in done:
            return done[name]
        scratch = tmp_path_factory.mktemp(f"vllm-shim-{name}")
        scratch.chmod(0o700)
        dist = scratch / "eagle3scope_vllm_shim_probe-0.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: eagle3scope-vllm-shim-probe\nVersion: 0\n")
        (dist / "entry_points.txt").write_text("[vllm.general_plugins]\neagle3scope = eagle3scope_shim.vllm.plugin:load\n")
        repo = str(REPO)
        environ = {"PYTHONPATH": os.pathsep.join([repo, os.path.join(repo, "instrumentation"), str(scratch)]),
                   env.ENDPOINT: f"ipc://{scratch}/pub.sock", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
                   "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_PLUGINS": "eagle3scope",
                   "VLLM_ENABLE_V1_MULTIPROCESSING": "1" if name == "multiprocess" else "0"}
        if name == "one-process":  # with the control channel, as `launch --control` opens it
            environ.update(control_env("auto", str(scratch))[0])
        draft = vllm_models.draft_speculators
        extra: list[str] = []
        if name == "sglang-numbered":
            draft = vllm_models.draft
            extra = ["--drop-weight", DROPPED, "--scratch", str(scratch)]
            environ[env.FAULT] = "vllm.combine"
        got = run_engine_python(vllm_python, DRIVER, str(vllm_models.target), str(draft), "--requests",
                                str(REQUESTS), *extra, timeout=600, env=environ)
        lines = [line for line in got.stdout.splitlines() if line.startswith("E3S-RESULT ")]
        assert got.returncode == 0 and lines, f"vLLM run {name} failed:\n{got.stderr[-4000:]}"
        done[name] = json.loads(lines[-1][len("E3S-RESULT "):])
        return done[name]

    return run


def latest(result, kind):
    found = [f["b"] for f in result["frames"] if f["k"] == kind]
    assert found, f"no {kind} frame"
    return found[-1]


def decode_steps(result):
    return [f["b"] for f in result["frames"] if f["k"] == "step" and f["b"]["mode"] == "decode"]


def assert_counts_agree(result):
    """The steps' accepted drafts equal vLLM's own counters, in total and per request (its
    spec_decode_metrics, carried by the finish frames), judged by the viewer's accounting."""
    steps = decode_steps(result)
    metrics = result["metrics"]
    assert sum(sum(s["accepted"]) for s in steps) == metrics["vllm:spec_decode_num_accepted_tokens"]
    assert sum(s["bs"] for s in steps) == metrics["vllm:spec_decode_num_drafts"]
    assert sum(len(d) for s in steps for d in s["draft_ids"]) == metrics["vllm:spec_decode_num_draft_tokens"]
    finished = {r["rid"]: r for f in result["frames"] if f["k"] == "finish" for r in f["b"]["requests"]}
    own = {r["request_id"]: r["spec"] for r in result["requests"]}
    assert len(finished) == REQUESTS
    for rid, counts in finished.items():
        spec = own[rid.split("-")[0]]
        assert (counts["verify_ct"], counts["correct_drafts"], counts["histogram"]) == \
            (spec["num_spec_steps"], spec["num_accepted_draft_tokens"], spec["acceptance_histogram"])
    accounting = Accounting()
    for frame in result["frames"]:
        body = frame["b"]
        if frame["k"] == "step" and body["mode"] == "prefill":
            accounting.start(body["rids"], (0, 0))
        elif frame["k"] == "step":
            accounting.count(body["rids"], body["accepted"], body["seq"])
        elif frame["k"] == "finish":
            accounting.finish(bodies.read("finish", body), 0, 0)
    assert (accounting.compared, accounting.mismatched) == (REQUESTS, 0)


def test_frames_arrive_valid_and_name_vllm(shim_runs):
    result = shim_runs("one-process")
    for frame in result["frames"]:
        bodies.read(frame["k"], frame["b"])
    hello = latest(result, "hello")
    assert hello["engine"] == "vllm" and hello["engine_version"].startswith("0.32") and "sglang_version" not in hello
    assert hello["server_args"]["algorithm"] == "EAGLE3" and hello["server_args"]["num_steps"] == 3
    assert set(hello["seams"].values()) == {"attached"} and len(hello["seams"]) == 10


def test_load_report_speculators_numbering(shim_runs, vllm_models):
    load = latest(shim_runs("one-process"), "load")
    ids = [i + 1 for i in vllm_models.aux_layer_ids]  # the speculators draft: vLLM's numbering
    assert load["aux"]["offset_rule"] == "none"
    assert load["aux"]["configured"] == load["aux"]["requested"] == load["aux"]["captured"] == ids
    assert load["fc"]["in"] == 3 * load["target_hidden_size"] and load["fc"]["out"] == load["hidden_size"]
    assert load["weights"]["unwritten"] == [] and load["weights"]["ignored"] == ["t2d"]
    assert load["d2t"]["present"] and load["d2t"]["out_of_range"] == 0


def test_steps_show_passes_capture_and_vllms_counts(shim_runs):
    result = shim_runs("one-process")
    steps = decode_steps(result)
    assert sum(sum(s["accepted"]) for s in steps) > 0  # the trained draft accepts
    width = 3 * latest(result, "load")["target_hidden_size"]
    for step in steps:
        assert step["passes"][0] == {"mode": "draft_extend", "width": width, "fc": True, "n": 1}
        assert step["passes"][1]["n"] == 2 and step["passes"][1]["fc"] is False
        assert step["capture"]["on"] and len(step["capture"]["widths"]) == 3
    assert_counts_agree(result)


def test_multiprocess_layout_one_publisher_worker_facts_forwarded(shim_runs):
    """EngineCore and the Worker are separate processes: one publisher, the worker's load report,
    passes and seams arrive through it, counts still agree."""
    result = shim_runs("multiprocess")
    assert len({f["src"] for f in result["frames"]}) == 1
    hello, load = latest(result, "hello"), latest(result, "load")
    assert {"vllm.combine", "vllm.update_from_output"} <= {s for s, v in hello["seams"].items() if v == "attached"}
    assert load["aux"]["offset_rule"] == "none"
    assert decode_steps(result)[0]["passes"][0]["fc"] is True
    assert_counts_agree(result)


def test_sglang_numbered_draft_dropped_weight_and_failing_hook(shim_runs, vllm_models):
    """The SGLang-numbered draft's ids are captured as given (one layer lower than SGLang would),
    the weight missing from its checkpoint is reported unwritten (vLLM itself says nothing), and the
    draft-pass hook that raises is disabled and reported while vLLM serves on."""
    result = shim_runs("sglang-numbered")
    load = latest(result, "load")
    ids = list(vllm_models.aux_layer_ids)
    assert load["aux"]["configured"] == load["aux"]["captured"] == ids and load["aux"]["offset_rule"] == "none"
    assert load["weights"]["unwritten"] == [f"model.{DROPPED}"]
    assert latest(result, "hello")["seams"]["vllm.combine"] == "failed"
    hooks = [f["b"] for f in result["frames"] if f["k"] == "hook" and f["b"]["seam"] == "vllm.combine"]
    assert hooks and hooks[0]["status"] == "failed" and "fault injected" in hooks[0]["detail"]
    assert all(step["passes"] == [] for step in decode_steps(result))
    # the draft without its down_proj accepts nothing: the symptom the unwritten weight explains
    assert sum(sum(s["accepted"]) for s in decode_steps(result)) == 0
    assert_counts_agree(result)


def test_aux_set_is_refused_with_the_reason(shim_runs):
    """vLLM in eager mode cannot have its capture changed by this shim: the control channel answers a
    list and refuses a set with the reason, rather than leaving the request to time out."""
    result = shim_runs("one-process")
    assert latest(result, "hello")["control"].startswith("tcp://127.0.0.1:")
    assert "vLLM sets the aux layers once" in result["control"]["list"]["why_not"]
    assert result["control"]["list"]["changeable"] is False
    refused = result["control"]["set"]
    assert "vLLM sets the aux layers once" in refused["error"] and refused["reply"]["ok"] is False
    configs = [f["b"] for f in result["frames"] if f["k"] == "config"]
    assert configs and configs[-1]["applied"] is False and configs[-1]["layers"] == [1, 2, 3]
