"""Schedule decisions as pure functions of the times they are given.

The database decides who runs a tick; this module decides which tick comes
next and what a late tick means (the missed-run policy). Nothing here reads a
clock: callers pass the database's time.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from .cron import CronSchedule
from .models import ConcurrencyMode, Job, MissedRunPolicy

log = logging.getLogger(__name__)

HIGH_FREQUENCY_THRESHOLD = timedelta(minutes=5)
_EPSILON = timedelta(microseconds=1)


def schedule_of(job: Job) -> CronSchedule:
    return CronSchedule.parse(job.cron_expression, job.timezone)


def initial_next_run(job: Job, now: datetime) -> datetime:
    """First due instant of a job that has none (see ``first_due``)."""
    return first_due(schedule_of(job), now, start_at=job.start_at,
                     run_immediately=job.run_immediately_if_never_run,
                     never_ran=job.last_run_at is None and job.run_count == 0)


def first_due(schedule: CronSchedule, now: datetime, *, start_at: datetime | None,
              run_immediately: bool, never_ran: bool) -> datetime:
    """Now, for a job that asks to run immediately and never ran; else its first
    tick after now, and never before ``start_at``."""
    if run_immediately and never_ran:
        return max(now, start_at) if start_at else now
    after = now
    if start_at is not None and start_at - _EPSILON > after:
        after = start_at - _EPSILON
    return schedule.next_after(after)


@dataclass(frozen=True)
class TickPlan:
    """What to do with a claimed tick.

    ``run`` False: record it as Skipped. ``catch_up``: the next tick to serve is the
    one after this tick (RunAll backlog), not the first one after completion.
    ``missed``: how many ticks after this one had already passed at claim time.
    """

    run: bool
    catch_up: bool
    missed: int
    note: str | None = None


def plan_tick(job: Job, scheduled_for: datetime, db_now: datetime, max_catch_up: int) -> TickPlan:
    """Apply the missed-run policy to a tick claimed at ``db_now``.

    A tick is *missed* when the tick after it had also come by the time it was
    claimed (no engine ran it in time). A tick that came while the job was still
    running never reaches here: the concurrency mode governs it.
    """
    if job.concurrency_mode is ConcurrencyMode.CONCURRENT:
        return TickPlan(run=True, catch_up=False, missed=0)
    later = schedule_of(job).ticks_between(scheduled_for, db_now, limit=max_catch_up + 1)
    missed = len(later)
    if missed == 0:
        return TickPlan(run=True, catch_up=False, missed=0)
    policy = job.missed_run_policy
    if policy is MissedRunPolicy.SKIP:
        return TickPlan(run=False, catch_up=False, missed=missed,
                        note=f"missed-run policy Skip: {_count(missed, max_catch_up)} tick(s) passed "
                             f"while no engine ran this job since {scheduled_for.isoformat()}")
    if policy is MissedRunPolicy.RUN_ALL:
        if missed <= max_catch_up:
            return TickPlan(run=True, catch_up=True, missed=missed)
        return TickPlan(run=True, catch_up=False, missed=missed,
                        note=f"missed-run policy RunAll: more than {max_catch_up} missed ticks; "
                             "running once now instead (raise max_catch_up_runs to replay more)")
    return TickPlan(run=True, catch_up=False, missed=missed)


def _count(missed: int, limit: int) -> str:
    return f"more than {limit}" if missed > limit else str(missed)


def next_run_after(job: Job, scheduled_for: datetime | None, now: datetime, catch_up: bool) -> datetime:
    """The next due instant once a tick is served (or skipped) at ``now``.

    Normal case: the first tick after ``now`` (ticks that came while the job ran are
    dropped: Skip mode; Queue mode keeps them as Queued runs). RunAll catch-up: the
    tick right after the one served, even if it is already past.
    """
    schedule = schedule_of(job)
    if catch_up and scheduled_for is not None:
        return schedule.next_after(scheduled_for)
    base = now if scheduled_for is None else max(now, scheduled_for)
    return schedule.next_after(base)


def is_high_frequency(job: Job, now: datetime) -> timedelta | None:
    """The job's shortest gap between fires when it is under five minutes, else None."""
    gap = schedule_of(job).min_interval(after=now)
    return gap if gap < HIGH_FREQUENCY_THRESHOLD else None
