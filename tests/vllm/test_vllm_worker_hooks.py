"""The model runner's hooks (eagle3scope_shim/vllm/worker.py) driven as vLLM 0.32 calls them, with
stand-ins for its objects (shapes only, no vLLM, no torch): one round's facts ride on the runner's
output, and a hook whose body raises returns vLLM's own result and disables only its seam."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from eagle3scope_shim.vllm import worker
from eagle3scope_shim.vllm.vllm_shim import VllmShim
from eagle3scope_shim.vllm.worker import FACTS_ATTR


def tensor(*shape):
    return SimpleNamespace(shape=shape)


class Output:
    """vLLM's ModelRunnerOutput as the hooks see it: a dataclass instance with ``req_id_to_index``."""

    def __init__(self):
        self.req_id_to_index = {"a": 0}


@pytest.fixture
def state():
    """A fresh vLLM shim state per test, as the plugin builds one (no publisher: another process publishes)."""
    made = VllmShim()
    made.worker.load_sent = True  # no drafter loaded here: the load report is not the subject
    return made


@pytest.fixture
def seams(state):
    """Hooks made for the test's state, one seam name each."""
    def hook(factory, name):
        return factory(state, f"test.{name}")

    return hook


def round_through_hooks(seams, combine_self, k=3, hidden=128, n_aux=3, rows=7):
    sample = seams(worker.make_sample_tokens, "sample")
    combine = seams(worker.make_combine, "combine")
    forward = seams(worker.make_draft_forward, "forward")
    aux = [tensor(rows, hidden) for _ in range(n_aux)]
    runner = SimpleNamespace(execute_model_state=(None,) * 6 + (aux,) + (None,) * 3,
                             model=SimpleNamespace(model=SimpleNamespace(aux_hidden_state_layers=(2, 4, 5))))

    def drafting(self):
        combine(lambda s, h: h, combine_self, tensor(rows, hidden * n_aux))
        for _ in range(k):  # the first pass, then k - 1 single-token passes, as propose runs them
            forward(lambda *a, **kw: None, None, input_ids=None, positions=None, hidden_states=tensor(1, hidden))
        return Output()

    return sample(drafting, runner)


def test_one_round_rides_on_the_output(seams):
    out = round_through_hooks(seams, SimpleNamespace(model=SimpleNamespace(use_aux_hidden_state=True)))
    facts = getattr(out, FACTS_ATTR)
    assert facts["first"] == (384, True, 7) and facts["later"] == (128, 2)
    assert facts["capture"] == {"on": True, "layers": [2, 4, 5], "widths": [128, 128, 128]}


def test_aux_off_first_pass_bypasses_fc(seams):
    out = round_through_hooks(seams, SimpleNamespace(model=SimpleNamespace(use_aux_hidden_state=False)), n_aux=1)
    assert getattr(out, FACTS_ATTR)["first"] == (128, False, 7)


def test_a_failing_hook_is_disabled_and_vllms_result_returned(state, seams):
    out = round_through_hooks(seams, SimpleNamespace())  # no .model: the combine hook's body raises
    failed = sorted(state.shim.seams.disabled)
    assert failed == ["test.combine"] and state.shim.seams.status == {"test.combine": "failed"}
    assert isinstance(out, Output)  # vLLM's result, unchanged
    facts = getattr(out, FACTS_ATTR)
    assert facts["first"] is None  # nothing guessed for the seam that failed
    # no publisher in this process: the failure travels to the EngineCore's with the round
    assert any(h["seam"] == failed[0] and h["status"] == "failed" for h in facts["hooks"])


def test_two_states_share_nothing(state, seams):
    """What one state's hooks learn stays on it: a round through the first state's hooks leaves the
    second's facts untouched, and a hook failing in the second leaves the first's seams running (one
    WorkerFacts or one Shim shared by every VllmShim fails here)."""
    other = VllmShim()
    other.worker.load_sent = True
    round_through_hooks(seams, SimpleNamespace(model=SimpleNamespace(use_aux_hidden_state=True)))
    assert state.worker.first == (384, True, 7) and state.worker.forwards == 3
    assert other.worker.first is None and other.worker.forwards == 0 and other.worker.capture is None
    round_through_hooks(lambda factory, name: factory(other, f"test.{name}"), SimpleNamespace())
    assert other.shim.seams.disabled == {"test.combine"} and state.shim.seams.disabled == set()
