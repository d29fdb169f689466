"""The vLLM shim's frames built from plain values (eagle3scope_shim/vllm/frames.py), its version
guard and its entry point, without vLLM: the bodies pass the wire's validation, a round's
per-request counts agree with vLLM's own per-request counters by the viewer's accounting rule, and
the hello says what the configuration hides."""

from __future__ import annotations

import logging
import pkgutil
import tomllib
from pathlib import Path
from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from eagle3scope.analysis.accounting import Accounting
from eagle3scope.wire import bodies
from eagle3scope_shim.instrumentor import INSTRUMENTOR
from eagle3scope_shim.vllm import frames, plugin, seams
from eagle3scope_shim.vllm.worker import offset_rule

REPO = Path(__file__).resolve().parents[2]


def vllm_config(mode="NONE", eager=True, k=3):
    return SimpleNamespace(
        speculative_config=SimpleNamespace(method="eagle3", num_speculative_tokens=k, model="/m/draft"),
        model_config=SimpleNamespace(dtype="torch.float32", enforce_eager=eager, model="/m/target"),
        compilation_config=SimpleNamespace(mode=SimpleNamespace(name=mode), cudagraph_capture_sizes=[]),
        scheduler_config=SimpleNamespace(async_scheduling=False),
        parallel_config=SimpleNamespace(data_parallel_rank=0, data_parallel_size=1, tensor_parallel_size=1,
                                        pipeline_parallel_size=1))


WORKER = {"first": (384, True, 12), "later": (128, 2), "capture": {"on": True, "layers": [2, 4, 5]},
          "draft_ms": 1.0, "verify_ms": 2.0, "num_steps": 3}


class Metrics:
    """vLLM's RequestSpecDecodeMetrics as it counts (v1/metrics/stats.py observe): histogram[accepted] += 1."""

    def __init__(self, k):
        self.histogram = [0] * (k + 1)

    def observe(self, accepted):
        self.histogram[accepted] += 1


def test_hello_names_the_engine_and_its_configuration():
    hello = frames.hello_body(vllm_config(), "0.32.0", 1, {"vllm.combine": "attached"}, "ipc:///x")
    bodies.read("hello", hello)
    assert hello["engine"] == "vllm" and hello["engine_version"] == "0.32.0" and "sglang_version" not in hello
    args = hello["server_args"]
    assert (args["algorithm"], args["num_steps"], args["topk"], args["dtype"], args["cuda_graph"]) == \
        ("EAGLE3", 3, 1, "float32", False)
    assert args["compile_mode"] == "NONE" and "draft_model" not in hello["unobserved"]
    assert "aux set" in hello["unobserved"]["control"] and hello["control"] is None


def test_compile_mode_and_a_failed_seam_are_said_in_the_hello():
    hello = frames.hello_body(vllm_config(mode="VLLM_COMPILE", eager=False), "0.32.0", 1,
                              {"vllm.combine": "failed", "vllm.propose": "attached"}, None)
    assert hello["server_args"]["compile_mode"] == "VLLM_COMPILE"
    assert "compiled" in hello["unobserved"]["draft_model"]
    assert "compile mode VLLM_COMPILE" in frames.aux_refusal(vllm_config(mode="VLLM_COMPILE", eager=False))
    assert "compile mode" not in frames.aux_refusal(vllm_config())
    assert hello["unobserved"]["vllm.combine"].startswith("failed") and "vllm.propose" not in hello["unobserved"]


def test_passes_name_the_first_pass_by_what_the_round_verified():
    prefill, = frames.step_bodies(0, 1, [], ["a"], WORKER, {})
    assert prefill["mode"] == "prefill" and prefill["passes"][0] == {"mode": "extend", "width": 384, "fc": True, "n": 1}
    both = frames.step_bodies(5, 1, [("b", [1, 2, 3], 2, [1, 9])], ["a"], WORKER, {"b": 40})
    assert [s["mode"] for s in both] == ["prefill", "decode"] and [s["seq"] for s in both] == [5, 6]
    assert both[0]["passes"] == []  # the round's passes go with its decode step
    assert both[1]["passes"] == [{"mode": "draft_extend", "width": 384, "fc": True, "n": 1},
                                 {"mode": "decode", "width": 128, "fc": False, "n": 2}]
    assert (both[1]["accepted"], both[1]["bonus"], both[1]["ctx_len"]) == ([1], [1], [40])
    for body in both:
        bodies.read("step", body)


def test_no_draft_facts_no_passes():
    """A round whose draft-pass seam failed (fail closed) says nothing about passes rather than guess."""
    decode, = frames.step_bodies(0, 1, [("b", [1], 1, [3])], [], {**WORKER, "first": None}, {})
    assert decode["passes"] == []


@given(st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=12), min_size=1, max_size=6))
def test_round_counts_agree_with_vllms_per_request_counters(accepted_per_round):
    """Requests a..: each list is one request's rounds (accepted drafts of k=4). The shim's steps,
    tallied by the viewer's accounting, equal vLLM's own per-request counters in its finish frame."""
    k = 4
    acc = Accounting()
    rids = [f"r{i}" for i in range(len(accepted_per_round))]
    acc.start(rids, (0, 0))
    metrics = {rid: Metrics(k) for rid in rids}
    for step in range(max(len(r) for r in accepted_per_round)):
        rounds = []
        for rid, rounds_of in zip(rids, accepted_per_round):
            if step < len(rounds_of):
                n = rounds_of[step]
                metrics[rid].observe(n)  # vLLM: num_accepted = len(committed) - 1
                rounds.append((rid, list(range(k)), n + 1, list(range(n + 1))))
        decode, = frames.step_bodies(step, 1, rounds, [], {**WORKER, "num_steps": k}, {})
        bodies.read("step", decode)
        acc.count(decode["rids"], decode["accepted"], step)
    finish = bodies.read("finish", dict(seq=0, dropped=0, requests=[frames.finished(rid, metrics[rid]) for rid in rids]))
    acc.finish(finish, 0, 0)
    assert acc.compared == len(rids) and acc.mismatched == 0


def test_finish_without_vllms_counters_carries_the_rid_only():
    assert frames.finished("x", None) == {"rid": "x"}


def test_offset_rule():
    assert offset_rule([2, 4, 5], [2, 4, 5]) == "none"
    assert offset_rule([5, 2, 2, 4], [2, 4, 5]) == "none"  # vLLM sorts and deduplicates: still as given
    assert offset_rule(None, [2, 4, 5]) == "default"
    assert offset_rule([1, 3, 4], [2, 4, 5]) == "other"
    assert offset_rule([1, 3, 4], None) is None


def test_version_guard_refuses_other_release_lines(monkeypatch, caplog):
    monkeypatch.setenv("EAGLE3SCOPE_ENDPOINT", "ipc:///nowhere")
    monkeypatch.setattr(plugin.engine, "vllm_version", lambda: "0.31.2")
    with caplog.at_level(logging.WARNING, logger="eagle3scope"):
        plugin.load()
    assert not INSTRUMENTOR.is_instrumented
    lines = [r.getMessage() for r in caplog.records if "not a release line" in r.getMessage()]
    assert len(lines) == 1 and "0.31.2" in lines[0] and "0.32.x" in lines[0]
    assert seams.supported("0.32.0") and seams.supported("0.32.1+cpu") and not seams.supported("0.33.0")


def test_off_without_the_environment(monkeypatch):
    monkeypatch.delenv("EAGLE3SCOPE_ENDPOINT", raising=False)
    monkeypatch.delenv("EAGLE3SCOPE", raising=False)
    monkeypatch.setattr(plugin.engine, "vllm_version", lambda: (_ for _ in ()).throw(AssertionError("looked")))
    plugin.load()
    assert not INSTRUMENTOR.is_instrumented


def test_entry_point_is_declared_and_resolves():
    """vLLM finds the shim under its general-plugins group; the name resolves to the plugin's load."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    target = project["entry-points"]["vllm.general_plugins"]["eagle3scope"]
    assert pkgutil.resolve_name(target.replace(":", ".")) is plugin.load


def test_every_seam_has_a_hook():
    assert set(seams.TARGETS) == set(plugin.FACTORIES)
