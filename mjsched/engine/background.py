"""Side work (notifications, handing back a claim at stop) on threads of its own.

The completion writer calls back on its single thread; a slow mail server or
webhook there would delay every other run's completion, its lock release and
its recorded duration. Side work is handed here instead. It is counted, so a
graceful stop can wait for it (bounded), and it never raises into the engine.
The threads are daemons, started on first use: a notifier that hangs for ever
never keeps the interpreter from exiting (a ThreadPoolExecutor's would, since
concurrent.futures joins its workers at exit).
"""
from __future__ import annotations

import logging
import queue
import threading
from typing import Any, Callable

log = logging.getLogger(__name__)

_Task = tuple[Callable[..., Any], tuple[Any, ...]]


class BackgroundTasks:
    def __init__(self, workers: int = 2, name: str = "mjsched-notify") -> None:
        self._workers = workers
        self._name = name
        self._queue: queue.Queue[_Task | None] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._pending = 0
        self._cond = threading.Condition()
        self._closed = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        with self._cond:
            closed = self._closed
            self._pending += 1
            if not closed:
                self._start_workers()
                self._queue.put((fn, args))
        if closed:   # the engine is closing: do it here rather than drop it
            self._run(fn, args)

    def _start_workers(self) -> None:
        while len(self._threads) < self._workers:
            thread = threading.Thread(target=self._loop, name=f"{self._name}-{len(self._threads)}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def _loop(self) -> None:
        while True:
            task = self._queue.get()
            if task is None:
                return
            self._run(*task)

    def _run(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
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
        """Let the workers end once the queue is empty; a hung task's thread is left behind."""
        with self._cond:
            self._closed = True
            for _ in self._threads:
                self._queue.put(None)
