"""Runs in flight: the Run record, its registry, and the capped thread pool that executes them.

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
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Iterable

from ..models import Job

log = logging.getLogger(__name__)


class State(enum.Enum):
    RUNNING = "running"        # the driver is executing: holds a slot, lease renewed
    COMPLETING = "completing"  # driver returned, completion being written: lease renewed
    TIMED_OUT = "timed_out"    # past max_runtime: completion written as Timeout
    CANCELLED = "cancelled"    # an operator's cancel, not obeyed within the grace: written as Cancelled
    LOST = "lost"              # lease taken over or abandoned: nothing more to write


@dataclass(eq=False)
class Run:
    """One claimed (or manual) run this engine is responsible for, from claim to completion.

    ``state``, ``thread_alive`` and ``completing_since`` change only in the registry's
    transitions, under its lock; the fields the dispatcher and the facade adjust
    (``renew``, ``last_enqueued``) change only through the methods below, under this run's
    own lock. Everything else is fixed at the claim.
    """
    job: Job
    run_id: str
    token: str
    scheduled_for: datetime | None
    manual: bool = False
    catch_up: bool = False
    deadline: float | None = None              # time.monotonic() past which the run times out
    seen_next_run_at: datetime | None = None   # the job's next_run_at when claimed (completion's guard)
    attempt: int = 1                           # 1 for a tick's first run, then its retries
    retry_in: float | None = None              # set by its completion: seconds until the next attempt
    cancel_event: threading.Event = field(default_factory=threading.Event)
    started: float = field(default_factory=time.monotonic)
    state: State = State.RUNNING
    thread_alive: bool = True
    last_enqueued: datetime | None = None      # Queue mode: newest tick kept as a Queued run
    renew: bool = True                         # False: left to lapse (stop_polling gave up on it)
    completing_since: float | None = None      # time.monotonic() when its completion was handed over
    context: Any = None
    notified: threading.Event = field(default_factory=threading.Event)   # its notification is out (or none)
    cancel_request: Any = None                 # an operator's CancelRequest, once delivered (registry lock)
    cancel_deadline: float | None = None       # time.monotonic() past which a cancelled run is ended anyway
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def keep_lease(self) -> None:
        """Renew its lease again (polling restarted, or the engine closes and hands it back)."""
        with self._lock:
            self.renew = True

    def cancel(self, *, keep_lease: bool) -> None:
        """Ask the driver to stop; ``keep_lease`` False lets its lease lapse, so another
        engine can take the job over once it expires."""
        with self._lock:
            self.renew = keep_lease
        self.cancel_event.set()

    def note_enqueued(self, tick: datetime) -> None:
        """Queue mode: ``tick`` is kept as a Queued run; the next one to keep comes after it."""
        with self._lock:
            self.last_enqueued = tick


class RunRegistry:
    """Every run this engine is responsible for, keyed by run id."""

    def __init__(self, on_slot_freed: Callable[[], None] = lambda: None) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._entries: dict[str, Run] = {}
        self._leaked: set[str] = set()
        self._on_slot_freed = on_slot_freed
        self.leaked_total = 0

    def add(self, entry: Run) -> None:
        with self._lock:
            self._entries[entry.run_id] = entry

    def live_count(self) -> int:
        """Runs holding a slot (manual runs are the caller's and do not count)."""
        with self._lock:
            return sum(1 for e in self._entries.values() if e.state is State.RUNNING and not e.manual)

    def snapshot(self) -> list[Run]:
        with self._lock:
            return list(self._entries.values())

    def tokens_to_renew(self, completion_window: float | None = None) -> list[str]:
        """Tokens of running runs, and of completing runs whose completion was handed over
        less than ``completion_window`` seconds ago (None: all of them)."""
        oldest = None if completion_window is None else time.monotonic() - completion_window
        with self._lock:
            return list({e.token for e in self._entries.values()
                         if e.renew and (e.state is State.RUNNING or (
                             e.state is State.COMPLETING and (
                                 oldest is None or e.completing_since is None or e.completing_since >= oldest)))})

    def stalled_completions(self, completion_window: float) -> list[Run]:
        """Completing runs whose completion has not landed within ``completion_window`` seconds."""
        oldest = time.monotonic() - completion_window
        with self._lock:
            return [e for e in self._entries.values() if e.state is State.COMPLETING
                    and e.completing_since is not None and e.completing_since < oldest]

    def transition(self, entry: Run, new: State, *, only_from: tuple[State, ...] = (State.RUNNING,)) -> bool:
        """Move ``entry`` to ``new`` if it is still in one of ``only_from``; True when it moved."""
        with self._lock:
            if entry.state not in only_from or self._entries.get(entry.run_id) is not entry:
                return False
            freed = entry.state is State.RUNNING
            entry.state = new
            if new is State.COMPLETING:
                entry.completing_since = time.monotonic()
            if new in (State.TIMED_OUT, State.CANCELLED, State.LOST) and entry.thread_alive:
                self._leaked.add(entry.run_id)
                self.leaked_total += 1
            self._changed.notify_all()
        if freed:
            self._on_slot_freed()
        return True

    def deliver_cancel(self, entry: Run, request: Any, deadline: float) -> bool:
        """Note an operator's cancel on ``entry`` while it is still RUNNING and has none yet;
        True when noted. Under the lock ``transition`` takes, so a run whose driver returned
        first (COMPLETING) keeps its own outcome, and one noted before that ends Cancelled."""
        with self._lock:
            if (entry.state is not State.RUNNING or entry.cancel_request is not None
                    or self._entries.get(entry.run_id) is not entry):
                return False
            entry.cancel_request = request
            entry.cancel_deadline = deadline
            self._changed.notify_all()
            return True

    def by_run_ids(self, run_ids: set[str]) -> list[Run]:
        with self._lock:
            return [e for e in self._entries.values() if e.run_id.lower() in run_ids]

    def thread_done(self, entry: Run) -> None:
        with self._lock:
            entry.thread_alive = False
            self._leaked.discard(entry.run_id)
            self._changed.notify_all()

    def remove(self, entry: Run) -> None:
        """Forget ``entry`` (identity-checked: a newer entry under the same id stays)."""
        with self._lock:
            if self._entries.get(entry.run_id) is entry:
                del self._entries[entry.run_id]
            self._changed.notify_all()

    def by_tokens(self, tokens: set[str]) -> list[Run]:
        with self._lock:
            return [e for e in self._entries.values() if e.token in tokens]

    @property
    def leaked(self) -> int:
        with self._lock:
            return len(self._leaked)

    def wait_idle(self, timeout: float | None) -> bool:
        """Wait until no run is executing or completing (None: no bound); False on timeout."""
        with self._lock:
            return self._changed.wait_for(
                lambda: not any(e.state in (State.RUNNING, State.COMPLETING) for e in self._entries.values()),
                timeout)

    def wait_gone(self, entry: Run, timeout: float | None) -> bool:
        """Wait until ``entry`` left the registry (its completion was written)."""
        with self._lock:
            return self._changed.wait_for(lambda: self._entries.get(entry.run_id) is not entry, timeout)

    def wait_all_gone(self, run_ids: Iterable[str], timeout: float | None) -> bool:
        """Wait until none of ``run_ids`` is in the registry (each completion written, or lost)."""
        ids = set(run_ids)
        with self._lock:
            return self._changed.wait_for(lambda: not ids & self._entries.keys(), timeout)

    def wait_free_slot(self, cap: int, timeout: float | None) -> bool:
        """Wait until fewer than ``cap`` runs hold a slot; False on timeout."""
        with self._lock:
            return self._changed.wait_for(
                lambda: sum(1 for e in self._entries.values() if e.state is State.RUNNING and not e.manual) < cap,
                timeout)

    def busy(self) -> list[Run]:
        with self._lock:
            return [e for e in self._entries.values() if e.state in (State.RUNNING, State.COMPLETING)]


class _DaemonExecutor:
    """The part of ThreadPoolExecutor the engine uses, on daemon threads.

    concurrent.futures joins its workers at interpreter exit (daemon or not, through
    ``threading._register_atexit``), so one job thread that ignores ``cancel_event``
    would keep the process alive after ``close()``. These threads are daemons that
    nothing joins: once the engine handed the run back, the process may exit.
    """

    def __init__(self, size: int, name: str) -> None:
        self._size = size
        self._name = name
        self._queue: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None] = \
            queue.SimpleQueue()
        self._threads = 0
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._shutdown = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new work after shutdown")
            self._queue.put((future, fn, args))
            if not self._idle.acquire(blocking=False) and self._threads < self._size:
                self._threads += 1
                threading.Thread(target=self._work, name=f"{self._name}_{self._threads - 1}", daemon=True).start()
        return future

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                self._queue.put(None)     # wake the next worker: every one of them ends
                return
            future, fn, args = item
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args)
                except BaseException as exc:  # noqa: BLE001 - kept in the future, as concurrent.futures does
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            del item, future, fn, args
            self._idle.release()

    def shutdown(self, cancel_futures: bool = False) -> None:
        """Idle workers end; work already queued runs first unless ``cancel_futures``."""
        with self._lock:
            self._shutdown = True
            if cancel_futures:
                while True:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is not None:
                        item[0].cancel()
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

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        with self._lock:
            return self._executor.submit(fn, *args)

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
