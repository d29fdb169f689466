"""benchmarks/support/sampled.py: which py-spy samples of the scheduler's main thread are the shim's own work.

The stacks are shaped as py-spy 0.4.3 writes them (``record -f raw --threads``) for SGLang 0.5.23's
scheduler with the shim attached through ``HookRegistry`` (one line per stack, its count last).
"""


from benchmarks.support import sampled

MAIN = "thread (3405): MainThread;<module> (<string>:1);Scheduler.run_batch (scheduler.py:4849)"
REGISTRY = "_wrap_fn.<locals>.wrapper (plugins/hook_registry.py:388)"
HOOK = "around.<locals>.hook (eagle3scope_shim/guard.py:96)"
POST = "make_step.<locals>.post (eagle3scope_shim/hooks.py:202)"


def raw(*stacks: tuple[str, int]) -> str:
    return "\n".join(f"{s} {n}" for s, n in stacks) + "\n"


def test_samples_are_split_into_the_shims_and_sglangs():
    text = raw(
        (f"{MAIN};{REGISTRY};{HOOK}", 5),  # the guard's own line: the wrapper
        (f"{MAIN};{REGISTRY}", 2),  # SGLang's wrapper, which only calls the hook
        (f"{MAIN};{REGISTRY};{HOOK};{POST};capture_now (eagle3scope_shim/loadreport.py:184)", 3),
        (f"{MAIN};{REGISTRY};{HOOK};{POST};Module.__getattr__ (torch/nn/modules/module.py:1966)", 1),
        (f"{MAIN};{REGISTRY};{HOOK};EAGLEWorkerV2.forward_batch_generation (eagle_worker_v2.py:1503)", 40),
        (f"{MAIN};{REGISTRY};{HOOK};{POST};fill_bonus_tokens_cpu (sgl_kernel/speculative.py:77)", 4),  # py-spy's stale frame
        (f"{MAIN};Scheduler.recv_requests (scheduler.py:1200)", 45),
        ("thread (3620): e3s-publisher;Publisher._run (eagle3scope_shim/publisher.py:300)", 9),
    )
    got = sampled.attribute(text)
    assert got["main_thread_samples"] == 100  # the publisher thread is not the main thread
    assert got["shim_samples"] == 5 + 2 + 3 + 1
    assert got["shim_share_of_main_thread"] == 0.11
    assert got["by_part"] == {"wrapper": 5, "HookRegistry wrapper": 2, "make_step.<locals>.post": 4}


def test_another_thread_and_malformed_lines():
    text = raw(("thread (3620): e3s-publisher;Publisher._run (eagle3scope_shim/publisher.py:300)", 9)) + "garbage\n\n"
    assert sampled.attribute(text) == {"main_thread_samples": 0, "shim_samples": 0, "shim_share_of_main_thread": None,
                                       "by_part": {}}
    got = sampled.attribute(text, thread="e3s-publisher")
    assert (got["main_thread_samples"], got["shim_samples"], got["by_part"]) == (9, 9, {"Publisher._run": 9})
