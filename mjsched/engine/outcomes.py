"""What follows a run's written end: the log line, the listeners, the retry notice, the notification.

Called on the completion writer's thread once the database has answered for the run;
the notification itself (driver code formats it, notifier code sends it) goes to the
background tasks, so a slow notifier never holds up the next completion batch.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Callable, Protocol

from ..clock import DbClock
from ..drivers.base import BaseScheduledJob, ExecutionContext, JobResult
from ..models import RunStatus
from ..notify import Notifier, safe_notify
from . import retrying
from .background import BackgroundTasks
from .listeners import Listeners
from .stats import EngineStats

log = logging.getLogger(__name__)


class Flag(Protocol):
    """Set once something the run owes is done (its notification)."""
    def set(self) -> None: ...


class FinishedRun(retrying.RetriedRun, Protocol):
    """What the outcome of a run's written end reads of it (``engine.run.Run``)."""
    @property
    def run_id(self) -> str: ...
    @property
    def started(self) -> float: ...      # time.monotonic() when it began
    @property
    def context(self) -> Any: ...        # its ExecutionContext (the notification's run record)
    @property
    def notified(self) -> Flag: ...


class Outcomes:
    def __init__(self, *, stats: EngineStats, listeners: Listeners, clock: DbClock,
                 side_work: BackgroundTasks, notifier: Callable[[], Notifier]) -> None:
        self._stats = stats
        self._listeners = listeners
        self._clock = clock
        self._side_work = side_work
        self._notifier = notifier     # read at each notification: the facade's notifier may be replaced

    def record(self, run: FinishedRun, result: JobResult, driver: BaseScheduledJob | None, status: RunStatus,
               outcome: bool | None) -> None:
        """``outcome``: True written, False refused (the lease was taken over: fenced), None
        not written at all (the writer gave up; its lease lapses)."""
        elapsed_ms = int((time.monotonic() - run.started) * 1000)
        if outcome is False:
            self._stats.bump("fenced_completions")
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

    def _notify(self, run: FinishedRun, result: JobResult, driver: BaseScheduledJob | None, status: RunStatus,
                elapsed_ms: int) -> None:
        try:
            self._send_notification(run, result, driver, status, elapsed_ms)
        finally:
            run.notified.set()

    def _send_notification(self, run: FinishedRun, result: JobResult, driver: BaseScheduledJob | None,
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
