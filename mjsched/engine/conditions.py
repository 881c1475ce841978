"""A ``threading.Condition`` whose notifications cost nothing while no thread waits.

The run registry's condition is notified at each of a run's transitions (three a run: its
thread returns, it leaves RUNNING, it leaves the registry), and the completion writer's
at each pass, but threads wait on them only in stop_polling, execute_job and flush.
``Condition.notify_all`` checks that the caller owns the lock and walks the waiters even
when there are none: about 1 µs a call, on the path of every run.
"""
from __future__ import annotations

import threading
from typing import Any


class WaitedCondition(threading.Condition):
    """Counts the threads in ``wait`` (``wait_for`` waits through it); ``notify`` and
    ``notify_all`` return at once when the count is zero. The count changes only under
    the lock, which a notifier holds, so a waiter is never missed."""

    def __init__(self, lock: Any = None) -> None:
        super().__init__(lock)
        self._waiting = 0

    def wait(self, timeout: float | None = None) -> bool:
        self._waiting += 1          # the caller holds the lock (Condition.wait requires it)
        try:
            return super().wait(timeout)
        finally:
            self._waiting -= 1      # the lock is held again here, timeout or not

    def notify(self, n: int = 1) -> None:
        if self._waiting:
            super().notify(n)

    def notify_all(self) -> None:
        if self._waiting:
            super().notify_all()
