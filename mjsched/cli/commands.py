"""The ``mjsched`` command (also ``python -m mjsched``).

Exit codes: 0 ok; 1 a run failed (or could not start: lock held), or mjsched itself
failed unexpectedly; 2 bad usage or input, an unknown job, a database that cannot be
reached. Errors are one line on stderr: ``mjsched: error: <message>``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import signal
import sys
import threading
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

from . import config as config_mod
from ..logfmt import JsonLinesFormatter
from ..redaction import RedactingFilter, redact, redact_text
from ..errors import ConfigurationError, JobNotActive, JobNotFound, LockNotAcquired, SchedulerError
from ..parameters import parse_assignment
from ..retry import parse_spec
from ..version import __version__
from .terminal import (EXIT_FAILED, EXIT_OK, EXIT_USAGE, UTC, GracefulStop, ago, clip, drain, duration, jsonable,
                       table, ts)

log = logging.getLogger("mjsched.cli")

_EPS = timedelta(microseconds=1)
JOB_STATUSES = ("Pending", "Active", "Paused", "Disabled", "Expired")
EMBEDDED_MOVED_EXIT_BOUND = 20.0   # seconds: `run` exits this soon after its embedded server moved
RUN_STATUSES = ("Queued", "Running", "Completed", "Failed", "Timeout", "Cancelled", "Abandoned", "Skipped")


class UsageError(SchedulerError):
    """Bad command-line usage (exit 2)."""


class Parser(argparse.ArgumentParser):
    """argparse, with one-line errors and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def enum_arg(allowed: Sequence[str]) -> Callable[[str], str]:
    """Accept enum values case-insensitively ("skip" -> "Skip"); validation reports bad ones."""
    def convert(text: str) -> str:
        for value in allowed:
            if value.lower() == text.lower():
                return value
        return text
    return convert


# -- the per-invocation context -------------------------------------------------------------------------
class Context:
    def __init__(self, args: argparse.Namespace, settings: config_mod.Settings) -> None:
        self.args = args
        self.settings = settings
        self.json = bool(getattr(args, "json", False))
        self.out = sys.stdout
        self.embedded: Any = None
        self._engines: list[Any] = []

    def emit(self, text: str = "") -> None:
        print(redact_text(text), file=self.out, flush=True)

    def emit_json(self, value: Any) -> None:
        print(json.dumps(redact(jsonable(value)), indent=2, default=str), file=self.out, flush=True)

    def dsn(self) -> str:
        if self.settings.dsn:
            return self.settings.dsn
        if self.embedded is None:
            from .embedded import EmbeddedServer

            self.embedded = EmbeddedServer(self.settings["embedded.data_dir"], self.settings["embedded.user"],
                                           announce=lambda m: print(f"mjsched: {m}", file=sys.stderr, flush=True))
        return str(self.embedded.start())

    def watch_embedded(self, stop: "GracefulStop") -> list[str]:
        """For a long-running command on the embedded server: when another process restarted the
        server on another port (the recorded one was taken), stop with a clear error (the list
        gets the message), since this process's connections point at the old port. The stop is
        bounded: the process exits within EMBEDDED_MOVED_EXIT_BOUND seconds whatever the close does."""
        moved: list[str] = []
        if self.embedded is None:
            return moved

        def on_moved(old: int, new: int) -> None:
            moved.append(f"the embedded PostgreSQL moved from 127.0.0.1:{old} to 127.0.0.1:{new} (another mjsched "
                         f"process restarted it while port {old} was taken); this process's connections point at "
                         "the old port: start it again")
            stop.request("the embedded PostgreSQL moved")

            def bound() -> None:
                os.write(2, f"mjsched: error: {moved[0]} (exiting: the stop took too long)\n".encode())
                os._exit(EXIT_FAILED)
            timer = threading.Timer(EMBEDDED_MOVED_EXIT_BOUND, bound)
            timer.daemon = True
            timer.start()
        self.embedded.watch(on_moved)
        return moved

    @property
    def on_embedded(self) -> bool:
        return not self.settings.dsn

    def describe_database(self) -> str:
        if self.on_embedded and self.embedded is not None:
            st = self.embedded.status()
            return f"embedded PostgreSQL {st.get('major') or ''} on 127.0.0.1:{st.get('port')} ({st['data_dir']})"
        return redact_text(self.settings.dsn or "")

    def engine(self, *, long_running: bool = False, install: bool | None = None, **overrides: Any) -> Any:
        """A SchedulingEngine on the configured database (the embedded one by default).

        One-shot commands give up on an unreachable database after a few seconds;
        ``run`` keeps the engine's patient retries. On the embedded database the
        schema is installed on first use (zero setup).
        """
        from ..engine import EngineOptions, SchedulingEngine

        options = self.settings.engine_options()
        tuning = {k: overrides.pop(k) for k in list(overrides) if k in EngineOptions.__dataclass_fields__}
        if tuning:
            options = dataclasses.replace(options, **tuning)
        notifier = overrides.pop("notifier", None) or self.settings.build_notifier()
        if not long_running:
            overrides.update(retry_attempts=2, retry_max_delay=3.0, connect_timeout=5.0)
        engine = SchedulingEngine(self.dsn(), notifier=notifier, options=options, **overrides)
        self._engines.append(engine)
        if install if install is not None else self.on_embedded:
            engine.install()
        return engine

    def close(self) -> None:
        for engine in self._engines:
            try:
                engine.close()
            except Exception as exc:  # noqa: BLE001 - closing must not mask the command's outcome
                log.debug("closing the engine failed: %s", exc)
        self._engines.clear()
        if self.embedded is not None:
            try:
                self.embedded.stop()
            except Exception as exc:  # noqa: BLE001
                print(f"mjsched: warning: could not stop the embedded PostgreSQL: {exc}", file=sys.stderr)


def resolve_job(engine: Any, ref: str) -> Any:
    """A job by id or by name, the library's rule (``engine.get_job``, mjsched/engine/refs.py),
    else, for the command line only, by a unique id prefix (at least 4 characters)."""
    from ..engine.refs import as_job_id

    try:
        return engine.get_job(ref)
    except JobNotFound:
        if len(ref) < 4 or as_job_id(ref) is not None:
            raise
    prefixed = [j for j in engine.list_jobs() if j.id.startswith(ref.lower())]
    if len(prefixed) == 1:
        return prefixed[0]
    if len(prefixed) > 1:
        raise ConfigurationError("job", ref, f"id prefix matches {len(prefixed)} jobs; give more characters")
    raise JobNotFound(ref, by="name")


def parse_instant(field: str, text: str | None, zone: str) -> datetime | None:
    """ISO 8601; a time without an offset is read in the job's timezone."""
    if text is None:
        return None
    from ..cron import resolve_timezone

    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ConfigurationError(field, text, "must be an ISO 8601 date/time, e.g. 2030-01-31T09:00:00+01:00") \
            from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=resolve_timezone(zone))
    return value


def job_configuration(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    if text.startswith("@"):
        path = Path(text[1:]).expanduser()
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError("--config", str(path), f"cannot be read: {exc.strerror}") from None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigurationError("--config", text, f"is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ConfigurationError("--config", text, "must be a JSON object, e.g. '{\"command\": [\"true\"]}'")
    return value


# -- commands -------------------------------------------------------------------------------------------
def cmd_init_db(ctx: Context) -> int:
    engine = ctx.engine(install=False)
    applied = engine.install()
    if ctx.json:
        ctx.emit_json({"applied": applied, "database": ctx.describe_database()})
    elif applied:
        ctx.emit(f"installed: {', '.join(applied)} on {ctx.describe_database()}")
    else:
        ctx.emit(f"schema is up to date on {ctx.describe_database()}")
    return EXIT_OK


def job_row(job: Any) -> list[str]:
    return [job.id, clip(job.name, 32), job.driver, f"{schedule_words(job)} ({job.timezone})", job.status.value,
            ts(job.next_run_at), ts(job.last_run_at), f"{job.success_count}/{job.failure_count}"]


def schedule_words(job: Any) -> str:
    """A job's schedule as one short text: its cron, 'every 1m30s' or 'once at <ISO>'."""
    from ..schedules import format_duration

    if job.interval_seconds is not None:
        return f"every {format_duration(job.interval_seconds)}"
    if job.run_at is not None:
        return f"once at {job.run_at.astimezone(UTC).isoformat()}"
    return str(job.cron_expression)


def parse_every(text: str) -> int:
    from ..schedules import parse_duration

    return parse_duration(text, "--every")


def schedule_fields(a: Any, zone: str) -> dict[str, Any]:
    """--cron / --every / --run-at as create_job/update_job keywords (only those given; the
    API refuses more than one, or none on add). --run-at without an offset is read in ``zone``."""
    given = {"cron": a.cron, "every": a.every, "run_at": parse_instant("--run-at", a.run_at, zone)}
    return {k: v for k, v in given.items() if v is not None}


JOB_HEADERS = ["ID", "NAME", "DRIVER", "SCHEDULE", "STATUS", "NEXT RUN (UTC)", "LAST RUN (UTC)", "OK/FAILED"]


def cmd_jobs_add(ctx: Context) -> int:
    a = ctx.args
    fields: dict[str, Any] = {
        "concurrency_mode": a.concurrency_mode, "missed_run_policy": a.missed_run_policy, "status": a.status,
        "run_immediately_if_never_run": a.run_immediately, "notify_on_success": a.notify_on_success,
        "notify_on_failure": a.notify_on_failure, "high_frequency_ok": a.high_frequency_ok,
    }
    optional = {"description": a.description, "owner": a.owner, "notify_to": a.notify_to,
                "max_runtime": a.max_runtime, "max_queued_runs": a.max_queued_runs, "isolation": a.isolation,
                "keep_runs_days": a.keep_runs_days, "keep_runs_count": a.keep_runs_count,
                "start_at": parse_instant("--start-at", a.start_at, a.timezone),
                "end_at": parse_instant("--end-at", a.end_at, a.timezone),
                "retry": parse_spec(a.retry) if a.retry is not None else None,
                "notify_final_attempt_only": False if a.notify_every_attempt else None}
    fields.update({k: v for k, v in optional.items() if v is not None})
    fields.update(schedule_fields(a, a.timezone))
    configuration = job_configuration(a.configuration)
    # Validate the whole job before touching the database (and before starting one).
    from .. import validation

    validation.job_fields({"name": a.name, "driver": a.driver, "timezone": a.timezone,
                           "configuration": configuration, "cron": None, **fields}, creating=True)
    if a.check_import:
        check_can_run(a.driver, configuration)
    engine = ctx.engine()
    job_id = engine.create_job(name=a.name, driver=a.driver, timezone=a.timezone,
                               configuration=configuration, **fields)
    job = engine.get_job(job_id)
    if ctx.json:
        ctx.emit_json(job)
    else:
        ctx.emit(f"created job {job.id} ({job.name}); status {job.status.value}, next run {ts(job.next_run_at)} UTC")
    return EXIT_OK


def check_can_run(driver: str, configuration: dict[str, Any] | None) -> None:
    """--check-import: could this process run the job (import a python job's callable)?"""
    from ..drivers.registry import get_driver

    get_driver(driver)().check_can_run(configuration or {})


def cmd_jobs_edit(ctx: Context) -> int:
    """Change fields of a job in place: its id and run history stay (``remove`` + ``add`` lose them)."""
    a = ctx.args
    engine = ctx.engine()
    job = resolve_job(engine, a.job)
    zone = a.timezone or job.timezone
    given = {"name": a.name, "driver": a.driver, **schedule_fields(a, zone), "timezone": a.timezone,
             "configuration": job_configuration(a.configuration), "description": a.description,
             "owner": a.owner, "concurrency_mode": a.concurrency_mode, "missed_run_policy": a.missed_run_policy,
             "max_runtime": a.max_runtime, "max_queued_runs": a.max_queued_runs, "isolation": a.isolation,
             "start_at": parse_instant("--start-at", a.start_at, zone),
             "end_at": parse_instant("--end-at", a.end_at, zone), "status": a.status, "notify_to": a.notify_to,
             "notify_on_success": a.notify_on_success, "notify_on_failure": a.notify_on_failure,
             "high_frequency_ok": a.high_frequency_ok, "keep_runs_days": a.keep_runs_days,
             "keep_runs_count": a.keep_runs_count,
             "retry": parse_spec(a.retry) if a.retry is not None else None,
             "notify_final_attempt_only": a.notify_final_attempt_only}
    fields = {k: v for k, v in given.items() if v is not None}
    for flag, key in (("clear_max_runtime", "max_runtime"), ("clear_start_at", "start_at"),
                      ("clear_end_at", "end_at"), ("clear_keep_runs_days", "keep_runs_days"),
                      ("clear_keep_runs_count", "keep_runs_count"), ("clear_retry", "retry")):
        if getattr(a, flag):
            if key in fields:
                raise UsageError(f"--{key.replace('_', '-')} and --{flag.replace('_', '-')} contradict each other")
            fields[key] = None
    if not fields:
        raise UsageError("nothing to change: give at least one field, e.g. --cron '*/5 * * * *'")
    if a.check_import:
        check_can_run(fields.get("driver", job.driver), fields.get("configuration", job.configuration))
    job = engine.update_job(job.id, **fields)
    if ctx.json:
        ctx.emit_json(job)
    else:
        ctx.emit(f"updated job {job.id} ({job.name}): {', '.join(sorted(fields))}; status {job.status.value}, "
                 f"next run {ts(job.next_run_at)} UTC")
    return EXIT_OK


def cmd_jobs_list(ctx: Context) -> int:
    engine = ctx.engine()
    status = ctx.args.status
    jobs = engine.list_jobs(status)
    if status is None and not ctx.args.all:
        jobs = [j for j in jobs if j.status.value != "Disabled"]
    if ctx.json:
        ctx.emit_json(jobs)
    elif not jobs:
        ctx.emit("no jobs" + ("" if ctx.args.all or status else " (Disabled jobs are hidden; use --all)"))
    else:
        ctx.emit(table(JOB_HEADERS, [job_row(j) for j in jobs]))
    return EXIT_OK


def cmd_jobs_show(ctx: Context) -> int:
    engine = ctx.engine()
    job = resolve_job(engine, ctx.args.job)
    if ctx.json:
        ctx.emit_json(job)
        return EXIT_OK
    data = redact(jsonable(job))
    width = max(len(k) for k in data)
    for key, value in data.items():
        if key == "configuration":
            value = json.dumps(value, sort_keys=True)
        ctx.emit(f"{key.ljust(width)}  {'-' if value is None else value}")
    return EXIT_OK


def _set_status(ctx: Context, action: str) -> int:
    engine = ctx.engine()
    job = resolve_job(engine, ctx.args.job)
    job = getattr(engine, f"{action}_job")(job.id)
    if ctx.json:
        ctx.emit_json(job)
    else:
        ctx.emit(f"{action}d job {job.id} ({job.name}): status {job.status.value}, next run {ts(job.next_run_at)} UTC")
    return EXIT_OK


def cmd_jobs_pause(ctx: Context) -> int:
    return _set_status(ctx, "pause")


def cmd_jobs_resume(ctx: Context) -> int:
    return _set_status(ctx, "resume")


def cmd_jobs_remove(ctx: Context) -> int:
    engine = ctx.engine()
    job = resolve_job(engine, ctx.args.job)
    engine.delete_job(job.id)
    if ctx.json:
        ctx.emit_json({"removed": job.id, "name": job.name})
    else:
        ctx.emit(f"removed job {job.id} ({job.name}) and its run history")
    return EXIT_OK


def cmd_jobs_unlock(ctx: Context) -> int:
    """The operator's override for a lock whose holder is known to be gone (fenced, logged)."""
    engine = ctx.engine()
    job = resolve_job(engine, ctx.args.job)
    freed = engine.unlock_job(job.id)
    if ctx.json:
        ctx.emit_json({"job": job.id, "name": job.name, "unlocked": freed})
    elif freed:
        ctx.emit(f"unlocked job {job.id} ({job.name}): the run that held the lock is recorded Abandoned; "
                 "its engine's late completion will be refused")
    else:
        ctx.emit(f"job {job.id} ({job.name}) was not locked; nothing changed")
    return EXIT_OK


def cmd_jobs_import_celery(ctx: Context) -> int:
    """One celery job per beat_schedule entry of a Celery app, idempotent by name (issue 16)."""
    from ..contrib.celery import import_beat_schedule

    a = ctx.args
    result = import_beat_schedule(a.app, ctx.engine(), status=a.status, mode=a.mode, dry_run=a.dry_run)
    if ctx.json:
        ctx.emit_json({**result.as_dict(), "dry_run": a.dry_run})
    else:
        verb = "would be " if a.dry_run else ""
        for label, names in (("created", result.created), ("updated", result.updated),
                             ("unchanged", result.unchanged)):
            ctx.emit(f"{len(names)} {verb}{label}" + (f": {', '.join(names)}" if names else ""))
        for name, why in result.refused.items():
            ctx.emit(f"refused {name}: {why}")
    return EXIT_FAILED if result.refused else EXIT_OK


def cmd_jobs_apply(ctx: Context) -> int:
    """Make the jobs match a TOML file of declarations (engine.sync_jobs); --dry-run writes nothing."""
    from . import jobfile

    from ..engine.declared import declarations

    a = ctx.args
    declared = jobfile.load(a.file)
    declarations(declared)     # every job checked before a connection is opened
    result = ctx.engine().sync_jobs(declared, remove_missing=a.remove_missing, dry_run=a.dry_run)
    removed_as = {"pause": "paused", "delete": "deleted"}.get(a.remove_missing, "removed")
    if ctx.json:
        ctx.emit_json({"dry_run": result.dry_run, "remove_missing": a.remove_missing, "created": result.created,
                       "updated": result.updated, "unchanged": result.unchanged, "removed": result.removed,
                       "changes": {name: {k: {"old": c.old, "new": c.new} for k, c in fields.items()}
                                   for name, fields in result.changes.items()}})
        return EXIT_OK
    for label, names in (("created", result.created), ("updated", result.updated), ("unchanged", result.unchanged),
                         (removed_as, result.removed)):
        for name in names:
            changes = result.changes.get(name, {})
            detail = "; ".join(f"{k}: {_diff_value(c.old)} -> {_diff_value(c.new)}" for k, c in sorted(changes.items()))
            ctx.emit(f"{label:<9} {name}" + (f"  ({detail})" if detail else ""))
    verb = "would be " if result.dry_run else ""
    ctx.emit(f"{len(result.created)} {verb}created, {len(result.updated)} {verb}updated, "
             f"{len(result.unchanged)} unchanged, {len(result.removed)} {verb}{removed_as}"
             + (" (dry run: nothing was written)" if result.dry_run else ""))
    return EXIT_OK


def _diff_value(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (dict, list)):
        return json.dumps(redact(value), sort_keys=True)
    return repr(value)


@dataclasses.dataclass(frozen=True)
class _PreviewTarget:
    """What ``jobs preview`` shows: a stored job's schedule, or one given as flags (no job)."""
    given: dict[str, Any]          # at most one of cron, every, run_at once checked
    zone: str
    after: datetime
    anchor: datetime | None = None  # an interval's ticks: anchor + k * every
    job: Any = None


def cmd_jobs_preview(ctx: Context) -> int:
    from ..cron import resolve_timezone

    a = ctx.args
    target = _preview_target(ctx)
    if len(target.given) > 1:
        raise UsageError("give one of --cron, --every, --run-at")
    job, zone, times = target.job, target.zone, _fire_times(target, a.count)
    tz = resolve_timezone(zone)
    rows = [{"local": t.astimezone(tz).isoformat(), "utc": t.astimezone(UTC).isoformat()} for t in times]
    shown = _schedule_text(target.given)
    if ctx.json:
        ctx.emit_json({"cron": target.given.get("cron"), "schedule": shown, "timezone": zone,
                       "job": job.id if job else None, "times": rows})
        return EXIT_OK
    title = f"job {job.name!r} ({job.id})" if job else "schedule"
    ctx.emit(f"next {len(times)} fire time(s) of {title}: {shown!r} in {zone}")
    if job is not None and job.status.value != "Active":
        ctx.emit(f"(the job is {job.status.value}: nothing fires until it is Active)")
    ctx.emit(table([zone, "UTC"], [[t.astimezone(tz).strftime("%Y-%m-%d %H:%M:%S %Z (%z)"),
                                    t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")] for t in times]))
    if job is not None and job.end_at is not None and len(times) < a.count:
        ctx.emit(f"(the job's window ends at {ts(job.end_at)} UTC)")
    return EXIT_OK


def _preview_target(ctx: Context) -> _PreviewTarget:
    """A job or a schedule, never both; a job's ticks start at its start_at, and an expired
    one-off has none left."""
    a = ctx.args
    after = parse_instant("--after", a.after, a.timezone or "UTC") if a.after else datetime.now(UTC)
    given = schedule_fields(a, a.timezone or "UTC")
    if a.job is None:
        if not given:
            raise UsageError("give a job id or name, or a schedule: --cron EXPR, --every DURATION or --run-at ISO")
        return _PreviewTarget(given, a.timezone or "UTC", after)
    if given:
        raise UsageError("give a job or a schedule (--cron, --every, --run-at), not both")
    job = resolve_job(ctx.engine(), a.job)
    kind = {"cron": job.cron_expression, "every": job.interval_seconds, "run_at": job.run_at}
    given = {k: v for k, v in kind.items() if v is not None}
    if "run_at" in given and job.status.value == "Expired":
        given = {}   # a one-off that ended has no run left
    elif job.start_at is not None and job.start_at > after:
        after = job.start_at - _EPS   # a tick exactly at start_at fires
    return _PreviewTarget(given, a.timezone or job.timezone, after, anchor=job.start_at or job.created_at, job=job)


def _fire_times(target: _PreviewTarget, count: int) -> list[datetime]:
    """The next ``count`` fire times after target.after, none at or past a job's end_at."""
    from ..cron import next_run_times
    from ..schedules import next_run_times as preview_times

    given, zone, after = target.given, target.zone, target.after
    if "every" in given:
        times = preview_times(every=given["every"], timezone=zone, after=after, count=count, start_at=target.anchor)
    elif "run_at" in given:
        times = preview_times(run_at=given["run_at"], timezone=zone, after=after, count=count)
    elif "cron" in given:
        times = next_run_times(given["cron"], zone, after=after, count=count)
    else:
        times = []
    if target.job is not None and target.job.end_at is not None:
        times = [t for t in times if t < target.job.end_at]
    return times


def _schedule_text(given: dict[str, Any]) -> str:
    """The schedule as the preview's heading shows it ("ended" when nothing is left)."""
    from ..schedules import format_duration

    every = given.get("every")
    return (given.get("cron") if "cron" in given
            else f"every {format_duration(every if isinstance(every, int) else parse_every(every))}" if every
            else f"once at {given['run_at'].astimezone(UTC).isoformat()}" if "run_at" in given else "ended")


def run_row(run: Any) -> dict[str, Any]:
    """A run as shown (text and --json): JSON-ready, secrets in details and parameters masked."""
    return dict(redact(jsonable(run)))


def run_lines(run: Any, job_name: str | None = None) -> list[str]:
    lines = [f"run {run.id} of job {job_name or run.scheduled_job_id}: {run.status.value}"
             + (f" in {duration(run.duration_ms)}" if run.duration_ms is not None else "")]
    if run.parameters:
        lines.append(f"parameters: {json.dumps(run_row(run)['parameters'], sort_keys=True)}")
    if run.error_message:
        lines.append(f"error: {run.error_message}")
    for key, value in redact(run.details or {}).items():
        if value is None or value == "":
            continue
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        if isinstance(value, str) and "\n" in value.strip():
            lines.append(f"{key}:")
            lines.extend("  " + line for line in value.rstrip().splitlines()[-20:])
        else:
            lines.append(f"{key}: {text}")
    return lines


def cmd_execute(ctx: Context) -> int:
    engine = ctx.engine()
    job = resolve_job(engine, ctx.args.job)
    parameters = dict(parse_assignment(text) for text in ctx.args.param or []) or None
    run = engine.execute_job(job.id, parameters, force=ctx.args.force)
    if ctx.json:
        ctx.emit_json(run)
    else:
        for line in run_lines(run, job.name):
            ctx.emit(line)
    return EXIT_OK if run.status.value == "Completed" else EXIT_FAILED


def attempt_text(run: Any) -> str:
    """A run's attempt for the runs table: "2", and for a Queued retry when it is due."""
    text = str(getattr(run, "attempt", 1))
    if run.status.value == "Queued" and getattr(run, "retry_at", None) is not None:
        text += f" (due {ts(run.retry_at)})"
    return text


def cmd_runs(ctx: Context) -> int:
    engine = ctx.engine()
    job_id = resolve_job(engine, ctx.args.job).id if ctx.args.job else None
    if ctx.args.follow:
        if not ctx.args.interval > 0:
            raise UsageError(f"--interval must be a positive number of seconds, not {ctx.args.interval}")
        return follow_runs(ctx, engine, job_id)
    runs = engine.list_runs(job_id=job_id, status=ctx.args.status, limit=ctx.args.limit)
    if ctx.json:
        ctx.emit_json(runs)
        return EXIT_OK
    if not runs:
        ctx.emit("no runs")
        return EXIT_OK
    ctx.emit(runs_table(runs, {j.id: j.name for j in engine.list_jobs()}))
    return EXIT_OK


def runs_table(runs: list[Any], names: dict[str, str]) -> str:
    """The runs as a table; a PARAMETERS column only when a listed run has some
    (execute_job(parameters=...)), masked like details."""
    with_parameters = any(r.parameters for r in runs)
    return table(["RUN", "JOB", "STATUS", "ATTEMPT", "SCHEDULED FOR (UTC)", "STARTED (UTC)", "DURATION", "BY",
                  "ERROR"] + (["PARAMETERS"] if with_parameters else []),
                 [[r.id[:8], clip(names.get(r.scheduled_job_id, r.scheduled_job_id[:8]), 28), r.status.value,
                   attempt_text(r), ts(r.scheduled_for) if r.scheduled_for else "manual", ts(r.started_at),
                   duration(r.duration_ms), clip(r.executed_by_instance, 24), clip(r.error_message, 50)]
                  + ([clip(json.dumps(run_row(r)["parameters"], sort_keys=True) if r.parameters else "-", 40)]
                     if with_parameters else [])
                  for r in runs])


def cmd_runs_cancel(ctx: Context) -> int:
    """Ask for a run to be cancelled (any process; the run's engine acts at its next lease
    renewal); with --wait, also wait for the run to end and exit 1 unless it ended Cancelled."""
    from ..engine.cancellation import default_requester

    engine = ctx.engine()
    engine.cancel_run(ctx.args.run, requested_by=default_requester())
    run = engine.backend.get_run(str(uuid.UUID(ctx.args.run)))
    if ctx.args.wait and run is not None and not run.finished:
        if not ctx.args.timeout > 0:
            raise UsageError(f"--timeout must be a positive number of seconds, not {ctx.args.timeout}")
        deadline = time.monotonic() + ctx.args.timeout
        while run is not None and not run.finished and time.monotonic() < deadline:
            time.sleep(0.2)
            run = engine.backend.get_run(run.id)
    if run is None:      # deleted with its job meanwhile
        raise SchedulerError(f"run_id={ctx.args.run!r}: the run was deleted with its job")
    if ctx.json:
        ctx.emit_json(run)
    elif run.finished:
        ctx.emit(f"run {run.id}: {run.status.value}" + (f": {run.error_message}" if run.error_message else ""))
    else:
        ctx.emit(f"run {run.id}: cancel requested by {run.cancel_requested_by} at {ts(run.cancel_requested_at)} UTC; "
                 f"its engine ({run.executed_by_instance}) ends it Cancelled at its next lease renewal")
    if ctx.args.wait:
        return EXIT_OK if run.status.value == "Cancelled" else EXIT_FAILED
    return EXIT_OK


def cmd_runs_prune(ctx: Context) -> int:
    """Delete finished runs now (README "Run-history retention"); --dry-run counts them."""
    a = ctx.args
    from .. import retention

    older_than = retention.duration("--older-than", a.older_than) if a.older_than is not None else None
    if a.keep_last is not None and (isinstance(a.keep_last, bool) or a.keep_last < 1):
        raise UsageError(f"--keep-last must be a number of runs >= 1, not {a.keep_last}")
    engine = ctx.engine()
    job = resolve_job(engine, a.job) if a.job else None
    count = engine.prune_runs(older_than, a.keep_last, job_id=job.id if job else None, dry_run=a.dry_run,
                              batch_size=a.batch_size)
    rule = ("the retention settings (each job's keep_runs_days/keep_runs_count, else the engine's)"
            if older_than is None and a.keep_last is None else
            " and ".join(p for p in (f"older than {a.older_than}" if older_than is not None else "",
                                     f"beyond each job's newest {a.keep_last}" if a.keep_last is not None else "")
                         if p))
    if ctx.json:
        ctx.emit_json({"dry_run": a.dry_run, "purged": count, "older_than_seconds": older_than,
                       "keep_last": a.keep_last, "job": job.name if job else None})
    else:
        scope = f" of job {job.name}" if job else ""
        ctx.emit(f"{'would delete' if a.dry_run else 'deleted'} {count} finished run(s){scope}: {rule} "
                 "(Running and Queued runs are never deleted)")
    return EXIT_OK


def follow_runs(ctx: Context, engine: Any, job_id: str | None) -> int:
    """A live tail: each run once when it starts (or is queued) and once when it ends, until
    Ctrl-C/SIGTERM (exit 0). With --json, one JSON object a line."""
    seen: dict[str, str] = {}
    names: dict[str, str] = {}
    first = True
    try:
        while True:
            runs = engine.list_runs(job_id=job_id, status=ctx.args.status, limit=max(ctx.args.limit, 200))
            fresh = [r for r in reversed(runs) if seen.get(r.id) != r.status.value]
            if first:   # the backlog: the last --limit runs, as plain `runs` shows them
                fresh = fresh[-ctx.args.limit:] if ctx.args.limit else []
            if any(r.scheduled_job_id not in names for r in fresh):
                names = {j.id: j.name for j in engine.list_jobs()}
            for run in fresh:
                if ctx.json:
                    print(json.dumps(redact(jsonable(run)), default=str), file=ctx.out, flush=True)
                else:
                    when = run.completed_at or run.started_at or run.queued_at
                    ctx.emit(f"{ts(when)}  {clip(names.get(run.scheduled_job_id, run.scheduled_job_id[:8]), 28):<28} "
                             f"{run.status.value:<9} {run.id[:8]} {duration(run.duration_ms):>8} "
                             f"{clip(run.error_message or '', 60)}")
            seen.update((r.id, r.status.value) for r in runs)
            first = False
            time.sleep(ctx.args.interval)
    except KeyboardInterrupt:
        return EXIT_OK


def cmd_status(ctx: Context) -> int:
    engine = ctx.engine()
    from ..liveness import LIVE, engine_state, silent_seconds

    summary = dict(engine.backend.status_summary())
    engines = summary.pop("engines", [])
    by_instance = summary.pop("running_by_instance", {}) or {}
    for e in engines:
        e["silent_seconds"] = silent_seconds(e)
        e["state"] = engine_state(e, lease_seconds=ctx.settings["lease_timeout"])
        e["stale"] = e["state"] != LIVE
    live = {e["instance"] for e in engines if e["state"] == LIVE}
    # Running runs whose engine is not live: left to lapse (the sweep makes them Abandoned).
    orphaned = {instance: runs for instance, runs in by_instance.items() if instance not in live}
    summary["orphaned_running"] = sum(orphaned.values())
    if ctx.json:
        ctx.emit_json({"database": ctx.describe_database(), "engines": engines, "counts": summary,
                       "orphaned_running_by_instance": orphaned})
        return EXIT_OK
    ctx.emit(f"database: {ctx.describe_database()}")
    ctx.emit("")
    if engines:
        ctx.emit(f"engines ({sum(e['state'] == LIVE for e in engines)} live of {len(engines)} registered)")
        ctx.emit(table(["INSTANCE", "HOST", "PID", "VERSION", "STARTED (UTC)", "LAST SEEN", "STATE", "RUNNING", "CAP"],
                       [[e["instance"], e["host"], e["pid"], e["version"], ts(e["started_at"]),
                         ago(e["silent_seconds"]), e["state"], e.get("running", "-"),
                         e.get("max_concurrent_jobs") or "-"] for e in engines]))
    else:
        ctx.emit("engines: none running (start one with `mjsched run`)")
    if orphaned:
        ctx.emit("")
        ctx.emit(f"orphaned: {summary['orphaned_running']} Running run(s) of engines that are not live "
                 f"({', '.join(f'{i} ({n})' for i, n in sorted(orphaned.items(), key=lambda kv: str(kv[0])))}); "
                 "they end Abandoned when their lease lapses, or now with `mjsched jobs unlock JOB`")
    ctx.emit("")
    labels = [("active_jobs", "active jobs"), ("due", "due now"), ("running", "running"), ("queued", "queued"),
              ("failing", "failing (last run not Completed)"), ("abandoned_24h", "abandoned (24 h)"),
              ("orphaned_running", "orphaned (running, engine not live)")]
    width = max(len(label) for _, label in labels)
    for key, label in labels:
        if key in summary:
            ctx.emit(f"{label.ljust(width)}  {summary[key]}")
    return EXIT_OK


def cmd_config(ctx: Context) -> int:
    rows = ctx.settings.describe()
    if ctx.json:
        ctx.emit_json({"config_file": ctx.settings.config_file, "settings": rows})
        return EXIT_OK
    ctx.emit(f"config file: {ctx.settings.config_file or '(none)'}")
    ctx.emit(table(["KEY", "VALUE", "FROM"], [[r["key"], clip(json.dumps(r["value"]) if not isinstance(
        r["value"], str) else r["value"], 50), r["source"]] for r in rows]))
    return EXIT_OK


def cmd_run(ctx: Context) -> int:
    settings = ctx.settings
    if not settings["enabled"]:
        print(f"mjsched: scheduled jobs are disabled (enabled = false, from {settings.label('enabled')}); "
              "not polling", file=sys.stderr)
        return EXIT_OK
    if ctx.args.once:
        return run_once(ctx)
    if ctx.args.timeout is not None:
        raise UsageError("--timeout goes with --once (a polling engine stops on SIGINT/SIGTERM)")
    engine = ctx.engine(long_running=True)
    dashboard = start_dashboard(ctx, engine)
    exporter = None
    if settings["metrics.port"]:
        from ..metrics import EngineMetrics

        exporter = EngineMetrics(engine)
        exporter.serve(settings["metrics.port"], settings["metrics.host"])
        log.info("metrics on http://%s:%d/metrics", settings["metrics.host"], settings["metrics.port"],
                 extra={"action": "metrics_started"})
    stop = GracefulStop()
    with stop.installed():
        engine.start_polling()
        log.info("mjsched %s running on %s; stop with SIGTERM or Ctrl-C (drain up to %gs)", __version__,
                 ctx.describe_database(), settings["shutdown_timeout"], extra={"action": "cli_running"})
        moved = ctx.watch_embedded(stop)
        stop.wait()
        if moved:    # its database is no longer where its connections point: nothing to drain into
            log.error("%s", moved[0], extra={"action": "embedded_moved"})
            drain(engine, 0.0, stop)
            code = EXIT_FAILED
        else:
            log.info("received %s: stopping; waiting up to %gs for running jobs", stop.signal_name,
                     settings["shutdown_timeout"], extra={"action": "cli_stopping"})
            code = drain(engine, settings["shutdown_timeout"], stop)
    if exporter is not None:
        exporter.close()
    if dashboard is not None:
        dashboard.stop()
    if moved:
        print(f"mjsched: error: {moved[0]}", file=sys.stderr, flush=True)
    return code


def run_once(ctx: Context) -> int:
    """``run --once``: one pass over what is due now, wait for those runs; exit 1 unless every
    one of them Completed within --timeout (a run still going then is handed back Cancelled)."""
    engine = ctx.engine(long_running=True)   # the runs' completions get the engine's patient retries
    runs = engine.run_due_jobs(timeout=ctx.args.timeout)
    ok = all(r.status.value == "Completed" for r in runs)
    if ctx.json:
        ctx.emit_json({"runs": runs, "ok": ok})
    elif runs:
        ctx.emit(runs_table(runs, {j.id: j.name for j in engine.list_jobs()}))
    else:
        ctx.emit("nothing was due")
    return EXIT_OK if ok else EXIT_FAILED


def cmd_dashboard(ctx: Context) -> int:
    """Serve the web dashboard until Ctrl-C/SIGTERM (needs the 'web' extra; README "Dashboard")."""
    try:
        from ..web import auth_from_env, create_app, make_dashboard_server
        from ..web.security import check_bind, parse_bind
    except ImportError as exc:
        raise ConfigurationError("dashboard", None, f"needs the 'web' extra: pip install 'mjsched[web]' ({exc})") \
            from None
    host, port = parse_bind(ctx.args.bind)
    auth = auth_from_env()
    check_bind(host, auth)          # before anything is opened: a public bind needs auth
    app = create_app(ctx.engine(), read_only=ctx.args.read_only, auth=auth,
                     stale_after=float(ctx.settings["lease_timeout"]))
    server = make_dashboard_server(app, host, port)
    bound = server.server_address
    ctx.emit(f"mjsched dashboard on http://{host if ':' not in host else '[' + host + ']'}:{bound[1]}/ "
             f"({'read-only, ' if ctx.args.read_only else ''}{'auth on' if auth else 'no auth: loopback only'}); "
             "Ctrl-C to stop")
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        app.close()
    return EXIT_OK


def start_dashboard(ctx: Context, engine: Any) -> Any:
    """``run --dashboard-port``: the dashboard of this engine in a thread of this process."""
    port = getattr(ctx.args, "dashboard_port", None)
    if port is None:
        return None
    try:
        from ..web import DashboardThread, auth_from_env, create_app
    except ImportError as exc:
        raise ConfigurationError("--dashboard-port", port, f"needs the 'web' extra: pip install 'mjsched[web]' "
                                                           f"({exc})") from None
    app = create_app(engine, auth=auth_from_env(), stale_after=float(ctx.settings["lease_timeout"]))
    return DashboardThread(app, ctx.args.dashboard_host or "127.0.0.1", port).start()


def cmd_demo(ctx: Context) -> int:
    from .demo import run_demo

    if ctx.json:
        raise UsageError("demo prints a live table for people and has no --json; "
                         "script against `mjsched runs --json` or `mjsched status --json`")

    return run_demo(ctx, ctx.args.duration)


# Commands whose output is their log (long-running): with --json it is one JSON object a line.
LOGGING_COMMANDS = ("run", "dashboard")


# -- the parser -------------------------------------------------------------------------------------------
def _common() -> Parser:
    common = Parser(add_help=False)
    common.add_argument("--dsn", default=argparse.SUPPRESS, metavar="DSN",
                        help="database URL (postgresql://... or mssql://...); default: $MJSCHED_DSN, the config "
                             "file, else the embedded PostgreSQL")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print machine-readable JSON")
    common.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                        help="more log output (-v: info, -vv: debug)")
    common.add_argument("--app-dir", action="append", default=argparse.SUPPRESS, metavar="DIR",
                        help="import python jobs' modules from DIR too (put first on sys.path; repeatable)")
    return common


# add(parent, name, handler, help_text, **kw) -> the new subcommand's parser (see _verb_adder).
AddVerb = Callable[..., Any]


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: the global flags, then each verb group from its own builder, in --help order."""
    common = _common()
    parser = _top_parser(common)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    add = _verb_adder(common)
    add(sub, "init-db", cmd_init_db, "create or upgrade the mjsched schema and procedures (idempotent)")
    _add_run(sub, add)
    _add_jobs(sub, add, common)
    _add_execute(sub, add)
    _add_runs(sub, add)
    add(sub, "status", cmd_status, "engines seen, and how many jobs are due, running, queued, failing, abandoned")
    add(sub, "config", cmd_config, "the effective settings and where each comes from")
    _add_dashboard(sub, add)
    _add_demo(sub, add)
    return parser


def _top_parser(common: Parser) -> Parser:
    """``mjsched`` itself: the global flags, and --config and --version, which come before the command."""
    parser = Parser(prog="mjsched", parents=[common],
                    description="Cron-scheduled jobs out of a SQL database, safely, on one server or many.",
                    epilog="Exit codes: 0 ok, 1 a run failed, 2 bad usage or input. Settings: flags > MJSCHED_* "
                           "environment > TOML file (--config, else ./mjsched.toml) > defaults.")
    parser.add_argument("--config", metavar="FILE", default=None,
                        help="TOML settings file (default: $MJSCHED_CONFIG, else ./mjsched.toml if present); "
                             "give it before the command")
    parser.add_argument("--version", action="version", version=f"mjsched {__version__}")
    return parser


def _verb_adder(common: Parser) -> AddVerb:
    """Subcommands take the global flags after their name too, and their help line is their description."""
    def add(parent: Any, name: str, handler: Callable[[Context], int], help_text: str, **kw: Any) -> Any:
        p = parent.add_parser(name, parents=[common], help=help_text, description=help_text, **kw)
        p.set_defaults(handler=handler)
        return p
    return add


def _add_run(sub: Any, add: AddVerb) -> None:
    """``run``: an engine in the foreground, and the settings it takes as flags."""
    run = add(sub, "run", cmd_run, "run an engine: poll until SIGINT/SIGTERM, then drain running jobs "
                                   "(bounded) and exit 0; --once: run what is due now, wait, exit")
    run.add_argument("--once", action="store_true",
                     help="run what is due now (claiming again as slots free up), wait for those runs and exit: "
                          "0 if all Completed, else 1 (for system cron and scripts)")
    run.add_argument("--timeout", type=float, metavar="SECONDS",
                     help="with --once: wait at most this long for the runs (default: no bound)")
    run.add_argument("--max-concurrent-jobs", type=int, metavar="N", help="hard cap on runs at once (default 5)")
    run.add_argument("--lease", type=float, metavar="SECONDS", help="lease of a claimed run (default 600)")
    run.add_argument("--min-poll-interval", type=float, metavar="SECONDS")
    run.add_argument("--max-poll-interval", type=float, metavar="SECONDS", help="longest idle sleep (default 10)")
    run.add_argument("--instance-name", metavar="NAME", help="engine name (default <host>-<pid>)")
    run.add_argument("--allowed-drivers", action="append", metavar="NAMES",
                     help="drivers this engine may run, comma-separated or repeated (default: all); a job of "
                          "another driver ends Failed here")
    run.add_argument("--keep-runs-days", type=int, metavar="DAYS", dest="engine_keep_runs_days",
                     help="retention default: keep finished runs this many days (0: off; a job's own setting wins)")
    run.add_argument("--keep-runs-count", type=int, metavar="N", dest="engine_keep_runs_count",
                     help="retention default: keep each job's newest N finished runs (0: off)")
    run.add_argument("--purge-interval", type=float, metavar="SECONDS",
                     help="purge run history at most this often (default 10)")
    run.add_argument("--shutdown-timeout", type=float, metavar="SECONDS",
                     help="on SIGINT/SIGTERM wait at most this long for running jobs (default 30)")
    run.add_argument("--metrics-port", type=int, metavar="PORT",
                     help="serve Prometheus metrics on this port (needs mjsched[metrics])")
    run.add_argument("--metrics-host", metavar="ADDR", help="address for --metrics-port (default 127.0.0.1)")
    run.add_argument("--dashboard-port", type=int, metavar="PORT",
                     help="serve the web dashboard of this engine on this port (needs mjsched[web])")
    run.add_argument("--dashboard-host", metavar="ADDR",
                     help="address for --dashboard-port (default 127.0.0.1; any other needs MJSCHED_DASHBOARD_TOKEN "
                          "or MJSCHED_DASHBOARD_USER/PASSWORD)")


def _add_jobs(sub: Any, add: AddVerb, common: Parser) -> None:
    """``jobs ACTION``: one builder per action; without an ACTION it prints its help."""
    jobs = sub.add_parser("jobs", parents=[common],
                          help="add, edit, apply, list, show, pause, resume, remove, unlock, preview jobs",
                          description="Manage jobs. A JOB is an id (a UUID) or a name (names are unique; a value "
                                      "that is not a UUID is a name), or a unique id prefix of 4+ characters.")
    jobs.set_defaults(handler=lambda ctx: _missing_subcommand(jobs))
    jsub = jobs.add_subparsers(dest="jobs_command", metavar="ACTION", parser_class=Parser)
    _add_jobs_add(jsub, add)
    _add_jobs_edit(jsub, add)
    _add_jobs_apply(jsub, add)
    _add_jobs_list(jsub, add)
    _add_jobs_by_ref(jsub, add)
    _add_jobs_preview(jsub, add)
    _add_jobs_import_celery(jsub, add)


def _add_jobs_add(jsub: Any, add: AddVerb) -> None:
    """``jobs add``: one of --cron, --every, --run-at is required; the rest have create_job's defaults."""
    ja = add(jsub, "add", cmd_jobs_add, "create a job")
    ja.add_argument("--name", required=True)
    ja.add_argument("--driver", required=True, help="shell, python, sql, http, or a registered driver")
    kinds = ja.add_mutually_exclusive_group(required=True)
    kinds.add_argument("--cron", help="5 fields, or 6 with seconds first; @hourly-style macros")
    kinds.add_argument("--every", metavar="DURATION",
                    help="an interval instead of a cron: 90s, 15m, 2h, 1d, 1h30m (ticks from --start-at, else "
                         "the creation time; DST never moves them)")
    kinds.add_argument("--run-at", metavar="ISO",
                    help="one run instead of a cron, then the job is Expired (no offset: in --timezone)")
    ja.add_argument("--timezone", default="UTC", help="IANA zone the cron is read in (default UTC)")
    ja.add_argument("--config", "--configuration", dest="configuration", metavar="JSON",
                    help="driver configuration as a JSON object, or @file.json")
    ja.add_argument("--description")
    ja.add_argument("--owner")
    ja.add_argument("--concurrency-mode", type=enum_arg(("Skip", "Queue", "Concurrent")), default="Skip",
                    help="Skip (default), Queue or Concurrent")
    ja.add_argument("--missed-run-policy", type=enum_arg(("Skip", "RunOnce", "RunAll")), default="RunOnce",
                    help="Skip, RunOnce (default) or RunAll")
    ja.add_argument("--max-runtime", type=float, metavar="SECONDS", help="past it the run is timed out")
    ja.add_argument("--max-queued-runs", type=int, metavar="N", help="Queue mode: bound of kept ticks")
    ja.add_argument("--isolation", type=enum_arg(("thread", "process")), help="thread or process")
    ja.add_argument("--start-at", metavar="ISO", help="nothing runs before (no offset: in --timezone)")
    ja.add_argument("--end-at", metavar="ISO", help="nothing runs from then on (no offset: in --timezone)")
    ja.add_argument("--status", type=enum_arg(JOB_STATUSES), default="Active", help="default Active")
    ja.add_argument("--run-immediately", action="store_true", help="run at once if it never ran")
    ja.add_argument("--notify-on-success", action="store_true")
    ja.add_argument("--notify-on-failure", action=argparse.BooleanOptionalAction, default=True,
                    help="notify when a run fails (default on)")
    ja.add_argument("--notify-to", metavar="ADDRESSES", help="comma-separated e-mail recipients")
    ja.add_argument("--keep-runs-days", type=int, metavar="DAYS",
                    help="keep this job's finished runs this many days (0: regardless of age; default: the engine's)")
    ja.add_argument("--keep-runs-count", type=int, metavar="N",
                    help="keep this job's newest N finished runs (0: no count; default: the engine's)")
    ja.add_argument("--retry", metavar="SPEC",
                    help="retry a Failed or Timeout tick: MAX_ATTEMPTS[,INITIAL_DELAY[,FACTOR[,MAX_DELAY[,JITTER]]]] "
                         "(seconds; e.g. 3 or 5,60,2,3600,0.1); default: the driver's, else none")
    ja.add_argument("--notify-every-attempt", action="store_true",
                    help="notify each failed attempt, not only the final one")
    ja.add_argument("--high-frequency-ok", action=argparse.BooleanOptionalAction, default=False,
                    help="no warning that the job fires more often than every 5 minutes (default off)")
    ja.add_argument("--check-import", action="store_true",
                    help="also import a python job's callable here (by default only its form is checked: the "
                         "engines' hosts, not this shell, must be able to import it)")


def _add_jobs_edit(jsub: Any, add: AddVerb) -> None:
    """``jobs edit``: every flag is optional; --clear-* sets a field back to "none of its own"."""
    je = add(jsub, "edit", cmd_jobs_edit, "change fields of a job in place (id and run history kept); "
                                          "a new schedule takes effect from its next tick")
    je.add_argument("job", metavar="JOB")
    je.add_argument("--name")
    je.add_argument("--driver")
    kinds = je.add_mutually_exclusive_group()
    kinds.add_argument("--cron", help="a new schedule: one of --cron, --every, --run-at replaces the job's")
    kinds.add_argument("--every", metavar="DURATION", help="90s, 15m, 2h, 1d, 1h30m")
    kinds.add_argument("--run-at", metavar="ISO", help="one run (no offset: in the job's timezone)")
    je.add_argument("--timezone")
    je.add_argument("--config", "--configuration", dest="configuration", metavar="JSON",
                    help="replaces the whole configuration: a JSON object, or @file.json")
    je.add_argument("--description")
    je.add_argument("--owner")
    je.add_argument("--status", type=enum_arg(JOB_STATUSES))
    je.add_argument("--concurrency-mode", type=enum_arg(("Skip", "Queue", "Concurrent")))
    je.add_argument("--missed-run-policy", type=enum_arg(("Skip", "RunOnce", "RunAll")))
    je.add_argument("--max-runtime", type=float, metavar="SECONDS")
    je.add_argument("--clear-max-runtime", action="store_true", help="no limit (the driver's default)")
    je.add_argument("--max-queued-runs", type=int, metavar="N")
    je.add_argument("--isolation", type=enum_arg(("thread", "process")))
    je.add_argument("--start-at", metavar="ISO")
    je.add_argument("--clear-start-at", action="store_true")
    je.add_argument("--end-at", metavar="ISO")
    je.add_argument("--clear-end-at", action="store_true")
    je.add_argument("--notify-on-success", action=argparse.BooleanOptionalAction, default=None)
    je.add_argument("--notify-on-failure", action=argparse.BooleanOptionalAction, default=None)
    je.add_argument("--notify-to", metavar="ADDRESSES")
    je.add_argument("--keep-runs-days", type=int, metavar="DAYS", help="as for jobs add")
    je.add_argument("--clear-keep-runs-days", action="store_true", help="back to the engine's setting")
    je.add_argument("--keep-runs-count", type=int, metavar="N", help="as for jobs add")
    je.add_argument("--clear-keep-runs-count", action="store_true", help="back to the engine's setting")
    je.add_argument("--retry", metavar="SPEC", help="as for jobs add")
    je.add_argument("--clear-retry", action="store_true", help="no policy of its own (the driver's default)")
    je.add_argument("--notify-final-attempt-only", action=argparse.BooleanOptionalAction, default=None,
                    help="failures notify only when no retry follows (default on)")
    je.add_argument("--high-frequency-ok", action=argparse.BooleanOptionalAction, default=None,
                    help="silence (or, with --no-, restore) the high-frequency warning of the job")
    je.add_argument("--check-import", action="store_true", help="as for jobs add")


def _add_jobs_apply(jsub: Any, add: AddVerb) -> None:
    """``jobs apply FILE.toml``: declarative create-or-update by name."""
    jy = add(jsub, "apply", cmd_jobs_apply,
             "create or update the jobs a TOML file declares ([jobs.NAME] tables of create_job's fields), by name; "
             "fields a table leaves out take their defaults, status is kept unless given")
    jy.add_argument("file", metavar="FILE.toml")
    jy.add_argument("--dry-run", action="store_true", help="print what would change (field: old -> new); write nothing")
    jy.add_argument("--remove-missing", choices=("keep", "pause", "delete"), default="keep",
                    help="jobs in the database the file does not declare: keep (default), pause the Active ones, "
                         "or delete them with their history")


def _add_jobs_list(jsub: Any, add: AddVerb) -> None:
    """``jobs list``: Disabled jobs are hidden unless asked for."""
    jl = add(jsub, "list", cmd_jobs_list, "list jobs (Disabled ones only with --all or --status Disabled)")
    jl.add_argument("--all", action="store_true", help="include Disabled jobs")
    jl.add_argument("--status", type=enum_arg(JOB_STATUSES), help="only jobs with this status")


def _add_jobs_by_ref(jsub: Any, add: AddVerb) -> None:
    """The job actions whose only argument is the JOB they act on."""
    for name, handler, text in (("show", cmd_jobs_show, "show every field of a job"),
                                ("pause", cmd_jobs_pause, "pause a job (status Paused)"),
                                ("resume", cmd_jobs_resume, "resume a job (status Active; next run from now)"),
                                ("remove", cmd_jobs_remove, "delete a job and its run history"),
                                ("delete", cmd_jobs_remove, "the same as remove (the API's delete_job)"),
                                ("unlock", cmd_jobs_unlock, "free a job's lock whoever holds it (operator "
                                                            "override; the holding run ends Abandoned)")):
        add(jsub, name, handler, text).add_argument("job", metavar="JOB")


def _add_jobs_preview(jsub: Any, add: AddVerb) -> None:
    """``jobs preview``: fire times of a stored job, or of a schedule given as flags."""
    jp = add(jsub, "preview", cmd_jobs_preview, "the next fire times of a job or a cron expression, in its "
                                                "zone and in UTC")
    jp.add_argument("job", metavar="JOB", nargs="?")
    kinds = jp.add_mutually_exclusive_group()
    kinds.add_argument("--cron", help="preview this expression instead of a job's")
    kinds.add_argument("--every", metavar="DURATION", help="preview this interval (anchored at --after, or now)")
    kinds.add_argument("--run-at", metavar="ISO", help="preview this one run (no offset: in --timezone)")
    jp.add_argument("--timezone", help="zone to read --cron in (default UTC, or the job's)")
    jp.add_argument("-n", "--count", type=int, default=5, help="how many (default 5)")
    jp.add_argument("--after", metavar="ISO", help="start after this instant (default now)")


def _add_jobs_import_celery(jsub: Any, add: AddVerb) -> None:
    """``jobs import-celery``: one job per beat_schedule entry of a Celery app."""
    ji = add(jsub, "import-celery", cmd_jobs_import_celery,
             "create or update one celery job per beat_schedule entry of a Celery app (by name; exit 1 when "
             "an entry has no faithful cron form: solar, an interval cron cannot express, an unsupported option)")
    ji.add_argument("app", metavar="PKG.MODULE:APP", help="the Celery app, as the engines import it")
    ji.add_argument("--status", type=enum_arg(("Active", "Paused", "Disabled")), default="Active",
                    help="status of new jobs (Paused: switch over from beat without a gap or a double run)")
    ji.add_argument("--mode", type=enum_arg(("send", "wait")), default="send",
                    help="send (default, what beat does) or wait (hold the slot until the task finished)")
    ji.add_argument("--dry-run", action="store_true", help="show what would change; write nothing")


def _add_execute(sub: Any, add: AddVerb) -> None:
    """``execute JOB``: one run now, under the job's lock; --param changes its configuration for that run only."""
    ex = add(sub, "execute", cmd_execute, "run a job now, under its lock, and print the run (exit 1 if it failed)")
    ex.add_argument("job", metavar="JOB")
    ex.add_argument("--force", action="store_true", help="run it even if it is not Active (Paused, Disabled...)")
    ex.add_argument("--param", action="append", metavar="KEY=VALUE",
                    help="merged over the job's configuration for this run only (repeatable; VALUE is JSON when "
                         "it parses, else a string), e.g. --param day=2026-11-30")


def _add_runs(sub: Any, add: AddVerb) -> None:
    """``runs``: the history on its own; ``runs cancel`` and ``runs prune`` as optional actions."""
    rn = add(sub, "runs", cmd_runs, "run history, newest first; `runs cancel RUN_ID` cancels a Queued or "
                                    "Running run; `runs prune` deletes old finished runs")
    rn.add_argument("--job", metavar="JOB")
    rn.add_argument("--status", type=enum_arg(RUN_STATUSES), help=", ".join(RUN_STATUSES))
    rn.add_argument("--limit", type=int, default=20, help="default 20")
    rn.add_argument("-f", "--follow", action="store_true",
                    help="keep printing runs as they start and end, until Ctrl-C (--json: one object a line)")
    rn.add_argument("--interval", type=float, default=1.0, metavar="SECONDS", help="--follow's poll interval")
    rsub = rn.add_subparsers(dest="runs_command", metavar="ACTION", parser_class=Parser, required=False)
    _add_runs_cancel(rsub, add)
    _add_runs_prune(rsub, add)


def _add_runs_cancel(rsub: Any, add: AddVerb) -> None:
    """``runs cancel RUN_ID``: cancellation is recorded in the database, so it works from any machine."""
    rc = add(rsub, "cancel", cmd_runs_cancel, "cancel a Queued or Running run, from any machine: its engine "
                                             "ends it Cancelled at its next lease renewal")
    rc.add_argument("run", metavar="RUN_ID")
    rc.add_argument("--wait", action="store_true", help="wait for the run to end; exit 1 unless it ends Cancelled")
    rc.add_argument("--timeout", type=float, default=120.0, metavar="SECONDS", help="--wait's bound (default 120)")


def _add_runs_prune(rsub: Any, add: AddVerb) -> None:
    """``runs prune``: finished runs only, by explicit bounds or else by the retention settings."""
    rp = add(rsub, "prune", cmd_runs_prune, "delete finished runs now, in small batches (never Running or Queued "
                                            "ones); without --older-than/--keep-last: by the retention settings")
    rp.add_argument("--older-than", metavar="DURATION", help="runs that finished longer ago: 30d, 12h, 90m, 2w")
    rp.add_argument("--keep-last", type=int, metavar="N", help="but keep each job's newest N finished runs")
    rp.add_argument("--job", metavar="JOB", help="only this job's runs")
    rp.add_argument("--dry-run", action="store_true", help="count what would be deleted; delete nothing")
    rp.add_argument("--batch-size", type=int, metavar="N", help="rows per batch (default 1000, at most 4000)")


def _add_dashboard(sub: Any, add: AddVerb) -> None:
    """``dashboard``: the web UI served from this process; a bind beyond loopback needs auth."""
    db = add(sub, "dashboard", cmd_dashboard, "serve the web dashboard (needs mjsched[web]); beyond loopback only "
                                              "with MJSCHED_DASHBOARD_TOKEN or MJSCHED_DASHBOARD_USER/PASSWORD")
    db.add_argument("--bind", default="127.0.0.1:8080", metavar="HOST:PORT", help="default 127.0.0.1:8080")
    db.add_argument("--read-only", action="store_true", help="hide and refuse every action")


def _add_demo(sub: Any, add: AddVerb) -> None:
    """``demo``: the zero-setup tour."""
    dm = add(sub, "demo", cmd_demo, "a zero-setup tour: sample jobs, an engine, a live table of runs")
    dm.add_argument("--duration", type=float, metavar="SECONDS", help="stop after this long (default: Ctrl-C)")


def _missing_subcommand(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_USAGE


def flag_settings(args: argparse.Namespace) -> dict[str, tuple[Any, str]]:
    mapping = {"dsn": ("dsn", "--dsn"), "max_concurrent_jobs": ("max_concurrent_jobs", "--max-concurrent-jobs"),
               "lease": ("lease_timeout", "--lease"), "min_poll_interval": ("min_poll_interval", "--min-poll-interval"),
               "max_poll_interval": ("max_poll_interval", "--max-poll-interval"),
               "instance_name": ("instance_name", "--instance-name"),
               "shutdown_timeout": ("shutdown_timeout", "--shutdown-timeout"),
               "allowed_drivers": ("allowed_drivers", "--allowed-drivers"),
               "metrics_port": ("metrics.port", "--metrics-port"), "metrics_host": ("metrics.host", "--metrics-host"),
               "engine_keep_runs_days": ("keep_runs_days", "--keep-runs-days"),
               "engine_keep_runs_count": ("keep_runs_count", "--keep-runs-count"),
               "purge_interval": ("purge_interval", "--purge-interval")}
    out = {}
    for attr, (key, flag) in mapping.items():
        value = getattr(args, attr, None)
        if isinstance(value, list):      # a repeatable flag: --allowed-drivers a --allowed-drivers b,c
            value = ",".join(value)
        if value is not None:
            out[key] = (value, flag)
    return out


def setup_logging(verbosity: int, command: str | None, json_lines: bool = False) -> None:
    level = logging.WARNING
    if command in ("run", "dashboard") or verbosity >= 1:
        level = logging.INFO
    if verbosity >= 2:
        level = logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    if json_lines and command in LOGGING_COMMANDS:   # their output is their log: --json makes it JSON lines
        handler.setFormatter(JsonLinesFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    handler.addFilter(RedactingFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("mjsched").setLevel(level)
    if command != "run" and verbosity == 0:
        # one-shot commands: a retry that ends in an error is reported once, as that error
        logging.getLogger("mjsched.backends").setLevel(logging.ERROR)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, prepare the process, run the command, flush; exit code 0 ok, 1 failed, 2 bad usage or input."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "command", None) is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    _prepare_process(args)
    code = _run_command(args)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        _silence_stdout()
    if _threads_left():
        os._exit(code)   # runs still executing past the drain bound: their leases lapse; do not hang
    return code


def _prepare_process(args: argparse.Namespace) -> None:
    """--app-dir first on sys.path, then logging (the demo sets up its own, from args.verbose)."""
    verbosity = int(getattr(args, "verbose", 0) or 0)
    for directory in reversed(getattr(args, "app_dir", None) or []):
        sys.path.insert(0, str(Path(directory).expanduser().resolve()))
    if args.command != "demo":
        setup_logging(verbosity, args.command, json_lines=bool(getattr(args, "json", False)))
    else:
        args.verbose = verbosity


def _run_command(args: argparse.Namespace) -> int:
    """The command's handler, with SIGTERM ending it through the same cleanup as Ctrl-C; its context
    is closed whatever happens."""
    ctx: Context | None = None
    previous_term = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, _raise_interrupt)
        settings = config_mod.load(flag_settings(args), config_file=args.config)
        ctx = Context(args, settings)
        return int(args.handler(ctx))
    except (KeyboardInterrupt, Exception) as exc:  # noqa: BLE001 - each reported as one line by _report
        return _report(exc, verbosity=int(getattr(args, "verbose", 0) or 0))
    finally:
        try:
            if ctx is not None:
                ctx.close()
        finally:
            if signal.getsignal(signal.SIGTERM) is _raise_interrupt:   # not while `run` is stopping
                signal.signal(signal.SIGTERM, previous_term)


def _report(exc: BaseException, verbosity: int) -> int:
    """A command's error as one line on stderr, and its exit code (called while handling it)."""
    if isinstance(exc, LockNotAcquired):
        print(f"mjsched: error: {_one_line(exc)} (it is running elsewhere; try again later)", file=sys.stderr)
        return EXIT_FAILED
    if isinstance(exc, JobNotActive):
        print(f"mjsched: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_FAILED
    if isinstance(exc, SchedulerError):
        print(f"mjsched: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    if isinstance(exc, KeyboardInterrupt):
        print("mjsched: interrupted", file=sys.stderr)
        return 130
    if isinstance(exc, BrokenPipeError):   # `mjsched runs | head`: the reader left; not an error of ours
        _silence_stdout()
        return EXIT_OK
    # Anything else is a bug in mjsched: one line, the traceback with -v.
    if verbosity:
        log.exception("unexpected error")
    print(f"mjsched: internal error: {type(exc).__name__}: {_one_line(exc)} (run with -v for the traceback)",
          file=sys.stderr)
    return EXIT_FAILED


def _silence_stdout() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _raise_interrupt(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def _one_line(exc: BaseException) -> str:
    return redact_text(" ".join(str(exc).split())) or type(exc).__name__


def _threads_left(grace: float = 1.0) -> bool:
    deadline = time.monotonic() + grace
    while True:
        alive = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon
                 and t.is_alive()]
        if not alive:
            return False
        if time.monotonic() > deadline:
            log.warning("%d job thread(s) still running at exit; exiting anyway (their leases lapse)", len(alive))
            return True
        time.sleep(0.05)

