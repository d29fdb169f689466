"""The control channel's shared secret: a token file only its owner can read (mode 0600).

``eagle3scope launch --control`` creates it; the shim reads it at startup and refuses to open the
channel when the file is missing, empty or readable by anyone else; the client reads it the same
way. Requests are signed with it (:func:`eagle3scope.wire.control_protocol.sign`), never sent.
"""

from __future__ import annotations

import os
import secrets
import stat
import tempfile
from pathlib import Path

MIN_TOKEN_CHARS = 16


class TokenError(Exception):
    """The token file cannot be trusted or read; the message says what to do."""


def read_token(path: str | os.PathLike) -> str:
    """The token in ``path``; raises :class:`TokenError` unless it is a 0600 file of ours."""
    path = Path(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise TokenError(f"token file {path} does not exist") from None
    except OSError as exc:
        raise TokenError(f"token file {path} cannot be read: {exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise TokenError(f"token file {path} is not a regular file")
    if st.st_mode & 0o077:
        raise TokenError(f"token file {path} has mode {stat.S_IMODE(st.st_mode):04o}; it must be 0600 (chmod 600 {path})")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise TokenError(f"token file {path} belongs to uid {st.st_uid}, not to this user")
    try:
        token = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenError(f"token file {path} cannot be read: {exc}") from None
    if len(token) < MIN_TOKEN_CHARS:
        raise TokenError(f"token file {path} holds no usable token (at least {MIN_TOKEN_CHARS} characters)")
    return token


def create_token_file(directory: str | os.PathLike | None = None) -> Path:
    """Write a fresh random token to a new 0600 file in ``directory`` (default: a private 0700
    temp dir) and return its path."""
    if directory is None:
        directory = tempfile.mkdtemp(prefix="eagle3scope-control-")
    directory = Path(directory)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / f"control-{os.getpid()}-{secrets.token_hex(4)}.token"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(secrets.token_urlsafe(32) + "\n")
    return path
