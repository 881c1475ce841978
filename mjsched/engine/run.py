"""One run's life in one class: ``Run``, whose methods are its transitions.

A run is claimed (or started by hand), executes on a pool thread, and ends in exactly one
way: it finishes (the driver returned), times out (past max_runtime), is cancelled by an
operator and does not stop within the grace, loses its lease (taken over, swept or the job
deleted), or is handed back when the engine closes. Each of those is a method here. The
fields that change after the claim (``state``, ``thread_alive``, ``completing_since``,
``renew``, ``last_enqueued``, the cancel request, ``retry_in``) change only inside these
methods, under one lock: the registry's, which also counts the slots, so a transition and
the cap can never disagree, and two threads (a worker returning, the lease keeper timing
the run out) can never both end a run. The thread that wins a transition then does what
follows it: hands the completion to the writer, logs, tells the listeners, notifies.

Heartbeat: each run says whether its lease is still wanted (``wants_lease``) and reacts to
losing it (``lose``); the lease keeper only gathers the runs that want one into a single
``renew_leases`` call per beat, so N runs cost one statement, not N. A driver may also
renew its own run's lease at once (``heartbeat``, as ``ExecutionContext.heartbeat``).

The registry of the runs in flight (``RunRegistry``) lives here too: it holds runs and its
lock is the one their transitions take. The parts below a run (the lease keeper, the fence,
cancellation, the outcomes, retries) never import this module: each states in a small
Protocol of its own what it needs of a run, and a ``Run`` meets all of them.
"""
from __future__ import annotations

import enum
import functools
import logging
import math
import threading
import time
import weakref
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any, Callable, Iterable

from .. import scheduling
from ..backends.base import Backend, CancelRequest, Completion
from ..clock import DbClock
from ..drivers.base import BaseScheduledJob, ExecutionContext, JobResult
from ..drivers.celery_trust import CeleryAllowList
from ..drivers.registry import get_driver
from ..errors import SchedulerError
from ..execution import RuntimeBound, failure, run_driver, runtime_bound
from ..models import Job, JobRun, RunStatus
from ..redaction import guard_logger
from ..tracing import RunSpan, start_run
from . import retrying
from .cancellation import cancel_message
from .completions import CompletionWriter
from .conditions import WaitedCondition
from .lazy_event import LazyEvent
from .leases import Heartbeat
from .outcomes import Flag, Outcomes
from .stats import EngineStats
from .worker_pool import WorkerPool

log = logging.getLogger(__name__)


class State(enum.Enum):
    """Where a run is in its life; only ``Run._move`` changes it."""
    RUNNING = "running"        # the driver is executing: holds a slot, lease renewed
    COMPLETING = "completing"  # driver returned, completion being written: lease renewed
    TIMED_OUT = "timed_out"    # past max_runtime: completion written as Timeout
    CANCELLED = "cancelled"    # an operator's cancel, not obeyed within the grace: written as Cancelled
    LOST = "lost"              # lease taken over or abandoned, or handed back: nothing more to write


class _NobodyWaits:
    """The ``notified`` flag of a claimed run: only execute_job waits for a notification, so
    only a manual run gets a real Event (one Condition less per claimed run)."""
    __slots__ = ()

    def set(self) -> None:
        pass


NOBODY_WAITS = _NobodyWaits()
ENDED_EARLY = (State.TIMED_OUT, State.CANCELLED, State.LOST)   # a thread still going then counts as leaked


@dataclass(frozen=True)
class RunServices:
    """What every run of one engine shares: where it executes, who writes its end, who keeps
    its lease, and who hears about it. Built once by ``wiring.build_parts``."""
    backend: Backend
    registry: RunRegistry
    pool: WorkerPool
    writer: CompletionWriter
    keeper: Heartbeat                   # built before this (it needs the registry, not the runs)
    outcomes: Outcomes                  # what follows a written end: log, listeners, notification
    clock: DbClock
    stats: EngineStats
    instance: str
    lease_seconds: float                # what a claim or a renewal grants (Run.lease_until)
    allowed_drivers: frozenset[str] | None
    wake: Callable[[], None]            # the dispatcher polls again (a slot or a job came free)
    default_max_runtime: float | None = None   # the bound of runs whose job and driver set none
    celery_allow: CeleryAllowList | None = None   # what a celery job may name here (None: anything)


@dataclass(eq=False)
class Run:
    """One claimed (or manual) run this engine is responsible for, from claim to completion.

    Fixed at the claim: the job, ids, the tick, ``deadline`` and ``seen_next_run_at`` (the
    job's next_run_at when claimed: the completion's compare-and-set guard). Everything else
    changes only in the methods below, under ``services.registry.changed``.
    """
    services: RunServices = field(repr=False)
    job: Job
    run_id: str
    token: str
    scheduled_for: datetime | None
    manual: bool = False
    catch_up: bool = False
    deadline: float | None = None              # time.monotonic() past which the run times out
    bound: RuntimeBound | None = None          # what set the deadline (named when it times out)
    seen_next_run_at: datetime | None = None
    attempt: int = 1                           # 1 for a tick's first run, then its retries
    retry_in: float | None = None              # set by its completion: seconds until the next attempt
    cancel_event: threading.Event = field(default_factory=LazyEvent)   # a Condition only once used
    started: float = field(default_factory=time.monotonic)
    state: State = State.RUNNING
    thread_alive: bool = True
    last_enqueued: datetime | None = None      # Queue mode: newest tick kept as a Queued run
    renew: bool = True                         # False: left to lapse (stop_polling gave up on it)
    completing_since: float | None = None      # time.monotonic() when its completion was handed over
    context: Any = None
    notified: Flag = field(default_factory=lambda: NOBODY_WAITS)   # its notification is out (or none)
    cancel_request: CancelRequest | None = None   # an operator's cancel, once delivered
    cancel_deadline: float | None = None       # time.monotonic() past which a cancelled run is ended anyway
    # time.monotonic() until which its lease certainly holds: the start of the last call that
    # granted it (the claim, a renewal) plus the lease; the fence stops it before then (fencing.py)
    lease_until: float = math.inf
    span: RunSpan | None = None                # its trace span (mjsched.tracing; None without OpenTelemetry)

    @classmethod
    def begin(cls, services: RunServices, job: Job, run_id: str, token: str, scheduled_for: datetime | None, *,
              manual: bool, catch_up: bool, seen_next_run_at: datetime | None = None,
              parameters: dict[str, Any] | None = None, attempt: int = 1,
              last_enqueued: datetime | None = None, lease_from: float | None = None, traced: bool = True) -> Run:
        """A run just claimed, with the context its driver will see. ``job`` is what the driver
        sees (a manual run's ``parameters`` already merged into its configuration).
        ``last_enqueued``: Queue mode's newest tick already served or kept (``note_enqueued``),
        set here while no other thread can see the run. ``lease_from``: time.monotonic() when
        the call that claimed it began (its first attempt; default now), which its lease runs from.
        ``traced`` False: no span (``tracing.wanted()`` said so for the whole claim)."""
        try:
            driver_cls: type[BaseScheduledJob] | None = get_driver(job.driver)
        except SchedulerError:
            driver_cls = None
        bound = runtime_bound(job, driver_cls, services.default_max_runtime)
        run = cls(services, job, run_id, token, scheduled_for, manual=manual, catch_up=catch_up,
                  deadline=time.monotonic() + bound.seconds if bound else None, bound=bound,
                  seen_next_run_at=seen_next_run_at, attempt=attempt, last_enqueued=last_enqueued,
                  notified=threading.Event() if manual else NOBODY_WAITS,
                  lease_until=(time.monotonic() if lease_from is None else lease_from) + services.lease_seconds,
                  span=start_run(job_id=job.id, job_name=job.name, driver=job.driver, run_id=run_id,
                                 tick=scheduled_for, attempt=attempt, manual=manual, instance=services.instance)
                  if traced else None)
        record = JobRun(id=run_id, scheduled_job_id=job.id, scheduled_for=scheduled_for, status=RunStatus.RUNNING,
                        success=None, error_message=None, details=None, queued_at=None,
                        started_at=services.clock.now(), completed_at=None, duration_ms=None,
                        executed_by_instance=services.instance, lock_token=token, lease_expires_at=None,
                        parameters=parameters, attempt=attempt)
        run.context = ExecutionContext(job=job, run=record, cancel_event=run.cancel_event,
                                       logger=_job_logger(job.driver),
                                       heartbeat=_heartbeat_of(run),
                                       fencing_source=_fencing_of(services, run_id))
        return run

    @property
    def running(self) -> bool:
        """Its driver is executing (it holds a slot); read without the lock, as a filter: each
        transition checks again under it."""
        return self.state is State.RUNNING

    # -- start -----------------------------------------------------------------------------
    def start(self) -> None:
        """A claimed, registered run: its lease and max_runtime are watched, then the capped
        pool executes it (a shut-down pool forgets it: SchedulerError)."""
        self._watch()
        try:
            self.services.pool.submit(self.execute)
        except RuntimeError as exc:   # the pool is shut down, or no thread could be started
            self.services.registry.remove(self)
            raise SchedulerError(f"no worker for the run: {exc}") from None

    def start_manual(self) -> None:
        """A manual run: registered, watched, and on a thread of its own outside the cap."""
        self.services.registry.add(self)
        self._watch()
        threading.Thread(target=self.execute, name="mjsched-execute", daemon=True).start()

    def _watch(self) -> None:
        keeper = self.services.keeper
        keeper.start()
        keeper.fence.watch(self.lease_until)
        # The keeper re-reads deadlines at every beat: only a deadline before the next one needs
        # it woken (every run has one now, most a day away: default_max_runtime).
        if self.deadline is not None and self.deadline - time.monotonic() < keeper.interval:
            keeper.poke()

    # -- its lease -------------------------------------------------------------------------
    def wants_lease(self, completing_since_at_least: float | None) -> bool:
        """Whether the next beat renews this run's lease: while it runs, and while its completion
        is being written, unless that has taken longer than the keeper's completion window
        (``completing_since_at_least``; None: no window), or the engine gave up on it."""
        if not self.renew:
            return False
        if self.state is State.RUNNING:
            return True
        return self.state is State.COMPLETING and (
            completing_since_at_least is None or self.completing_since is None
            or self.completing_since >= completing_since_at_least)

    def heartbeat(self) -> bool:
        """Renew this run's lease now (a driver's ``context.heartbeat()``); False once the run
        is no longer RUNNING or the renewal failed."""
        if self.state is not State.RUNNING:
            return False
        return self.services.keeper.renew([self.token]) and self.state is State.RUNNING

    def extend_lease(self, until: float) -> None:
        """A renewal answered this run's token renewed: its lease holds until ``until`` (monotonic)."""
        with self.services.registry.changed:
            self.lease_until = max(self.lease_until, until)

    def keep_lease(self) -> None:
        """Renew its lease again (polling restarted, or the engine closes and hands it back)."""
        with self.services.registry.changed:
            self.renew = True

    def cancel(self, *, keep_lease: bool) -> None:
        """Ask the driver to stop; ``keep_lease`` False lets its lease lapse, so another
        engine can take the job over once it expires."""
        with self.services.registry.changed:
            self.renew = keep_lease
        self.cancel_event.set()

    def note_enqueued(self, tick: datetime) -> None:
        """Queue mode: ``tick`` is kept as a Queued run; the next one to keep comes after it."""
        with self.services.registry.changed:
            self.last_enqueued = tick

    # -- finish ----------------------------------------------------------------------------
    def execute(self) -> None:
        """The worker thread's body: run the driver, then finish."""
        driver: BaseScheduledJob | None = None
        if self.state is not State.RUNNING:   # timed out or lost while it waited for a thread
            self._thread_done()
            return
        try:
            log.debug("starting job %r (run %s)", self.job.name, self.run_id, extra={"action": "run_started"})
            if self.span is None:
                result, driver = run_driver(self.context, self.services.allowed_drivers, self.services.celery_allow)
            else:
                self.span.started(self.scheduled_for, self.context.run.started_at)
                with self.span.current():
                    result, driver = run_driver(self.context, self.services.allowed_drivers,
                                                self.services.celery_allow)
        except BaseException as exc:  # noqa: BLE001 - even KeyboardInterrupt from a driver: the run must end
            result = failure(exc)
        finally:
            self._thread_done()
        self.finish(result, driver)

    def finish(self, result: JobResult, driver: BaseScheduledJob | None) -> None:
        """The driver returned: RUNNING -> COMPLETING, its completion to the writer. An
        operator's cancel noted before this (under the same lock) makes it Cancelled."""
        if not self._move(State.COMPLETING):
            log.warning("run %s of job %r returned after it was %s; its result is discarded", self.run_id,
                        self.job.name, self.state.value, extra={"action": "leaked_run_finished"})
            return
        status = RunStatus.COMPLETED if result.success else RunStatus.FAILED
        if self.cancel_request is not None:
            status = RunStatus.CANCELLED
            result = JobResult(success=False, error_message=cancel_message(self.cancel_request, result.error_message),
                               details=result.details)
        elif not result.success and self.cancel_event.is_set():
            status = RunStatus.CANCELLED   # it gave up because the engine asked it to (shutdown)
        self._write_end(status, result, driver)

    def time_out(self) -> None:
        """Past max_runtime (the keeper's call): RUNNING -> TIMED_OUT, recorded Timeout; a
        thread still going is leaked and no longer holds a slot."""
        if not self._end_early(State.TIMED_OUT, only_if=lambda: True):
            return
        self.cancel_event.set()
        self.services.stats.bump("timeouts")
        bound = self.bound or RuntimeBound(0.0, "max_runtime")
        message = f"exceeded {bound.source} of {bound.seconds:g}s; cancelled"
        if bound.engine_default:
            # no job or driver setting bounded it: the engine's backstop for hung runs did
            self.services.stats.bump("default_max_runtime_timeouts")
            message += " (the engine's bound for runs whose job sets no max_runtime; give the job one if it needs longer)"
            log.warning("run %s of job %r still running after default_max_runtime (%gs), the engine's bound for jobs "
                        "without max_runtime: recorded Timeout, its slot freed", self.run_id, self.job.name,
                        bound.seconds, extra={"action": "run_exceeded_default_max_runtime", "job_id": self.job.id})
        if self.thread_alive:
            log.warning("run %s of job %r timed out; its thread is still running and is counted as leaked "
                        "(%d leaked now)", self.run_id, self.job.name, self.services.registry.leaked,
                        extra={"action": "run_timed_out"})
        self._write_end(RunStatus.TIMEOUT, JobResult(success=False, error_message=message), None)

    def request_cancel(self, request: CancelRequest, deadline: float, grace: float) -> bool:
        """An operator's cancel (``Cancellation``'s call): noted once, while the run is still
        RUNNING, then its driver is asked to stop within ``grace`` seconds; ``deadline``
        (monotonic) is when the keeper ends it anyway (``cancel_overdue``). False when not
        noted: the run had one already, or its driver returned first and keeps its own outcome
        (noted under the lock ``finish`` moves under)."""
        registry = self.services.registry
        with registry.changed:
            if self.state is not State.RUNNING or self.cancel_request is not None or not registry.holds(self):
                return False
            self.cancel_request = request
            self.cancel_deadline = deadline
            registry.changed.notify_all()
        if self.context is not None:
            self.context.cancel_grace = grace    # before the event: the child's supervisor reads it
        self.cancel_event.set()
        return True

    def cancel_overdue(self) -> None:
        """An operator's cancel not obeyed within the grace (the keeper's call): RUNNING ->
        CANCELLED, recorded Cancelled; a thread still going is leaked (an isolated child was killed)."""
        if not self._end_early(State.CANCELLED, only_if=lambda: self.cancel_request is not None):
            return
        assert self.cancel_request is not None
        message = cancel_message(self.cancel_request, "the run did not stop within the grace period; its "
                                 "thread is left running")
        log.warning("run %s of job %r ignored its cancel; recorded Cancelled, its thread is counted as leaked "
                    "(%d leaked now)", self.run_id, self.job.name, self.services.registry.leaked,
                    extra={"action": "run_cancel_overdue"})
        self._write_end(RunStatus.CANCELLED, JobResult(success=False, error_message=message), None)

    def lose(self) -> None:
        """Its lease was taken over or abandoned (the keeper's call): -> LOST, nothing more to
        write or notify; the driver is asked to stop."""
        if not self._move(State.LOST, only_from=(State.RUNNING, State.COMPLETING)):
            return
        self.cancel_event.set()
        self.services.stats.bump("leases_lost")
        self._end_span("Lost")
        if self.thread_alive and not self.manual:
            self.services.pool.absorb_leak()
        self.notified.set()       # a lost run sends no notification
        self.services.registry.remove(self)
        self.services.wake()

    def fence(self, unrenewed_for: float) -> bool:
        """Its lease could lapse within the fence's margin and was not renewed (the fence's
        call): RUNNING -> LOST before another engine may take the job. Killed at once (no kill
        grace: an isolated child's tree, a shell job's process group), nothing written (its
        token is about to be taken over); True when it was fenced."""
        if self.state is not State.RUNNING:
            return False
        if self.context is not None:
            self.context.cancel_grace = 0.0     # before the event: the child's supervisor reads it
        if not self._move(State.LOST):
            return False
        self.cancel_event.set()
        self.services.stats.bump("leases_fenced")
        self._end_span("Fenced")
        if self.thread_alive and not self.manual:
            self.services.pool.absorb_leak()
        log.error("Lease of run %s (job %r) could not be renewed for %.1fs: the run is stopped before another "
                  "engine may take the job over (self-fencing); nothing is recorded for it here", self.run_id,
                  self.job.name, unrenewed_for, extra={"action": "lease_lost", "reason": "fenced"})
        self.notified.set()       # a fenced run sends no notification
        self.services.registry.remove(self)
        self.services.wake()
        return True

    def hand_back(self) -> Completion | None:
        """At close, a run still executing: -> LOST, and the Cancelled completion that releases
        its lock (written by ``hand_back_held`` in one call); None when it ended meanwhile."""
        if not self._move(State.LOST):
            return None
        self._end_span("Cancelled", "handed back: the engine closed while the run was still executing")
        self.notified.set()
        self.services.registry.remove(self)
        return self.completion(RunStatus.CANCELLED, "the engine closed while the run was still executing; "
                                                    "handed back", None)

    def completion(self, status: RunStatus, error: str | None, details: dict[str, Any] | None) -> Completion:
        """The run's end, moving the schedule on only if nobody edited it since the claim; a Failed
        or Timeout attempt of a tick with a retry left also asks for the next attempt."""
        retry_in = retrying.retry_in(self, status)
        with self.services.registry.changed:
            self.retry_in = retry_in
        return Completion(self.run_id, self.token, status.value, error, details, self._next_run_at(),
                          guard=True, expected_next_run_at=self.seen_next_run_at, retry_in=retry_in)

    # -- the steps the transitions share -----------------------------------------------------
    def _move(self, new: State, *, only_from: tuple[State, ...] = (State.RUNNING,)) -> bool:
        """Move to ``new`` if still in one of ``only_from`` and registered; True when it moved.
        Leaving RUNNING frees a slot, and the dispatcher hears of it."""
        registry = self.services.registry
        with registry.changed:
            if self.state not in only_from or not registry.holds(self):
                return False
            freed = self.state is State.RUNNING
            self.state = new
            if new is State.COMPLETING:
                self.completing_since = time.monotonic()
            if new in ENDED_EARLY and self.thread_alive:
                registry.count_leak(self)
            registry.changed.notify_all()
        if freed:
            registry.slot_freed()
        return True

    def _end_early(self, new: State, only_if: Callable[[], bool]) -> bool:
        """A RUNNING run ended by the keeper, not by its driver. A thread still going is given
        up first, so new work never queues behind it in the pool."""
        if self.state is not State.RUNNING or not only_if():
            return False
        if self.thread_alive and not self.manual:
            self.services.pool.absorb_leak()
        return self._move(new)

    def _thread_done(self) -> None:
        registry = self.services.registry
        with registry.changed:
            self.thread_alive = False
            registry.forget_leak(self)
            registry.changed.notify_all()

    def _write_end(self, status: RunStatus, result: JobResult, driver: BaseScheduledJob | None) -> None:
        self.services.writer.submit(self.completion(status, result.error_message, result.details),
                                    partial(self._written, result, driver, status))

    def _written(self, result: JobResult, driver: BaseScheduledJob | None, status: RunStatus,
                 outcome: bool | None) -> None:
        """The writer's callback: the outcome is recorded (logged, listeners, notification),
        then the run leaves the registry (execute_job waits for that) and the dispatcher polls."""
        try:
            self._end_span(status.value if outcome else "Refused" if outcome is False else "Unwritten",
                           result.error_message)
            self.services.outcomes.record(self, result, driver, status, outcome)
        finally:
            self.services.registry.remove(self)
            self.services.wake()

    def _end_span(self, outcome: str, error: str | None = None) -> None:
        if self.span is not None:
            self.span.end(outcome, error)

    def _next_run_at(self) -> datetime | None:
        """Where the job's schedule goes when this run ends (None: leave it alone). A retry
        leaves it too: its tick's first attempt already moved it, and a tick that came due
        while the retry ran is still due, so a retry never costs a tick."""
        if not scheduling.schedule_moves_at_end(self.job.concurrency_mode, manual=self.manual, attempt=self.attempt):
            return None
        try:
            return scheduling.next_run_after(self.job, self.scheduled_for, self.services.clock.now(), self.catch_up)
        except Exception as exc:  # noqa: BLE001 - the run's outcome is still recorded; its next claim sets it aside
            log.error("job %r: cannot compute its next run: %s: %s", self.job.name, type(exc).__name__, exc)
            return None


class RunRegistry:
    """Every run this engine is responsible for, keyed by run id, and the one lock their
    fields change under (``changed``: a run's transitions take it, and waiters wait on it)."""

    def __init__(self, on_slot_freed: Callable[[], None] = lambda: None) -> None:
        self.changed = WaitedCondition(threading.Lock())
        self._entries: dict[str, Run] = {}
        self._leaked: set[str] = set()
        self._on_slot_freed = on_slot_freed
        self.leaked_total = 0

    def add(self, entry: Run) -> None:
        with self.changed:
            self._entries[entry.run_id] = entry

    def live_count(self) -> int:
        """Runs holding a slot (manual runs are the caller's and do not count)."""
        with self.changed:
            return self._live()

    def _live(self) -> int:
        return sum(1 for e in self._entries.values() if e.state is State.RUNNING and not e.manual)

    def snapshot(self) -> list[Run]:
        with self.changed:
            return list(self._entries.values())

    def tokens_to_renew(self, completion_window: float | None = None) -> list[str]:
        """Tokens of the runs that want their lease renewed: running ones, and completing ones
        whose completion was handed over less than ``completion_window`` seconds ago (None:
        all of them). Each run decides (``wants_lease``); the keeper renews them in one call."""
        oldest = None if completion_window is None else time.monotonic() - completion_window
        with self.changed:
            return list({e.token for e in self._entries.values() if e.wants_lease(oldest)})

    def stalled_completions(self, completion_window: float) -> list[Run]:
        """Completing runs whose completion has not landed within ``completion_window`` seconds."""
        oldest = time.monotonic() - completion_window
        with self.changed:
            return [e for e in self._entries.values() if e.state is State.COMPLETING
                    and e.completing_since is not None and e.completing_since < oldest]

    # -- for a run's transitions, which hold ``changed`` while they call these ---------------
    def holds(self, entry: Run) -> bool:
        """``entry`` is the registered run of its id (not one forgotten, nor an older one)."""
        return self._entries.get(entry.run_id) is entry

    def count_leak(self, entry: Run) -> None:
        """``entry`` ended while its thread still runs: that thread is leaked until it returns."""
        self._leaked.add(entry.run_id)
        self.leaked_total += 1

    def forget_leak(self, entry: Run) -> None:
        self._leaked.discard(entry.run_id)

    def slot_freed(self) -> None:
        """A run left RUNNING (called after ``changed`` is released): the dispatcher may claim."""
        self._on_slot_freed()

    # -- lookups and waits ------------------------------------------------------------------
    def by_run_ids(self, run_ids: set[str]) -> list[Run]:
        with self.changed:
            return [e for e in self._entries.values() if e.run_id.lower() in run_ids]

    def remove(self, entry: Run) -> None:
        """Forget ``entry`` (identity-checked: a newer entry under the same id stays)."""
        with self.changed:
            if self._entries.get(entry.run_id) is entry:
                del self._entries[entry.run_id]
            self.changed.notify_all()

    def by_tokens(self, tokens: set[str]) -> list[Run]:
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

    def wait_gone(self, entry: Run, timeout: float | None) -> bool:
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

    def busy(self) -> list[Run]:
        with self.changed:
            return [e for e in self._entries.values() if e.state in (State.RUNNING, State.COMPLETING)]


def _fencing_of(services: RunServices, run_id: str) -> Callable[[], int | None]:
    """``context.fencing_token``'s source: the run's row, read once and only when asked (the
    claim does not return the token, so runs that never use it cost nothing)."""
    def fencing_token() -> int | None:
        try:
            record = services.backend.get_run(run_id)
        except Exception as exc:  # noqa: BLE001 - asked again next time; the run itself goes on
            log.warning("run %s: its fencing token could not be read: %s", run_id, exc,
                        extra={"action": "fencing_token_unread"})
            return None
        return record.fencing_token if record is not None else None
    return fencing_token


def _heartbeat_of(run: Run) -> Callable[[], bool]:
    """``context.heartbeat`` holding its run weakly. The bound method ``run.heartbeat`` made a
    cycle (run -> context -> run) of every run: garbage only the cycle collector frees, whose
    full passes (12-23 ms at 200 runs a second) then fell inside the bursts of due jobs.
    A run already freed holds no lease: False, as for any run that is no longer running."""
    ref = weakref.ref(run)

    def heartbeat() -> bool:
        held = ref()
        return held is not None and held.heartbeat()
    return heartbeat


@functools.lru_cache(maxsize=1024)
def _job_logger(driver: str) -> logging.Logger:
    """A driver's logger, looked up once (getLogger takes logging's module lock each call). Its
    records name what a job runs (a shell command, a URL), so they are masked at the source,
    for every handler an application attaches (an isolated run's records are handled here too)."""
    return guard_logger(logging.getLogger(f"mjsched.job.{driver}"))


def hand_back_held(services: RunServices) -> None:
    """Runs still executing at close are recorded Cancelled and their locks released, in
    one fenced call, so no lock outlives the engine; a thread that returns later finds its
    run lost and its result is discarded (logged)."""
    items = [c for c in (run.hand_back() for run in services.registry.busy()) if c is not None]
    if not items:
        return
    try:
        done = services.backend.complete_runs(items)
    except SchedulerError as exc:
        log.error("close: could not hand back %d run(s) (%s); their leases will lapse", len(items), exc,
                  extra={"action": "hand_back_failed"})
        return
    log.warning("closed with %d run(s) still executing: %d recorded Cancelled and their locks released",
                len(items), sum(1 for ok in done.values() if ok), extra={"action": "handed_back_at_close"})
