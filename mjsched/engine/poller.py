"""The poll loop: one thread that polls, then sleeps until the next due instant.

It wakes early on ``wake()`` (a job changed, a slot freed, a completion
landed). A failing poll is logged and retried with backoff; nothing stops the
loop but ``stop()``.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable

from ..errors import DatabaseError
from .wakeup import Wakeup

log = logging.getLogger(__name__)


@dataclass
class _Failing:
    """Polls failing in a row: when one gets through again, one line says so."""
    since: float
    polls: int = 0
    database: bool = False     # the last failure was the database's (unreachable, refused)

    def recovered(self) -> None:
        took = time.monotonic() - self.since
        log.warning("%spolls succeed again after %d failed poll(s) over %.1fs",
                    "reconnected to the database: " if self.database else "", self.polls, took,
                    extra={"action": "poll_recovered", "failed_polls": self.polls})


class Poller:
    def __init__(self, poll: Callable[[], float], *, min_interval: float, max_interval: float,
                 name: str = "mjsched-poller", wakeup: Wakeup | None = None) -> None:
        """``wakeup``: the flag the loop sleeps on, made before the parts that wake it (None: one of its own)."""
        self._poll = poll
        self._min = min_interval
        self._max = max_interval
        self._name = name
        self.wakeup = wakeup if wakeup is not None else Wakeup()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.polls = 0
        self.failures = 0

    def start(self) -> None:
        """Start a loop; a previous one, if still finishing a poll, stays stopped."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, args=(self._stop,), name=self._name, daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Poll again at once (``Wakeup.wake``: a wake during a poll is never lost)."""
        self.wakeup.wake()

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the loop to end, then wait up to ``timeout`` seconds for it (0: do not wait)."""
        self._stop.set()
        self.wakeup.wake()
        self.join(timeout)

    def join(self, timeout: float | None) -> bool:
        """Wait for the loop to end (a poll under way finishes first); True when it did."""
        if self._thread is not None and self._thread is not threading.current_thread() and timeout != 0:
            self._thread.join(timeout)
        return not self.alive

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _loop(self, stop: threading.Event) -> None:
        backoff = self._min
        failing: _Failing | None = None    # the failed polls since the last one that got through
        while not stop.is_set():
            self.wakeup.clear()
            try:
                delay = self._poll()
                backoff = self._min
                if failing is not None:
                    failing.recovered()
                    failing = None
            except BaseException as exc:  # the poller never dies
                self.failures += 1
                backoff = min(max(backoff * 2, 0.5), self._max)
                delay = backoff
                failing = failing or _Failing(time.monotonic())
                failing.polls += 1
                failing.database = isinstance(exc, DatabaseError)
                log.error("poll failed (retrying in %.1fs): %s: %s", delay, type(exc).__name__, exc,
                          exc_info=not isinstance(exc, Exception) or log.isEnabledFor(logging.DEBUG),
                          extra={"action": "poll_failed"})
            self.polls += 1
            if stop.is_set():
                break
            self.wakeup.wait(min(max(delay, self._min), self._max))
