"""What the step hooks read of a round where SGLang's CUDA deployments differ from one CPU process:
pipeline parallelism's tail draft, the graph a padded or DP-attention replay ran, and a decode rank
whose batch says extend under DP spec-prefill coordination (SGLang 0.5.23, eagle_worker_v2.py and
eagle_draft_cuda_graph_runner.py). Stand-in objects only: no torch, no SGLang."""

from __future__ import annotations

import types

import pytest
from benchmarks.support.device_events import CpuTensor

from eagle3scope_shim import hooks
from eagle3scope_shim.shim_state import Step

ns = types.SimpleNamespace


class _Published:
    def __init__(self):
        self.bodies = []

    def submit(self, kind, payload, finalize):
        self.bodies.append(finalize(payload))
        return True

    def drop(self, kind):
        raise AssertionError("no step is dropped here")


@pytest.fixture
def published(shim):
    """A publishing process at its first step, the commit seam absent (steps go out as they end)."""
    shim.publisher = _Published()
    shim.load.draft_embed_width = 128
    return shim.publisher


def _decode_batch(draft_tokens, extend_in_batch=False):
    mode = ns(is_idle=lambda: False, is_extend=lambda: False)
    return ns(forward_mode=mode, reqs=[ns(rid="r")], is_extend_in_batch=extend_in_batch,
              spec_info=ns(draft_token=CpuTensor(draft_tokens), hidden_states=None), seq_lens=[0])


def _verified(lens, ids):
    return ns(accept_lens=CpuTensor(lens), next_token_ids=CpuTensor(ids))


def test_under_pipeline_parallelism_the_published_draft_is_the_one_verify_checked(shim, published):
    """The PP last stage verifies the draft relayed with the batch, then drafts the next round (the
    tail draft); the step pairs this round's acceptance with this round's proposals."""
    shim.topology = {"parallel": {"pp_size": 2}}
    step, verify = hooks.FACTORIES["step"](shim, "v2.step"), hooks.FACTORIES["verify_v2"](shim, "v2.verify")
    draft = hooks.FACTORIES["draft"](shim, "v2.draft")
    worker = ns(speculative_num_steps=3, topk=1)

    def last_stage(self, batch):
        verify(lambda w, b: _verified([2], [11, 12, 0, 0]), self, batch)
        draft(lambda w, b: ns(draft_token=CpuTensor([12, 90, 91, 92])), self, batch)  # the next round's proposals

    step(last_stage, worker, _decode_batch([5, 10, 11, 12]))
    (body,) = published.bodies
    assert body["draft_ids"] == [[10, 11, 12]] and body["accepted_ids"] == [[11, 12]] and body["accepted"] == [1]


def test_without_pipeline_parallelism_the_draft_hook_takes_the_draft(shim, published):
    step, verify = hooks.FACTORIES["step"](shim, "v2.step"), hooks.FACTORIES["verify_v2"](shim, "v2.verify")
    draft = hooks.FACTORIES["draft"](shim, "v2.draft")

    def one_stage(self, batch):
        draft(lambda w, b: ns(draft_token=CpuTensor([5, 10, 11, 12])), self, batch)
        verify(lambda w, b: _verified([2], [10, 12, 0, 0]), self, batch)

    step(one_stage, ns(speculative_num_steps=3, topk=1), _decode_batch([0, 0, 0, 0]))
    assert published.bodies[0]["draft_ids"] == [[10, 11, 12]] and shim.plan.tail_draft is False


def test_a_round_whose_verify_ran_is_decode_whatever_the_batch_says(shim, published):
    """SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION=1: a decode rank's batch has ``is_extend_in_batch``
    set while it drafts and verifies; without verify the same batch is a prefill step."""
    step, verify = hooks.FACTORIES["step"](shim, "v2.step"), hooks.FACTORIES["verify_v2"](shim, "v2.verify")
    worker = ns(speculative_num_steps=3, topk=1)
    step(lambda self, b: verify(lambda w, bb: _verified([3], [10, 11, 12, 0]), self, b), worker,
         _decode_batch([5, 10, 11, 12], extend_in_batch=True))
    step(lambda self, b: None, worker, _decode_batch([5, 10, 11, 12], extend_in_batch=True))
    decode, prefill = published.bodies
    assert (decode["mode"], decode["accepted"], decode["accepted_ids"]) == ("decode", [2], [[10, 11, 12]])
    assert prefill["mode"] == "prefill" and prefill["accepted"] == [0]


@pytest.mark.parametrize("runner, graph_bs", [
    (ns(bs=8), 8),  # DP attention: padded from the largest batch of all ranks (8), not this rank's 3
    (ns(bs=4), 4),  # padded up to the next captured size
    (None, 4),  # a runner that keeps no key: the smallest captured size that holds the batch
])
def test_a_replayed_pass_names_the_graph_its_runner_chose(shim, published, runner, graph_bs):
    shim.load.graphs.update({("decode", 1): [384, True], ("decode", 4): [384, True], ("decode", 8): [384, True]})
    shim.step = Step()
    worker = ns(speculative_num_steps=3, cuda_graph_runner=runner)
    batch = ns(spec_info=ns(hidden_states=ns(shape=(3, 384))), seq_lens=[7, 8, 9])
    hooks.FACTORIES["draft"](shim, "v2.draft")(lambda w, b: ns(draft_token=CpuTensor([0] * 12)), worker, batch)  # no forward ran
    assert shim.step.passes == [("decode", 384, None, 2, graph_bs)]
