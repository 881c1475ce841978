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

A process forked after ``install()`` (a job's ``multiprocessing`` worker) has the handler but
neither the relay thread nor a pipe of its own: it would hand its signals to its parent (a
worker's SIGTERM at a pool's exit would cancel the job, or count as the CLI's stop). So the
child gives the signals back to their previous handlers at the fork.
"""
from __future__ import annotations

import logging
import os
import signal
import threading
import weakref
from typing import Any, Callable

log = logging.getLogger(__name__)

PIPE_READ_BYTES = 64

_installed: weakref.WeakSet[SignalRelay] = weakref.WeakSet()


class SignalRelay:
    """Hands the signals it is installed for to ``on_signal`` on a thread of its own."""

    def __init__(self, on_signal: Callable[[int], None], *, name: str, wakeup: bool = False) -> None:
        self._on_signal = on_signal
        self._name = name
        self._wakeup = wakeup
        self._signals: frozenset[int] = frozenset()
        self._previous: dict[int, Any] = {}
        self._previous_wakeup_fd = -1
        self._written_by_c = False
        self._write_fd: int | None = None    # None: not installed, or restored
        self._read_fd: int | None = None

    def handler(self, signum: int, _frame: Any) -> None:
        """The Python-level handler: no lock, nothing that a second signal inside it could break."""
        write_fd = self._write_fd
        if write_fd is not None and not self._written_by_c:
            try:
                os.write(write_fd, bytes((signum,)))
            except OSError:   # full: signals already wait to be read
                pass

    def install(self, *signals: int) -> SignalRelay:
        """Take ``signals`` over; on the main thread only (``signal.signal`` works nowhere else).
        If taking them fails half-way, what was taken is given back and the error raised."""
        if threading.current_thread() is not threading.main_thread():
            raise ValueError("signals can only be taken over on the main thread")
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        self._signals = frozenset(signals)
        self._write_fd, self._read_fd = write_fd, read_fd
        threading.Thread(target=self._relay, args=(read_fd,), name=self._name, daemon=True).start()
        _installed.add(self)
        try:
            if self._wakeup:
                try:
                    self._previous_wakeup_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
                    self._written_by_c = True
                except (ValueError, OSError):
                    pass   # the Python handler writes instead
            for sig in signals:
                self._previous[sig] = signal.signal(sig, self.handler)
        except BaseException:
            self.restore()
            raise
        return self

    def restore(self) -> None:
        """Give the signals back and end the relay thread; a second call does nothing. The wakeup
        fd goes first: a signal in between is still relayed once, by the Python handler."""
        write_fd = self._write_fd
        if write_fd is None:
            return
        try:
            self._give_back()
        finally:
            self._write_fd = None
            _installed.discard(self)
            os.close(write_fd)   # the relay thread reads the end of the pipe and closes its side

    def _give_back(self) -> None:
        try:
            if self._written_by_c:
                self._written_by_c = False
                signal.set_wakeup_fd(self._previous_wakeup_fd)
        finally:
            previous, self._previous = self._previous, {}
            for sig, handler in previous.items():
                signal.signal(sig, signal.SIG_DFL if handler is None else handler)

    def _forget_in_forked_child(self) -> None:
        """After a fork: this process has no relay thread; its signals go back to their previous
        handlers and the parent's pipe is closed here."""
        fds = (self._write_fd, self._read_fd)
        self._write_fd = self._read_fd = None
        try:
            self._give_back()
        except (ValueError, OSError, TypeError):
            pass
        for fd in fds:
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass

    def _relay(self, read_fd: int) -> None:
        try:
            while True:
                try:
                    data = os.read(read_fd, PIPE_READ_BYTES)   # retried on EINTR (PEP 475)
                except OSError:
                    return
                if not data:
                    return
                for signum in data:
                    if signum in self._signals:
                        try:
                            self._on_signal(signum)
                        except Exception:  # noqa: BLE001 - the next signal must still be acted on
                            log.exception("acting on signal %d failed", signum)
        finally:
            try:
                os.close(read_fd)
            except OSError:
                pass


def _after_fork_in_child() -> None:
    for relay in list(_installed):
        relay._forget_in_forked_child()
    _installed.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
