"""Files and directories only this user controls: the control token, the CURVE key, the ipc socket's
directory, recordings.

Why one module: every secret or socket eagle3scope puts on disk is safe only if no other user can
read it, replace it or squat its name first, and each check must hold on what is actually opened.
A directory is trusted when it is owned by this user (or root) and not writable by group or other
(and, where it holds a socket or secrets, not even searchable by them). A file is opened with
``O_NOFOLLOW`` and judged by ``fstat`` on the open descriptor, so a rename or a link swapped in
between a check and the read cannot pass. New files are written to a private temporary name and
linked into place, so nobody ever reads a half-written one and an existing name is never replaced.
Standard library only.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path


class PrivateFileError(Exception):
    """A file or directory cannot be trusted; the message says why and what to do."""


def _uid() -> int | None:
    return os.getuid() if hasattr(os, "getuid") else None


def _judge_dir(st: os.stat_result, path: Path, what: str, *, others_may_enter: bool) -> None:
    uid = _uid()
    mode = stat.S_IMODE(st.st_mode)
    if not stat.S_ISDIR(st.st_mode):
        raise PrivateFileError(f"{what} {path} is not a directory")
    if uid is not None and st.st_uid not in (uid, 0):
        raise PrivateFileError(f"{what} {path} belongs to uid {st.st_uid}, not to this user (uid {uid}): "
                               "its owner could replace or remove what is in it; use a directory of your own")
    forbidden = 0o022 if others_may_enter else 0o077
    if mode & forbidden:
        need = "not writable by group or other" if others_may_enter else "0700"
        raise PrivateFileError(f"{what} {path} has mode {mode:04o}; it must be {need} (chmod 700 {path})")


def check_private_dir(path: str | os.PathLike, what: str = "directory", *, others_may_enter: bool = False) -> Path:
    """``path`` if it is a real directory (not a link) of this user's that nobody else can write to
    (``others_may_enter``) or even enter (default); raises :class:`PrivateFileError` saying why not."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise PrivateFileError(f"{what} {path} does not exist") from None
    except OSError as exc:
        raise PrivateFileError(f"{what} {path} cannot be checked: {exc}") from None
    if stat.S_ISLNK(st.st_mode):
        raise PrivateFileError(f"{what} {path} is a symbolic link; give the directory itself")
    _judge_dir(st, path, what, others_may_enter=others_may_enter)
    return path


def ensure_private_dir(path: str | os.PathLike, what: str = "directory", *, others_may_enter: bool = False) -> Path:
    """Create ``path`` (mode 0700, parents as needed) unless it exists, then :func:`check_private_dir`.
    An existing directory is never loosened or taken over: one that fails the check is refused."""
    path = Path(path)
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise PrivateFileError(f"cannot create {what} {path}: {exc}") from None
    return check_private_dir(path, what, others_may_enter=others_may_enter)


def read_private_file(path: str | os.PathLike, what: str = "file", *, max_bytes: int = 1 << 16) -> bytes:
    """The bytes of ``path``: a regular file of this user's, mode 0600 or stricter, not a link,
    judged on the descriptor that is read (no check-then-read race), at most ``max_bytes``."""
    path = Path(path)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise PrivateFileError(f"{what} {path} does not exist") from None
    except OSError as exc:
        if os.path.islink(path):
            raise PrivateFileError(f"{what} {path} is a symbolic link; give the file itself") from None
        raise PrivateFileError(f"{what} {path} cannot be read: {exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PrivateFileError(f"{what} {path} is not a regular file")
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o077:
            raise PrivateFileError(f"{what} {path} has mode {mode:04o}; it must be 0600 (chmod 600 {path})")
        uid = _uid()
        if uid is not None and st.st_uid != uid:
            raise PrivateFileError(f"{what} {path} belongs to uid {st.st_uid}, not to this user")
        if st.st_size > max_bytes:
            raise PrivateFileError(f"{what} {path} is larger than {max_bytes} bytes")
        chunks, left = [], max_bytes + 1
        while left > 0 and (chunk := os.read(fd, left)):
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise PrivateFileError(f"{what} {path} cannot be read: {exc}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        raise PrivateFileError(f"{what} {path} is larger than {max_bytes} bytes")
    return data


def create_private_file(path: str | os.PathLike, data: bytes, what: str = "file") -> Path:
    """Write ``data`` to the new file ``path`` (mode 0600) in a private directory, complete or not
    at all: written under a temporary name, then linked into place. Raises FileExistsError when
    ``path`` exists (it is never replaced) and :class:`PrivateFileError` when it cannot be written."""
    path = Path(path)
    check_private_dir(path.parent, f"directory of {what}", others_may_enter=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.link(tmp, path)  # atomic, and fails on an existing name
    except FileExistsError:
        raise
    except OSError as exc:
        raise PrivateFileError(f"cannot write {what} {path}: {exc}") from None
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    return path
