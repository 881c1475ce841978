"""Jobs set aside: Active, but no engine will run them, because their schedule cannot be computed.

Plain SQL can write a cron, a zone or an instant that no engine can schedule. A claim of such
a job sets it aside (its next_run_at cleared, the claimed run Skipped with the reason); the
reschedule sweep passes over one that never had a next run. Either way the row is left Active
without a next_run_at, and is logged once (``job_set_aside``, ``bad_schedule``). This module
lists them for ``mjsched status`` and the dashboard, recomputed from the rows by the code that
schedules them, rather than recorded a second time: a read both dialects already have, true
after any restart, and empty again as soon as the definition is fixed.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import scheduling
from .backends.base import Backend

PAGE = 2_000          # rows per read of Active jobs without a next run
MAX_SCANNED = 20_000  # a status read looks at no more rows than this (a bulk edit may leave many unscheduled)


@dataclass(frozen=True)
class SetAsideJob:
    """A job no engine will run until its definition changes, and why (the scheduler's error)."""

    id: str
    name: str
    driver: str
    schedule: str
    timezone: str
    reason: str


def set_aside_jobs(backend: Backend, *, limit: int = 100) -> list[SetAsideJob]:
    """At most ``limit`` set-aside jobs, by id: Active jobs without a next run whose first due
    instant cannot be computed now (a job merely waiting for its first schedule is not one)."""
    now = backend.db_now()
    found: list[SetAsideJob] = []
    after: str | None = None
    scanned = 0
    while len(found) < limit and scanned < MAX_SCANNED:
        page = backend.unscheduled_jobs(limit=PAGE, after=after)
        scanned += len(page)
        for job in page:
            try:
                scheduling.initial_next_run(job, now)
            except Exception as exc:  # noqa: BLE001 - whatever the row makes the computation raise
                found.append(SetAsideJob(job.id, job.name, job.driver, job.schedule_text, job.timezone,
                                         f"{type(exc).__name__}: {exc}"))
        if len(page) < PAGE:
            break
        after = page[-1].id
    return found[:limit]
