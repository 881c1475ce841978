"""Errors about one job, logged once: a bad row is met at every poll (claimed, or passed over
by the reschedule sweep), and a report per poll would drown the log.

The claim path and the reschedule sweep share one ``JobReports``, so a job is reported once
whichever meets it first. The memory is this process's, bounded (cleared when it grows past
its limit: a report said again is better than memory without end).
"""
from __future__ import annotations

from typing import Hashable

from ..backends.base import UnscheduledJob
from ..models import Job

LIMIT = 100_000   # keys remembered at most; past it the memory starts again


class LogOnce:
    """A bounded set of keys already logged."""

    def __init__(self, limit: int = LIMIT) -> None:
        self._limit = limit
        self._seen: set[Hashable] = set()

    def first(self, key: Hashable) -> bool:
        """True the first time ``key`` is met (remembered from now on), else False."""
        if key in self._seen:
            return False
        if len(self._seen) > self._limit:
            self._seen.clear()
        self._seen.add(key)
        return True


class JobReports:
    """Which jobs were reported unusable or refused. A job is reported again once what the
    report was about changes: a new cron or zone, a new driver or reason."""

    def __init__(self, limit: int = LIMIT) -> None:
        self._unusable = LogOnce(limit)   # (job id, schedule, zone)
        self._refused = LogOnce(limit)    # (job id, driver, reason)

    def first_unusable(self, job: Job | UnscheduledJob) -> bool:
        """True the first time ``job`` is reported unusable with its present schedule and zone."""
        return self._unusable.first((job.id, job.schedule_text, job.timezone))

    def first_refusal(self, job: Job, reason: str) -> bool:
        """True the first time ``job`` is refused for ``reason`` (its driver or configuration)."""
        return self._refused.first((job.id, job.driver, reason))
