"""Side work (notifications) on threads of its own.

The completion writer calls back on its single thread; a slow mail server or
webhook there would delay every other run's completion, its lock release and
its recorded duration. Side work is handed here instead. It is counted, so a
graceful stop can wait for it (bounded), and it never raises into the engine.
"""
from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

log = logging.getLogger(__name__)


class BackgroundTasks:
    def __init__(self, workers: int = 2, name: str = "mjsched-notify") -> None:
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self._pending = 0
        self._cond = threading.Condition()

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        with self._cond:
            self._pending += 1
        try:
            self._executor.submit(self._run, fn, *args)
        except RuntimeError:   # shut down: the engine is closing; do it here rather than drop it
            self._run(fn, *args)

    def _run(self, fn: Callable[..., Any], *args: Any) -> None:
        try:
            fn(*args)
        except Exception:  # noqa: BLE001 - side work must never reach the engine
            log.exception("background task %r failed", fn)
        finally:
            with self._cond:
                self._pending -= 1
                self._cond.notify_all()

    @property
    def pending(self) -> int:
        with self._cond:
            return self._pending

    def flush(self, timeout: float | None) -> bool:
        """Wait until every submitted task ran (None: no bound); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending == 0, timeout)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=False)
