"""Publisher and Subscriber over real ZeroMQ sockets: delivery, stickiness, loss accounting, no blocking."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import msgpack
import pytest
import zmq

from eagle3scope.live.subscriber import Subscriber
from eagle3scope.wire import SCHEMA_MAJOR, encode_frame
from eagle3scope.wire.endpoints import is_loopback, resolve_bind_endpoint
from eagle3scope.wire.loss import StreamLoss
from eagle3scope_shim.publisher import Publisher
from benchmarks.support.synthetic import hello_body, load_body, step_body


def collect(sub: Subscriber, until, timeout: float = 5.0) -> list:
    got, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline and not until(got):
        got.extend(sub.poll(50))
    return got


def wait_connected(pub: Publisher, sub: Subscriber) -> None:
    """PUB/SUB joins late: wait until a sticky hello makes it through."""
    frames = collect(sub, lambda got: any(f.kind == "hello" for f in got))
    assert any(f.kind == "hello" for f in frames), "subscriber never connected"


@pytest.fixture
def pub():
    p = Publisher("tcp://127.0.0.1:*", "dp0", sticky_interval_s=0.1, heartbeat_interval_s=0.1)
    p.set_sticky("hello", hello_body())
    p.start()
    yield p
    p.close()


def test_endpoint_resolution_stays_on_loopback_unless_asked():
    assert resolve_bind_endpoint("5557") == "tcp://127.0.0.1:5557"
    assert resolve_bind_endpoint("tcp://127.0.0.1:*") == "tcp://127.0.0.1:0"
    assert is_loopback(resolve_bind_endpoint("")) and is_loopback("ipc:///tmp/x") and is_loopback("tcp://[::1]:5")
    assert not is_loopback("tcp://0.0.0.0:5557") and not is_loopback("tcp://*:5557")
    with pytest.raises(ValueError):
        resolve_bind_endpoint("udp://127.0.0.1:5")


def test_steps_arrive_in_order_with_bodies_intact(pub):
    assert pub.endpoint.startswith("tcp://127.0.0.1:") and not pub.endpoint.endswith(":0")
    with Subscriber([pub.endpoint]) as sub:
        wait_connected(pub, sub)
        bodies = [step_body(i, bs=3) for i in range(500)]
        for body in bodies:
            pub.submit("step", body)
        steps = [f for f in collect(sub, lambda got: sum(f.kind == "step" for f in got) >= 500) if f.kind == "step"]
        assert [f.body for f in steps] == bodies
        assert sub.sources == {"dp0"}
        beats = collect(sub, lambda got: any(f.kind == "heartbeat" and f.body["steps"] == 500 for f in got))
        assert any(f.kind == "heartbeat" and f.body["steps"] == 500 for f in beats)


def test_late_subscriber_learns_hello_and_load(pub):
    pub.set_sticky("load", load_body())
    for i in range(50):
        pub.submit("step", step_body(i))
    time.sleep(0.3)  # everything so far went to nobody
    with Subscriber([pub.endpoint]) as sub:
        got = collect(sub, lambda got: {"hello", "load"} <= {f.kind for f in got})
        assert {f.kind: f.body for f in got if f.kind in ("hello", "load")} == {"hello": hello_body(), "load": load_body()}


def test_finalize_runs_off_the_hot_path_and_failures_are_reported_once(pub):
    with Subscriber([pub.endpoint]) as sub:
        wait_connected(pub, sub)
        hot_thread = threading.get_ident()
        seen_threads = set()

        def finalize(payload):
            seen_threads.add(threading.get_ident())
            if payload == "boom":
                raise RuntimeError("device event lost")
            return None if payload == "skip" else step_body(payload)

        for payload in (0, "boom", "skip", 1, "boom", 2):
            pub.submit("step", payload, finalize)
        frames = collect(sub, lambda got: sum(f.kind == "step" for f in got) >= 3)
        time.sleep(0.2)
        frames += sub.poll(50)
        assert [f.body["seq"] for f in frames if f.kind == "step"] == [0, 1, 2]
        hooks = [f.body for f in frames if f.kind == "hook"]
        assert len(hooks) == 1 and hooks[0]["seam"] == "publisher" and hooks[0]["status"] == "failed"
        assert "device event lost" in hooks[0]["detail"]
        assert pub.hook_failures == 2 and hot_thread not in seen_threads


def test_a_burst_with_failures_inside_is_numbered_without_holes(pub):
    """The publisher builds and packs a whole burst before it numbers and sends it. Failures inside the
    burst (a finalize that raises, a body that does not pack) are reported as they happen, so their
    ``hook`` frame goes out first; every frame that goes out, in the burst or not, takes the next
    ``n``: a viewer counts holes as frames lost in transit, and there are none here."""
    with Subscriber([pub.endpoint]) as sub:
        wait_connected(pub, sub)
        pub._wake_batch = 10  # the ten events below wake the thread together: one burst

        def finalize(payload):
            if payload == "raise":
                raise RuntimeError("device event lost")
            if payload == "unpackable":
                return {"seq": 99, "tensor": object()}
            return step_body(payload)

        for payload in (0, 1, "raise", 2, "unpackable", 3, 4, 5, 6, 7):
            pub.submit("step", payload, finalize)
        frames = collect(sub, lambda got: sum(f.kind == "step" for f in got) >= 8)
        time.sleep(0.3)
        frames += sub.poll(50)
        assert [f.body["seq"] for f in frames if f.kind == "step"] == list(range(8))
        numbers = [f.n for f in frames]
        assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))  # no holes, no repeats
        failed = [f for f in frames if f.kind == "hook"]
        assert len(failed) == 2 and {"finalize", "encode"} == {h.body["detail"].split()[0] for h in failed}
        first_step = next(i for i, f in enumerate(frames) if f.kind == "step" and f.body["seq"] == 0)
        assert all(frames.index(h) < first_step for h in failed)  # reported while the burst was packed
        assert pub.hook_failures == 2 and pub.dropped == 0


def test_submit_never_blocks_and_counts_drops_without_subscriber():
    gate, wedged = threading.Event(), threading.Event()

    def wedge(_):
        wedged.set()
        gate.wait(5)

    p = Publisher("tcp://127.0.0.1:*", "dp0", queue_size=1000)
    p.start()
    try:
        p.submit("step", 0, wedge)  # the publisher thread is now stuck in this finalize
        assert wedged.wait(5)
        body = step_body(1)
        start = time.perf_counter()
        for _ in range(100_000):
            p.submit("step", body)
        elapsed = time.perf_counter() - start
        assert elapsed < 2.0, f"100k submits took {elapsed:.2f}s"
        assert p.steps == 100_001
        assert p.queued == 1000 and p.dropped == 100_000 - 1000
    finally:
        gate.set()
        t = time.perf_counter()
        p.close(linger_s=0.2)
        assert time.perf_counter() - t < 2.0


def test_close_is_idempotent_and_later_submits_are_dropped(pub):
    pub.close()
    pub.close()
    pub.submit("step", step_body(0))
    assert pub.dropped >= 1


def test_ipc_endpoint(tmp_path):
    p = Publisher(f"ipc://{tmp_path}/e3s.sock", "dp1", sticky_interval_s=0.1)
    p.set_sticky("hello", hello_body(publisher_index=1))
    p.start()
    try:
        with Subscriber([p.endpoint]) as sub:
            wait_connected(p, sub)
            p.submit("step", step_body(5))
            frames = collect(sub, lambda got: any(f.kind == "step" for f in got))
            assert [f.body["seq"] for f in frames if f.kind == "step"] == [5]
    finally:
        p.close()


def test_one_subscriber_listens_to_several_publishers():
    pubs = [Publisher("tcp://127.0.0.1:*", f"dp{i}", sticky_interval_s=0.1) for i in range(2)]
    for p in pubs:
        p.set_sticky("hello", hello_body(publisher_index=int(p.src[2:])))
        p.start()
    try:
        with Subscriber([p.endpoint for p in pubs]) as sub:
            collect(sub, lambda got: {f.src for f in got if f.kind == "hello"} == {"dp0", "dp1"})
            for i in range(20):
                for p in pubs:
                    p.submit("step", step_body(i))
            frames = collect(sub, lambda got: sum(f.kind == "step" for f in got) >= 40)
            for src in ("dp0", "dp1"):
                assert [f.body["seq"] for f in frames if f.kind == "step" and f.src == src] == list(range(20))
    finally:
        for p in pubs:
            p.close()


def _join(pub, sub) -> list:
    """One hello once the subscriber listens; returns what arrived with it."""
    pub.wait_subscribed()
    pub.send("hello", hello_body(), src="x")
    return collect(sub, lambda got: any(f.kind == "hello" for f in got))


def test_bad_frames_are_counted_and_do_not_hide_the_next_ones(synthetic_publisher):
    pub = synthetic_publisher
    with Subscriber([pub.endpoint]) as sub:
        _join(pub, sub)
        newer = msgpack.packb({"v": [SCHEMA_MAJOR + 1, 0], "k": "step", "src": "x", "n": 1, "t": 0, "b": {}})
        for data in (b"\xc1garbage", newer, encode_frame("step", step_body(1), src="x", n=1)):
            pub.send_raw(data)
        frames = collect(sub, lambda got: any(f.kind == "step" for f in got))
        assert [f.body["seq"] for f in frames if f.kind == "step"] == [1]
        assert sub.bad_frames == 2 and "upgrade eagle3scope" in sub.last_error


def test_gaps_and_shim_drops_add_up_per_source(synthetic_publisher):
    """What the subscriber delivers, counted by the recorder's one counter (StreamLoss)."""
    pub = synthetic_publisher
    loss = StreamLoss()
    with Subscriber([pub.endpoint]) as sub:
        for frame in _join(pub, sub):
            loss.observe(frame)
        stats = loss.sources["x"]
        assert (stats.last_n, stats.lost_in_transit, stats.restarts) == (0, 0, 0)
        for n in (1, 5):
            pub.send("step", step_body(n), src="x", n=n)
        pub.send("heartbeat", {"steps": 9, "dropped": 7, "hook_failures": 1, "queued": 0}, src="x")
        for frame in collect(sub, lambda got: any(f.kind == "heartbeat" for f in got)):
            loss.observe(frame)
        assert (stats.lost_in_transit, stats.shim_dropped, stats.hook_failures) == (3, 7, 1)
        assert loss.lost == stats.lost == 3 + 7
        assert loss.summary(sub.bad_frames)["sources"]["x"]["dropped_by_shim"] == 7
        pub.send("hello", hello_body(), src="x", n=0)  # publisher restarted under the same src
        for frame in collect(sub, lambda got: bool(got)):
            loss.observe(frame)
        assert stats.restarts == 1 and stats.lost_in_transit == 3
        assert sub.sources == {"x"} and not hasattr(sub, "lost")  # the subscriber itself counts no loss


def test_failed_connect_leaves_nothing_that_blocks_the_gc():
    """A half-built Subscriber caught in a reference cycle (as inside click) must not hang gc.collect()."""
    code = textwrap.dedent("""
        import gc, zmq
        from eagle3scope.live.subscriber import Subscriber
        box = []
        try:
            Subscriber(["tcp://127.0.0.1:1", "not-an-endpoint"])
        except zmq.ZMQError as exc:
            box.append(exc)
        box.append(box)
        del box
        gc.collect()
        print("collected")
    """)
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail("gc.collect() blocked in zmq Context.term() on a leaked socket")
    assert done.stdout.strip() == "collected", done.stderr


def test_a_viewer_joining_late_learns_hello_and_load_at_once():
    """A viewer that subscribes long after the server started gets the sticky bodies when it joins,
    not a sticky interval later: a short recording (40 collapsed steps take under a second on the
    CPU engine) would otherwise end with steps and no hello or load, and every rule keyed on the
    draft's class stays silent."""
    import time

    from eagle3scope.live.subscriber import Subscriber
    from eagle3scope_shim.publisher import Publisher
    from benchmarks.support.synthetic import hello_body, load_body

    pub = Publisher("tcp://127.0.0.1:0", "late0", sticky_interval_s=600.0)
    pub.start()
    try:
        pub.set_sticky("hello", hello_body())
        pub.set_sticky("load", load_body())
        time.sleep(0.5)  # the first send went to nobody
        sub = Subscriber([pub.endpoint])
        try:
            kinds, deadline = set(), time.monotonic() + 5.0
            while not {"hello", "load"} <= kinds and time.monotonic() < deadline:
                kinds |= {f.kind for f in sub.poll(50)}
            assert {"hello", "load"} <= kinds
        finally:
            sub.close()
    finally:
        pub.close(0)
