"""The public facade: job CRUD, start and stop polling, manual execution, close.

The engine is thin on purpose: the procedures decide who runs what; this class holds
the parts ``wiring.build_parts`` builds (``engine.parts``: the dispatcher, the poll loop,
the capped pool, the lease keeper, the completion writer, the change feed; see the package
docstring) and delegates the order of start, stop and close to EngineControl.
"""
from __future__ import annotations

import functools
import logging
from datetime import datetime
from typing import Any, Callable, Iterable, TypeVar

from .. import alerts, audit, validation
from .. import tags as tag_rules
from .. import why as why_module
from ..alerts import Alert
from ..backends import Backend, open_backend
from ..errors import ConfigurationError, EngineForked, JobNotFound
from ..models import DispatchResult, Job, JobChange, JobRun, JobStatus, RunStatus, SyncResult
from ..notify import LoggingNotifier, Notifier
from ..why import WhyReport
from . import declared, refs
from .cancellation import default_requester
from .control import EngineControl
from .jobs import changed_job_values, create_job, pause_until
from .listeners import EngineListener
from .manual import ManualRuns
from .once import check_timeout
from .options import EngineOptions, options_from
from .retention import prune
from .parts import EngineParts
from .stats import EngineStats
from .wiring import announce_job_changed, backend_defaults, build_parts

log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])
E = TypeVar("E", bound=type)

# What a forked copy of an engine still answers, doing nothing there: the calls a shutdown
# path makes in every process (atexit, gunicorn's worker_exit, a with-block's end). Every
# other public method raises EngineForked (mjsched/forking.py, docs/guide/deployment.md).
ANSWERED_AFTER_FORK = frozenset({"stop_polling", "close", "__exit__"})


def _refused_after_fork(method: F) -> F:
    @functools.wraps(method)
    def guarded(self: "SchedulingEngine", *args: Any, **kwargs: Any) -> Any:
        if self._control.forked:
            raise EngineForked(method.__name__, self._control.owner_pid)
        return method(self, *args, **kwargs)
    return guarded  # type: ignore[return-value]


def _one_process(cls: E) -> E:
    """Every public method of ``cls`` but ANSWERED_AFTER_FORK refuses in a forked copy: a
    method added tomorrow is covered too (tests/integration/test_fork.py checks each)."""
    for name, value in list(vars(cls).items()):
        public = not name.startswith("_") or name == "__enter__"
        if public and callable(value) and name not in ANSWERED_AFTER_FORK:
            setattr(cls, name, _refused_after_fork(value))
    return cls


@_one_process
class SchedulingEngine:
    """Runs cron-scheduled jobs stored in a database, safely alongside other engines.

    ``max_concurrent_jobs`` is a hard cap on runs executing in this engine;
    ``lease_timeout`` (seconds) is how long a claimed run stays ours without a
    heartbeat. See README "Tuning the cap and the lease".

    The tuning arguments' defaults are ``EngineOptions``'s (written there only).
    ``parts`` (``EngineParts``): the engine's parts, for tests and operators; not a stable API.
    """
    def __init__(self, dsn: str | None = None, max_concurrent_jobs: int = EngineOptions.max_concurrent_jobs,
                 lease_timeout: float = EngineOptions.lease_timeout,
                 instance_name: str | None = EngineOptions.instance_name, notifier: Notifier | None = None, *,
                 min_poll_interval: float = EngineOptions.min_poll_interval,
                 max_poll_interval: float = EngineOptions.max_poll_interval,
                 max_catch_up_runs: int = EngineOptions.max_catch_up_runs,
                 heartbeat_interval: float | None = EngineOptions.heartbeat_interval,
                 completion_batch_window: float = EngineOptions.completion_batch_window,
                 backend: Backend | None = None,
                 allowed_drivers: Iterable[str] | str | None = EngineOptions.allowed_drivers,
                 options: EngineOptions | None = None,
                 cancel_grace: float = EngineOptions.cancel_grace,
                 default_max_runtime: float | None = EngineOptions.default_max_runtime,
                 keep_runs_days: int | None = EngineOptions.keep_runs_days,
                 keep_runs_count: int | None = EngineOptions.keep_runs_count,
                 purge_interval: float | None = EngineOptions.purge_interval,
                 purge_pass_seconds: float = EngineOptions.purge_pass_seconds,
                 purge_batch_size: int = EngineOptions.purge_batch_size,
                 celery_allowed_apps: Iterable[str] | str | None = EngineOptions.celery_allowed_apps,
                 celery_allowed_brokers: Iterable[str] | str | None = EngineOptions.celery_allowed_brokers,
                 alert_interval: float | None = EngineOptions.alert_interval,
                 **backend_options: Any) -> None:
        """``options`` (built by the CLI's config) replaces the tuning arguments when given (one
        given beside it as well is refused: ConfigurationError naming it).
        ``keep_runs_days``/``keep_runs_count``: run-history retention for jobs without their own
        (README "Run-history retention"); ``purge_interval`` (None: this engine never purges).
        ``alert_interval``: deadline alerts are evaluated at most this often (None: not by this engine).
        ``default_max_runtime`` (seconds; default one day, None: unbounded) bounds every run whose
        job sets no max_runtime (nor its driver a default_max_runtime): past it the run is Timeout.
        ``celery_allowed_apps`` / ``celery_allowed_brokers``: the app paths a ``celery`` job may
        name here / the broker and result backend URLs (None: any); others are refused by
        create_job and end Failed when they run, never imported (docs/guide/trust.md)."""
        self.options = options_from(
            options, max_concurrent_jobs=max_concurrent_jobs, lease_timeout=lease_timeout, instance_name=instance_name,
            min_poll_interval=min_poll_interval, max_poll_interval=max_poll_interval,
            max_catch_up_runs=max_catch_up_runs, heartbeat_interval=heartbeat_interval,
            completion_batch_window=completion_batch_window, allowed_drivers=allowed_drivers,
            cancel_grace=cancel_grace, default_max_runtime=default_max_runtime,
            keep_runs_days=keep_runs_days, keep_runs_count=keep_runs_count, purge_interval=purge_interval,
            purge_pass_seconds=purge_pass_seconds, purge_batch_size=purge_batch_size,
            celery_allowed_apps=celery_allowed_apps, celery_allowed_brokers=celery_allowed_brokers,
            alert_interval=alert_interval)
        opts = self.options
        self.max_concurrent_jobs, self.lease_timeout = opts.max_concurrent_jobs, opts.lease_timeout
        self.min_poll_interval, self.max_poll_interval = opts.min_poll_interval, opts.max_poll_interval
        self.max_catch_up_runs, self.allowed_drivers = opts.max_catch_up_runs, opts.allowed_drivers
        self.instance_name: str = opts.instance_name or ""
        if notifier is not None and not callable(getattr(notifier, "notify", None)):
            raise ConfigurationError("notifier", notifier, "must have a notify(job, run, notification) method")
        self.notifier: Notifier = notifier or LoggingNotifier()
        if backend is None and not dsn:
            raise ConfigurationError("dsn", dsn, "a database URL is required (postgresql://... or mssql://...)")
        self.backend: Backend = backend or open_backend(str(dsn), **backend_defaults(opts, backend_options))
        self.stats = EngineStats({"dispatched": 0, "timeouts": 0, "default_max_runtime_timeouts": 0, "leases_lost": 0,
                                  "leases_fenced": 0, "fenced_completions": 0, "runs_purged": 0})
        # The engine's parts, for tests and operators (``engine.parts.registry``, ...): not a stable API.
        self.parts: EngineParts = build_parts(self.backend, opts, self.stats, notifier=lambda: self.notifier)
        self._control = EngineControl(self.parts)
        self._manual = ManualRuns(self.parts)
        self._declared: set[str] = set()    # names this object's ensure_job/sync_jobs declared

    # -- schema ----------------------------------------------------------------------
    def install(self) -> list[str]:
        """Create or upgrade tables and procedures; safe from several engines at once."""
        started = self.backend.db_now()
        applied = self.backend.install()
        if applied:
            log.info("installed mjsched schema scripts: %s", ", ".join(applied), extra={"action": "install"})
        if "001_schema" in applied or "005_job_names" in applied:
            self.parts.housekeeping.report_set_aside(started)
        return applied

    # -- jobs --------------------------------------------------------------------------
    def create_job(self, name: str, driver: str, cron: str | None = None, timezone: str = "UTC",
                   configuration: dict[str, Any] | None = None, *, every: Any = None, run_at: Any = None,
                   **fields: Any) -> str:
        """Validate everything, then insert the job; returns its id (a UUID string). The schedule
        is exactly one of ``cron``, ``every`` (a timedelta or '90s', '15m', '2h', '1d') and
        ``run_at`` (an aware datetime: one run, then the job is Expired)."""
        self._admit(driver, configuration)
        rules = alerts.pop_rules(fields)      # deadline alerts (alerts.ALERT_FIELDS), checked first
        rules = alerts.merged(None, rules) if rules else None
        job_id = create_job(self.backend, {"name": name, "driver": driver, "cron": cron, "every": every,
                                           "run_at": run_at, "timezone": timezone, "configuration": configuration,
                                           **fields})
        if rules:
            self.backend.set_job_alerts(job_id, rules)
        return job_id

    def job_alerts(self, job_id: str) -> dict[str, Any]:
        """The job's deadline-alert rules as create_job keywords (None: that rule is off)."""
        return alerts.as_keywords(self.backend.job_alert_rules(self.get_job(job_id).id))

    def open_alerts(self, job_id: str | None = None, limit: int = 200) -> list[Alert]:
        """The open deadline alerts (of one job), newest first (docs/guide/operations.md)."""
        jid = self.get_job(job_id).id if job_id is not None else None
        return [Alert.from_row(r) for r in self.backend.open_alerts(jid, validation.positive_int("limit", limit))]

    def _set_alerts(self, job_id: str, changes: dict[str, Any] | None) -> None:
        """Write the job's alert rules when they differ: ``changes`` over the current ones."""
        if changes is None:
            return
        current = self.backend.job_alert_rules(job_id)
        wanted = alerts.merged(current, changes)
        if alerts.as_keywords(current) != alerts.as_keywords(wanted):
            self.backend.set_job_alerts(job_id, wanted)

    def _admit(self, driver: Any, configuration: Any) -> None:
        """A celery job this engine may not run is refused before its driver's checks, which
        import the app (ConfigurationError naming the key; see celery_allowed_apps)."""
        allow = self.options.celery_allow
        if allow is not None and driver == "celery":
            allow.check(configuration)

    def get_job(self, job_id: str) -> Job:
        """The job ``job_id`` names: an id, or a name (a value that is not a UUID); JobNotFound
        otherwise. Every method that takes a job takes either (mjsched/engine/refs.py)."""
        return refs.resolve_job(self.backend, job_id)

    def ensure_job(self, name: str, driver: str, cron: str | None = None, *, every: Any = None,
                   run_at: Any = None, **fields: Any) -> Job:
        """Create the job ``name``, or update it to match: fields not given take create_job's
        defaults, except ``status`` (kept unless given). Only the fields that differ are
        written, so next_run_at is recomputed only when the schedule changed; id, statistics
        and history are kept. Safe from several processes at once (names are unique)."""
        self._admit(driver, fields.get("configuration"))
        spec = {"name": name, "driver": driver, "cron": cron, "every": every, "run_at": run_at, **fields}
        with audit.changes_by(via="ensure_job"):
            job = declared.ensure(self, declared.declare(spec))[1]
        self._declared.add(job.name)
        return job

    def sync_jobs(self, jobs: list[dict[str, Any]], remove_missing: str = "keep", *,
                  dry_run: bool = False, tag: str | None = None) -> SyncResult:
        """ensure_job for each dict of ``jobs`` (all checked before any is written); then the
        jobs no dict names are kept, paused (Active ones) or deleted, as ``remove_missing``
        says ("keep", "pause" or "delete": every job in the database counts). With
        ``dry_run`` nothing is written and the result says what would change. With ``tag``
        the sync is scoped to that tag: every declared job carries it (added to its tags), and
        only jobs carrying it count as missing, so one team's file never touches another's jobs."""
        for spec in jobs if isinstance(jobs, list) else ():
            if isinstance(spec, dict):
                self._admit(spec.get("driver"), spec.get("configuration"))
        with audit.changes_by(via="sync_jobs"):
            result = declared.sync(self, jobs, remove_missing, dry_run,
                                   tag=None if tag is None else tag_rules.tag(tag))
        if not result.dry_run:
            self._declared.update(result.created + result.updated + result.unchanged)
        return result

    @property
    def declared_names(self) -> frozenset[str]:
        """The names of the jobs this engine object declared (ensure_job, sync_jobs): the next
        start of the code that declares them sets them back to the declaration, so a dashboard
        mounted on this engine says so on their pages. The database does not record it: jobs
        declared by another process (or ``mjsched jobs apply``) are not in it."""
        return frozenset(self._declared)

    def job_history(self, job_id: str, limit: int = 100) -> list[JobChange]:
        """The job's audit trail, newest first: every change to its definition, by whom
        (database login, application user), through which path, field by field, credentials
        masked. ``job_id`` may name a deleted job (its id, or its last name)."""
        limit = validation.positive_int("limit", limit)
        job = refs.as_job_id(job_id)
        if job is None:
            name = validation.job_name(job_id)
            found = self.backend.jobs_named(name)
            job = found[0].id if len(found) == 1 else None
        changes = self.backend.job_history(job, None if job is not None else name, limit)
        if not changes:
            raise JobNotFound(job_id)
        return [audit.masked(c) for c in changes]

    def list_jobs(self, status: str | None = None, *, tag: str | None = None) -> list[Job]:
        """Every job, by name; or those of ``status`` and/or carrying ``tag``."""
        if status is not None:
            status = validation.enum_value("status", status, JobStatus).value
        return self.backend.list_jobs(status, None if tag is None else tag_rules.tag(tag))

    def pause_jobs(self, *, tag: str, reason: str | None = None, until: Any = None,
                   user: str | None = None) -> int:
        """Pause every Active job carrying ``tag`` in one transaction; returns how many. The
        database records who (its login, and ``user``: the application's user, default
        user@host), ``reason`` and ``until``: an aware datetime, or a duration from now ('2h',
        a timedelta), after which the first poll of any engine resumes them (None: until
        resume_jobs). Running runs finish. Everything is checked before anything is written."""
        tag = tag_rules.tag(tag)
        reason = validation.text("reason", reason, limit=1000)
        user = validation.text("user", user if user is not None else default_requester(), limit=255)
        paused = self.backend.pause_jobs(tag, reason, pause_until(self.backend, until), user)
        log.info("paused %d job(s) tagged %r%s%s", paused, tag, f" until {until}" if until is not None else "",
                 f": {reason}" if reason else "", extra={"action": "jobs_paused"})
        self.on_job_changed()
        return paused

    def set_tag_limit(self, tag: str, max_running: int | None, *, user: str | None = None) -> None:
        """At most ``max_running`` runs of jobs carrying ``tag`` run at once across every engine
        (None lifts the limit; 0 holds every scheduled run of the tag back). The claims enforce it
        in the database; a manual run (execute_job) is never held back but takes a slot while it
        runs. Recorded with the database login and ``user`` (default user@host)."""
        tag = tag_rules.tag(tag)
        limit = tag_rules.max_running(max_running)
        user = validation.text("user", user if user is not None else default_requester(), limit=255)
        self.backend.set_tag_limit(tag, limit, user)
        log.info("tag %r: %s", tag, "no limit" if limit is None else f"at most {limit} running at once",
                 extra={"action": "tag_limit_set"})
        self.on_job_changed()

    def tags(self) -> list[tag_rules.TagInfo]:
        """Every tag (carried by a job, or limited): its jobs, limit, Running runs and the due
        jobs its limit holds back now."""
        waiting: dict[str, list[str]] = {}
        for wait in self.waiting_for_tag():
            waiting.setdefault(wait.tag, []).append(wait.name)
        return [tag_rules.TagInfo(tag=r["tag"], jobs=int(r["jobs"]), max_running=r["max_running"],
                                  running=int(r["running"]), waiting=tuple(waiting.get(r["tag"], ())),
                                  set_at=r["set_at"], set_by=r["set_by"], set_by_user=r["set_by_user"])
                for r in self.backend.tag_summary()]

    def waiting_for_tag(self, job_id: str | None = None) -> list[tag_rules.TagWait]:
        """The due jobs (or this one) a tag's limit holds back now, one per (job, tag)."""
        jid = refs.resolve_job_id(self.backend, job_id) if job_id is not None else None
        return [tag_rules.TagWait(job_id=str(r["job_id"]), name=r["name"], tag=r["tag"],
                                  max_running=int(r["max_running"]), running=int(r["running"]))
                for r in self.backend.waiting_for_tag(jid)]

    def resume_jobs(self, *, tag: str) -> int:
        """Resume every Paused job carrying ``tag`` (however it was paused); returns how many.
        Each runs next at its first tick from now (ticks missed while paused are not run)."""
        tag = tag_rules.tag(tag)
        resumed = self.backend.resume_jobs(tag)
        log.info("resumed %d job(s) tagged %r", resumed, tag, extra={"action": "jobs_resumed"})
        self.on_job_changed()
        return resumed

    def update_job(self, job_id: str, **fields: Any) -> Job:
        """Change fields of a job; a new schedule takes effect from its next tick."""
        current = self.get_job(job_id)
        if "driver" in fields or "configuration" in fields:
            self._admit(fields.get("driver", current.driver), fields.get("configuration", current.configuration))
        rules = alerts.pop_rules(fields)
        if rules is not None:
            alerts.merged(self.backend.job_alert_rules(current.id), rules)    # checked before anything is written
        values = changed_job_values(self.backend, current, fields) if fields or rules is None else {}
        if (values or rules is None) and not self.backend.update_job(current.id, values):
            raise JobNotFound(job_id)
        self._set_alerts(current.id, rules)
        self.on_job_changed()
        return self.get_job(current.id)

    def pause_job(self, job_id: str) -> Job:
        return self.update_job(job_id, status=JobStatus.PAUSED.value)

    def resume_job(self, job_id: str) -> Job:
        return self.update_job(job_id, status=JobStatus.ACTIVE.value)

    def delete_job(self, job_id: str) -> None:
        if not self.backend.delete_job(refs.resolve_job_id(self.backend, job_id)):
            raise JobNotFound(job_id)

    def list_runs(self, job_id: str | None = None, status: str | None = None, limit: int = 100) -> list[JobRun]:
        jid = refs.resolve_job_id(self.backend, job_id) if job_id is not None else None
        if status is not None:
            status = validation.enum_value("status", status, RunStatus).value
        return self.backend.list_runs(jid, status, validation.positive_int("limit", limit))

    def get_run(self, run_id: str) -> JobRun:
        """The run ``run_id`` names: its id, any unique prefix of it, or the short id listings
        show (mjsched/engine/refs.py). RunNotFound when none does, AmbiguousRunId (listing the
        candidates) when several do."""
        return refs.resolve_run(self.backend, run_id)

    def prune_runs(self, older_than: Any = None, keep_last: int | None = None, *, job_id: str | None = None,
                   dry_run: bool = False, batch_size: int | None = None) -> int:
        """Delete finished runs now, batch after batch; returns how many (``dry_run``: how many
        would go, nothing deleted). ``older_than`` (a timedelta, seconds, or "30d") and/or
        ``keep_last`` (the newest N per job are kept) apply to every job, or to ``job_id``;
        without either, the retention rules apply (each job's keep_runs_*, else this engine's).
        Running and Queued runs are never deleted. README "Run-history retention"."""
        jid = self.get_job(job_id).id if job_id is not None else None
        return prune(self.backend, self.options, older_than=older_than, keep_last=keep_last, job_id=jid,
                     dry_run=dry_run, batch_size=batch_size, stats=self.stats)

    def why(self, job_id: str, at: datetime | None = None) -> WhyReport:
        """Why the job's next tick has not run yet, or (``at``: an aware datetime) what became of
        its last tick at or before ``at``: a ``WhyReport`` whose ``reasons`` (each with a stable
        ``code``, a sentence and its facts) walk the claim rule in its order, read from the
        database in one statement (mjsched/why.py; README "Why didn't my job run?"). JobNotFound
        for an unknown job."""
        job = self.get_job(job_id)
        tick = None
        if at is not None:
            if not isinstance(at, datetime) or at.tzinfo is None or at.utcoffset() is None:
                raise ConfigurationError("at", at, "must be a timezone-aware datetime")
            tick = why_module.tick_at_or_before(job, at) or at
        row = self.backend.why_facts(job.id, tick, at)
        if row is None:
            raise JobNotFound(job_id)
        return why_module.explain(why_module.facts_from_row(row, asked_at=at, lease_seconds=self.lease_timeout,
                                                            max_catch_up_runs=self.max_catch_up_runs))

    # -- polling -------------------------------------------------------------------------
    @property
    def is_polling(self) -> bool:
        """False in a forked copy: its threads did not survive the fork (it never polls)."""
        return self._control.polling and not self._control.forked

    def start_polling(self) -> None:
        """Run the start-up steps, then poll in the background; returns at once."""
        self._control.start()

    def stop_polling(self, wait: bool = True, max_wait: float | None = 30.0) -> None:
        """Stop dispatching; with ``wait``, drain in-flight runs for at most ``max_wait`` seconds.
        In a forked copy (docs/guide/deployment.md) it returns at once, doing nothing: the
        engine polls, and is stopped, in the process that made it.

        Runs still going afterwards get their ``cancel_event`` set and keep their
        leases, which lapse once this engine stops renewing them. The call returns
        within ``max_wait`` (with ``wait=False``: at once) plus at most a second for
        the poller and the engine registry; a poll that is stuck in the database
        hands back whatever it claims once it returns.
        """
        self._control.stop(wait, max_wait)

    @property
    def inflight(self) -> int:
        """Runs executing in this engine now (what the cap counts); 0 in a forked copy."""
        return 0 if self._control.forked else self.parts.registry.live_count()

    @property
    def leaked(self) -> int:
        """Timed-out or lease-lost runs whose thread still runs (they hold no slot)."""
        return 0 if self._control.forked else self.parts.registry.leaked

    def add_listener(self, listener: EngineListener) -> None:
        """Observe the engine: ``listener`` implements any of ``on_poll(DispatchResult)``,
        ``on_poll_failed()``, ``on_run_finished(status: str, seconds: float)`` and
        ``on_count(name: str, n: int)`` (each move of a counter of ``engine.stats``: the
        counters and the listeners are one channel) (``EngineListener``); another ``on_*`` method (a misspelled hook) is refused with
        ConfigurationError. Listener errors are logged and never reach the engine's threads."""
        self.parts.listeners.add(listener)

    def on_job_changed(self) -> None:
        """Wake the poller: a job was added or edited (by this process or another)."""
        announce_job_changed(self.parts.dispatcher, self.parts.wakeup, self.parts.purger)

    def dispatch_due_jobs(self) -> DispatchResult:
        """One poll, by hand: sweep, claim up to the free slots, hand runs to the pool.
        EngineStopped after stop_polling() or close(): this engine starts no runs then."""
        self._control.check_dispatching("dispatch_due_jobs")
        return self.parts.listeners.observe(lambda: self.parts.dispatcher.dispatch(True))[0]

    def run_due_jobs(self, timeout: float | None = None) -> list[JobRun]:
        """Claim everything due now (pass after pass while slots free up), wait for those runs
        within ``timeout`` seconds (None: no bound) and return them; for scripts and system cron.
        Not while polling: the loop would start runs this call does not wait for; EngineStopped
        after stop_polling() or close()."""
        timeout = check_timeout(timeout)
        self._control.check_dispatching("run_due_jobs")
        if self._control.polling:
            raise ConfigurationError("run_due_jobs", "while polling", "stop_polling() first, or let the loop run")
        return self.parts.due_pass.run(timeout)

    # -- manual execution ---------------------------------------------------------------
    def execute_job(self, job_id: str, parameters: dict[str, Any] | None = None, *, force: bool = False) -> JobRun:
        """Run a job now, in this call, under its lock; returns the finished run.

        ``parameters`` are merged over the job's configuration for this run only (see
        mjsched/parameters.py), checked by the driver's ``validate_configuration`` before
        anything is written, and stored on the run (``JobRun.parameters``).
        A job that is not Active raises JobNotActive unless ``force`` (an operator's
        deliberate run of a paused job). Lock and run are taken in one replay-safe call,
        so a lost reply never leaves the job locked by a run nobody executes.
        """
        return self._manual.execute(job_id, parameters, force)

    def cancel_run(self, run_id: str, *, requested_by: str | None = None) -> None:
        """Cancel a run, from any process (mjsched/engine/cancellation.py): a Queued run ends
        Cancelled at once; a Running run's engine sets its cancel_event at its next lease
        renewal at the latest and ends it Cancelled (killing a process-isolated run after
        ``cancel_grace``). ``run_id``: as get_run takes it (an id, a unique prefix, a short id).
        RunNotFound for an unknown id, AmbiguousRunId for a prefix several runs have,
        RunNotCancellable for a run that already ended. ``requested_by`` (default user@host and
        this engine) goes into the run's error_message."""
        if validation.canonical_uuid(run_id) is None and isinstance(run_id, str):
            run_id = refs.resolve_run(self.backend, run_id).id
        self.parts.cancellation.request(run_id, requested_by or default_requester(self.instance_name))

    def unlock_job(self, job_id: str) -> bool:
        """Operator override: free the job's lock whoever holds it. The run that held it ends
        Abandoned and its holder's late completion is refused (fenced by its token).
        Returns False when the job was not locked."""
        return self._manual.unlock(job_id)

    # -- lifecycle -------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop polling (without draining) and leave nothing held: runs still going get their
        ``cancel_event`` and CLOSE_GRACE_SECONDS to return (their outcome is recorded as
        usual); what is left after that is handed back (recorded Cancelled, its lock released,
        fenced by its token) before the connections close. Also called at interpreter exit.
        In a forked copy it returns at once: the inherited connections are the parent's, left
        open for it (docs/guide/deployment.md)."""
        self._control.close()

    def __enter__(self) -> "SchedulingEngine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

