"""Start-up and housekeeping steps: install check, the set-aside report of an upgrade, locks of
gone engines of this host, marking this engine stopped, schedules for new jobs, the permission
probe, the high-frequency warning and the run-history purge. Each warns; none crashes the engine."""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Sequence

from .. import scheduling, sqlfiles
from ..backends.base import Backend, UnscheduledJob
from ..clock import DbClock
from ..drivers.registry import get_driver
from ..errors import SchedulerError, SchemaNotInstalled
from ..models import Job, RunStatus
from ..privileges import split_missing
from .log_once import JobReports, LogOnce
from .set_aside import SetAside

if TYPE_CHECKING:
    from .alerting import AlertWatcher
    from .retention import RunPurger

log = logging.getLogger(__name__)

# Jobs per reschedule page: one fetch and one initialize_next_runs call. Below the 5,000 locks
# at which SQL Server escalates a statement's row locks to a table lock (claims would wait).
RESCHEDULE_PAGE = 2_000
# Seconds of rescheduling per poll; the poller comes straight back for the rest.
RESCHEDULE_BUDGET_SECONDS = 0.5
# Jobs per note_frequency_warned call (one statement each; the start-up query hands over at
# most 1,000 jobs per schedule).
NOTE_PAGE = 1_000
# What the high-frequency warning means and how to silence it; the log line points here.
HIGH_FREQUENCY_DOC = "docs/guide/time.md#high-frequency"
SET_ASIDE_BY = "mjsched install"   # executed_by_instance of the Failed run a schema upgrade records


def frequency_key(schedule: str, zone: str) -> str:
    """The schedule a high-frequency warning is remembered for (scheduled_job.frequency_warned;
    note_frequency_warned and the start-up query build the same text): ``schedule`` is the
    cron expression or 'every <n>s' (schedules.schedule_text); a new schedule or timezone is
    warned about once more."""
    return f"{schedule} | {zone}"


def _seconds(gap: timedelta) -> str:
    seconds = gap.total_seconds()
    return f"{seconds:g}s" if seconds < 60 else f"{seconds / 60:g}min"


def process_alive(pid: int) -> bool:
    """True when a process with this pid exists on this host (signal 0 probes, sends nothing)."""
    if pid <= 0:
        return True     # 0 and negatives name process groups: nothing to probe
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True     # it exists, owned by someone else (or cannot be probed: assume alive)
    return True


class Housekeeping:
    def __init__(self, backend: Backend, clock: DbClock, purger: "RunPurger | None" = None,
                 alerts: "AlertWatcher | None" = None) -> None:
        self._backend = backend
        self._clock = clock
        self._purger = purger
        self._alerts = alerts
        self._verdicts: dict[tuple[str, str, str], timedelta | None] = {}   # (cron, zone, driver) -> gap
        self._warned: set[tuple[str, str]] = set()   # (job id, schedule key) warned about by this process
        self._said = LogOnce(limit=10_000)   # schedule keys this engine logged the warning for
        self._sweeping = False            # a reschedule sweep is under way, at ids after _cursor
        self._sweep_again = False         # jobs changed during it: sweep once more after it
        self._cursor: str | None = None
        # what was reported about which job, and the jobs set aside: shared with the claim path
        # (the dispatcher), so a job is reported once whichever meets it first
        self.reports = JobReports()
        self.set_aside = SetAside(backend, self.reports)

    def purge_if_due(self) -> None:
        """Run-history retention: start a purge pass (on its own thread) when its interval has
        passed (engine/retention.py); called by every poll, costs nothing otherwise."""
        if self._purger is not None:
            self._purger.maybe_start()
        if self._alerts is not None:       # deadline alerts, likewise (engine/alerting.py)
            self._alerts.maybe_start()

    def check_installed(self) -> None:
        have = set(self._backend.installed_versions())
        missing = [s.name for s in sqlfiles.scripts(self._backend.dialect) if s.name not in have]
        if missing:
            raise SchemaNotInstalled(f"schema scripts not installed: {', '.join(missing)}; "
                                     "call engine.install() or run `mjsched init-db`")

    def schedule_unscheduled(self, budget: float = RESCHEDULE_BUDGET_SECONDS, restart: bool = False) -> bool:
        """Give a next_run_at to Active jobs without one (new, resumed, or edited by plain SQL).

        A sweep pages through them in id order, ``RESCHEDULE_PAGE`` jobs per page, one
        ``initialize_next_runs`` call per page, until none are left; it stops after the page
        that ends ``budget`` seconds and goes on from there at the next call, so a bulk edit
        of 50,000 jobs never holds a poll for long. A job whose schedule cannot be computed is
        reported once and passed over (the next page starts after it). ``restart``: jobs
        changed since the sweep under way began, so another sweep follows it (those it
        already passed may have lost their next_run_at). True when work is left: call again
        at once.
        """
        if restart and self._sweeping:
            self._sweep_again = True
        if not self._sweeping:
            self._sweeping, self._sweep_again, self._cursor = True, False, None
        deadline = time.monotonic() + budget
        while True:
            jobs = self._backend.unscheduled_jobs(limit=RESCHEDULE_PAGE, after=self._cursor)
            if jobs:
                self._cursor = jobs[-1].id
                self._schedule_page(jobs)
            if len(jobs) < RESCHEDULE_PAGE:
                self._sweeping = False
                return self._sweep_again
            if time.monotonic() >= deadline:
                return True

    def _schedule_page(self, jobs: list[UnscheduledJob]) -> None:
        """One page: the first due instant once per distinct schedule, one call to set them."""
        held = self.set_aside.still_undecodable([j.id for j in jobs])
        if held:
            jobs = [j for j in jobs if j.id not in held]
            if not jobs:
                return
        now = self._backend.db_now()
        self._clock.observe(now)
        groups: dict[tuple[object, ...], list[UnscheduledJob]] = {}
        for job in jobs:
            groups.setdefault(scheduling.initial_next_run_key(job), []).append(job)
        planned: list[tuple[UnscheduledJob, datetime]] = []
        for members in groups.values():
            try:
                nxt = scheduling.initial_next_run(members[0], now)
            except Exception as exc:  # noqa: BLE001 - one bad row must never stop the others
                self._report_unusable(members, exc)
                continue
            planned.extend((job, nxt) for job in members)
        initialized = self._backend.initialize_next_runs([(j.id, t) for j, t in planned]) if planned else 0
        if initialized and len(planned) == 1:
            log.info("scheduled job %r: next run %s", planned[0][0].name, planned[0][1].isoformat(),
                     extra={"action": "scheduled"})
        elif initialized:
            log.info("scheduled %d job(s) without a next run (%d distinct schedule(s)); next runs %s to %s",
                     initialized, len(groups), min(t for _, t in planned).isoformat(),
                     max(t for _, t in planned).isoformat(), extra={"action": "scheduled"})
        self.warn_high_frequency(jobs)

    def _report_unusable(self, jobs: list[UnscheduledJob], exc: BaseException) -> None:
        """Log jobs whose schedule cannot be computed, each once per (cron, timezone) it has."""
        fresh = [j for j in jobs if self.reports.first_unusable(j)]
        if not fresh:
            log.debug("%d job(s) with schedule %r still have an unusable schedule", len(jobs), jobs[0].schedule_text)
            return
        names = ", ".join(repr(j.name) for j in fresh[:5]) + (", ..." if len(fresh) > 5 else "")
        log.error("%d job(s) with schedule %r (%s) have an unusable schedule and will not run until it is fixed: "
                  "%s (%s)", len(fresh), jobs[0].schedule_text, jobs[0].timezone, exc, names,
                  extra={"action": "bad_schedule"})

    def probe_permissions(self) -> None:
        try:
            missing = self._backend.probe_permissions()
        except Exception as exc:  # noqa: BLE001 - the probe must never stop start-up
            log.warning("permission probe failed (continuing): %s", exc, extra={"action": "probe_failed"})
            return
        engine, admin = split_missing(missing)
        if engine:
            log.error("the database role lacks EXECUTE on: %s. Job dispatch WILL fail until it is granted "
                      "(grant the engine role of sql/%s/grants.sql)", ", ".join(engine), self._backend.dialect,
                      extra={"action": "probe_missing_execute"})
        elif admin:
            log.info("database role: engine (runs jobs; may not define them: %s are the admin role's)",
                     ", ".join(admin), extra={"action": "probe_role", "role": "engine"})
        else:
            log.info("database role: may run jobs and define them (owner or engine+admin); engines need "
                     "only the engine role (README, \"Trust model\")", extra={"action": "probe_role", "role": "all"})

    def warn_high_frequency(self, jobs: Sequence[Job | UnscheduledJob]) -> None:
        """Warn about jobs firing more often than every five minutes: each job is noted once per
        schedule ever (jobs that opted out, high_frequency_ok, or were noted for their present
        schedule, frequency_warned in the database, are passed over), and the log says it once
        per schedule and engine, however many jobs share it.
        Driver classes that are high-frequency by design are never warned about. Cheap enough
        for the claim path: verdicts are cached per (cron, zone, driver)."""
        groups: dict[tuple[str, str, str], list[Job | UnscheduledJob]] = {}
        for job in jobs:
            if job.run_at is not None:   # a one-off fires once: never high-frequency
                continue
            key = frequency_key(job.schedule_text, job.timezone)
            if job.high_frequency_ok or job.frequency_warned == key or (job.id, key) in self._warned:
                continue
            groups.setdefault((job.schedule_text, job.timezone, job.driver), []).append(job)
        for (cron, zone, driver), members in groups.items():
            if self._check_schedule(cron, zone, driver, members[0].name, len(members)):
                self._note_warned([(j.id, frequency_key(cron, zone)) for j in members])

    def warn_high_frequency_at_start(self) -> None:
        """The start-up check, over distinct schedules of jobs not warned for them yet (the
        query leaves out the others): no job is loaded into memory."""
        try:
            schedules = self._backend.active_schedules()
        except SchedulerError as exc:
            log.warning("high-frequency check skipped: %s", exc)
            return
        for row in schedules:
            cron, zone = row["schedule"], row["timezone"]
            if self._check_schedule(cron, zone, row["driver"], row["example"], int(row["jobs"])):
                key = frequency_key(cron, zone)
                self._note_warned([(str(i).lower(), key) for i in row.get("job_ids") or ()])

    def _note_warned(self, items: list[tuple[str, str]]) -> None:
        """Remember warnings, in this process and in the database (pages of NOTE_PAGE jobs); a
        failure costs a repeated warning at a later start, never the poll."""
        if len(self._warned) > 100_000:
            self._warned.clear()
        self._warned.update(items)
        for start in range(0, len(items), NOTE_PAGE):
            try:
                self._backend.note_frequency_warned(items[start:start + NOTE_PAGE])
            except Exception as exc:  # noqa: BLE001 - a warning not recorded is said again later
                log.debug("could not record the high-frequency warning of %d job(s): %s",
                          len(items[start:start + NOTE_PAGE]), exc)
                return

    def _check_schedule(self, cron: str, zone: str, driver: str, example: str, jobs: int) -> bool:
        """Warn when the schedule is high-frequency (and its driver not so by design); True when
        it was warned about."""
        key = (cron, zone, driver)
        if key not in self._verdicts:
            try:
                by_design = getattr(get_driver(driver), "high_frequency_by_design", False)
                gap = None if by_design else scheduling.schedule_gap(cron, zone, self._clock.now(), example)
            except Exception:  # noqa: BLE001 - an unusable schedule is reported where it is scheduled
                gap = None
            if len(self._verdicts) > 10_000:
                self._verdicts.clear()
            self._verdicts[key] = gap
        gap = self._verdicts[key]
        if gap is None:
            return False
        said = frequency_key(cron, zone)
        if self._said.first(said):
            others = f" (+{jobs - 1} more)" if jobs > 1 else ""
            log.warning("job %r%s fires every %s (%r, %s), under 5 min: see %s", example, others,
                        _seconds(gap), cron, zone, HIGH_FREQUENCY_DOC, extra={"action": "high_frequency"})
        return True

    def release_previous_engines(self, instance_name: str) -> None:
        """Locks left by an earlier engine of this host whose process is gone (or by this
        instance name after its clean stop) are released now, fenced, instead of blocking
        their jobs for the rest of a lease. Engines of this process are never touched."""
        host = socket.gethostname()
        try:
            holders = self._backend.engines_holding_locks(host)
        except SchedulerError as exc:
            log.warning("start-up: could not list engines of this host holding locks (%s)", exc)
            return
        for holder in holders:
            instance, pid = str(holder["instance"]), int(holder["pid"])
            if pid == os.getpid():
                continue
            stopped_cleanly = holder.get("stopped_at") is not None and instance == instance_name
            if process_alive(pid) and not stopped_cleanly:
                continue
            reason = (f"Abandoned: engine {instance} (pid {pid} on {host}) is gone; "
                      f"released at start-up by {instance_name}")
            try:
                runs, locks = self._backend.release_engine_locks(instance, reason)
            except SchedulerError as exc:
                log.warning("start-up: could not release the locks of engine %s (%s)", instance, exc)
                continue
            log.warning("start-up: engine %s (pid %d on this host) is gone: released %d lock(s), abandoned %d "
                        "run(s)", instance, pid, locks, runs, extra={"action": "previous_engine_released"})

    def report_set_aside(self, since: datetime) -> None:
        """Log, once (at the install that did it), each job the schema upgrade set aside:
        a row breaking a rule of 001_schema.sql is Disabled and gets a Failed run saying why."""
        try:   # Failed: a row set aside (001_schema); Skipped: a job renamed for its duplicate name (005)
            runs = [run for status in (RunStatus.FAILED, RunStatus.SKIPPED)
                    for run in self._backend.list_runs(None, status.value, 1000)]
        except SchedulerError as exc:
            log.warning("could not list the jobs the upgrade set aside: %s", exc)
            return
        for run in runs:
            if run.executed_by_instance == SET_ASIDE_BY and run.started_at is not None and run.started_at >= since:
                action = "job_renamed_duplicate" if run.status is RunStatus.SKIPPED else "job_set_aside"
                log.warning("job %s: %s", run.scheduled_job_id, run.error_message,
                            extra={"action": action, "job_id": run.scheduled_job_id})

    def unregister(self, instance_name: str, timeout: float | None) -> None:
        """Mark this engine stopped in the registry, best effort: a slow database never
        holds stop_polling() past its bound (the call finishes in the background)."""
        def go() -> None:
            try:
                self._backend.unregister_engine(instance_name)
            except SchedulerError as exc:
                log.warning("could not mark engine %s stopped: %s", instance_name, exc)
        worker = threading.Thread(target=go, name="mjsched-unregister", daemon=True)
        worker.start()
        worker.join(timeout)
