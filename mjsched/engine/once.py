"""One pass for scripts and system-cron setups: claim what is due now, wait for those runs.

The database clock decides what is due, as it does for the poll loop: a caller-given
"evaluation time" would let two hosts disagree about which tick is due and would bypass the
per-tick uniqueness the claims rely on. Previews (``next_run_times(after=...)``) take a time.
"""
from __future__ import annotations

import logging
import time
from typing import Callable

from ..backends.base import Backend
from ..errors import ConfigurationError, SchedulerError
from ..models import DispatchResult, JobRun
from .background import BackgroundTasks
from .run import RunRegistry

log = logging.getLogger(__name__)

NOTIFY_WAIT_SECONDS = 5.0   # after the runs, wait at most this long for their notifications to go out
QUEUE_RETRY_SECONDS = 1.0   # after a failed attempt to keep Queue ticks, try again this much later


def check_timeout(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0 \
            or timeout == float("inf"):
        raise ConfigurationError("timeout", timeout, "must be a finite number of seconds >= 0, or None")
    return float(timeout)


class DuePass:
    """``run_due_jobs``: claim pass after pass while due work waits for a slot, then wait."""

    def __init__(self, *, dispatch: Callable[[bool], DispatchResult], keep_queue_ticks: Callable[[], float],
                 registry: RunRegistry, backend: Backend, side_work: BackgroundTasks, cap: int) -> None:
        self._dispatch = dispatch
        self._keep_queue_ticks = keep_queue_ticks
        self._registry = registry
        self._backend = backend
        self._side_work = side_work
        self._cap = cap

    def run(self, timeout: float | None) -> list[JobRun]:
        """Runs started by this pass, as they are when they finished or the timeout came (a run
        still going is returned Running and goes on until ``close()`` hands it back)."""
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())
        started: list[str] = []
        sweep = True
        while True:
            result = self._dispatch(sweep)
            sweep = False
            started += result.run_ids
            if not result.due_left_waiting:
                break    # nothing due is left waiting for a slot
            if not self._registry.wait_free_slot(self._cap, left()):
                log.warning("run_due_jobs: %d due run(s) still waiting for a slot at the timeout; not started",
                            result.due_left_waiting, extra={"action": "due_left_at_timeout"})
                break
        finished = self._wait_for(started, left)
        remaining = left()   # their notifications are out before a script exits (a hung notifier: bounded)
        self._side_work.flush(NOTIFY_WAIT_SECONDS if remaining is None else min(NOTIFY_WAIT_SECONDS, remaining))
        runs = [run for run in (self._backend.get_run(run_id) for run_id in started) if run is not None]
        log.info("run_due_jobs: %d run(s) started, %d finished%s", len(started),
                 sum(1 for r in runs if r.finished), "" if finished else " (timeout: the rest still running)",
                 extra={"action": "due_pass_done"})
        return runs

    def _wait_for(self, started: list[str], left: Callable[[], float | None]) -> bool:
        """Wait until the runs are gone (True) or the timeout came (False). Meanwhile each Queue
        tick that comes due while its job runs is kept as a Queued run, as the poll loop keeps
        it: a script's pass must not turn Queue mode into Skip."""
        while True:
            try:
                step = self._keep_queue_ticks()
            except SchedulerError as exc:   # the database failed for a moment: the runs go on
                log.warning("run_due_jobs: could not keep Queue ticks (%s); trying again in %.0f s", exc,
                            QUEUE_RETRY_SECONDS, extra={"action": "queue_ticks_failed"})
                step = QUEUE_RETRY_SECONDS
            remaining = left()
            if self._registry.wait_all_gone(started, step if remaining is None else min(step, remaining)):
                return True
            if left() == 0:
                return False
