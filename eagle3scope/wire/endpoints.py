"""Endpoints both sides agree on: the default, what binds where, one per data-parallel rank.

The shim binds with :func:`resolve_bind_endpoint` and refuses a control channel that is not
:func:`is_loopback`; ``launch``, ``watch`` and ``record`` use the same functions so that
``eagle3scope launch`` and a bare ``eagle3scope watch`` meet without flags. Standard library only.
"""

from __future__ import annotations

import ipaddress
import socket
import tempfile

DEFAULT_ENDPOINT = "tcp://127.0.0.1:5557"

_LOOPBACK_NAMES = {"localhost", "ip6-localhost"}


def resolve_bind_endpoint(endpoint: str) -> str:
    """Turn a user endpoint into a bindable one; a bare port (``"5557"``) means loopback.

    Binding beyond loopback happens only when the endpoint names a non-loopback host itself
    (``tcp://0.0.0.0:5557``, ``tcp://*:5557``): nothing widens it implicitly.
    """
    endpoint = endpoint.strip()
    if not endpoint:
        return DEFAULT_ENDPOINT
    if endpoint.isdigit():
        return f"tcp://127.0.0.1:{endpoint}"
    if "://" not in endpoint:
        raise ValueError(f"endpoint {endpoint!r} needs a scheme (tcp:// or ipc://) or is a bare port")
    scheme, _, rest = endpoint.partition("://")
    if scheme not in ("tcp", "ipc", "inproc"):
        raise ValueError(f"endpoint {endpoint!r}: only tcp://, ipc:// and inproc:// are supported")
    if scheme == "tcp":
        host, sep, port = rest.rpartition(":")
        if not sep or not host:
            raise ValueError(f"endpoint {endpoint!r} needs host:port")
        if port == "*":
            return f"tcp://{host}:0"
    return endpoint


def is_loopback(endpoint: str) -> bool:
    """True when ``endpoint`` can only be reached from this machine."""
    if not endpoint.startswith("tcp://"):
        return True  # ipc:// and inproc:// are local by construction
    host = endpoint[6:].rpartition(":")[0].strip("[]")
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def endpoint_for_dp_rank(endpoint: str, dp_rank: int) -> str:
    """One publisher per data-parallel rank: tcp port + dp_rank, ipc path suffix ``-dpN``."""
    if not dp_rank:
        return endpoint
    if endpoint.isdigit():
        return str(int(endpoint) + dp_rank)
    if endpoint.startswith("tcp://"):
        host, _, port = endpoint.rpartition(":")
        if port.isdigit() and int(port) > 0:
            return f"{host}:{int(port) + dp_rank}"
        return endpoint
    return f"{endpoint}-dp{dp_rank}"


def free_port() -> int:
    """A loopback port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fresh_ipc_endpoint(name: str = "events") -> str:
    """A new private ipc:// endpoint. Tests and the demo use it instead of a tcp port picked in
    advance, which SGLang could hand to one of its own sockets before the shim binds it."""
    return f"ipc://{tempfile.mkdtemp(prefix='e3s-')}/{name}"
