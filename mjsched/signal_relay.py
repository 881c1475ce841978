"""Signals acted on by a thread, never inside a Python signal handler.

Python runs a signal handler on the main thread between two bytecodes of whatever that
thread was doing, and a second signal can run it again in the middle of the first. A
handler that takes a lock (``threading.Event.set`` does) then waits on itself for ever: a
process-isolated child that got two SIGTERMs close together (its parent signals the child
and its process group) hung, its job still running, until the SIGKILL, and its job never
saw the cancel. Here the Python-level handler only writes the signal's number to a pipe
(``os.write`` takes no lock, and a re-entered write is harmless), and a daemon thread reads
the pipe and calls ``on_signal(signum)``, where locks are safe.

With ``wakeup=True`` the byte is written by the C-level handler (``signal.set_wakeup_fd``)
the moment the signal arrives, so the relay acts even while the main thread is inside a
long C call (a database round trip); the Python handler then writes nothing. Not for a
process whose job may take the wakeup fd for itself (an asyncio loop's
``add_signal_handler`` does): there the plain handler is the one that keeps working.
"""
from __future__ import annotations

import os
import signal
import threading
from typing import Any, Callable

PIPE_READ_BYTES = 64


class SignalRelay:
    """Hands the signals it is installed for to ``on_signal`` on a thread of its own."""

    def __init__(self, on_signal: Callable[[int], None], *, name: str, wakeup: bool = False) -> None:
        self._on_signal = on_signal
        self._wakeup = wakeup
        self._signals: frozenset[int] = frozenset()
        self._previous: dict[int, Any] = {}
        self._previous_wakeup_fd: int | None = None
        self._written_by_c = False
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)
        threading.Thread(target=self._relay, name=name, daemon=True).start()

    def handler(self, signum: int, _frame: Any) -> None:
        """The Python-level handler: no lock, nothing that a second signal inside it could break."""
        if not self._written_by_c:
            try:
                os.write(self._write_fd, bytes((signum,)))
            except OSError:   # full (signals already wait to be read) or closed (restored)
                pass

    def install(self, *signals: int) -> SignalRelay:
        """Take ``signals`` over (main thread only: ``signal.signal`` raises ValueError elsewhere).
        The wakeup fd goes in before the handlers, so no signal is written twice or not at all."""
        self._signals = frozenset(signals)
        if self._wakeup:
            try:
                self._previous_wakeup_fd = signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)
                self._written_by_c = True
            except (ValueError, OSError):
                self._previous_wakeup_fd = None   # the Python handler writes instead
        for sig in signals:
            self._previous[sig] = signal.signal(sig, self.handler)
        return self

    def restore(self) -> None:
        """Give the signals back to their previous handlers and end the relay thread."""
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()
        if self._written_by_c:
            signal.set_wakeup_fd(-1 if self._previous_wakeup_fd is None else self._previous_wakeup_fd)
            self._written_by_c = False
        os.close(self._write_fd)   # the relay thread reads the end of the pipe and closes its side

    def _relay(self) -> None:
        try:
            while True:
                data = os.read(self._read_fd, PIPE_READ_BYTES)   # retried on EINTR (PEP 475)
                if not data:
                    return
                for signum in data:
                    if signum in self._signals:
                        self._on_signal(signum)
        except OSError:
            return
        finally:
            try:
                os.close(self._read_fd)
            except OSError:
                pass
