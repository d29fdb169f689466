"""How the TUI's process ends: on an OS signal, on a vanished terminal, or when the app quits.

A killed TUI must not leave the terminal in the alternate screen with mouse reporting on. So every
signal whose default action would end the process (:func:`eagle3scope.signals.ending_signals`)
ends the app instead, through its own shutdown, with the status a shell reports for a killed
command (128 + N); a shutdown that hangs past :data:`SIGNAL_GRACE_S`, or a second signal, ends the
process at once with the same status (:func:`hard_exit`). Plain Python, no Textual: the app hands
in the callback that ends it.
"""

from __future__ import annotations

import asyncio
import os
import select
import signal
import threading
from typing import Callable

from eagle3scope.signals import ending_signals

TERMINAL_GONE = 128 + signal.SIGHUP  # the exit status when the terminal vanished, as after SIGHUP
SIGNAL_GRACE_S = 5.0  # an ending signal ends the process after this long even if shutdown hangs


def hard_exit(status: int) -> None:
    """End the process now with ``status`` (a shutdown that hung): leave the alternate screen and
    turn mouse reporting off if the terminal takes it at once, then ``os._exit``."""
    try:
        _r, writable, _x = select.select([], [2], [], 0)
        if writable:
            os.write(2, b"\x1b[?1000l\x1b[?1003l\x1b[?1006l\x1b[?1049l\x1b[?25h")
    except (OSError, ValueError):
        pass
    os._exit(status)


class EndingSignals:
    """The ending signals, caught while an app runs: each one calls ``end(128 + N)`` on the event
    loop's thread. Signals already ignored (nohup) or handled by someone else (a test runner's
    alarm) are left as they are. The handler is a plain one, run by the main thread even while the
    event loop is stuck, and it arms :data:`SIGNAL_GRACE_S`."""

    def __init__(self, end: Callable[[int], None]) -> None:
        self._end = end
        self._loop: asyncio.AbstractEventLoop | None = None
        self._before: dict[int, object] = {}
        #: the status the first signal asked for, None before one came
        self.ending: int | None = None

    def install(self) -> None:
        """Catch the ending signals; call from the app's running event loop, before the terminal
        enters application mode."""
        self._loop = asyncio.get_running_loop()
        for sig in ending_signals():
            try:
                previous = signal.getsignal(sig)
                if previous in (signal.SIG_DFL, signal.default_int_handler):
                    signal.signal(sig, self._on_signal)
                    self._before[sig] = previous
            except (OSError, RuntimeError, ValueError):
                continue

    def restore(self) -> None:
        """The handlers of before :meth:`install` back (the app has ended; its loop is going)."""
        while self._before:
            sig, previous = self._before.popitem()
            try:
                signal.signal(sig, previous)
            except (OSError, RuntimeError, ValueError):
                continue

    def _on_signal(self, signum: int, _frame) -> None:
        status = 128 + signum
        if self.ending is not None:  # a second signal: no more waiting
            hard_exit(self.ending)
        self.ending = status
        timer = threading.Timer(SIGNAL_GRACE_S, hard_exit, (status,))
        timer.daemon = True
        timer.start()
        self._loop.call_soon_threadsafe(self._end, status)


def run_app(app) -> int:
    """Run ``app`` (a :class:`~eagle3scope.tui.app.ScopeApp`); its exit status: :data:`TERMINAL_GONE`
    once the terminal went, whatever the app's own shutdown made of a dead terminal."""
    app.run()
    if app.gone_reason is not None:
        return TERMINAL_GONE
    return app.return_code or 0
