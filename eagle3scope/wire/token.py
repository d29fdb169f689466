"""The control channel's shared secret: a token file only its owner can read (mode 0600).

``eagle3scope launch --control`` creates it; the shim reads it at startup and refuses to open the
channel when the file is missing, empty, a link, readable by anyone else or in a directory another
user can write to; the client reads it the same way. Requests are signed with it
(:func:`eagle3scope.wire.control_protocol.sign`), never sent. File rules: :mod:`eagle3scope.wire.private`.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path

from eagle3scope.wire.private import PrivateFileError, check_private_dir, create_private_file, ensure_private_dir, read_private_file

MIN_TOKEN_CHARS = 16


class TokenError(PrivateFileError):
    """The token file cannot be trusted or read; the message says what to do."""


def read_token(path: str | os.PathLike) -> str:
    """The token in ``path``; raises :class:`TokenError` unless it is a 0600 file of ours in a
    directory nobody else can write to."""
    path = Path(path)
    try:
        data = read_private_file(path, "token file", max_bytes=4096)
        check_private_dir(path.parent, "token directory", others_may_enter=True)
    except PrivateFileError as exc:
        raise TokenError(str(exc)) from None
    try:
        token = data.decode("ascii").strip()
    except UnicodeDecodeError as exc:
        raise TokenError(f"token file {path} cannot be read: {exc}") from None
    if len(token) < MIN_TOKEN_CHARS:
        raise TokenError(f"token file {path} holds no usable token (at least {MIN_TOKEN_CHARS} characters)")
    return token


def create_token_file(directory: str | os.PathLike | None = None) -> Path:
    """Write a fresh random token to a new 0600 file in ``directory`` (created 0700 if missing; an
    existing one must be this user's and not group/other writable) and return its path. Default
    directory: a private 0700 temp dir."""
    if directory is None:
        directory = tempfile.mkdtemp(prefix="eagle3scope-control-")
    try:
        directory = ensure_private_dir(directory, "token directory", others_may_enter=True)
        path = directory / f"control-{os.getpid()}-{secrets.token_hex(4)}.token"
        return create_private_file(path, (secrets.token_urlsafe(32) + "\n").encode("ascii"), "token file")
    except PrivateFileError as exc:
        raise TokenError(str(exc)) from None
