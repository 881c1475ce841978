"""A run's life in one place: start, finish, time out, lose the lease, hand back.

Each transition moves the ``Run`` in the registry (under its lock, so two threads never
both end a run) and then does what follows: the completion handed to the writer, the
outcome logged and the listeners told, the notification sent off the writer's thread.
The threads that drive a run (a pool worker, the lease keeper, the completion writer,
``close()``) call these methods and nothing else.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
from datetime import datetime
from functools import partial
from typing import Any, Callable

from .. import scheduling
from ..backends.base import Backend, Completion
from ..clock import DbClock
from ..drivers.base import BaseScheduledJob, ExecutionContext, JobResult
from ..drivers.registry import get_driver
from ..errors import SchedulerError
from ..execution import effective_max_runtime, failure, run_driver
from ..models import ConcurrencyMode, Job, JobRun, RunStatus
from ..notify import Notifier, safe_notify
from . import retrying
from .background import BackgroundTasks
from .cancellation import cancel_message
from .completions import CompletionWriter
from .leases import LeaseKeeper
from .listeners import Listeners
from .runs import Run, RunRegistry, State, WorkerPool

log = logging.getLogger("mjsched.engine")


class RunLifecycle:
    def __init__(self, *, backend: Backend, registry: RunRegistry, pool: WorkerPool, writer: CompletionWriter,
                 keeper: Callable[[], LeaseKeeper], side_work: BackgroundTasks, clock: DbClock,
                 notifier: Callable[[], Notifier], listeners: Listeners, stats: dict[str, int],
                 instance_name: str, allowed_drivers: frozenset[str] | None, wake: Callable[[], None]) -> None:
        self._backend = backend
        self._registry = registry
        self._pool = pool
        self._writer = writer
        self._keeper = keeper         # a callable: the keeper is built after this (it calls back here)
        self._side_work = side_work
        self._clock = clock
        self._notifier = notifier     # read at each notification: the facade's notifier may be replaced
        self._listeners = listeners
        self._stats = stats
        self._instance = instance_name
        self._allowed_drivers = allowed_drivers
        self._wake = wake

    # -- start -----------------------------------------------------------------------------
    def new_run(self, job: Job, run_id: str, token: str, scheduled_for: datetime | None, *, manual: bool,
                catch_up: bool, seen_next_run_at: datetime | None = None,
                parameters: dict[str, Any] | None = None, attempt: int = 1) -> Run:
        """``job`` is what the driver sees (with ``parameters`` already merged into its
        configuration for a manual run with parameters)."""
        try:
            driver_cls: type[BaseScheduledJob] | None = get_driver(job.driver)
        except SchedulerError:
            driver_cls = None
        max_runtime = effective_max_runtime(job, driver_cls)
        run = Run(job=job, run_id=run_id, token=token, scheduled_for=scheduled_for, manual=manual,
                  catch_up=catch_up, deadline=time.monotonic() + max_runtime if max_runtime else None,
                  seen_next_run_at=seen_next_run_at, attempt=attempt)
        record = JobRun(id=run_id, scheduled_job_id=job.id, scheduled_for=scheduled_for, status=RunStatus.RUNNING,
                        success=None, error_message=None, details=None, queued_at=None,
                        started_at=self._clock.now(), completed_at=None, duration_ms=None,
                        executed_by_instance=self._instance, lock_token=token, lease_expires_at=None,
                        parameters=parameters, attempt=attempt)
        run.context = ExecutionContext(job=job, run=record, cancel_event=run.cancel_event,
                                       logger=logging.getLogger(f"mjsched.job.{job.driver}"),
                                       heartbeat=partial(self._context_heartbeat, run))
        return run

    def watch(self, run: Run) -> None:
        """A registered run gets its heartbeat and its max_runtime watch (keeper re-reads deadlines)."""
        keeper = self._keeper()
        keeper.start()
        if run.deadline is not None:
            keeper.poke()

    def submit(self, run: Run) -> None:
        """Hand a registered run to the capped pool; a shut-down pool forgets it."""
        try:
            self._pool.submit(self.execute, run)
        except RuntimeError:
            self._registry.remove(run)
            raise SchedulerError("worker pool is shut down") from None

    def execute_in_thread(self, run: Run) -> None:
        """A manual run: on a thread of its own, outside the cap."""
        threading.Thread(target=self.execute, args=(run,), name="mjsched-execute", daemon=True).start()

    def _context_heartbeat(self, run: Run) -> bool:
        if run.state is not State.RUNNING:
            return False
        return self._keeper().renew([run.token]) and run.state is State.RUNNING

    # -- finish ----------------------------------------------------------------------------
    def execute(self, run: Run) -> None:
        """Run the driver, then finish: RUNNING -> COMPLETING, completion to the writer."""
        driver: BaseScheduledJob | None = None
        if run.state is not State.RUNNING:   # timed out or lost while it waited for a thread
            self._registry.thread_done(run)
            return
        try:
            log.debug("starting job %r (run %s)", run.job.name, run.run_id, extra={"action": "run_started"})
            result, driver = run_driver(run.context, self._allowed_drivers)
        except BaseException as exc:  # noqa: BLE001 - even KeyboardInterrupt from a driver: the run must end
            result = failure(exc)
        finally:
            self._registry.thread_done(run)
        self.finish(run, result, driver)

    def finish(self, run: Run, result: JobResult, driver: BaseScheduledJob | None) -> None:
        if not self._registry.transition(run, State.COMPLETING):
            log.warning("run %s of job %r returned after it was %s; its result is discarded", run.run_id,
                        run.job.name, run.state.value, extra={"action": "leaked_run_finished"})
            return
        status = RunStatus.COMPLETED if result.success else RunStatus.FAILED
        if run.cancel_request is not None:
            # an operator's cancel reached the run before it returned (noted under the lock
            # the transition above took): Cancelled, whatever the driver said
            status = RunStatus.CANCELLED
            result = JobResult(success=False, error_message=cancel_message(run.cancel_request, result.error_message),
                               details=result.details)
        elif not result.success and run.cancel_event.is_set():
            status = RunStatus.CANCELLED   # it gave up because the engine asked it to (shutdown)
        self._writer.submit(self.completion(run, status, result.error_message, result.details),
                            partial(self._completed, run, result, driver, status))

    def completion(self, run: Run, status: RunStatus, error: str | None,
                   details: dict[str, Any] | None) -> Completion:
        """The run's end, moving the schedule on only if nobody edited it since the claim; a Failed
        or Timeout attempt of a tick with a retry left also asks for the next attempt."""
        run.retry_in = retrying.retry_in(run, status)
        return Completion(run.run_id, run.token, status.value, error, details, self._next_run_of(run),
                          guard=True, expected_next_run_at=run.seen_next_run_at, retry_in=run.retry_in)

    def _next_run_of(self, run: Run) -> datetime | None:
        """Where the job's schedule goes when this run ends (None: leave it alone). A retry
        leaves it too: its tick's first attempt already moved it, and a tick that came due
        while the retry ran is still due, so a retry never costs a tick."""
        if run.manual or run.attempt > 1 or run.job.concurrency_mode is ConcurrencyMode.CONCURRENT:
            return None
        try:
            return scheduling.next_run_after(run.job, run.scheduled_for, self._clock.now(), run.catch_up)
        except Exception as exc:  # noqa: BLE001 - the run's outcome is still recorded; its next claim sets it aside
            log.error("job %r: cannot compute its next run: %s: %s", run.job.name, type(exc).__name__, exc)
            return None

    def _completed(self, run: Run, result: JobResult, driver: BaseScheduledJob | None,
                   status: RunStatus, outcome: bool | None) -> None:
        try:
            self._record_outcome(run, result, driver, status, outcome)
        finally:
            self._registry.remove(run)   # after the notification is handed over: execute_job waits for it
            self._wake()

    def _record_outcome(self, run: Run, result: JobResult, driver: BaseScheduledJob | None,
                        status: RunStatus, outcome: bool | None) -> None:
        elapsed_ms = int((time.monotonic() - run.started) * 1000)
        if outcome is False:
            self._stats["fenced_completions"] += 1
            log.warning("completion of run %s (job %r) was refused: its lease had been taken over or swept",
                        run.run_id, run.job.name, extra={"action": "completion_fenced"})
        if not outcome:
            run.notified.set()
            return
        self._listeners.run_finished(status.value, elapsed_ms / 1000.0)
        log.info("%s job %r (run %s) in %d ms%s", status.value.lower(), run.job.name, run.run_id,
                 elapsed_ms, f": {result.error_message}" if result.error_message else "",
                 extra={"action": "run_finished", "status": status.value})
        retried = retrying.announce(run, self._clock.now())
        if retried and run.job.notify_final_attempt_only:
            run.notified.set()   # not the final attempt: the failure notifies when no retry follows
        elif (result.success and run.job.notify_on_success) or (not result.success and run.job.notify_on_failure):
            self._side_work.submit(self._notify, run, result, driver, status, elapsed_ms)
        else:
            run.notified.set()

    def _notify(self, run: Run, result: JobResult, driver: BaseScheduledJob | None, status: RunStatus,
                elapsed_ms: int) -> None:
        """Format (driver code) and send (notifier code) off the completion writer's thread."""
        try:
            self._send_notification(run, result, driver, status, elapsed_ms)
        finally:
            run.notified.set()

    def _send_notification(self, run: Run, result: JobResult, driver: BaseScheduledJob | None,
                           status: RunStatus, elapsed_ms: int) -> None:
        context: ExecutionContext = run.context
        final = dataclasses.replace(context.run, status=status, success=result.success,
                                    error_message=result.error_message, details=result.details,
                                    duration_ms=elapsed_ms)
        try:
            notification = (driver or BaseScheduledJob()).format_notification(
                dataclasses.replace(context, run=final), result)
        except Exception as exc:  # noqa: BLE001 - a formatter bug must not lose the notice
            log.warning("format_notification of job %r failed (%s); using the default text", run.job.name, exc)
            notification = BaseScheduledJob().format_notification(dataclasses.replace(context, run=final), result)
        safe_notify(self._notifier(), run.job, final, notification, log)

    # -- time out, lose the lease (from the lease keeper) -----------------------------------
    def time_out(self, run: Run) -> None:
        """Past max_runtime: RUNNING -> TIMED_OUT, recorded Timeout; a thread still going is leaked."""
        if run.state is not State.RUNNING:
            return
        if run.thread_alive and not run.manual:
            self._pool.absorb_leak()   # before the slot is freed: new work never queues behind the stuck thread
        if not self._registry.transition(run, State.TIMED_OUT):
            return
        run.cancel_event.set()
        self._stats["timeouts"] += 1
        limit = effective_max_runtime(run.job, None) or 0
        message = f"exceeded max_runtime of {limit:g}s; cancelled"
        if run.thread_alive:
            log.warning("run %s of job %r timed out; its thread is still running and is counted as leaked "
                        "(%d leaked now)", run.run_id, run.job.name, self._registry.leaked,
                        extra={"action": "run_timed_out"})
        result = JobResult(success=False, error_message=message)
        self._writer.submit(self.completion(run, RunStatus.TIMEOUT, message, None),
                            partial(self._completed, run, result, None, RunStatus.TIMEOUT))

    def cancel_overdue(self, run: Run) -> None:
        """An operator's cancel not obeyed within the grace: RUNNING -> CANCELLED, recorded
        Cancelled; a thread still going is leaked (a process-isolated child was killed)."""
        if run.state is not State.RUNNING or run.cancel_request is None:
            return
        if run.thread_alive and not run.manual:
            self._pool.absorb_leak()   # before the slot is freed: new work never queues behind the stuck thread
        if not self._registry.transition(run, State.CANCELLED):
            return
        message = cancel_message(run.cancel_request, "the run did not stop within the grace period; its thread "
                                 "is left running")
        log.warning("run %s of job %r ignored its cancel; recorded Cancelled, its thread is counted as leaked "
                    "(%d leaked now)", run.run_id, run.job.name, self._registry.leaked,
                    extra={"action": "run_cancel_overdue"})
        result = JobResult(success=False, error_message=message)
        self._writer.submit(self.completion(run, RunStatus.CANCELLED, message, None),
                            partial(self._completed, run, result, None, RunStatus.CANCELLED))

    def lose(self, run: Run) -> None:
        """Its lease was taken over or abandoned: -> LOST, nothing more to write or notify."""
        if self._registry.transition(run, State.LOST, only_from=(State.RUNNING, State.COMPLETING)):
            run.cancel_event.set()
            self._stats["leases_lost"] += 1
            if run.thread_alive and not run.manual:
                self._pool.absorb_leak()
            run.notified.set()       # a lost run sends no notification
            self._registry.remove(run)
            self._wake()

    # -- hand back (close) -----------------------------------------------------------------
    def hand_back_held(self) -> None:
        """Runs still executing at close are recorded Cancelled and their locks released, in
        one fenced call, so no lock outlives the engine; a thread that returns later finds its
        run lost and its result is discarded (logged)."""
        left = [run for run in self._registry.busy()
                if self._registry.transition(run, State.LOST, only_from=(State.RUNNING,))]
        if not left:
            return
        items = [self.completion(run, RunStatus.CANCELLED,
                                 "the engine closed while the run was still executing; handed back", None)
                 for run in left]
        for run in left:
            run.notified.set()
            self._registry.remove(run)
        try:
            done = self._backend.complete_job_runs(items)
        except SchedulerError as exc:
            log.error("close: could not hand back %d run(s) (%s); their leases will lapse", len(items), exc,
                      extra={"action": "hand_back_failed"})
            return
        log.warning("closed with %d run(s) still executing: %d recorded Cancelled and their locks released",
                    len(items), sum(1 for ok in done.values() if ok), extra={"action": "handed_back_at_close"})
