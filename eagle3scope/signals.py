"""The signals that end a command, caught so that it ends cleanly instead.

``record``, ``gate`` and ``exporter`` stop on :data:`STOP_SIGNALS` (SIGINT, SIGTERM, SIGHUP,
SIGQUIT), commit what they hold and exit: a closed terminal (SIGHUP) or a quit key (SIGQUIT) must
not lose a recorder's batch or a canary's verdict. The TUI (``watch``, ``replay``) leaves the
alternate screen and switches mouse reporting off on every signal whose default action would end
the process (:func:`ending_signals`): a killed TUI must not leave the terminal unusable.
Signals a process inherited as ignored (``nohup``) stay ignored. Faults (SIGSEGV, SIGBUS, SIGFPE,
SIGILL, SIGABRT, SIGTRAP) are not caught: no code can run safely after them.
"""

from __future__ import annotations

import contextlib
import signal
from typing import Callable, Iterator

STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT") if hasattr(signal, name))

#: default action: ignore, stop or continue (handled by the terminal layer), or a fault
_NOT_ENDING = {"SIGKILL", "SIGSTOP", "SIGCHLD", "SIGCONT", "SIGURG", "SIGWINCH", "SIGTSTP", "SIGTTIN", "SIGTTOU",
               "SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGABRT", "SIGTRAP", "SIGPIPE"}


def ending_signals() -> tuple[int, ...]:
    """Every catchable signal whose default action ends the process (real-time ones included)."""
    skip = {getattr(signal, name) for name in _NOT_ENDING if hasattr(signal, name)}
    return tuple(sorted(int(s) for s in signal.valid_signals() if s not in skip))


@contextlib.contextmanager
def stopping_on(handler: Callable[[int], None], signals: tuple[int, ...] = STOP_SIGNALS) -> Iterator[None]:
    """Call ``handler(signum)`` instead of dying on ``signals`` inside the block (main thread only);
    the previous handlers come back after it."""
    previous = {}
    for sig in signals:
        try:
            if signal.getsignal(sig) is signal.SIG_IGN:
                continue
            previous[sig] = signal.signal(sig, lambda signum, _frame: handler(signum))
        except (OSError, ValueError, RuntimeError):  # uncatchable here, or not the main thread
            continue
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)


def name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
