"""Start-up and housekeeping steps: install check, schedules for new jobs, the
permission probe and the high-frequency warning. Each warns; none crashes the engine."""
from __future__ import annotations

import logging

from . import scheduling, sqlfiles
from .backends.base import Backend
from .clock import DbClock
from .drivers.registry import get_driver
from .errors import SchedulerError, SchemaNotInstalled
from .models import Job

log = logging.getLogger("mjsched.engine")


class Housekeeping:
    def __init__(self, backend: Backend, clock: DbClock) -> None:
        self._backend = backend
        self._clock = clock
        self._high_frequency_warned: set[str] = set()

    def check_installed(self) -> None:
        have = set(self._backend.installed_versions())
        missing = [s.name for s in sqlfiles.scripts(self._backend.dialect) if s.name not in have]
        if missing:
            raise SchemaNotInstalled(f"schema scripts not installed: {', '.join(missing)}; "
                                     "call engine.install() or run `mjsched init-db`")

    def schedule_unscheduled(self) -> None:
        """Give a next_run_at to Active jobs without one (new, resumed, or edited by plain SQL)."""
        jobs = self._backend.unscheduled_jobs()
        if not jobs:
            return
        now = self._backend.db_now()
        self._clock.observe(now)
        for job in jobs:
            try:
                nxt = scheduling.initial_next_run(job, now)
            except SchedulerError as exc:
                log.error("job %r (%s) has an unusable schedule and will not run: %s", job.name, job.id, exc,
                          extra={"action": "bad_schedule"})
                continue
            if self._backend.initialize_next_run(job.id, nxt):
                log.info("scheduled job %r: next run %s", job.name, nxt.isoformat(), extra={"action": "scheduled"})
        self.warn_high_frequency(jobs)

    def probe_permissions(self) -> None:
        try:
            missing = self._backend.probe_permissions()
        except Exception as exc:  # noqa: BLE001 - the probe must never stop start-up
            log.warning("permission probe failed (continuing): %s", exc, extra={"action": "probe_failed"})
            return
        if missing:
            log.error("the database role lacks EXECUTE on: %s. Job dispatch WILL fail until it is granted "
                      "(see sql/%s/grants.sql)", ", ".join(missing), self._backend.dialect,
                      extra={"action": "probe_missing_execute"})

    def warn_high_frequency(self, jobs: list[Job]) -> None:
        """Once per job per process, unless its driver is high-frequency by design."""
        for job in jobs:
            if job.id in self._high_frequency_warned:
                continue
            try:
                if getattr(get_driver(job.driver), "high_frequency_by_design", False):
                    continue
                gap = scheduling.is_high_frequency(job, self._clock.now())
            except SchedulerError:
                continue
            self._high_frequency_warned.add(job.id)
            if gap is not None:
                log.warning("job %r (cron %r, %s) fires every %s, more often than every 5 minutes; each run is a "
                            "database round trip and a history row. This is a recommendation, not a block.",
                            job.name, job.cron_expression, job.timezone, gap, extra={"action": "high_frequency"})
