"""Sending a frame on a ZeroMQ socket without letting go of the GIL.

pyzmq releases the GIL around every send. In SGLang's scheduler process the scheduler's thread is
usually waiting for it by then (the publisher holds it while it builds frames), so each send hands
the GIL over and taking it back costs the publisher a wait and a wake-up, the scheduler's thread a
switch, and each side cold caches. A non-blocking send on a PUB socket is a few µs of work (a
lock-free pipe write; ZeroMQ's I/O thread does the socket work), less than a hand-over. So the
publisher calls libzmq's ``zmq_send`` through :class:`ctypes.PyDLL`, which keeps the GIL, on the
very library pyzmq loaded in this process: the one ``libzmq`` mapped (``/proc/self/maps``), of
pyzmq's version, that reads the socket's type back. Where any of that fails (no ``/proc``, a
libzmq linked into pyzmq's module, two of them mapped), :func:`sender` gives pyzmq's send.
BENCHMARKS.md ("Shim", the publisher) has what it saves.
"""

from __future__ import annotations

import ctypes
import errno
import os
from typing import Callable

import zmq


def sender(sock: zmq.Socket) -> Callable[[bytes], None]:
    """``put(data)``: send ``data`` on ``sock`` without waiting, raising ``zmq.Again`` when it would
    block and ``zmq.ZMQError`` on any other error, as ``sock.send(data, zmq.NOBLOCK)`` does. Use it
    on one thread, and not after ``sock`` is closed."""
    held = _held(sock)
    if held is not None:
        return held
    send, flags = sock.send, zmq.NOBLOCK
    return lambda data: send(data, flags)


def _held(sock: zmq.Socket) -> Callable[[bytes], None] | None:
    path = _loaded_libzmq()
    if path is None:
        return None
    try:
        lib = ctypes.PyDLL(path)
        send, get, version, last_error = lib.zmq_send, lib.zmq_getsockopt, lib.zmq_version, lib.zmq_errno
        send.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int]
        send.restype = ctypes.c_int
        handle = ctypes.c_void_p(sock.underlying)
        parts = [ctypes.c_int() for _ in range(3)]
        version(*(ctypes.byref(p) for p in parts))
        if tuple(p.value for p in parts) != zmq.zmq_version_info():
            return None
        kind, size = ctypes.c_int(), ctypes.c_size_t(ctypes.sizeof(ctypes.c_int))
        if get(handle, zmq.TYPE, ctypes.byref(kind), ctypes.byref(size)) != 0 or kind.value != sock.type:
            return None
    except Exception:  # a shortcut only: whatever goes wrong finding it, pyzmq's send still works
        return None
    flags = zmq.DONTWAIT

    def put(data: bytes) -> None:
        while send(handle, data, len(data), flags) < 0:
            code = last_error()
            if code == errno.EINTR:  # pyzmq retries a send a signal interrupted; so does this
                continue
            raise zmq.Again() if code == errno.EAGAIN else zmq.ZMQError(code)

    return put


def _loaded_libzmq(maps: str = "/proc/self/maps") -> str | None:
    """The path of the one libzmq shared library mapped into this process, else None."""
    try:
        with open(maps, encoding="utf-8", errors="replace") as f:
            paths = {line.split(None, 5)[-1].strip() for line in f if "libzmq" in line}
    except OSError:
        return None
    libs = {p for p in paths if os.path.basename(p).startswith("libzmq") and ".so" in os.path.basename(p)}
    return libs.pop() if len(libs) == 1 else None
