"""free_port: a port for a process that binds it later is never one the kernel hands out itself."""

import socket

from eagle3scope.wire.endpoints import FREE_PORT_RANGES, _ephemeral_low, free_port


def test_free_ports_are_bindable_and_outside_the_kernels_and_sglangs_ranges():
    low_ephemeral = _ephemeral_low()
    for _ in range(50):
        port = free_port()
        assert port < low_ephemeral  # bind(0) and connect() only draw from low_ephemeral up
        assert not 22000 <= port <= 29999  # SGLang's get_free_port_below_ephemeral (0.5.23)
        assert any(lo <= port <= hi for lo, hi in FREE_PORT_RANGES)
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_port_in_use_is_never_returned():
    held = []
    try:
        for _ in range(30):
            port = free_port()
            assert port not in [s.getsockname()[1] for s in held]
            s = socket.socket()
            s.bind(("127.0.0.1", port))
            s.listen()
            held.append(s)
    finally:
        for s in held:
            s.close()
