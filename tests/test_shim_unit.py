"""The shim's own logic without SGLang: bonus normalisation of both worker eras, per-request
splitting, the fail-closed wrapper, and the per-data-parallel-rank endpoints."""

from __future__ import annotations

import pytest

from eagle3scope.wire import decode_frame, encode_frame
from eagle3scope.wire.endpoints import endpoint_for_dp_rank
from eagle3scope_shim import hooks, state
from eagle3scope_shim.state import STATE, Step, around


class Host(list):
    """A host-side stand-in for a snapshotted tensor: what finalize calls is ``tolist``."""

    def tolist(self):
        return list(self)


def _decode_step(verify, draft=None, bs=3):
    step = Step()
    step.draft, step.verify = draft, verify
    step.passes = [["decode", 128, False, 2], ["draft_extend_v2", 384, True, 1]]
    body = hooks.finalize_step((7, 123, [f"r{i}" for i in range(bs)], step, {"on": True, "layers": [1, 2, 3]}))
    assert decode_frame(encode_frame("step", body, src="t", n=0)).body == body  # a valid wire step
    return body


def test_v2_accept_lens_include_the_bonus():
    # 3 requests, 4 draft tokens each: row = [last verified token, 3 drafts]; predict strided by 4
    draft = Host([5, 10, 11, 12, 6, 20, 21, 22, 7, 30, 31, 32])
    predict = Host([10, 11, 99, 0, 44, 0, 0, 0, 30, 31, 32, 33])
    body = _decode_step(("v2", Host([3, 1, 4]), predict), draft)
    assert body["draft_ids"] == [[10, 11, 12], [20, 21, 22], [30, 31, 32]]
    assert body["accepted"] == [2, 0, 3] and body["bonus"] == [1, 1, 1]
    assert body["accepted_ids"] == [[10, 11, 99], [44], [30, 31, 32, 33]]
    assert body["mode"] == "decode" and body["passes"][1] == {"mode": "draft_extend_v2", "width": 384, "fc": True, "n": 1}


def test_v1_counts_exclude_the_bonus_and_tokens_are_packed():
    body = _decode_step(("v1", [2, 0, 1], Host([10, 11, 99, 44, 30, 33])))
    assert body["accepted"] == [2, 0, 1] and body["bonus"] == [1, 1, 1]
    assert body["accepted_ids"] == [[10, 11, 99], [44], [30, 33]]
    assert body["draft_ids"] == [[], [], []]  # draft hook unobserved: nothing invented


def test_prefill_step_carries_no_acceptance():
    step = Step()
    step.prefill = True
    body = hooks.finalize_step((1, 0, ["a", "b"], step, None))
    assert body["mode"] == "prefill" and body["accepted"] == [0, 0] and body["accepted_ids"] == [[], []]


@pytest.fixture
def clean_state(monkeypatch):
    monkeypatch.setattr(STATE, "disabled", set())
    monkeypatch.setattr(STATE, "seam_status", {})
    monkeypatch.setattr(STATE, "pending", [])
    monkeypatch.setattr(STATE, "publisher", None)
    monkeypatch.setattr(STATE, "fault", None)
    return STATE


def test_a_failing_hook_is_disabled_reported_once_and_changes_nothing(clean_state):
    calls = []

    def original(x):
        calls.append(x)
        return x * 2

    def pre(x):
        raise ValueError("boom")

    hook = around("t.seam", pre, None)
    assert hook(original, 3) == 6 and hook(original, 4) == 8 and calls == [3, 4]
    assert "t.seam" in clean_state.disabled
    assert [b["seam"] for b in clean_state.pending] == ["t.seam"] and clean_state.pending[0]["status"] == "failed"

    def post(ctx, result, x):
        raise KeyError("late")

    hook = around("t.post", None, post)
    assert hook(original, 5) == 10 and "t.post" in clean_state.disabled

    def broken(x):
        raise RuntimeError("SGLang's own error")

    with pytest.raises(RuntimeError, match="SGLang's own error"):
        around("t.ok", lambda x: None, None)(broken, 1)
    assert "t.ok" not in clean_state.disabled


def test_fault_injection_names_one_seam(clean_state, monkeypatch):
    monkeypatch.setattr(STATE, "fault", "t.faulty")
    ran = []
    assert around("t.faulty", lambda x: ran.append(x), None)(lambda x: x + 1, 1) == 2
    assert around("t.fine", lambda x: ran.append(x), None)(lambda x: x + 1, 1) == 2
    assert ran == [1] and clean_state.disabled == {"t.faulty"}
    assert "injected" in clean_state.pending[0]["detail"]


def test_one_endpoint_per_data_parallel_rank():
    assert endpoint_for_dp_rank("tcp://127.0.0.1:5557", 0) == "tcp://127.0.0.1:5557"
    assert endpoint_for_dp_rank("tcp://127.0.0.1:5557", 2) == "tcp://127.0.0.1:5559"
    assert endpoint_for_dp_rank("5557", 1) == "5558"
    assert endpoint_for_dp_rank("ipc:///tmp/e3s", 1) == "ipc:///tmp/e3s-dp1"


def test_requested_endpoint(monkeypatch):
    monkeypatch.delenv("EAGLE3SCOPE_ENDPOINT", raising=False)
    monkeypatch.delenv("EAGLE3SCOPE", raising=False)
    assert state.requested_endpoint() is None
    monkeypatch.setenv("EAGLE3SCOPE", "1")
    assert state.requested_endpoint() == "tcp://127.0.0.1:5557"
    monkeypatch.setenv("EAGLE3SCOPE_ENDPOINT", "tcp://127.0.0.1:6000")
    assert state.requested_endpoint() == "tcp://127.0.0.1:6000"
