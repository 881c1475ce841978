"""The engine's side of retries: which policy a run follows, and what its completion asks for.

The database records the next attempt (complete_items, in the failure's own transaction)
and claims it when due; the engine only draws the delay from the policy, since the
driver's default policy is Python (``BaseScheduledJob.retry``). What is retried: a
Failed or Timeout attempt of a tick. Not retried: Completed, Cancelled (someone asked it
to stop), Skipped, Abandoned (the engine died or lost the lease: the run may still be
executing somewhere, and no engine is there to draw the delay), and manual runs
(``execute_job`` hands the failure to its caller).
"""
from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Protocol

from ..drivers.registry import get_driver
from ..errors import SchedulerError
from ..models import Job, RunStatus
from ..retry import RetryPolicy

log = logging.getLogger(__name__)

RETRIED_STATUSES = (RunStatus.FAILED, RunStatus.TIMEOUT)


class RetriedRun(Protocol):
    """What retries read of a run (``engine.run.Run``): its tick and attempt, and the delay
    its completion recorded."""
    @property
    def job(self) -> Job: ...
    @property
    def manual(self) -> bool: ...
    @property
    def scheduled_for(self) -> datetime | None: ...
    @property
    def attempt(self) -> int: ...
    @property
    def retry_in(self) -> float | None: ...


def effective_policy(job: Job) -> RetryPolicy | None:
    """The job's own policy, else its driver's ``retry`` class attribute, else None."""
    own = job.retry
    if own is not None:
        return own
    try:
        default = getattr(get_driver(job.driver), "retry", None)
    except SchedulerError:
        return None
    return default if isinstance(default, RetryPolicy) else None


def retry_in(run: RetriedRun, status: RunStatus) -> float | None:
    """Seconds until the next attempt of ``run``'s tick, or None when none follows."""
    if status not in RETRIED_STATUSES or run.manual or run.scheduled_for is None:
        return None
    policy = effective_policy(run.job)
    if policy is None or not policy.retries_left(run.attempt):
        return None
    return policy.delay(run.attempt)


def announce(run: RetriedRun, now: datetime) -> bool:
    """Log the retry that ``run``'s completion recorded; False when none was (then this was
    the tick's final attempt). A retry due at or after the job's end_at is recorded Skipped
    by the database, so it is not announced (the estimate uses the engine's database clock)."""
    if run.retry_in is None:
        return False
    due = now + timedelta(seconds=run.retry_in)
    if run.job.end_at is not None and due >= run.job.end_at:
        log.warning("job %r: attempt %d of tick %s failed; no retry: it would be due after the job's end_at (%s)",
                    run.job.name, run.attempt, run.scheduled_for, run.job.end_at.isoformat(),
                    extra={"action": "retry_dropped", "job_id": run.job.id})
        return False
    policy = effective_policy(run.job)
    log.info("job %r: attempt %d of tick %s failed; attempt %d of %s in %.1f s", run.job.name, run.attempt,
             run.scheduled_for, run.attempt + 1, policy.max_attempts if policy else "?", run.retry_in,
             extra={"action": "retry_scheduled", "job_id": run.job.id, "attempt": run.attempt + 1})
    return True
