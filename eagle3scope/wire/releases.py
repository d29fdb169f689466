"""SGLang release knowledge both sides share: how a version string is read and compared, which
SGLang is installed here, and the release lines (eras) checked when none is named.

One parser for the shim (version guard, graph recapture), the aux-layer family rules, the doctor's
loader layouts and ``fix``: PEP 440-like, so ``0.4.4.post2`` sorts after ``0.4.4`` and ``0.5.17rc1``
before ``0.5.17``. Reads package metadata only, never imports SGLang.
"""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version

#: The release lines a check covers when no release is named and SGLang is not installed here:
#: the oldest and the newest the engine tests run (their loaders and aux rules differ).
ERAS = ("0.5.10", "0.5.23")

_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.?post(\d+))?(?:\.?(rc|dev|a|b)\d*)?(?:\+.*)?")


def parse_version(text: str) -> tuple[int, int, int, int]:
    """``"0.4.4.post2"`` -> ``(0, 4, 4, 2)``; ``"0.5.23"`` -> ``(0, 5, 23, 0)``; rc/dev sort before.
    Raises ValueError on anything else (a usage error where a user typed it)."""
    m = _VERSION.fullmatch(str(text).strip())
    if not m:
        raise ValueError(f"not an SGLang version: {text!r}")
    major, minor, patch, post, pre = m.groups()
    return (int(major), int(minor), int(patch or 0), int(post) if post else (-1 if pre else 0))


def release(text: str | None) -> tuple[int, int, int, int] | None:
    """:func:`parse_version`, or None for a missing or unreadable version (sent by a server)."""
    try:
        return parse_version(text) if text else None
    except ValueError:
        return None


def before(sglang_version: str | None, first: str | tuple[int, ...]) -> bool:
    """True when the release is known and older than ``first`` (``"0.5.17"`` or ``(0, 5, 17)``; an
    unknown release counts as newest)."""
    parsed = release(sglang_version)
    if parsed is None:
        return False
    return parsed < (parse_version(first) if isinstance(first, str) else (*first, *(0,) * (4 - len(first))))


def installed_sglang() -> str | None:
    """The installed SGLang's version (package metadata, no SGLang import), None when absent."""
    try:
        return version("sglang")
    except PackageNotFoundError:
        return None
