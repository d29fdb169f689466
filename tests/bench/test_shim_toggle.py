"""benchmarks/support/shim_toggle.py: the bench's switch of the shim's hooks inside the server under test, and
its per-round interleaving (``bench_shim.py --design interleave``), on a stand-in scheduler whose two
per-round methods have SGLang 0.5.23's signatures (scheduler.py: ``run_batch(self, batch,
pp_proxy_tensors=None)``, ``process_batch_result(self, batch, result)``) and seams wrapped the way
SGLang's ``HookRegistry`` wraps them (``__wrapped__``)."""

import functools
import sys
import types

import pytest

from benchmarks.support import shim_toggle


class Worker:
    def forward_batch_generation(self, batch):
        return "plain"


class Resolver:
    def resolve(self, result, batch):
        return "plain"


def _wrapped(original, calls, seam):
    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        calls.append(seam)
        return original(*args, **kwargs)

    return wrapper


@pytest.fixture
def server(shim, monkeypatch):
    """A module holding the two seams, in the seam table of the shim the server's instrumentor holds (a
    stand-in for the instrumentor module the bench looks it up in); the self-time cells a hook adds to."""
    module = types.ModuleType("e3s_toggle_stand_in")
    module.Worker, module.Resolver = Worker, Resolver
    monkeypatch.setitem(sys.modules, module.__name__, module)
    calls = []
    plain = {"step": Worker.__dict__["forward_batch_generation"], "commit": Resolver.__dict__["resolve"]}
    monkeypatch.setattr(Worker, "forward_batch_generation", _wrapped(plain["step"], calls, "step"))
    monkeypatch.setattr(Resolver, "resolve", _wrapped(plain["commit"], calls, "commit"))
    shim.seams.targets.update({"v2.step": f"{module.__name__}.Worker.forward_batch_generation",
                               shim_toggle.COMMIT_SEAM: f"{module.__name__}.Resolver.resolve"})
    instrumentor = types.SimpleNamespace(INSTRUMENTOR=types.SimpleNamespace(shim=shim))
    monkeypatch.setitem(sys.modules, "eagle3scope_shim.instrumentor", instrumentor)
    return calls


class Scheduler:
    """SGLang's overlap loop in small: run_batch(k + 1) before process_batch_result(k)."""

    def __init__(self):
        self.worker, self.resolver = Worker(), Resolver()

    def run_batch(self, batch, pp_proxy_tensors=None):
        self.worker.forward_batch_generation(batch)
        return types.SimpleNamespace(batch=batch)

    def process_batch_result(self, batch, result):
        self.resolver.resolve(result, batch)
        for req in batch.reqs:
            req.output_ids.append(1)


@pytest.fixture
def scheduler_class():
    """A class of its own per test: install() rewraps the class it is given."""
    return type("Scheduler", (Scheduler,), {"run_batch": Scheduler.run_batch,
                                            "process_batch_result": Scheduler.process_batch_result})


def _batch(extend=False):
    return types.SimpleNamespace(forward_mode=types.SimpleNamespace(is_extend=lambda: extend),
                                 reqs=[types.SimpleNamespace(output_ids=[])])


def test_rounds_take_turns_and_each_rounds_hooks_follow_its_arm(server, scheduler_class):
    toggle = shim_toggle.Toggle()
    interleave = shim_toggle.Interleave(toggle, 1, first="on", owner=scheduler_class)
    interleave.install()
    sched = scheduler_class()
    batches = [_batch(extend=(i % 4 == 0)) for i in range(8)]
    results = [sched.run_batch(batches[0])]
    for i in range(1, 8):  # overlap: each round's result is processed after the next round ran
        results.append(sched.run_batch(batches[i]))
        sched.process_batch_result(batches[i - 1], results[i - 1])
    sched.process_batch_result(batches[7], results[7])
    # prefill rounds (0, 4) take turns apart from decode rounds: on, off; decode 1 2 3 5 6 7: on off on off on off
    arms = ["on", "on", "off", "on", "off", "off", "on", "off"]
    expected = []
    for i in range(8):
        if arms[i] == "on":
            expected.append("step")
        if i > 0 and arms[i - 1] == "on":
            expected.append("commit")
    if arms[7] == "on":
        expected.append("commit")
    assert server == expected
    totals = interleave.snapshot()
    assert totals["on"]["rounds"] == totals["off"]["rounds"] == 4
    assert totals["on"]["tokens"] == totals["off"]["tokens"] == 4
    assert totals["on"]["cpu_ns"] > 0 and totals["off"]["cpu_ns"] > 0


def test_the_second_session_starts_with_the_other_arm(server, scheduler_class):
    interleave = shim_toggle.Interleave(shim_toggle.Toggle(), 1, first="off", owner=scheduler_class)
    interleave.install()
    sched = scheduler_class()
    batch = _batch()
    sched.process_batch_result(batch, sched.run_batch(batch))
    assert server == [] and interleave.snapshot()["off"]["rounds"] == 1


def test_a_restart_gives_the_next_round_of_each_kind_to_the_arm_named(server, scheduler_class):
    """The bench restarts the turns at each half block: the half's first prefill and first decode
    round go to the arm it names, however many rounds of each kind ran before."""
    interleave = shim_toggle.Interleave(shim_toggle.Toggle(), 1, first="on", owner=scheduler_class)
    interleave.install()
    sched = scheduler_class()
    for extend in (True, False, False, False):  # on, on, off, on: the decode turn now stands at off
        batch = _batch(extend)
        sched.process_batch_result(batch, sched.run_batch(batch))
    for first in ("on", "off"):
        interleave.restart(first)
        before = interleave.snapshot()
        for extend in (True, False):
            server.clear()
            batch = _batch(extend)
            sched.process_batch_result(batch, sched.run_batch(batch))
            assert server == (["step", "commit"] if first == "on" else [])
        after = interleave.snapshot()
        assert after[first]["rounds"] - before[first]["rounds"] == 2


def test_a_result_run_before_interleaving_is_processed_unaccounted(server, scheduler_class):
    sched = scheduler_class()
    batch = _batch()
    early = sched.run_batch(batch)
    interleave = shim_toggle.Interleave(shim_toggle.Toggle(), 1, owner=scheduler_class)
    interleave.install()
    sched.process_batch_result(batch, early)
    assert batch.reqs[0].output_ids == [1]
    assert interleave.snapshot()["on"]["tokens"] == interleave.snapshot()["off"]["tokens"] == 0


def test_the_on_arm_pays_the_publishers_per_second_cpu_for_its_share_of_the_rounds():
    """bench_shim._split_arms: the publisher's CPU in its drains is the on rounds' frames and goes to
    the on arm whole; the rest (wake-ups, heartbeats, sticky re-sends) accrues by the second, which a
    server with the shim on in every round pays over all of them: the on arm pays its rounds' share.
    Everything else is shared by rounds, as before; ``fixed_in_full`` gives the uncorrected split."""
    from benchmarks.shim import bench_shim
    block = {"arms": {"on": {"rounds": 30, "cpu_ns": 600_000_000, "wall_ns": 700_000_000},
                      "off": {"rounds": 10, "cpu_ns": 190_000_000, "wall_ns": 220_000_000}},
             "scheduler_threads": {"main": 1.0, "shim publisher": 0.05, "shim zmq": 0.01},
             "cpu_s": 1.5, "wall_s": 1.2, "tokens": 40, "texts": ["t"], "publisher_busy_s": 0.03}
    (off,), (on,) = bench_shim._split_arms([block])
    shared_cpu = 1.5 - 0.79 - 0.06  # all processes' CPU outside the calls and the shim's threads
    assert off["cpu_s"] == pytest.approx(0.19 + 0.25 * shared_cpu)
    assert on["cpu_s"] == pytest.approx(0.6 + 0.75 * shared_cpu + 0.03 + 0.75 * 0.02 + 0.01)  # drains whole, the rest by share
    assert on["scheduler_threads"]["shim publisher"] == pytest.approx(0.045)
    (_,), (full,) = bench_shim._split_arms([block], fixed_in_full=True)
    assert full["cpu_s"] == pytest.approx(on["cpu_s"] + 0.25 * 0.02)
    del block["publisher_busy_s"]  # a server that does not say: no correction
    (_,), (untold,) = bench_shim._split_arms([block])
    assert untold["cpu_s"] == pytest.approx(full["cpu_s"]) and (off["tokens"], on["tokens"]) == (10, 30)


def test_the_bench_hears_every_frame_a_block_left_waiting():
    """bench_shim._heard_all: a block of 16 requests leaves far more frames waiting than one
    ``Subscriber.poll`` returns (256); the shim's account per round is taken from all of them.
    A real publisher and subscriber over ipc."""
    import time

    from eagle3scope.live.subscriber import Subscriber
    from eagle3scope.wire.endpoints import fresh_ipc_endpoint
    from eagle3scope_shim.publisher import Publisher

    from benchmarks.shim import bench_shim
    pub = Publisher(fresh_ipc_endpoint("bench-heard"), "dp0", sticky_interval_s=0.05, queue_size=4096)
    pub.set_sticky("hello", {"schema": 1})
    pub.start()
    try:
        with Subscriber([pub.endpoint]) as sub:
            deadline = time.monotonic() + 5
            while not any(f.kind == "hello" for f in sub.poll(50)):  # PUB/SUB joins late
                assert time.monotonic() < deadline, "subscriber never connected"
            for i in range(1000):
                pub.submit("hook", {"seam": "bench", "status": "attached", "detail": str(i)})
            deadline = time.monotonic() + 5
            while pub.queued and time.monotonic() < deadline:  # all taken for sending (re-sent hellos count in pub.sent)
                time.sleep(0.01)
            time.sleep(0.3)  # the last burst sent and carried over the socket
            seen = []
            heard = lambda got: seen.extend(f.body["detail"] for f in got if f.kind == "hook") or len(got)  # noqa: E731
            assert bench_shim._heard_all(sub, heard, timeout_ms=1000) >= 1000
            assert seen == [str(i) for i in range(1000)]
    finally:
        pub.close()
