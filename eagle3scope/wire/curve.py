"""ZeroMQ CURVE for the event stream over TCP: who holds the key file may publish and subscribe.

Plain TCP is readable and forgeable by anyone who can reach the port. Over TCP the publisher is a
CURVE server and every subscriber a CURVE client, both with the one key pair in a 0600 key file
(``$EAGLE3SCOPE_CURVE_KEY_FILE``, default ``~/.config/eagle3scope/curve.key``, written like the
control token: :mod:`eagle3scope.wire.private`). A viewer knows the server's public key from the
file, so a publisher without the secret cannot complete the handshake (no frame of a squatter is
accepted); the publisher's ZAP handler admits only clients that prove they hold the same secret,
so nobody else can subscribe. Traffic is encrypted. The file's text is ZeroMQ's certificate
format (``zmq.auth.load_certificate`` reads it).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import zmq

from eagle3scope.wire import env
from eagle3scope.wire.private import PrivateFileError, create_private_file, ensure_private_dir, read_private_file

ENV_KEY_FILE = env.KEY_FILE
_ZAP_DOMAIN = "eagle3scope"
_KEY = re.compile(rb'^\s*(public|secret)-key\s*=\s*"([0-9A-Za-z.\-:+=^!/*?&<>()\[\]{}@%$#]{40})"\s*$', re.M)


class KeyFileError(PrivateFileError):
    """The CURVE key file is missing, unreadable or not private; the message says what to do."""


@dataclass(frozen=True)
class CurveKeys:
    public: bytes  # Z85, 40 characters
    secret: bytes
    path: Path


def key_file() -> Path:
    """Where the key pair lives: ``$EAGLE3SCOPE_CURVE_KEY_FILE``, else ``$XDG_CONFIG_HOME`` (or
    ``~/.config``) ``/eagle3scope/curve.key``."""
    explicit = os.environ.get(ENV_KEY_FILE, "").strip()
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "eagle3scope" / "curve.key"


def load_keys(path: str | os.PathLike | None = None, *, create: bool = False) -> CurveKeys:
    """The key pair in ``path`` (default :func:`key_file`); with ``create``, a fresh one is written
    first when the file does not exist (its directory made 0700). Raises :class:`KeyFileError`."""
    path = Path(path) if path is not None else key_file()
    if create and not path.exists():
        public, secret = zmq.curve_keypair()
        text = (b"#   eagle3scope CURVE key pair: whoever holds this file can read and publish the event stream\n"
                b"metadata\ncurve\n    public-key = \"" + public + b"\"\n    secret-key = \"" + secret + b"\"\n")
        try:
            ensure_private_dir(path.parent, "key directory", others_may_enter=True)
            create_private_file(path, text, "CURVE key file")
        except FileExistsError:
            pass  # another process created it at the same moment: use theirs
        except PrivateFileError as exc:
            raise KeyFileError(str(exc)) from None
    try:
        data = read_private_file(path, "CURVE key file", max_bytes=4096)
    except PrivateFileError as exc:
        hint = "" if path.exists() else (" (the server writes it on its first start over TCP, as does `eagle3scope"
                                          " launch --endpoint tcp://...`; copy it here to reach that server)")
        raise KeyFileError(f"{exc}{hint}") from None
    keys = {name: value for name, value in _KEY.findall(data)}
    if set(keys) != {b"public", b"secret"}:
        raise KeyFileError(f"CURVE key file {path} holds no public-key and secret-key pair")
    try:
        derived = zmq.curve_public(keys[b"secret"])
    except (zmq.ZMQError, ValueError) as exc:
        raise KeyFileError(f"CURVE key file {path}: bad secret key ({exc})") from None
    if derived != keys[b"public"]:
        raise KeyFileError(f"CURVE key file {path}: the public key does not belong to the secret key")
    return CurveKeys(keys[b"public"], keys[b"secret"], path)


def secure_client(sock: zmq.Socket, keys: CurveKeys) -> None:
    """Make the next ``connect`` of ``sock`` a CURVE client that accepts only the key file's server."""
    sock.curve_serverkey = keys.public
    sock.curve_publickey = keys.public
    sock.curve_secretkey = keys.secret


class _HoldersOnly:
    """ZAP credentials provider: admit only clients whose long-term key is the server's own."""

    def __init__(self, public: bytes) -> None:
        self.public = public

    def callback(self, domain: str, key: bytes) -> bool:
        return key == self.public


def secure_server(ctx: zmq.Context, sock: zmq.Socket, keys: CurveKeys):
    """Make ``sock`` (not yet bound) a CURVE server admitting only holders of the key file; returns
    the ZAP authenticator thread, to ``stop()`` when the socket closes."""
    from zmq.auth.thread import ThreadAuthenticator

    auth = ThreadAuthenticator(ctx, log=None)
    auth.start()
    auth.configure_curve_callback(domain=_ZAP_DOMAIN, credentials_provider=_HoldersOnly(keys.public))
    sock.zap_domain = _ZAP_DOMAIN.encode()
    sock.curve_secretkey = keys.secret
    sock.curve_publickey = keys.public
    sock.curve_server = True
    return auth
