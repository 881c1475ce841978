"""The public facade: job CRUD, polling, manual execution.

The engine is thin on purpose: the procedures decide who runs what; this class
wires the poll loop, the capped pool, the lease keeper and the completion
writer around them, and turns results into rows and notifications.
"""
from __future__ import annotations

import atexit
import dataclasses
import logging
import os
import socket
import threading
import time
import uuid
import weakref
from datetime import datetime
from functools import partial
from typing import Any, Iterable

from .. import scheduling, validation
from .background import BackgroundTasks
from ..backends.base import Backend, Completion, Listener, SweepResult, open_backend
from ..backends.watchdog import call_timeout_for_lease
from ..clock import DbClock
from .completions import CompletionWriter
from ..cron import CronSchedule
from .runs import InFlight, InFlightRegistry, State, WorkerPool
from ..drivers.base import BaseScheduledJob, ExecutionContext, JobResult
from ..drivers.registry import allowed_driver_names, get_driver
from ..errors import ConfigurationError, JobNotActive, JobNotFound, LockNotAcquired, SchedulerError
from ..execution import effective_max_runtime, failure, run_driver
from .leases import LeaseKeeper
from ..models import ConcurrencyMode, DispatchResult, Job, JobRun, JobStatus, RunStatus
from ..notify import LoggingNotifier, Notifier, safe_notify
from .poller import Poller
from .housekeeping import Housekeeping
from ..version import __version__

log = logging.getLogger(__name__)

SCHEDULE_REFRESH_SECONDS = 5.0
SET_ASIDE_BY = "mjsched install"   # executed_by_instance of the Failed run a schema upgrade records
MANUAL_NOTIFY_WAIT_SECONDS = 5.0    # execute_job waits at most this long for its run's notification
CLOSE_GRACE_SECONDS = 5.0   # close(): how long cancelled runs may take to return and be recorded

# Engines not closed yet: at interpreter exit each is closed, so what it holds is handed back.
_open_engines: "weakref.WeakSet[SchedulingEngine]" = weakref.WeakSet()


@atexit.register
def _close_open_engines() -> None:
    for engine in list(_open_engines):
        try:
            engine.close()
        except Exception as exc:  # noqa: BLE001 - exit must go on
            log.warning("closing engine %s at exit failed: %s", engine.instance_name, exc)


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


class SchedulingEngine:
    """Runs cron-scheduled jobs stored in a database, safely alongside other engines.

    ``max_concurrent_jobs`` is a hard cap on runs executing in this engine;
    ``lease_timeout`` (seconds) is how long a claimed run stays ours without a
    heartbeat. See README "Tuning the cap and the lease".
    """

    def __init__(self, dsn: str | None = None, max_concurrent_jobs: int = 5, lease_timeout: float = 600.0,
                 instance_name: str | None = None, notifier: Notifier | None = None, *,
                 min_poll_interval: float = 0.005, max_poll_interval: float = 10.0,
                 max_catch_up_runs: int = 100, heartbeat_interval: float | None = None,
                 completion_batch_window: float = 0.002, backend: Backend | None = None,
                 allowed_drivers: Iterable[str] | str | None = None,
                 **backend_options: Any) -> None:
        self.max_concurrent_jobs = validation.positive_int("max_concurrent_jobs", max_concurrent_jobs)
        # Drivers this engine runs (None: all); a job of another driver ends Failed here (README "Trust model").
        self.allowed_drivers = allowed_driver_names(allowed_drivers)
        self.lease_timeout = float(validation.positive_number("lease_timeout", lease_timeout, optional=False)
                                   or 0)
        self.max_poll_interval = float(validation.positive_number("max_poll_interval", max_poll_interval,
                                                                  optional=False) or 0)
        self.min_poll_interval = float(validation.positive_number("min_poll_interval", min_poll_interval,
                                                                  optional=False) or 0)
        if self.min_poll_interval > self.max_poll_interval:
            raise ConfigurationError("min_poll_interval", min_poll_interval, "must not exceed max_poll_interval")
        self.max_catch_up_runs = validation.positive_int("max_catch_up_runs", max_catch_up_runs, maximum=100_000)
        if heartbeat_interval is not None:
            validation.positive_number("heartbeat_interval", heartbeat_interval, optional=False)
            if heartbeat_interval > self.lease_timeout / 3:
                raise ConfigurationError("heartbeat_interval", heartbeat_interval,
                                         f"must renew at least three times per lease (<= {self.lease_timeout / 3:g})")
        self.instance_name = validation.text("instance_name", instance_name, limit=255) or \
            f"{socket.gethostname()}-{os.getpid()}"
        if notifier is not None and not callable(getattr(notifier, "notify", None)):
            raise ConfigurationError("notifier", notifier, "must have a notify(job, run, notification) method")
        self.notifier: Notifier = notifier or LoggingNotifier()
        backend_options.setdefault("pool_size", self.max_concurrent_jobs + 4)
        # Every call is bounded relative to the lease (README "Timeouts and half-open connections")
        backend_options.setdefault("call_timeout", call_timeout_for_lease(
            self.lease_timeout, float(backend_options.get("statement_timeout", 60.0))))
        backend_options.setdefault("retry_max_delay", max(backend_options["call_timeout"],
                                                          min(15.0, self.lease_timeout / 2)))
        if backend is None and not dsn:
            raise ConfigurationError("dsn", dsn, "a database URL is required (postgresql://... or mssql://...)")
        self.backend: Backend = backend or open_backend(str(dsn), **backend_options)

        self._registry = InFlightRegistry(on_slot_freed=self._slot_freed)
        self._pool = WorkerPool(self.max_concurrent_jobs)
        self._side_work = BackgroundTasks()    # notifications: never on the completion writer's thread
        self._writer = CompletionWriter(self.backend, batch_window=completion_batch_window,
                                        give_up_after=self.lease_timeout + 60)
        self._keeper = LeaseKeeper(self.backend, self._registry, instance=self.instance_name,
                                   lease_seconds=self.lease_timeout, interval=heartbeat_interval,
                                   on_timeout=self._time_out, on_lost=self._lost)
        self._poller = Poller(self._poll, min_interval=self.min_poll_interval,
                              max_interval=self.max_poll_interval)
        self._clock = DbClock(self.backend.db_now)
        self._dispatch_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._accepting = True          # False once stop_polling began: no new dispatches
        self._accept_lock = threading.Lock()   # a claim becomes a run only while accepting, under this lock
        self._polling = False
        self._listener_stop = threading.Event()
        self._listener_thread: threading.Thread | None = None
        # (claim id, claims already started) of a claim whose reply or handling failed
        self._unanswered_claim: tuple[str, set[str]] | None = None
        self._listener: Listener | None = None
        self._schedule_dirty = True
        self._schedule_more = False     # a reschedule sweep has pages left: poll again at once
        self._schedule_checked = 0.0
        self._last_sweep = 0.0
        self._housekeeping = Housekeeping(self.backend, self._clock)
        self._closed = False
        _open_engines.add(self)
        self.stats = {"dispatched": 0, "timeouts": 0, "leases_lost": 0, "fenced_completions": 0}
        self._listeners: list[Any] = []

    # -- schema ----------------------------------------------------------------------
    def install(self) -> list[str]:
        """Create or upgrade tables and procedures; safe from several engines at once."""
        started = self.backend.db_now()
        applied = self.backend.install()
        if applied:
            log.info("installed mjsched schema scripts: %s", ", ".join(applied), extra={"action": "install"})
        if "001_schema" in applied:
            self._report_set_aside(started)
        return applied

    def _report_set_aside(self, since: datetime) -> None:
        """Log, once (at the install that did it), each job the schema upgrade set aside:
        a row breaking a rule of 001_schema.sql is Disabled and gets a Failed run saying why."""
        try:
            runs = self.backend.list_runs(None, RunStatus.FAILED.value, 1000)
        except SchedulerError as exc:
            log.warning("could not list the jobs the upgrade set aside: %s", exc)
            return
        for run in runs:
            if run.executed_by_instance == SET_ASIDE_BY and run.started_at is not None and run.started_at >= since:
                log.warning("job %s: %s", run.scheduled_job_id, run.error_message,
                            extra={"action": "job_set_aside", "job_id": run.scheduled_job_id})

    # -- jobs --------------------------------------------------------------------------
    def create_job(self, name: str, driver: str, cron: str, timezone: str = "UTC",
                   configuration: dict[str, Any] | None = None, **fields: Any) -> str:
        """Validate everything, then insert the job; returns its id (a UUID string)."""
        values = validation.job_fields({"name": name, "driver": driver, "cron": cron, "timezone": timezone,
                                        "configuration": configuration, **fields}, creating=True)
        driver_name = values.pop("driver")
        driver_cls = get_driver(driver_name)
        values["job_type_id"] = self.backend.ensure_job_type(driver_name, driver_cls.isolation,
                                                             driver_cls.default_max_runtime)
        if values["status"] == JobStatus.ACTIVE.value:
            schedule = CronSchedule.parse(values["cron_expression"], values["timezone"])
            values["next_run_at"] = scheduling.first_due(
                schedule, self.backend.db_now(), start_at=values.get("start_at"),
                run_immediately=values.get("run_immediately_if_never_run", False), never_ran=True)
        job_id = self.backend.insert_job(values)
        log.info("created job %r (%s), driver %s, cron %r %s", values["name"], job_id, driver_name,
                 values["cron_expression"], values["timezone"], extra={"action": "job_created"})
        return job_id

    def get_job(self, job_id: str) -> Job:
        job = self.backend.get_job(validation.job_id(job_id))
        if job is None:
            raise JobNotFound(job_id)
        return job

    def list_jobs(self, status: str | None = None) -> list[Job]:
        if status is not None:
            status = validation.enum_value("status", status, JobStatus).value
        return self.backend.list_jobs(status)

    def update_job(self, job_id: str, **fields: Any) -> Job:
        """Change fields of a job; a new schedule takes effect from its next tick."""
        current = self.get_job(job_id)
        values = validation.job_fields(fields, creating=False, current=dataclasses.asdict(current))
        if "driver" in values:
            driver_cls = get_driver(values["driver"])
            values["job_type_id"] = self.backend.ensure_job_type(values["driver"], driver_cls.isolation,
                                                                 driver_cls.default_max_runtime)
            del values["driver"]
        status = values.get("status", current.status.value)
        reschedule = any(k in values for k in ("cron_expression", "timezone", "start_at")) or (
            status == JobStatus.ACTIVE.value and current.status is not JobStatus.ACTIVE)
        if reschedule and status == JobStatus.ACTIVE.value:
            schedule = CronSchedule.parse(values.get("cron_expression", current.cron_expression),
                                          values.get("timezone", current.timezone))
            values["next_run_at"] = scheduling.first_due(
                schedule, self.backend.db_now(), start_at=values.get("start_at", current.start_at),
                run_immediately=values.get("run_immediately_if_never_run", current.run_immediately_if_never_run),
                never_ran=current.last_run_at is None and current.run_count == 0)
        if not self.backend.update_job(current.id, values):
            raise JobNotFound(job_id)
        self.on_job_changed()
        return self.get_job(current.id)

    def pause_job(self, job_id: str) -> Job:
        return self.update_job(job_id, status=JobStatus.PAUSED.value)

    def resume_job(self, job_id: str) -> Job:
        return self.update_job(job_id, status=JobStatus.ACTIVE.value)

    def delete_job(self, job_id: str) -> None:
        if not self.backend.delete_job(validation.job_id(job_id)):
            raise JobNotFound(job_id)

    def list_runs(self, job_id: str | None = None, status: str | None = None, limit: int = 100) -> list[JobRun]:
        jid = validation.job_id(job_id) if job_id is not None else None
        if status is not None:
            status = validation.enum_value("status", status, RunStatus).value
        return self.backend.list_runs(jid, status, validation.positive_int("limit", limit))

    # -- polling -------------------------------------------------------------------------
    @property
    def is_polling(self) -> bool:
        return self._polling

    def start_polling(self) -> None:
        """Run the start-up steps, then poll in the background; returns at once."""
        with self._state_lock:
            if self._polling:
                log.info("polling already started")
                return
            self._housekeeping.check_installed()
            self._release_previous_engines()
            self.backend.register_engine(self.instance_name, socket.gethostname(), os.getpid(), __version__,
                                         heartbeat_seconds=self.max_poll_interval,
                                         max_concurrent_jobs=self.max_concurrent_jobs)
            swept = self.backend.sweep_expired_leases()
            if swept.swept or swept.locks_freed:
                log.warning("start-up: cleared %d stale lock(s) and abandoned %d run(s) whose lease had expired",
                            swept.locks_freed, swept.swept, extra={"action": "stale_locks_cleared"})
            self._schedule_unscheduled()
            self._housekeeping.probe_permissions()
            self._housekeeping.warn_high_frequency_at_start()
            with self._accept_lock:
                self._accepting = True
            for entry in self._registry.busy():
                entry.renew = True   # runs a previous stop gave up on are ours again while they last
            self._polling = True
            self._keeper.start()
            self._poller.start()
            self._start_listener()
            log.info("polling started: instance %s, cap %d, lease %gs, drivers %s", self.instance_name,
                     self.max_concurrent_jobs, self.lease_timeout,
                     ",".join(sorted(self.allowed_drivers)) if self.allowed_drivers is not None else "all",
                     extra={"action": "polling_started"})

    def stop_polling(self, wait: bool = True, max_wait: float | None = 30.0) -> None:
        """Stop dispatching; with ``wait``, drain in-flight runs for at most ``max_wait`` seconds.

        Runs still going afterwards get their ``cancel_event`` set and keep their
        leases, which lapse once this engine stops renewing them. The call returns
        within ``max_wait`` (with ``wait=False``: at once) plus at most a second for
        the poller and the engine registry; a poll that is stuck in the database
        hands back whatever it claims once it returns.
        """
        if max_wait is not None:
            if isinstance(max_wait, bool) or not isinstance(max_wait, (int, float)) or max_wait < 0:
                raise ConfigurationError("max_wait", max_wait, "must be a number of seconds >= 0, or None")
        started = time.monotonic()
        budget_end = None if (wait and max_wait is None) else started + (float(max_wait or 0) if wait else 0.0)

        def left(at_least: float = 0.0) -> float | None:
            """Seconds left of the budget (None: unbounded), but at least ``at_least``."""
            return None if budget_end is None else max(at_least, budget_end - time.monotonic())
        with self._state_lock:
            if not self._polling:
                return
            self._polling = False
            self._listener_stop.set()
            if self._listener is not None:
                self._listener.interrupt()
            self._poller.stop(timeout=0)       # the loop starts no poll after the one under way
            self._close_gate(wait, left())
            if wait:
                self._registry.wait_idle(left())
                self._writer.flush(left())
                self._side_work.flush(left())
            still = [e for e in self._registry.busy() if not e.manual]
            for entry in still:
                entry.cancel_event.set()
                entry.renew = False      # its lease lapses, so another engine can take the job over
            if still:
                log.warning("stopped with %d run(s) still executing (%s); they keep their leases until expiry",
                            len(still), ", ".join(f"{e.job.name}/{e.run_id}" for e in still),
                            extra={"action": "stopped_with_inflight"})
            self._poller.join(left(at_least=0.5))
            self._unregister(left(at_least=0.5))
            log.info("polling stopped after %.2fs", time.monotonic() - started, extra={"action": "polling_stopped"})

    def _close_gate(self, wait: bool, timeout: float | None) -> None:
        """From here on no claim becomes a run of this engine. With ``wait``, a poll under
        way finishes first (within ``timeout``), so its runs are drained like the others;
        a poll still in the database after that hands its claims back when it returns."""
        got = self._dispatch_lock.acquire(timeout=-1 if timeout is None else timeout) if wait \
            else self._dispatch_lock.acquire(blocking=False)
        try:
            with self._accept_lock:
                self._accepting = False
            unanswered = None
            if got:   # no poll under way owns it
                unanswered, self._unanswered_claim = self._unanswered_claim, None
        finally:
            if got:
                self._dispatch_lock.release()
        if unanswered is not None:   # in the background: the database just failed and may be slow
            self._side_work.submit(self._hand_back_unanswered, *unanswered)

    def _hand_back_unanswered(self, claim_id: str, handled: set[str]) -> None:
        """The last claim raised and may have committed: replay it once more and hand back
        what it took, so those jobs do not wait out a lease for an engine that stopped."""
        try:
            batch = self.backend.claim_due_jobs(self.instance_name, 0, self.lease_timeout, claim_id=claim_id,
                                                replay=True)
        except SchedulerError as exc:
            log.warning("could not replay claim %s at stop (%s); its jobs wait out their lease", claim_id, exc)
            return
        for claim in batch.claims:
            if (claim.run_id or claim.job_id) not in handled:
                self._hand_back(claim.job_id, claim.run_id, claim.lock_token)

    def _hand_back(self, job_id: str, run_id: str | None, token: str, name: str | None = None) -> None:
        """A claim this engine will not run: its run ends Skipped unstarted (which releases the
        lock, leaves the schedule alone and counts in no statistic), or a run-less claim just
        lets the lock go; both through the procedures, fenced by the claim's token."""
        name = name or job_id
        if run_id is None:
            try:
                self.backend.release_job_lock(job_id, token)
            except SchedulerError as exc:
                log.warning("could not release job %r (%s); its lease will lapse", name, exc)
            return
        log.warning("job %r: claimed as the engine stopped; run %s recorded Skipped, not started",
                    name, run_id, extra={"action": "claim_handed_back"})
        self._writer.submit(Completion(run_id, token, RunStatus.SKIPPED.value,
                                       "the engine stopped before this run could start", None, None),
                            lambda _ok: None)

    def _unregister(self, timeout: float | None) -> None:
        """Mark this engine stopped in the registry, best effort: a slow database never
        holds stop_polling() past its bound (the call finishes in the background)."""
        def go() -> None:
            try:
                self.backend.unregister_engine(self.instance_name)
            except SchedulerError as exc:
                log.warning("could not mark engine %s stopped: %s", self.instance_name, exc)
        worker = threading.Thread(target=go, name="mjsched-unregister", daemon=True)
        worker.start()
        worker.join(timeout)

    @property
    def inflight(self) -> int:
        """Runs executing in this engine now (what the cap counts)."""
        return self._registry.live_count()

    @property
    def leaked(self) -> int:
        """Timed-out or lease-lost runs whose thread still runs (they hold no slot)."""
        return self._registry.leaked

    def add_listener(self, listener: Any) -> None:
        """Observe the engine: ``listener`` may define ``on_poll(DispatchResult)``,
        ``on_poll_failed()`` and ``on_run_finished(status: str, seconds: float)``.
        Listener errors are logged and never reach the engine's threads."""
        self._listeners.append(listener)

    def _emit(self, event: str, *args: Any) -> None:
        for listener in self._listeners:
            handler = getattr(listener, event, None)
            if handler is None:
                continue
            try:
                handler(*args)
            except Exception:  # noqa: BLE001 - an observer must never break the engine
                log.exception("engine listener %r failed in %s", listener, event)

    def on_job_changed(self) -> None:
        """Wake the poller: a job was added or edited (by this process or another)."""
        self._schedule_dirty = True
        self._poller.wake()

    def dispatch_due_jobs(self) -> DispatchResult:
        """One poll, by hand: sweep, claim up to the free slots, hand runs to the pool."""
        return self._observed_dispatch(sweep=True)[0]

    def _poll(self) -> float:
        # The background poller sweeps at most once a second (or per quarter lease):
        # a busy engine polls many times a second and a sweep per poll is wasted work.
        due = time.monotonic() - self._last_sweep >= min(1.0, self.lease_timeout / 4)
        return self._observed_dispatch(sweep=due)[1]

    def _observed_dispatch(self, sweep: bool) -> tuple[DispatchResult, float]:
        try:
            result, delay = self._dispatch(sweep)
        except BaseException:
            self._emit("on_poll_failed")
            raise
        self._emit("on_poll", result)
        return result, delay

    def _schedule_unscheduled(self) -> None:
        """Reschedule for at most a short budget; while pages are left, wake the poller so
        the rest (and the jobs now due) come at the next poll, not at the next idle one."""
        changed, self._schedule_dirty = self._schedule_dirty, False
        self._schedule_checked = time.monotonic()
        self._schedule_more = self._housekeeping.schedule_unscheduled(restart=changed)
        if self._schedule_more:
            self._poller.wake()

    def _dispatch(self, sweep: bool) -> tuple[DispatchResult, float]:
        with self._dispatch_lock:
            if not self._accepting:
                return DispatchResult(), self.max_poll_interval
            swept = SweepResult()
            # a completion whose job row was just released lands before a sweep or claim takes the job over
            self._writer.retry_busy_now()
            if sweep:
                swept = self.backend.sweep_expired_leases()
                self._last_sweep = time.monotonic()
            if swept.swept and self._registry.busy():
                self._keeper.renew()   # learn at once which of our own runs were abandoned
            if self._schedule_dirty or self._schedule_more or \
                    time.monotonic() - self._schedule_checked > SCHEDULE_REFRESH_SECONDS:
                self._schedule_unscheduled()
            dispatched = 0
            for _ in range(4):  # claims that only advanced a served tick leave slots: claim again
                free = max(0, self.max_concurrent_jobs - self._registry.live_count())
                # A claim that raised may have committed: call again under its id, as a replay.
                replay = self._unanswered_claim is not None
                if self._unanswered_claim is None:
                    self._unanswered_claim = (str(uuid.uuid4()), set())
                claim_id, handled = self._unanswered_claim
                batch = self.backend.claim_due_jobs(self.instance_name, free, self.lease_timeout,
                                                    claim_id=claim_id, replay=replay)
                if replay:
                    log.warning("claim %s had failed; asked again as a replay: %d claim(s) answered",
                                claim_id, len(batch.claims), extra={"action": "claim_replayed"})
                self._clock.observe(batch.db_now)
                db_now = batch.db_now or self._clock.now()
                jobs = {j.id: j for j in self.backend.get_jobs({c.job_id for c in batch.claims})} \
                    if batch.claims else {}
                self._housekeeping.warn_high_frequency(list(jobs.values()))
                started = 0
                for claim in batch.claims:
                    job = jobs.get(claim.job_id)
                    key = claim.run_id or claim.job_id
                    if job is None or key in handled:   # handled: started before a replay of its claim
                        continue
                    handled.add(key)
                    try:
                        started += self._start_claim(job, claim.run_id, claim.lock_token, claim.scheduled_for,
                                                     claim.from_queue, db_now)
                    except scheduling.UnusableSchedule as exc:   # the row itself: before any run started
                        self._set_aside(job, claim.run_id, claim.lock_token, exc.cause)
                    except SchedulerError as exc:
                        log.error("could not start run of job %r: %s (its lease will lapse and be swept)",
                                  job.name, exc, extra={"action": "dispatch_failed"})
                self._unanswered_claim = None
                dispatched += started
                if not any(c.run_id is None for c in batch.claims) or len(batch.claims) < free:
                    break
            delay = self.max_poll_interval
            if batch.next_due_at is not None:
                delay = min(delay, (batch.next_due_at - db_now).total_seconds() + 0.001)
            delay = min(delay, self._enqueue_queue_ticks(db_now))
            result = DispatchResult(swept=swept.swept, dispatched=dispatched, locked_out=batch.locked_out,
                                    skipped_at_capacity=batch.due_left if free == 0 or
                                    len(batch.claims) >= free else 0)
        if dispatched or swept.swept or result.skipped_at_capacity:
            log.info("poll: swept=%d, dispatched=%d, locked_out=%d, skipped_at_capacity=%d, inflight=%d/%d",
                     result.swept, result.dispatched, result.locked_out, result.skipped_at_capacity,
                     self._registry.live_count(), self.max_concurrent_jobs, extra={"action": "poll"})
        return result, max(0.0, delay)

    def _set_aside(self, job: Job, run_id: str | None, token: str, exc: BaseException) -> None:
        """A claimed job whose schedule cannot be computed (a cron, a zone or an instant no
        engine can use, written by plain SQL): its next_run_at is cleared, so no engine claims
        it again until its definition changes (the start-up sweep passes it over, reported
        once), and the claimed run ends Skipped with the reason. Logged once per job and reason."""
        reason = f"{type(exc).__name__}: {exc}"
        try:
            self.backend.advance_job(job.id, token, None, release=run_id is None)
        except SchedulerError as db_exc:
            log.warning("job %r: could not set it aside (%s); its lease will lapse", job.name, db_exc)
            return
        if run_id is not None:
            self._writer.submit(Completion(run_id, token, RunStatus.SKIPPED.value,
                                           f"set aside: its schedule cannot be computed ({reason}); "
                                           "fix the job's definition", None, None),
                                lambda _ok: self._poller.wake())
        if self._housekeeping.first_report(job):
            log.error("job %r (%s) set aside: its schedule cannot be computed (%s); it will not run until its "
                      "definition is fixed", job.name, job.id, reason,
                      extra={"action": "job_set_aside", "job_id": job.id})

    def _definition_refused(self, job: Job) -> str | None:
        """Why no run of ``job`` can succeed on this engine (its driver is not installed here, or
        the driver refuses its configuration), or None. Logged once per job and reason."""
        try:
            validation.check_runnable(job.driver, job.configuration)
            return None
        except Exception as exc:  # noqa: BLE001 - a plugin may raise anything from its validation
            reason = f"not run: {type(exc).__name__}: {exc}; fix the job's driver or configuration"
        if self._housekeeping.first_refusal(job, reason):
            log.error("job %r (%s): %s (each tick is recorded Skipped until then)", job.name, job.id, reason,
                      extra={"action": "job_refused", "job_id": job.id})
        return reason

    def _start_claim(self, job: Job, run_id: str | None, token: str, scheduled_for: datetime | None,
                     from_queue: bool, db_now: datetime) -> int:
        if run_id is None:  # the tick already had a run: move the schedule past it, run nothing
            nxt = scheduling.computed(scheduling.next_run_after, job, scheduled_for, db_now, catch_up=False)
            self.backend.advance_job(job.id, token, nxt, release=True)
            log.warning("job %r: tick %s already has a run; advanced to %s", job.name, scheduled_for, nxt,
                        extra={"action": "tick_already_served"})
            return 0
        # What next_run_at was at the claim: a due tick's claim serves it; for a queued run the
        # job's row read just after the claim is the closest there is.
        seen = scheduled_for if scheduled_for is not None and not from_queue else job.next_run_at
        refused = self._definition_refused(job)
        if refused is not None:   # no run of it can succeed: each tick is Skipped, reported once
            nxt = None if from_queue else scheduling.computed(scheduling.next_run_after, job, scheduled_for,
                                                              db_now, catch_up=False)
            self._writer.submit(Completion(run_id, token, RunStatus.SKIPPED.value, refused, None, nxt,
                                           guard=True, expected_next_run_at=seen),
                                lambda _ok: self._poller.wake())
            return 0
        plan = scheduling.TickPlan(run=True, catch_up=False, missed=0)
        if scheduled_for is not None and not from_queue:
            plan = scheduling.computed(scheduling.plan_tick, job, scheduled_for, db_now,
                                       self.max_catch_up_runs)
        if plan.note:
            log.warning("job %r: %s", job.name, plan.note, extra={"action": "missed_runs"})
        if not plan.run:
            nxt = scheduling.computed(scheduling.next_run_after, job, scheduled_for, db_now, catch_up=False)
            self._writer.submit(Completion(run_id, token, RunStatus.SKIPPED.value, plan.note, {"missed": plan.missed},
                                           nxt, guard=True, expected_next_run_at=seen),
                                lambda _ok: self._poller.wake())
            return 0
        if job.concurrency_mode is ConcurrencyMode.CONCURRENT and not from_queue:
            nxt = scheduling.computed(scheduling.next_run_after, job, scheduled_for, db_now,
                                      catch_up=plan.catch_up)
            self.backend.advance_job(job.id, token, nxt, release=True)
        entry = self._new_entry(job, run_id, token, scheduled_for, manual=False, catch_up=plan.catch_up)
        entry.seen_next_run_at = seen
        if scheduled_for is not None:
            # Only ticks that come due while this run runs are queued: those before the claim were
            # missed (a tick's claim) or were queued or refused already (a queued run's claim).
            entry.last_enqueued = max(scheduled_for, db_now)
        with self._accept_lock:
            accepted = self._accepting
            if accepted:
                self._registry.add(entry)
        if not accepted:   # stop_polling() began while this claim was in the database: hand it back
            self._hand_back(job.id, run_id, token, job.name)
            return 0
        self._watch(entry)         # also when polled by hand (dispatch_due_jobs without start_polling)
        try:
            self._pool.submit(self._run_entry, entry)
        except RuntimeError:
            self._registry.remove(entry)
            raise SchedulerError("worker pool is shut down") from None
        self.stats["dispatched"] += 1
        return 1

    def _new_entry(self, job: Job, run_id: str, token: str, scheduled_for: datetime | None,
                   *, manual: bool, catch_up: bool) -> InFlight:
        try:
            driver_cls: type[BaseScheduledJob] | None = get_driver(job.driver)
        except SchedulerError:
            driver_cls = None
        max_runtime = effective_max_runtime(job, driver_cls)
        entry = InFlight(job=job, run_id=run_id, token=token, scheduled_for=scheduled_for, manual=manual,
                         catch_up=catch_up, deadline=time.monotonic() + max_runtime if max_runtime else None)
        run = JobRun(id=run_id, scheduled_job_id=job.id, scheduled_for=scheduled_for, status=RunStatus.RUNNING,
                     success=None, error_message=None, details=None, queued_at=None, started_at=self._clock.now(),
                     completed_at=None, duration_ms=None, executed_by_instance=self.instance_name,
                     lock_token=token, lease_expires_at=None)
        entry.context = ExecutionContext(job=job, run=run, cancel_event=entry.cancel_event,
                                         logger=logging.getLogger(f"mjsched.job.{job.driver}"),
                                         heartbeat=partial(self._context_heartbeat, entry))
        return entry

    def _watch(self, entry: InFlight) -> None:
        """A registered run gets its heartbeat and its max_runtime watch (keeper re-reads deadlines)."""
        self._keeper.start()
        if entry.deadline is not None:
            self._keeper.poke()

    def _context_heartbeat(self, entry: InFlight) -> bool:
        if entry.state is not State.RUNNING:
            return False
        return self._keeper.renew([entry.token]) and entry.state is State.RUNNING

    # -- running a claimed run ---------------------------------------------------------------
    def _run_entry(self, entry: InFlight) -> None:
        driver: BaseScheduledJob | None = None
        if entry.state is not State.RUNNING:   # timed out or lost while it waited for a thread
            self._registry.thread_done(entry)
            return
        try:
            log.debug("starting job %r (run %s)", entry.job.name, entry.run_id, extra={"action": "run_started"})
            result, driver = run_driver(entry.context, self.allowed_drivers)
        except BaseException as exc:  # noqa: BLE001 - even KeyboardInterrupt from a driver: the run must end
            result = failure(exc)
        finally:
            self._registry.thread_done(entry)
        if not self._registry.transition(entry, State.COMPLETING):
            log.warning("run %s of job %r returned after it was %s; its result is discarded", entry.run_id,
                        entry.job.name, entry.state.value, extra={"action": "leaked_run_finished"})
            return
        status = RunStatus.COMPLETED if result.success else RunStatus.FAILED
        if not result.success and entry.cancel_event.is_set():
            status = RunStatus.CANCELLED   # it gave up because the engine asked it to (shutdown)
        self._writer.submit(self._completion(entry, status, result.error_message, result.details),
                            partial(self._completed, entry, result, driver, status))

    def _completion(self, entry: InFlight, status: RunStatus, error: str | None,
                    details: dict[str, Any] | None) -> Completion:
        """The run's end, moving the schedule on only if nobody edited it since the claim."""
        return Completion(entry.run_id, entry.token, status.value, error, details, self._next_run_of(entry),
                          guard=True, expected_next_run_at=entry.seen_next_run_at)

    def _next_run_of(self, entry: InFlight) -> datetime | None:
        """Where the job's schedule goes when this run ends (None: leave it alone)."""
        if entry.manual or entry.job.concurrency_mode is ConcurrencyMode.CONCURRENT:
            return None
        try:
            return scheduling.next_run_after(entry.job, entry.scheduled_for, self._clock.now(), entry.catch_up)
        except Exception as exc:  # noqa: BLE001 - the run's outcome is still recorded; its next claim sets it aside
            log.error("job %r: cannot compute its next run: %s: %s", entry.job.name, type(exc).__name__, exc)
            return None

    def _completed(self, entry: InFlight, result: JobResult, driver: BaseScheduledJob | None,
                   status: RunStatus, outcome: bool | None) -> None:
        try:
            self._record_outcome(entry, result, driver, status, outcome)
        finally:
            self._registry.remove(entry)   # after the notification is handed over: execute_job waits for it
            self._poller.wake()

    def _record_outcome(self, entry: InFlight, result: JobResult, driver: BaseScheduledJob | None,
                        status: RunStatus, outcome: bool | None) -> None:
        elapsed_ms = int((time.monotonic() - entry.started) * 1000)
        if outcome is False:
            self.stats["fenced_completions"] += 1
            log.warning("completion of run %s (job %r) was refused: its lease had been taken over or swept",
                        entry.run_id, entry.job.name, extra={"action": "completion_fenced"})
        if not outcome:
            entry.notified.set()
            return
        self._emit("on_run_finished", status.value, elapsed_ms / 1000.0)
        log.info("%s job %r (run %s) in %d ms%s", status.value.lower(), entry.job.name, entry.run_id,
                 elapsed_ms, f": {result.error_message}" if result.error_message else "",
                 extra={"action": "run_finished", "status": status.value})
        if (result.success and entry.job.notify_on_success) or (not result.success and entry.job.notify_on_failure):
            self._side_work.submit(self._notify, entry, result, driver, status, elapsed_ms)
        else:
            entry.notified.set()

    def _notify(self, entry: InFlight, result: JobResult, driver: BaseScheduledJob | None, status: RunStatus,
                elapsed_ms: int) -> None:
        """Format (driver code) and send (notifier code) off the completion writer's thread."""
        try:
            self._send_notification(entry, result, driver, status, elapsed_ms)
        finally:
            entry.notified.set()

    def _send_notification(self, entry: InFlight, result: JobResult, driver: BaseScheduledJob | None,
                           status: RunStatus, elapsed_ms: int) -> None:
        context: ExecutionContext = entry.context
        final = dataclasses.replace(context.run, status=status, success=result.success,
                                    error_message=result.error_message, details=result.details,
                                    duration_ms=elapsed_ms)
        try:
            notification = (driver or BaseScheduledJob()).format_notification(
                dataclasses.replace(context, run=final), result)
        except Exception as exc:  # noqa: BLE001 - a formatter bug must not lose the notice
            log.warning("format_notification of job %r failed (%s); using the default text", entry.job.name, exc)
            notification = BaseScheduledJob().format_notification(dataclasses.replace(context, run=final), result)
        safe_notify(self.notifier, entry.job, final, notification, log)

    def _time_out(self, entry: InFlight) -> None:
        if entry.state is not State.RUNNING:
            return
        if entry.thread_alive and not entry.manual:
            self._pool.absorb_leak()   # before the slot is freed: new work never queues behind the stuck thread
        if not self._registry.transition(entry, State.TIMED_OUT):
            return
        entry.cancel_event.set()
        self.stats["timeouts"] += 1
        limit = effective_max_runtime(entry.job, None) or 0
        message = f"exceeded max_runtime of {limit:g}s; cancelled"
        if entry.thread_alive:
            log.warning("run %s of job %r timed out; its thread is still running and is counted as leaked "
                        "(%d leaked now)", entry.run_id, entry.job.name, self._registry.leaked,
                        extra={"action": "run_timed_out"})
        result = JobResult(success=False, error_message=message)
        self._writer.submit(self._completion(entry, RunStatus.TIMEOUT, message, None),
                            partial(self._completed, entry, result, None, RunStatus.TIMEOUT))

    def _lost(self, entry: InFlight) -> None:
        if self._registry.transition(entry, State.LOST, only_from=(State.RUNNING, State.COMPLETING)):
            entry.cancel_event.set()
            self.stats["leases_lost"] += 1
            if entry.thread_alive and not entry.manual:
                self._pool.absorb_leak()
            entry.notified.set()       # a lost run sends no notification
            self._registry.remove(entry)
            self._poller.wake()

    def _slot_freed(self) -> None:
        self._poller.wake()

    # -- manual execution ---------------------------------------------------------------
    def execute_job(self, job_id: str, *, force: bool = False) -> JobRun:
        """Run a job now, in this call, under its lock; returns the finished run.

        A job that is not Active raises JobNotActive unless ``force`` (an operator's
        deliberate run of a paused job). Lock and run are taken in one replay-safe call,
        so a lost reply never leaves the job locked by a run nobody executes.
        """
        job = self.get_job(job_id)
        if not isinstance(force, bool):
            raise ConfigurationError("force", force, "must be True or False")
        # What this process cannot run (an import path it lacks) is refused before a run is recorded.
        get_driver(job.driver)().check_can_run(job.configuration)
        start = self.backend.start_manual_run(job.id, str(uuid.uuid4()), self.instance_name, self.lease_timeout,
                                              force=force)
        if start.outcome == "not_found":
            raise JobNotFound(job.id)
        if start.outcome == "not_active":
            raise JobNotActive(job.id, self.get_job(job.id).status.value)
        if start.outcome != "started" or not start.run_id or not start.lock_token:
            raise LockNotAcquired(job.id)
        run_id, token = start.run_id, start.lock_token
        entry = self._new_entry(job, run_id, token, None, manual=True, catch_up=False)
        self._registry.add(entry)
        self._watch(entry)
        threading.Thread(target=self._run_entry, args=(entry,), name="mjsched-execute", daemon=True).start()
        # Done when the run's completion is written (on return, or at its timeout), and its
        # notification sent: a script that exits right after must not lose it (bounded wait:
        # a notifier that hangs only delays the return).
        self._registry.wait_gone(entry, timeout=None)
        if not entry.notified.wait(MANUAL_NOTIFY_WAIT_SECONDS):
            log.warning("job %r: its notification is still being sent; execute_job returns without it",
                        job.name, extra={"action": "notification_pending"})
        run = self.backend.get_run(run_id)
        if run is None:
            raise JobNotFound(job.id)
        return run

    def unlock_job(self, job_id: str) -> bool:
        """Operator override: free the job's lock whoever holds it. The run that held it ends
        Abandoned and its holder's late completion is refused (fenced by its token).
        Returns False when the job was not locked."""
        job = self.get_job(job_id)
        freed = self.backend.force_unlock_job(job.id, f"Abandoned: an operator unlocked the job "
                                                      f"(through engine {self.instance_name})")
        if freed is None:
            log.info("job %r was not locked; nothing to unlock", job.name, extra={"action": "job_unlock_noop"})
            return False
        holder, abandoned = freed
        log.warning("job %r unlocked by an operator: the lock of %s was freed, %d run(s) abandoned", job.name,
                    holder or "?", abandoned, extra={"action": "job_unlocked"})
        return True

    # -- change feed ---------------------------------------------------------------------------
    def _start_listener(self) -> None:
        self._join_listener(timeout=10.0)   # a stop_polling() just before: let that listener go first
        listener = self._listener = self.backend.listener()
        if listener is None:
            return
        stop = self._listener_stop = threading.Event()   # fresh: the old thread must stay stopped
        try:
            listener.wait(0)   # LISTEN before start_polling() returns: a change made right after is heard
        except SchedulerError as exc:
            log.warning("job-change listener not connected yet (%s); retrying in the background", exc)

        def loop() -> None:
            delay = 0.5
            try:
                while not stop.is_set():
                    try:
                        if listener.wait(1.0) and not stop.is_set():
                            self.on_job_changed()
                        delay = 0.5
                    except SchedulerError:
                        if stop.wait(delay):
                            break
                        delay = min(delay * 2, 10.0)
            finally:
                listener.close()
        self._listener_thread = threading.Thread(target=loop, name="mjsched-listener", daemon=True)
        self._listener_thread.start()

    def _join_listener(self, timeout: float) -> None:
        """Wait for the listener thread to end; stop_polling() interrupted its wait, so
        this is quick unless it was reconnecting (one connect timeout at most)."""
        thread, self._listener_thread = self._listener_thread, None
        if thread is None or thread is threading.current_thread():
            return
        thread.join(timeout)
        if thread.is_alive():
            log.warning("the job-change listener did not stop within %.0fs; left to exit on its own", timeout)

    # -- queue mode --------------------------------------------------------------------------
    def _enqueue_queue_ticks(self, db_now: datetime) -> float:
        """Keep ticks of our running Queue-mode jobs as Queued runs; return seconds to the next one."""
        wait = self.max_poll_interval
        for entry in self._registry.busy():
            if entry.job.concurrency_mode is not ConcurrencyMode.QUEUE or entry.manual or entry.catch_up:
                continue
            try:
                schedule = scheduling.schedule_of(entry.job)
                base = entry.last_enqueued or entry.scheduled_for or db_now
                tick = schedule.next_after(base)
            except Exception as exc:  # noqa: BLE001 - no tick to keep for this job; the others go on
                if self._housekeeping.first_report(entry.job):
                    log.error("job %r: cannot compute the ticks to queue: %s: %s", entry.job.name,
                              type(exc).__name__, exc, extra={"action": "bad_schedule"})
                continue
            pending: datetime | None = tick
            while pending is not None and pending <= db_now:
                if self.backend.enqueue_job_run(entry.job.id, pending):
                    log.info("job %r still running: tick %s kept as a Queued run", entry.job.name,
                             pending.isoformat(), extra={"action": "queued"})
                entry.last_enqueued = pending
                try:
                    pending = schedule.next_after(pending)
                except Exception:  # noqa: BLE001 - past the last instant there is: nothing more to queue
                    pending = None
            if pending is not None:
                wait = min(wait, (pending - db_now).total_seconds() + 0.001)
        return wait

    # -- lifecycle -------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop polling (without draining) and leave nothing held: runs still going get their
        ``cancel_event`` and CLOSE_GRACE_SECONDS to return (their outcome is recorded as
        usual); what is left after that is handed back (recorded Cancelled, its lock released,
        fenced by its token) before the connections close. Also called at interpreter exit."""
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
        _open_engines.discard(self)
        if self._polling:
            self.stop_polling(wait=False)
        self._join_listener(timeout=10.0)
        going = self._registry.busy()
        for entry in going:
            entry.cancel_event.set()
            entry.renew = True     # ours until handed back below: no other engine takes it meanwhile
        if going:
            self._registry.wait_idle(CLOSE_GRACE_SECONDS)
        self._writer.flush(5.0)
        self._hand_back_held()
        self._keeper.stop()
        self._writer.stop(timeout=5.0)
        self._side_work.flush(5.0)
        self._side_work.shutdown()
        self._pool.shutdown()
        self.backend.close()

    def _hand_back_held(self) -> None:
        """Runs still executing at close are recorded Cancelled and their locks released, in
        one fenced call, so no lock outlives the engine; a thread that returns later finds its
        run lost and its result is discarded (logged)."""
        left = [entry for entry in self._registry.busy()
                if self._registry.transition(entry, State.LOST, only_from=(State.RUNNING,))]
        if not left:
            return
        items = [self._completion(entry, RunStatus.CANCELLED,
                                  "the engine closed while the run was still executing; handed back", None)
                 for entry in left]
        for entry in left:
            entry.notified.set()
            self._registry.remove(entry)
        try:
            done = self.backend.complete_job_runs(items)
        except SchedulerError as exc:
            log.error("close: could not hand back %d run(s) (%s); their leases will lapse", len(items), exc,
                      extra={"action": "hand_back_failed"})
            return
        log.warning("closed with %d run(s) still executing: %d recorded Cancelled and their locks released",
                    len(items), sum(1 for ok in done.values() if ok), extra={"action": "handed_back_at_close"})

    def _release_previous_engines(self) -> None:
        """Locks left by an earlier engine of this host whose process is gone (or by this
        instance name after its clean stop) are released now, fenced, instead of blocking
        their jobs for the rest of a lease. Engines of this process are never touched."""
        host = socket.gethostname()
        try:
            holders = self.backend.engines_holding_locks(host)
        except SchedulerError as exc:
            log.warning("start-up: could not list engines of this host holding locks (%s)", exc)
            return
        for holder in holders:
            instance, pid = str(holder["instance"]), int(holder["pid"])
            if pid == os.getpid():
                continue
            stopped_cleanly = holder.get("stopped_at") is not None and instance == self.instance_name
            if process_alive(pid) and not stopped_cleanly:
                continue
            reason = (f"Abandoned: engine {instance} (pid {pid} on {host}) is gone; "
                      f"released at start-up by {self.instance_name}")
            try:
                runs, locks = self.backend.release_engine_locks(instance, reason)
            except SchedulerError as exc:
                log.warning("start-up: could not release the locks of engine %s (%s)", instance, exc)
                continue
            log.warning("start-up: engine %s (pid %d on this host) is gone: released %d lock(s), abandoned %d "
                        "run(s)", instance, pid, locks, runs, extra={"action": "previous_engine_released"})

    def __enter__(self) -> "SchedulingEngine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

