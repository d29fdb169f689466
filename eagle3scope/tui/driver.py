"""The terminal driver of the TUI: Textual's, made to notice that its terminal went away.

Over SSH the terminal can vanish under a running TUI (the connection drops, the window closes,
``watch | head`` ends its reader). Textual's driver then spins: its output thread dies on the
first EIO/EPIPE, the app's next writes fill the thread's bounded queue and block the event loop
forever (so no signal handler runs), and its input thread reads end-of-file in a busy loop.
:class:`HangupAwareDriver` sees the terminal go on either side, an output write that fails or
stdin hung up (POLLHUP/POLLERR on the tty), and calls ``gone`` once from whichever thread saw it;
later output is dropped, and the dead descriptors are pointed at ``/dev/null`` so no later write
(the app's shutdown, the interpreter's last flush) fails again.
"""

from __future__ import annotations

import os
import select
import sys
import threading
from typing import IO, Callable

from textual.drivers.linux_driver import LinuxDriver

POLL_S = 0.2  # how often the stdin watch wakes to see whether the driver stopped


class TerminalOut:
    """A file for Textual's output thread: writes and flushes pass through until the first one
    fails (OSError, or ValueError for a file closed under it); then ``gone`` is called once and every
    later write is dropped, so the output thread never dies and its queue never fills."""

    def __init__(self, file: IO[str], gone: Callable[[BaseException], None]) -> None:
        self._file = file
        self._gone = gone
        self.broken = False

    def _fail(self, exc: BaseException) -> None:
        if not self.broken:
            self.broken = True
            self._gone(exc)

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                return self._file.write(text)
            except (OSError, ValueError) as exc:
                self._fail(exc)
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self._file.flush()
            except (OSError, ValueError) as exc:
                self._fail(exc)

    def fileno(self) -> int:
        return self._file.fileno()

    def isatty(self) -> bool:
        return self._file.isatty()

    def __getattr__(self, name: str):
        return getattr(self._file, name)


def stdin_hung_up(fd: int, timeout_s: float) -> bool:
    """Whether ``fd`` reports a hang-up or an error within ``timeout_s`` (input stays unread)."""
    poller = select.poll()
    poller.register(fd, 0)  # no events asked for: POLLHUP, POLLERR and POLLNVAL are always reported
    try:
        events = poller.poll(int(timeout_s * 1000))
    except InterruptedError:
        return False
    return any(mask & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _fd, mask in events)


def silence(*fds: int) -> None:
    """Point ``fds`` at /dev/null (a dead terminal's descriptors: later writes succeed, reads end)."""
    null = os.open(os.devnull, os.O_RDWR)
    try:
        for fd in fds:
            try:
                os.dup2(null, fd)
            except OSError:
                continue
    finally:
        os.close(null)


def same_file(fd: int, other: int) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.fstat(other))
    except OSError:
        return False


class HangupAwareDriver(LinuxDriver):
    """LinuxDriver that calls the app's ``terminal_gone(reason)`` once when its terminal goes."""

    def __init__(self, app, **kwargs) -> None:
        super().__init__(app, **kwargs)
        self._out_fd = self._file.fileno()
        self._file = TerminalOut(self._file, lambda exc: self._lost(f"output: {exc.__class__.__name__}: {exc}"))
        self._lost_once = threading.Lock()
        self._lost_reason: str | None = None
        self._watching = threading.Event()

    def _lost(self, reason: str) -> None:
        with self._lost_once:
            if self._lost_reason is not None:
                return
            self._lost_reason = reason
        dead = [fd for fd in (0, 1, 2) if fd == self._out_fd or same_file(fd, self._out_fd)]
        if self.input_tty and self.fileno not in dead and stdin_hung_up(self.fileno, 0):
            dead.append(self.fileno)
        silence(*dead)
        gone = getattr(self._app, "terminal_gone", None)
        if gone is not None:
            try:
                self._loop.call_soon_threadsafe(gone, reason)
            except RuntimeError:  # the app's loop has closed: it ended already
                pass

    def _watch_stdin(self) -> None:
        fd = self.fileno
        while self._watching.is_set():
            if stdin_hung_up(fd, POLL_S):
                self._lost("input: the terminal hung up")
                return

    def start_application_mode(self) -> None:
        super().start_application_mode()
        if self.input_tty:
            self._watching.set()
            threading.Thread(target=self._watch_stdin, name="e3s-hangup", daemon=True).start()

    def stop_application_mode(self) -> None:
        self._watching.clear()
        super().stop_application_mode()


def driver_class():
    """The driver for this platform: the hang-up aware one where Textual's is the Linux/macOS one."""
    return HangupAwareDriver if sys.platform != "win32" else None
