"""Endpoints both sides agree on: the default, what binds where, one per data-parallel rank, and
which of them are private, and where a viewer finds a publisher's siblings (the other DP ranks
of the same server).

The default is an ``ipc://`` socket in a per-user 0700 runtime directory (:func:`runtime_dir`):
on a shared host no other user can read the stream or bind its name first. The shim binds with
:func:`resolve_bind_endpoint` and :func:`guard`; viewers connect after :func:`guard`; ``launch``,
``watch`` and ``record`` use the same functions so that ``eagle3scope launch`` and a bare
``eagle3scope watch`` meet without flags. Plain TCP is readable and forgeable by anyone who can
reach the port (every local user, for loopback): both sides use it only with ZeroMQ CURVE
(:mod:`eagle3scope.wire.curve`) or when the user says the network is trusted
(``EAGLE3SCOPE_TRUSTED_NETWORK=1``). Standard library only (directory rules: :mod:`eagle3scope.wire.private`).
"""

from __future__ import annotations

import errno
import ipaddress
import os
import random
import socket
import stat
import tempfile
from pathlib import Path

from eagle3scope.wire import env
from eagle3scope.wire.private import PrivateFileError, check_private_dir, ensure_private_dir
from eagle3scope.wire.bodies import MAX_PUBLISHERS  # the most siblings a hello may list

#: How help texts name the default (the path depends on the user: :func:`default_endpoint`).
DEFAULT_ENDPOINT = "ipc://$XDG_RUNTIME_DIR/eagle3scope/events.sock"
ENV_TRUSTED = env.TRUSTED
SOCKET_NAME = "events.sock"
ENV_ENDPOINT = env.ENDPOINT

_LOOPBACK_NAMES = {"localhost", "ip6-localhost"}


class EndpointError(ValueError):
    """An endpoint cannot be used safely (or at all); the message says why and what to do."""


def trusted_network() -> bool:
    """True when the user said plain TCP is fine here (``EAGLE3SCOPE_TRUSTED_NETWORK=1``)."""
    return os.environ.get(ENV_TRUSTED, "").strip().lower() in ("1", "true", "yes", "on")


def runtime_dir() -> Path:
    """This user's private directory for sockets: ``$XDG_RUNTIME_DIR/eagle3scope``, else
    ``/tmp/eagle3scope-$UID`` (``$TMPDIR`` respected); created 0700 and checked to be this user's
    and closed to everyone else, else :class:`EndpointError` with the reason (another user may
    have created it first to squat the stream)."""
    base = os.environ.get("XDG_RUNTIME_DIR", "").strip()
    if base and os.path.isabs(base) and os.path.isdir(base):
        path = Path(base) / "eagle3scope"
    else:
        path = Path(tempfile.gettempdir()) / f"eagle3scope-{os.getuid()}"
    try:
        return ensure_private_dir(path, "eagle3scope runtime directory")
    except PrivateFileError as exc:
        raise EndpointError(f"{exc}; remove it or set XDG_RUNTIME_DIR to a directory of your own") from None


def default_endpoint() -> str:
    """The default publisher endpoint of this user on this host (see :func:`runtime_dir`)."""
    return f"ipc://{runtime_dir() / SOCKET_NAME}"


def resolve_bind_endpoint(endpoint: str) -> str:
    """Turn a user endpoint into a bindable one; a bare port (``"5557"``) means loopback.

    Binding beyond loopback happens only when the endpoint names a non-loopback host itself
    (``tcp://0.0.0.0:5557``, ``tcp://*:5557``): nothing widens it implicitly.
    """
    endpoint = endpoint.strip()
    if not endpoint:
        return default_endpoint()
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
    """One publisher per data-parallel rank: tcp port + dp_rank; ipc path with ``-dpN`` before a
    ``.sock`` suffix (``events.sock`` -> ``events-dp1.sock``), else at its end. The one place a
    rank's endpoint is derived, for the shim and for viewers finding a server's siblings."""
    if not dp_rank:
        return endpoint
    if endpoint.isdigit():
        return str(int(endpoint) + dp_rank)
    if endpoint.startswith("tcp://"):
        host, _, port = endpoint.rpartition(":")
        if port.isdigit() and int(port) > 0:
            return f"{host}:{int(port) + dp_rank}"
        return endpoint
    if endpoint.endswith(".sock"):
        return f"{endpoint[:-5]}-dp{dp_rank}.sock"
    return f"{endpoint}-dp{dp_rank}"


def ipc_path(endpoint: str) -> Path | None:
    """The filesystem path of an ``ipc://`` endpoint (None for other schemes and abstract names)."""
    if not endpoint.startswith("ipc://"):
        return None
    path = endpoint[6:]
    if not path or path.startswith("@"):
        return None
    return Path(path).absolute()


def guard(endpoint: str, *, bind: bool) -> str | None:
    """Judge ``endpoint`` before binding or connecting it; returns the security to apply
    (``"curve"`` for TCP, None for nothing) or raises :class:`EndpointError` saying why it is not safe.

    - ``ipc://``: the socket's directory must be this user's (or root's) and closed to others:
      for a bind not even enterable (nobody else may connect), for a connect not writable by
      others (nobody else can have bound the name). A bind also refuses a name another live
      publisher is serving (ZeroMQ would silently take it over).
    - ``tcp://``: CURVE, unless ``EAGLE3SCOPE_TRUSTED_NETWORK=1``.
    - ``inproc://``: in-process, private by construction.
    """
    if endpoint.startswith("inproc://"):
        return None
    if endpoint.startswith("tcp://"):
        return None if trusted_network() else "curve"
    path = ipc_path(endpoint)
    if path is None:
        if endpoint.startswith("ipc://@"):  # Linux abstract names: any local user can bind or connect
            if trusted_network():
                return None
            raise EndpointError(f"{endpoint} is an abstract socket name any local user can bind or read; "
                                f"use an ipc:// path in a private directory (or {ENV_TRUSTED}=1)")
        return None
    if not trusted_network():
        try:
            check_private_dir(path.parent, "socket directory", others_may_enter=not bind)
        except PrivateFileError as exc:
            raise EndpointError(f"{endpoint}: {exc}; other users could read or forge this stream "
                                f"(the default, {DEFAULT_ENDPOINT}, is private; or set {ENV_TRUSTED}=1)") from None
    if bind and os.path.lexists(path) and not stat.S_ISSOCK(os.lstat(path).st_mode):
        raise EndpointError(f"{endpoint}: {path} exists and is not a socket (ZeroMQ would delete it to bind)")
    if bind and _serving(path):
        raise EndpointError(f"{endpoint} is already served by another publisher (a second server on the"
                            " same endpoint?); give this one its own EAGLE3SCOPE_ENDPOINT")
    return None


def _serving(path: Path) -> bool:
    """True when something accepts connections on the Unix socket ``path`` (a stale file: False)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except OSError as exc:
            return exc.errno not in (errno.ENOENT, errno.ECONNREFUSED, errno.ENOTSOCK)
        return True


def sibling_endpoints(endpoint: str, publishers: int) -> list[str] | None:
    """Every publisher's bind endpoint of one server, index = DP rank, derived from rank 0's by
    :func:`endpoint_for_dp_rank`; None when they cannot be told apart (an ephemeral tcp port)."""
    out = [resolve_bind_endpoint(endpoint_for_dp_rank(endpoint, i)) for i in range(max(1, publishers))]
    return out if len(set(out)) == len(out) else None


def _tcp_port(endpoint: str) -> tuple[str, int] | None:
    host, sep, port = endpoint[6:].rpartition(":") if endpoint.startswith("tcp://") else ("", "", "")
    return (host, int(port)) if sep and host and port.isdigit() else None


def reach_sibling(connected: str, announced: str, sibling: str) -> str | None:
    """Where a viewer that reaches the publisher announcing itself as ``announced`` at ``connected``
    reaches ``sibling`` (from the same hello), or None when that would leave what it connected to.

    tcp keeps the host the viewer used and moves the port by the siblings' distance (SSH
    forwards in the same order, ``-L 6000:...:5557 -L 6001:...:5558``, keep working); ipc takes
    the sibling's DP index from :func:`endpoint_for_dp_rank` of the announced path and applies it to
    the path the viewer used (a forwarded ``gpu.sock`` finds ``gpu-dp1.sock`` beside it). The hello
    is untrusted: it can point a viewer at other ports of a host it already reads from, or at the
    rank names beside the socket it connected to, nowhere else.
    """
    here, own, other = _tcp_port(connected), _tcp_port(announced), _tcp_port(sibling)
    if here and own and other:
        port = here[1] + other[1] - own[1]
        return f"tcp://{here[0]}:{port}" if 0 < port < 65536 else None
    if connected.startswith("ipc://") and announced.startswith("ipc://") and sibling.startswith("ipc://"):
        index = next((i for i in range(MAX_PUBLISHERS) if endpoint_for_dp_rank(announced, i) == sibling), None)
        return None if index is None else endpoint_for_dp_rank(connected, index)
    return None


#: Where :func:`free_port` looks: below the kernel's ephemeral range (which ``bind(0)``, every
#: ``connect()`` and ZeroMQ's random binds draw from) and clear of 22000-29999, where SGLang picks its
#: own later-bound ports (``get_free_port_below_ephemeral``, sglang/srt/utils/network.py, 0.5.23).
FREE_PORT_RANGES = ((12000, 21999), (30000, 32767))


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(attempts: int = 64) -> int:
    """A loopback port that was free a moment ago, for a process that binds it later.

    A port from ``bind(0)`` is one the kernel hands out again to the next ``bind(0)`` or outgoing
    connection, so a server that binds it only after a minute of model loading can find it taken
    (CI saw SGLang's HTTP port held by a socket that never answered). Ports outside the ephemeral
    range are only ever taken by someone who chose them."""
    low_ephemeral = _ephemeral_low()
    candidates = [port for lo, hi in FREE_PORT_RANGES for port in range(lo, min(hi, low_ephemeral - 1) + 1)]
    for port in random.sample(candidates, min(attempts, len(candidates))):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fresh_ipc_endpoint(name: str = "events") -> str:
    """A new private ipc:// endpoint. Tests and the demo use it instead of a tcp port picked in
    advance, which SGLang could hand to one of its own sockets before the shim binds it."""
    return f"ipc://{tempfile.mkdtemp(prefix='e3s-')}/{name}"
