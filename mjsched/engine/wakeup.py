"""Wakeup: "poll again at once", made before the parts that ask for it and the poller that obeys.

A slot that frees, a completion that lands or a job that changes wakes the poll loop. Those
parts are built before the poller, so they are handed this object, not the poller: it holds
the one Event the poller sleeps on. A wake before the poller exists (or while it is stopped)
is kept, never lost: the loop's next sleep ends at once.
"""
from __future__ import annotations

import threading


class Wakeup:
    """The poll loop's wake-up flag (db-scheduler's ``Waiter``): set by anyone, cleared only
    by the loop, just before it polls."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def wake(self) -> None:
        """Poll again at once. A run wakes it twice (its slot frees, its completion lands):
        while the flag is already set, that costs a flag read, not Event.set's Condition.
        A wake skipped because the flag is set is never lost: the loop clears it only
        just before a poll, and that poll starts after the change this wake announced."""
        if not self._event.is_set():
            self._event.set()

    def __call__(self) -> None:
        """The parts are handed the Wakeup itself as their ``wake`` callable: each call looks
        ``wake`` up, so an instrumented ``wake`` (bench/latency_trace.py) sees every wake."""
        self.wake()

    def clear(self) -> None:
        """The loop is about to poll: what woke it is seen by this poll."""
        self._event.clear()

    def wait(self, timeout: float) -> bool:
        """Sleep until woken or ``timeout`` seconds passed; True when woken."""
        return self._event.wait(timeout)

    @property
    def pending(self) -> bool:
        """A wake came since the loop last cleared the flag."""
        return self._event.is_set()
