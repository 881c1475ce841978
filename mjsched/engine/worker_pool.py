"""The capped thread pool that executes runs.

The cap is hard: a slot is taken under a lock before a run is submitted and
given back the moment the driver returns, times out or loses its lease (the
registry counts the slots: ``engine.run.RunRegistry``). A thread that ignores
cancellation is counted as leaked and no longer holds a slot; the pool is
replaced so leaked threads never starve new work. Its threads are daemons
nothing joins, so a leaked one never keeps the process alive.
"""
from __future__ import annotations

import logging
import queue
import threading
from typing import Any, Callable

log = logging.getLogger(__name__)


class _DaemonExecutor:
    """Daemon threads that run submitted calls, at most ``size`` at once.

    concurrent.futures joins its workers at interpreter exit (daemon or not, through
    ``threading._register_atexit``), so one job thread that ignores ``cancel_event``
    would keep the process alive after ``close()``. These threads are daemons that
    nothing joins: once the engine handed the run back, the process may exit. No Future
    per call (a run reports its own end) and a plain count of idle workers: a run's
    hand-off is one queue put, not three Conditions.
    """

    def __init__(self, size: int, name: str) -> None:
        self._size = size
        self._name = name
        self._queue: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]] | None] = queue.SimpleQueue()
        self._threads = 0
        self._idle = 0              # workers waiting on the queue, not yet promised a call
        self._lock = threading.Lock()
        self._shutdown = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new work after shutdown")
            if self._idle > 0:
                self._idle -= 1     # that worker takes this call
            elif self._threads < self._size:
                self._start_worker()   # raises RuntimeError (no thread): the call is not queued
            self._queue.put((fn, args))

    def prestart(self) -> None:
        """Start every worker now, idle. A worker started by ``submit`` makes that run
        wait for ``Thread.start()`` (the new thread must get the GIL) while the poller
        holds the next ones: the first due instants after start-up ran tens of ms late."""
        with self._lock:
            while not self._shutdown and self._threads < self._size:
                try:
                    self._start_worker()
                except RuntimeError as exc:   # a thread limit: the others start when runs need them
                    log.warning("started %d of %d worker threads ahead of runs: %s", self._threads, self._size, exc,
                                extra={"action": "workers_not_prestarted"})
                    return
                self._idle += 1

    def _start_worker(self) -> None:
        """One more worker thread (the caller holds the lock); counted only once it started."""
        threading.Thread(target=self._work, name=f"{self._name}_{self._threads}", daemon=True).start()
        self._threads += 1

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                self._queue.put(None)     # wake the next worker: every one of them ends
                return
            fn, args = item
            try:
                fn(*args)
            except BaseException:  # noqa: BLE001 - a run ends itself; anything else is a bug, logged
                log.exception("worker call %r failed", fn)
            del item, fn, args
            with self._lock:
                self._idle += 1

    def shutdown(self, cancel_futures: bool = False) -> None:
        """Idle workers end; work already queued runs first unless ``cancel_futures``
        (then it is dropped: such a run stays registered until close hands it back)."""
        with self._lock:
            self._shutdown = True
            if cancel_futures:
                while True:
                    try:
                        self._queue.get_nowait()
                    except queue.Empty:
                        break
            self._queue.put(None)


class WorkerPool:
    """Daemon worker threads sized to the cap, replaced when threads leak.

    Never a ThreadPoolExecutor: its workers are joined at interpreter exit, so a job
    that ignores cancellation would keep the process alive past ``close()``.
    """

    def __init__(self, size: int, name: str = "mjsched-worker") -> None:
        self._size = size
        self._name = name
        self._lock = threading.Lock()
        self._executor = _DaemonExecutor(size, name)
        self._leaks_absorbed = 0

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        with self._lock:
            self._executor.submit(fn, *args)

    def prestart(self) -> None:
        """Start all ``size`` workers now (start_polling). Manual runs do not use the pool;
        a pool replaced after a leak starts its workers as runs need them."""
        with self._lock:
            self._executor.prestart()

    def absorb_leak(self) -> None:
        """A worker thread will not come back: start a fresh pool for new work."""
        with self._lock:
            old = self._executor
            self._leaks_absorbed += 1
            self._executor = _DaemonExecutor(self._size, f"{self._name}-{self._leaks_absorbed}")
        old.shutdown()

    def shutdown(self) -> None:
        with self._lock:
            self._executor.shutdown(cancel_futures=True)
