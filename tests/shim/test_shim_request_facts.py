"""The per-request facts the acceptance slices read: each decode step carries the requests' context
lengths (SGLang's host-side ``seq_lens_cpu``) and greedy flags (``sampling_params.top_k <= 1``),
dropped with a discarded request like every per-request list, and left out where SGLang does not say."""

from __future__ import annotations

import types

import pytest

from eagle3scope.wire import decode_frame, encode_frame
from eagle3scope_shim import hooks, step_body
from support.shim_state import ended, recording_publisher


class CpuTensor(list):
    """A host tensor as the step hook meets ``seq_lens_cpu``: on the CPU, read with ``tolist``."""

    is_cpu = True

    def tolist(self):
        return list(self)


class Host(list):
    """A device-side stand-in (no ``is_cpu``) where the shim must not read it, else a snapshot it lists."""

    def tolist(self):
        return list(self)


@pytest.fixture
def published(shim, monkeypatch):
    """(run one decode step through the step hook, returning the body the publisher thread builds)."""
    submitted = recording_publisher(shim)  # a fresh shim: no step, no seam status yet
    shim.uncommitted = type(shim.uncommitted)()
    shim.plan.stepped = True
    shim.snapshots.on_cpu = False
    shim.load.workers = []
    shim.plan.published_at_step = True
    hook = hooks.FACTORIES["step"](shim, "v2.step")

    def run(batch, accepted: list[int]) -> dict:
        def verify(worker, b):  # what the verify hook leaves on the step: per-request counts and ids
            shim.step.verify = ("v2", Host([a + 1 for a in accepted]), Host([7] * (4 * len(accepted))))

        hook(verify, types.SimpleNamespace(), batch)
        (kind, payload, finalize), = submitted[-1:]
        body = finalize(payload)
        assert decode_frame(encode_frame("step", body, src="t", n=0)).body == body  # validates as sent
        return body

    return run


def _batch(top_ks, seq_lens, **extra):
    reqs = [types.SimpleNamespace(rid=f"r{i}", sampling_params=types.SimpleNamespace(top_k=k), **extra)
            for i, k in enumerate(top_ks)]
    return types.SimpleNamespace(reqs=reqs, seq_lens_cpu=seq_lens, is_extend_in_batch=False,
                                 forward_mode=types.SimpleNamespace(is_idle=lambda: False, is_extend=lambda: False))


def test_a_decode_step_carries_each_requests_context_length_and_greedy_flag(published):
    body = published(_batch([1, 20, 1 << 30], CpuTensor([17, 300, 5000])), [2, 0, 1])
    assert body["ctx_len"] == [17, 300, 5000]
    assert body["greedy"] == [True, False, False]


def test_a_discarded_request_leaves_its_facts_with_it(shim):
    step = hooks.Step()
    step.verify = ("v2", Host([1, 3]), Host([7] * 8))
    step.ctx_len, step.discarded = CpuTensor([40, 90]), ["a"]
    step.reqs = tuple(types.SimpleNamespace(sampling_params=types.SimpleNamespace(top_k=k)) for k in (1, 50))
    body = step_body.finalize_step(shim, ended(step, rids=["a", "b"]))
    assert body["rids"] == ["b"] and body["ctx_len"] == [90] and body["greedy"] == [False]


def test_a_batch_that_does_not_say_publishes_the_step_without_them(published):
    batch = _batch([1], None)
    batch.reqs = [types.SimpleNamespace(rid="r0")]  # no sampling_params: an unknown SGLang
    body = published(batch, [1])
    assert "ctx_len" not in body and "greedy" not in body and body["accepted"] == [1]
    short = published(_batch([1, 1], CpuTensor([5])), [1, 1])  # lengths that do not match the batch
    assert "ctx_len" not in short and short["greedy"] == [True, True]
    on_device = published(_batch([1], Host([5])), [1])  # not on the host: reading it would wait for the device
    assert "ctx_len" not in on_device and on_device["greedy"] == [True]
