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
        self._verdicts: dict[tuple[str, str, str], bool] = {}   # (cron, zone, driver) -> warned

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
        """Warn about jobs firing more often than every five minutes (once per schedule
        per process), unless their driver is high-frequency by design. Cheap enough for
        the claim path: verdicts are cached per (cron, zone, driver)."""
        for job in jobs:
            self._check_schedule(job.cron_expression, job.timezone, job.driver, job.name, 1)

    def warn_high_frequency_at_start(self) -> None:
        """The start-up check, over distinct schedules: no job is loaded into memory."""
        try:
            schedules = self._backend.active_schedules()
        except SchedulerError as exc:
            log.warning("high-frequency check skipped: %s", exc)
            return
        for row in schedules:
            self._check_schedule(row["cron_expression"], row["timezone"], row["driver"], row["example"],
                                 int(row["jobs"]))

    def _check_schedule(self, cron: str, zone: str, driver: str, example: str, jobs: int) -> None:
        key = (cron, zone, driver)
        if key in self._verdicts:
            return
        try:
            by_design = getattr(get_driver(driver), "high_frequency_by_design", False)
            gap = None if by_design else scheduling.schedule_gap(cron, zone, self._clock.now())
        except SchedulerError:
            gap = None
        if len(self._verdicts) > 10_000:
            self._verdicts.clear()
        self._verdicts[key] = gap is not None
        if gap is not None:
            others = f" (and {jobs - 1} other job(s) with this schedule)" if jobs > 1 else ""
            log.warning("job %r%s (cron %r, %s) fires every %s, more often than every 5 minutes; each run is a "
                        "database round trip and a history row. This is a recommendation, not a block.",
                        example, others, cron, zone, gap, extra={"action": "high_frequency"})
