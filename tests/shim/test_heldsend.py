"""The publisher's send that keeps the GIL (heldsend): it reaches the viewer as pyzmq's send does,
says "would block" the same way, and falls back to pyzmq's send wherever libzmq cannot be found for
sure. Real sockets, the libzmq pyzmq loaded in this process."""

from __future__ import annotations

import time

import pytest
import zmq

from eagle3scope_shim import heldsend


@pytest.fixture
def pair(tmp_path):
    ctx = zmq.Context()
    pub, sub = ctx.socket(zmq.XPUB), ctx.socket(zmq.SUB)
    endpoint = f"ipc://{tmp_path}/held"
    pub.bind(endpoint)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(endpoint)
    assert pub.poll(5000) and pub.recv()[:1] == b"\x01"  # the subscription arrived
    yield pub, sub
    pub.close(0)
    sub.close(0)
    ctx.term()


def _received(sub, n: int) -> list[bytes]:
    got = []
    deadline = time.monotonic() + 5
    while len(got) < n and time.monotonic() < deadline:
        if sub.poll(100):
            got.append(sub.recv())
    return got


@pytest.mark.skipif(heldsend._loaded_libzmq() is None, reason="no single libzmq mapped (not Linux, or linked in)")
def test_frames_sent_holding_the_gil_arrive_whole_and_in_order(pair):
    pub, sub = pair
    put = heldsend._held(pub)
    assert put is not None  # pyzmq's own libzmq, found and checked
    frames = [bytes([i]) * (1 + 97 * i) + b"\x00tail" for i in range(20)]  # NULs inside: lengths, not C strings
    for frame in frames:
        put(frame)
    assert _received(sub, len(frames)) == frames


@pytest.mark.skipif(heldsend._loaded_libzmq() is None, reason="no single libzmq mapped (not Linux, or linked in)")
def test_a_full_socket_raises_again_as_pyzmq_does(tmp_path):
    """With XPUB_NODROP a full pipe makes a non-blocking send fail with EAGAIN: both sends say
    ``zmq.Again``, which the publisher counts as a drop. High-water marks of one message each way keep
    what fills the pipe small (at the default marks it took 1.6 GB)."""
    ctx = zmq.Context()
    pub, sub = ctx.socket(zmq.XPUB), ctx.socket(zmq.SUB)
    try:
        pub.setsockopt(zmq.SNDHWM, 1)
        pub.setsockopt(zmq.XPUB_NODROP, 1)
        sub.setsockopt(zmq.RCVHWM, 1)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        pub.bind(f"ipc://{tmp_path}/full")
        sub.connect(f"ipc://{tmp_path}/full")
        assert pub.poll(5000) and pub.recv()[:1] == b"\x01"  # subscribed; it never reads
        put, big = heldsend._held(pub), b"x" * (1 << 16)
        with pytest.raises(zmq.Again):
            for _ in range(100_000):
                put(big)
        with pytest.raises(zmq.Again):
            pub.send(big, zmq.NOBLOCK)
    finally:
        pub.close(0)
        sub.close(0)
        ctx.term()


def test_without_the_library_pyzmq_sends(pair, monkeypatch):
    pub, sub = pair
    monkeypatch.setattr(heldsend, "_loaded_libzmq", lambda: None)
    put = heldsend.sender(pub)
    assert heldsend._held(pub) is None
    put(b"one")
    assert _received(sub, 1) == [b"one"]


@pytest.mark.skipif(heldsend._loaded_libzmq() is None, reason="no single libzmq mapped (not Linux, or linked in)")
def test_a_libzmq_of_another_version_is_not_trusted(pair, monkeypatch):
    pub, _ = pair
    monkeypatch.setattr(zmq, "zmq_version_info", lambda: (1, 0, 0))
    assert heldsend._held(pub) is None


def test_the_library_is_the_one_libzmq_mapped(tmp_path):
    def maps(*paths):
        f = tmp_path / "maps"
        f.write_text("".join(f"7f00{i:04x}000-7f00{i:04x}fff r-xp 00000000 08:01 {i} {p}\n" for i, p in enumerate(paths)))
        return str(f)

    lib = "/opt/venv/lib/python3.11/site-packages/pyzmq.libs/libzmq-2f02442c.so.5.2.5"
    assert heldsend._loaded_libzmq(maps(lib, lib, "/usr/lib/libc.so.6")) == lib
    assert heldsend._loaded_libzmq(maps("/usr/lib/libc.so.6", "[heap]")) is None
    assert heldsend._loaded_libzmq(maps(lib, "/usr/lib/x86_64-linux-gnu/libzmq.so.5")) is None  # two: which one is pyzmq's?
    assert heldsend._loaded_libzmq(maps("/home/u/libzmq-notes/readme.txt")) is None  # a path naming it, not a library
    assert heldsend._loaded_libzmq(str(tmp_path / "absent")) is None


def test_anything_going_wrong_while_finding_the_library_leaves_pyzmqs_send(pair, monkeypatch):
    """The publisher starts inside SGLang's scheduler: the shortcut's failure must never stop it."""
    import ctypes

    pub, sub = pair

    def broken(path):
        raise ctypes.ArgumentError("a loader that fails in a way nobody listed")

    monkeypatch.setattr(heldsend, "_loaded_libzmq", lambda: "/some/libzmq.so.5")
    monkeypatch.setattr(ctypes, "PyDLL", broken)
    put = heldsend.sender(pub)
    put(b"still sent")
    assert _received(sub, 1) == [b"still sent"]
