"""The aux-layer toggle on a real tensor-parallel server: SGLang 0.5.23 CPU, ``--tp-size 2``.

Every TP rank holds its own target and capture list, and the draft's features are built on each
rank from its own capture (sglang-topologies.md), so a change must reach both ranks between the
same two scheduler iterations. It rides SGLang's own request broadcast from TP rank 0
(``SchedulerRequestReceiver._broadcast_reqs_across_ranks``, managers/scheduler_components/
request_receiver.py, 0.5.23). One shared server serves the ``aux-offset`` scenario's draft
(trained on ids [1, 3, 4], configured with speculators' [2, 4, 5]) with the control channel on:

* ``aux set`` to the trained ids changes both ranks' ``layers_to_capture`` at the same SGLang
  forward count, and SGLang's own ``meta_info.spec_accept_length`` follows: the served (wrong)
  set accepts clearly less, the trained set restores it, the wrong one brings it down again;
  greedy output stays the same throughout (speculative decoding is lossless);
* a set that fails on rank 1 only (``EAGLE3SCOPE_FAULT=aux.apply@tp1=IDS``: the shim's fault
  point on that rank's call into SGLang, as no real failure of a healthy TP-2 CPU server differs
  between ranks) is refused as a whole, with rank 1 named, and both ranks keep the set before it.
"""

from __future__ import annotations

import pytest

from eagle3scope.control.client import ControlClient, ControlError
from eagle3scope.demo.server import SGLangServer
from eagle3scope.wire.endpoints import free_port
from eagle3scope.wire.token import create_token_file, read_token

from support.aux_support import aux_cli, aux_offset_scenario

pytestmark = pytest.mark.engine

FAULTY = [0, 1, 2]  # valid ids (rank 0 accepts them); rank 1's fault point fails them
TP_ENV = {"SGLANG_CPU_OMP_THREADS_BIND": "0|1"}  # one core per rank (numa_utils asserts ranks <= NUMA nodes)


@pytest.fixture(scope="module")
def tp2(engine_python, tmp_path_factory):
    from eagle3scope.demo.models import demo_prompts

    paths, spec, offset = aux_offset_scenario(tmp_path_factory.mktemp("aux-offset"))
    token = create_token_file(tmp_path_factory.mktemp("token"))
    control = f"tcp://127.0.0.1:{free_port()}"
    env = {**TP_ENV, "EAGLE3SCOPE_ENDPOINT": f"tcp://127.0.0.1:{free_port()}", "EAGLE3SCOPE_CONTROL": control,
           "EAGLE3SCOPE_CONTROL_TOKEN_FILE": str(token), "EAGLE3SCOPE_FAULT": "aux.apply@tp1=" + ",".join(map(str, FAULTY))}
    with SGLangServer(spec.target_dir, spec.draft_dir, env=env,
                      extra_args=[*spec.extra_args, "--tp-size", "2", "--disable-radix-cache"]) as server:
        yield {"server": server, "client": ControlClient(control, read_token(token), timeout_s=10),
               "channel": ("--control", control, "--token-file", str(token)),
               "trained": list(paths.aux_layer_ids), "offset": offset, "prompts": demo_prompts(6)}


def _accept(tp2) -> tuple[float, list[str]]:
    """SGLang's mean accept length over the prompts (greedy, one batch) and the texts."""
    out = tp2["server"].generate(tp2["prompts"], max_new_tokens=40)
    return sum(o["meta_info"]["spec_accept_length"] for o in out) / len(out), [o["text"] for o in out]


def _applied_on_both_ranks(reply, layers):
    assert reply["status"] == "applied" and reply["layers"] == layers, reply
    ranks = reply["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1] and all(r["error"] == "" and r["on"] for r in ranks), ranks
    assert [r["captured"] for r in ranks] == [[i + 1 for i in layers]] * 2, ranks
    assert ranks[0]["forward_ct"] is not None and ranks[0]["forward_ct"] == ranks[1]["forward_ct"], ranks


def test_list_says_a_set_reaches_every_rank(tp2):
    listed = tp2["client"].list()
    assert listed["tp_size"] == 2 and listed["changeable"] and listed["why_not"] == "", listed
    assert listed["current"] == tp2["offset"] and listed["captured"] == [i + 1 for i in tp2["offset"]]
    out = aux_cli("list", *tp2["channel"])
    assert out.returncode == 0 and "tensor parallel: 2 ranks; a set is applied by all of them" in out.stdout, out


def test_set_changes_both_ranks_in_the_same_iteration_and_acceptance_follows(tp2):
    client, trained, offset = tp2["client"], tp2["trained"], tp2["offset"]
    wrong, texts = _accept(tp2)
    reply = client.set(trained, wait_s=5)
    _applied_on_both_ranks(reply, trained)
    right, texts_right = _accept(tp2)
    out = aux_cli("set", ",".join(map(str, offset)), "--wait", "5", *tp2["channel"])  # as a user does
    assert out.returncode == 0, out
    back = client.list()["ranks"]
    assert [r["captured"] for r in back] == [[i + 1 for i in offset]] * 2 and back[0]["forward_ct"] == \
        back[1]["forward_ct"] > reply["ranks"][0]["forward_ct"], back  # applied together, forwards after the last
    for r in back:
        assert f"TP rank {r['rank']}: captures {r['captured']} after SGLang's forward {r['forward_ct']}" in out.stdout
    wrong_again, texts_again = _accept(tp2)
    means = {"served": round(wrong, 3), "trained": round(right, 3), "served again": round(wrong_again, 3)}
    print("TP-2 mean spec_accept_length", means, "forward_ct", [r["forward_ct"] for r in reply["ranks"] + back])
    assert right > wrong + 0.3 and right > wrong_again + 0.3, means
    assert texts_right == texts and texts_again == texts  # lossless whatever the aux layers


def test_a_failure_on_one_rank_refuses_the_set_and_restores_both(tp2):
    client, trained = tp2["client"], tp2["trained"]
    _applied_on_both_ranks(client.set(trained, wait_s=5), trained)
    before, _ = _accept(tp2)
    with pytest.raises(ControlError) as refused:
        client.set(FAULTY, wait_s=5)
    reply = refused.value.reply
    assert reply["error"].startswith("TP rank 1: fault injected into aux.apply on TP rank 1"), reply
    assert reply["error"].endswith(f"restored {trained} on every TP rank"), reply
    assert [r["captured"] for r in reply["ranks"]] == [[i + 1 for i in trained]] * 2, reply
    listed = client.list()
    assert listed["current"] == trained and listed["captured"] == [i + 1 for i in trained] and listed["pending"] is None
    after, _ = _accept(tp2)
    assert after > before - 0.2, (before, after)  # the trained set still serves on both ranks
    assert tp2["server"].proc.poll() is None
