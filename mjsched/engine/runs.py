"""Runs in flight: their registry (and the one lock their fields change under), and the capped
thread pool that executes them.

The cap is hard: a slot is taken under a lock before a run is submitted and
given back the moment the driver returns, times out or loses its lease. A
thread that ignores cancellation is counted as leaked and no longer holds a
slot; the pool is replaced so leaked threads never starve new work. Its threads
are daemons nothing joins, so a leaked one never keeps the process alive.
"""
from __future__ import annotations

import enum
import logging
import queue
import threading
import time
from datetime import datetime
from typing import Any, Callable, Iterable, Protocol

from ..models import Job
from .conditions import WaitedCondition

log = logging.getLogger(__name__)


class State(enum.Enum):
    RUNNING = "running"        # the driver is executing: holds a slot, lease renewed
    COMPLETING = "completing"  # driver returned, completion being written: lease renewed
    TIMED_OUT = "timed_out"    # past max_runtime: completion written as Timeout
    CANCELLED = "cancelled"    # an operator's cancel, not obeyed within the grace: written as Cancelled
    LOST = "lost"              # lease taken over or abandoned, or handed back: nothing more to write


class Flag(Protocol):
    """Set once something the run owes is done (its notification)."""
    def set(self) -> None: ...


class HeldRun(Protocol):
    """What the parts below a run (this registry, the lease keeper, cancellation, retries,
    outcomes) see of it: its fields, and the transitions they may ask of it. The class is
    ``engine.run.Run``, which uses these parts; they never import it."""
    job: Job
    run_id: str
    token: str
    scheduled_for: datetime | None
    manual: bool
    catch_up: bool
    attempt: int
    retry_in: float | None
    state: State
    thread_alive: bool
    deadline: float | None
    cancel_deadline: float | None
    cancel_request: Any
    completing_since: float | None
    started: float
    context: Any
    notified: Flag
    cancel_event: threading.Event
    last_enqueued: datetime | None
    lease_until: float

    def wants_lease(self, completing_since_at_least: float | None) -> bool: ...
    def time_out(self) -> None: ...
    def cancel_overdue(self) -> None: ...
    def lose(self) -> None: ...
    def fence(self, unrenewed_for: float) -> bool: ...
    def extend_lease(self, until: float) -> None: ...
    def deliver_cancel(self, request: Any, deadline: float) -> bool: ...
    def cancel(self, *, keep_lease: bool) -> None: ...
    def keep_lease(self) -> None: ...


class RunRegistry:
    """Every run this engine is responsible for, keyed by run id, and the one lock their
    fields change under (``changed``: a run's transitions take it, and waiters wait on it)."""

    def __init__(self, on_slot_freed: Callable[[], None] = lambda: None) -> None:
        self.changed = WaitedCondition(threading.Lock())
        self._entries: dict[str, HeldRun] = {}
        self._leaked: set[str] = set()
        self._on_slot_freed = on_slot_freed
        self.leaked_total = 0

    def add(self, entry: HeldRun) -> None:
        with self.changed:
            self._entries[entry.run_id] = entry

    def live_count(self) -> int:
        """Runs holding a slot (manual runs are the caller's and do not count)."""
        with self.changed:
            return self._live()

    def _live(self) -> int:
        return sum(1 for e in self._entries.values() if e.state is State.RUNNING and not e.manual)

    def snapshot(self) -> list[HeldRun]:
        with self.changed:
            return list(self._entries.values())

    def tokens_to_renew(self, completion_window: float | None = None) -> list[str]:
        """Tokens of the runs that want their lease renewed: running ones, and completing ones
        whose completion was handed over less than ``completion_window`` seconds ago (None:
        all of them). Each run decides (``wants_lease``); the keeper renews them in one call."""
        oldest = None if completion_window is None else time.monotonic() - completion_window
        with self.changed:
            return list({e.token for e in self._entries.values() if e.wants_lease(oldest)})

    def stalled_completions(self, completion_window: float) -> list[HeldRun]:
        """Completing runs whose completion has not landed within ``completion_window`` seconds."""
        oldest = time.monotonic() - completion_window
        with self.changed:
            return [e for e in self._entries.values() if e.state is State.COMPLETING
                    and e.completing_since is not None and e.completing_since < oldest]

    # -- for a run's transitions, which hold ``changed`` while they call these ---------------
    def holds(self, entry: HeldRun) -> bool:
        """``entry`` is the registered run of its id (not one forgotten, nor an older one)."""
        return self._entries.get(entry.run_id) is entry

    def count_leak(self, entry: HeldRun) -> None:
        """``entry`` ended while its thread still runs: that thread is leaked until it returns."""
        self._leaked.add(entry.run_id)
        self.leaked_total += 1

    def forget_leak(self, entry: HeldRun) -> None:
        self._leaked.discard(entry.run_id)

    def slot_freed(self) -> None:
        """A run left RUNNING (called after ``changed`` is released): the dispatcher may claim."""
        self._on_slot_freed()

    # -- lookups and waits ------------------------------------------------------------------
    def by_run_ids(self, run_ids: set[str]) -> list[HeldRun]:
        with self.changed:
            return [e for e in self._entries.values() if e.run_id.lower() in run_ids]

    def remove(self, entry: HeldRun) -> None:
        """Forget ``entry`` (identity-checked: a newer entry under the same id stays)."""
        with self.changed:
            if self._entries.get(entry.run_id) is entry:
                del self._entries[entry.run_id]
            self.changed.notify_all()

    def by_tokens(self, tokens: set[str]) -> list[HeldRun]:
        with self.changed:
            return [e for e in self._entries.values() if e.token in tokens]

    @property
    def leaked(self) -> int:
        with self.changed:
            return len(self._leaked)

    def wait_idle(self, timeout: float | None) -> bool:
        """Wait until no run is executing or completing (None: no bound); False on timeout."""
        with self.changed:
            return self.changed.wait_for(
                lambda: not any(e.state in (State.RUNNING, State.COMPLETING) for e in self._entries.values()),
                timeout)

    def wait_gone(self, entry: HeldRun, timeout: float | None) -> bool:
        """Wait until ``entry`` left the registry (its completion was written)."""
        with self.changed:
            return self.changed.wait_for(lambda: self._entries.get(entry.run_id) is not entry, timeout)

    def wait_all_gone(self, run_ids: Iterable[str], timeout: float | None) -> bool:
        """Wait until none of ``run_ids`` is in the registry (each completion written, or lost)."""
        ids = set(run_ids)
        with self.changed:
            return self.changed.wait_for(lambda: not ids & self._entries.keys(), timeout)

    def wait_free_slot(self, cap: int, timeout: float | None) -> bool:
        """Wait until fewer than ``cap`` runs hold a slot; False on timeout."""
        with self.changed:
            return self.changed.wait_for(lambda: self._live() < cap, timeout)

    def busy(self) -> list[HeldRun]:
        with self.changed:
            return [e for e in self._entries.values() if e.state in (State.RUNNING, State.COMPLETING)]


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
