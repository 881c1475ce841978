"""The ``jobs`` verbs: add, edit, apply, list, show, pause, resume, remove/delete, unlock,
preview, import-celery; and how a job and its schedule read on the command line."""
from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError, DatabaseError
from ..redaction import redact
from ..retry import parse_spec
from .context import Context, UsageError, resolve_job
from .terminal import EXIT_FAILED, EXIT_OK, UTC, clip, jsonable, table, ts

_EPS = timedelta(microseconds=1)


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


def job_row(job: Any) -> list[str]:
    return [job.id, clip(job.name, 32), job.driver, f"{schedule_words(job)} ({job.timezone})", job.status.value,
            ts(job.next_run_at), ts(job.last_run_at), f"{job.success_count}/{job.failure_count}",
            ",".join(job.tags) or "-"]


def schedule_words(job: Any) -> str:
    """A job's schedule as one short text: its cron, 'every 1m30s' or 'once at <ISO>'."""
    from ..schedules import format_duration

    if job.interval_seconds is not None:
        return f"every {format_duration(job.interval_seconds)}"
    if isinstance(job.run_at, datetime):
        return f"once at {job.run_at.astimezone(UTC).isoformat()}"
    if job.run_at is not None:   # an Undecodable (mjsched/decoding.py)
        return f"once at {job.run_at}"
    return str(job.cron_expression)


def parse_every(text: str) -> int:
    from ..schedules import parse_duration

    return parse_duration(text, "--every")


def schedule_fields(a: Any, zone: str) -> dict[str, Any]:
    """--cron / --every / --run-at as create_job/update_job keywords (only those given; the
    API refuses more than one, or none on add). --run-at without an offset is read in ``zone``."""
    given = {"cron": a.cron, "every": a.every, "run_at": parse_instant("--run-at", a.run_at, zone)}
    return {k: v for k, v in given.items() if v is not None}


def alert_fields(a: Any) -> dict[str, Any]:
    """The --alert-* flags given, as create_job/update_job keywords ('off': None)."""
    out: dict[str, Any] = {}
    for key in ("alert_late_start", "alert_silent_after", "alert_too_long", "alert_failing_streak"):
        value = getattr(a, key, None)
        if value is None:
            continue
        if str(value).strip().lower() in ("off", "none"):
            out[key] = None
        elif key == "alert_failing_streak":
            out[key] = int(value) if str(value).strip().isdigit() else value
        else:
            out[key] = int(value) if str(value).strip().isdigit() else value
    if getattr(a, "pause_after_failing_streak", None) is not None:
        out["pause_after_failing_streak"] = a.pause_after_failing_streak
    return out


JOB_HEADERS = ["ID", "NAME", "DRIVER", "SCHEDULE", "STATUS", "NEXT RUN (UTC)", "LAST RUN (UTC)", "OK/FAILED", "TAGS"]


def cmd_jobs_add(ctx: Context) -> int:
    a = ctx.args
    fields: dict[str, Any] = {
        "concurrency_mode": a.concurrency_mode, "missed_run_policy": a.missed_run_policy, "status": a.status,
        "run_immediately_if_never_run": a.run_immediately, "notify_on_success": a.notify_on_success,
        "notify_on_failure": a.notify_on_failure, "high_frequency_ok": a.high_frequency_ok,
    }
    optional = {"description": a.description, "owner": a.owner, "notify_to": a.notify_to,
                "max_runtime": a.max_runtime, "max_queued_runs": a.max_queued_runs, "isolation": a.isolation,
                "keep_runs_days": a.keep_runs_days, "keep_runs_count": a.keep_runs_count, "jitter": a.jitter,
                "priority": a.priority,
                "start_at": parse_instant("--start-at", a.start_at, a.timezone),
                "end_at": parse_instant("--end-at", a.end_at, a.timezone),
                "retry": parse_spec(a.retry) if a.retry is not None else None,
                "notify_final_attempt_only": False if a.notify_every_attempt else None, "tags": a.tags}
    fields.update({k: v for k, v in optional.items() if v is not None})
    fields.update(schedule_fields(a, a.timezone))
    configuration = job_configuration(a.configuration)
    # Validate the whole job before touching the database (and before starting one).
    from .. import alerts, validation

    rules = alert_fields(a)
    alerts.merged(None, alerts.pop_rules(dict(rules)) or {})
    validation.job_fields({"name": a.name, "driver": a.driver, "timezone": a.timezone,
                           "configuration": configuration, "cron": None, **fields}, creating=True)
    if a.check_import:
        check_can_run(a.driver, configuration)
    engine = ctx.engine()
    job_id = engine.create_job(name=a.name, driver=a.driver, timezone=a.timezone,
                               configuration=configuration, **fields, **rules)
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
             "keep_runs_count": a.keep_runs_count, "jitter": a.jitter, "priority": a.priority,
             "retry": parse_spec(a.retry) if a.retry is not None else None,
             "notify_final_attempt_only": a.notify_final_attempt_only, "tags": a.tags}
    fields = {k: v for k, v in given.items() if v is not None}
    fields.update(alert_fields(a))
    for flag, key in (("clear_max_runtime", "max_runtime"), ("clear_start_at", "start_at"),
                      ("clear_end_at", "end_at"), ("clear_keep_runs_days", "keep_runs_days"),
                      ("clear_keep_runs_count", "keep_runs_count"), ("clear_retry", "retry"),
                      ("clear_tags", "tags"), ("clear_jitter", "jitter")):
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
    jobs = engine.list_jobs(status, tag=ctx.args.tag)
    if status is None and not ctx.args.all:
        jobs = [j for j in jobs if j.status.value != "Disabled"]
    from .tags_commands import waiting_note

    waiting = waiting_note(engine) if jobs else {}
    if ctx.json:
        ctx.emit_json([{**jsonable(j), "waiting_for_tag": waiting.get(j.id)} for j in jobs])
    elif not jobs:
        ctx.emit("no jobs" + ("" if ctx.args.all or status else " (Disabled jobs are hidden; use --all)"))
    else:
        rows = [job_row(j) for j in jobs]
        for job, row in zip(jobs, rows):
            if job.id in waiting:
                row[4] = f"{row[4]}, {waiting[job.id]}"
        ctx.emit(table(JOB_HEADERS, rows))
    return EXIT_OK


def cmd_jobs_show(ctx: Context) -> int:
    engine = ctx.engine()
    job = resolve_job(engine, ctx.args.job)
    if ctx.json:
        ctx.emit_json(job)
        return EXIT_OK
    data = redact(jsonable(job))
    try:    # the deadline-alert rules and open alerts (014_alerts.sql): none on an older schema
        data.update(engine.job_alerts(job.id))
        data["open_alerts"] = "; ".join(f"{a.rule} ({a.describe()})" for a in engine.open_alerts(job.id)) or None
    except (NotImplementedError, DatabaseError):
        pass
    width = max(len(k) for k in data)
    for key, value in data.items():
        if key == "configuration" and not isinstance(value, str):   # a str: "<undecodable: ...>" (decoding.py)
            value = json.dumps(value, sort_keys=True)
        ctx.emit(f"{key.ljust(width)}  {'-' if value is None else value}")
    return EXIT_OK


HISTORY_HEADERS = ["CHANGED (UTC)", "VERSION", "ACTION", "FIELD", "OLD", "NEW", "BY", "VIA"]


def cmd_jobs_history(ctx: Context) -> int:
    """The audit trail (013_audit.sql) of a job, newest first, values masked."""
    changes = ctx.engine().job_history(ctx.args.job, limit=ctx.args.limit)
    if ctx.json:
        ctx.emit_json(changes)
        return EXIT_OK
    rows = [[ts(c.changed_at), str(c.version), c.action, c.field, clip(c.old_value or "-", 40),
             clip(c.new_value or "-", 40), c.db_login + (f" ({c.app_user})" if c.app_user else ""), c.via]
            for c in changes]
    ctx.emit(table(HISTORY_HEADERS, rows))
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
    a = ctx.args
    if _by_tag(a, ("reason", "until")):
        until = parse_until(a.until)
        paused = ctx.engine().pause_jobs(tag=a.tag, reason=a.reason, until=until)
        return _tag_outcome(ctx, "paused", a.tag, paused, until)
    return _set_status(ctx, "pause")


def cmd_jobs_resume(ctx: Context) -> int:
    if _by_tag(ctx.args, ()):
        return _tag_outcome(ctx, "resumed", ctx.args.tag, ctx.engine().resume_jobs(tag=ctx.args.tag), None)
    return _set_status(ctx, "resume")


def _by_tag(a: Any, tag_only: tuple[str, ...]) -> bool:
    """Whether the verb acts on a tag (--tag) or on one JOB: exactly one of them."""
    if (a.job is None) == (a.tag is None):
        raise UsageError("give a JOB or --tag TAG (one of them)")
    for flag in tag_only:
        if a.tag is None and getattr(a, flag) is not None:
            raise UsageError(f"--{flag} goes with --tag")
    return a.tag is not None


def parse_until(text: str | None) -> Any:
    """--until: an ISO instant (no offset: UTC), else a duration from now (the engine reads it)."""
    if text is None:
        return None
    try:
        return parse_instant("--until", text, "UTC")
    except ConfigurationError:
        return text


def _tag_outcome(ctx: Context, verb: str, tag: str, count: int, until: Any) -> int:
    if ctx.json:
        ctx.emit_json({"tag": tag, verb: count})
    else:
        jobs = ctx.engine().list_jobs(tag=tag)
        when = next((j.paused_until for j in jobs if j.paused_until is not None), None) if until else None
        ctx.emit(f"{verb} {count} job(s) tagged {tag!r}" + (f" until {ts(when)} UTC" if when else ""))
    return EXIT_OK


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


def cmd_jobs_why(ctx: Context) -> int:
    """Why a job did not run (engine.why): the tick explained, the verdict, then every reason in
    the claim's order, each with its code; the engines as they report themselves."""
    engine = ctx.engine()
    job = resolve_job(engine, ctx.args.job)
    at = parse_instant("--at", ctx.args.at, job.timezone)
    report = engine.why(job.id, at=at)
    if ctx.json:
        ctx.emit_json(report.as_dict())
        return EXIT_OK
    for line in why_lines(report):
        ctx.emit(line)
    return EXIT_OK


def why_lines(report: Any) -> list[str]:
    """A WhyReport for a terminal."""
    tick = f"tick {ts(report.tick)} UTC" if report.tick is not None else "no next tick"
    asked = f" (the last tick at or before {ts(report.asked_at)} UTC)" if report.asked_at is not None else ""
    lines = [f"job {report.name} ({report.job_id}): {tick}{asked}; database time {ts(report.db_now)} UTC",
             f"verdict: {report.verdict}: {report.summary}", "", "reasons, in the order the claim checks them:"]
    width = max((len(r.code) for r in report.reasons), default=0)
    for reason in report.reasons:
        mark = "BLOCKS" if reason.blocking else "  note"
        lines.append(f"  {mark}  {reason.code.ljust(width)}  {reason.sentence}")
    if report.engines:
        lines += ["", "engines (as they report themselves):"]
        for e in report.engines:
            cap = "?" if e.max_concurrent_jobs is None else e.max_concurrent_jobs
            drivers = "all" if e.allowed_drivers is None else ",".join(sorted(e.allowed_drivers))
            lines.append(f"  {e.instance}  {e.state}, {e.running}/{cap} running, drivers {drivers}, "
                         f"last seen {ts(e.last_seen_at)} UTC")
    else:
        lines += ["", "engines: none registered"]
    return lines


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
    try:
        declarations(declared)     # every job checked before a connection is opened
    except ConfigurationError as exc:
        exc.args = (f"{a.file}: {exc.args[0] if exc.args else exc}",)   # which file holds the job
        raise
    result = ctx.engine().sync_jobs(declared, remove_missing=a.remove_missing, dry_run=a.dry_run, tag=a.tag)
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
    name: str | None = None         # the name H and the jitter are hashed from
    jitter: Any = None              # the jitter bound (a job's seconds, or --jitter's text)


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
    resolved, jitter = _resolved(target)
    if ctx.json:
        ctx.emit_json({"cron": target.given.get("cron"), "resolved_cron": resolved, "schedule": shown,
                       "timezone": zone, "job": job.id if job else None,
                       "jitter_seconds": jitter[0] if jitter else None,
                       "jitter_offset_seconds": jitter[1] if jitter else None, "times": rows})
        return EXIT_OK
    title = f"job {job.name!r} ({job.id})" if job else "schedule"
    ctx.emit(f"next {len(times)} fire time(s) of {title}: {shown!r} in {zone}")
    if resolved is not None and resolved != target.given.get("cron"):
        ctx.emit(f"resolved for the name {target.name!r}: {resolved!r}")
    if jitter:
        ctx.emit(f"jitter up to {jitter[0]}s: every tick {jitter[1]}s later (stable for the name {target.name!r})")
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
        return _PreviewTarget(given, a.timezone or "UTC", after, name=a.name, jitter=a.jitter)
    if a.name is not None or a.jitter is not None:
        raise UsageError("--name and --jitter go with a schedule given as flags; a job's own are used for a job")
    if given:
        raise UsageError("give a job or a schedule (--cron, --every, --run-at), not both")
    job = resolve_job(ctx.engine(), a.job)
    kind = {"cron": job.cron_expression, "every": job.interval_seconds, "run_at": job.run_at}
    given = {k: v for k, v in kind.items() if v is not None}
    if "run_at" in given and job.status.value == "Expired":
        given = {}   # a one-off that ended has no run left
    elif job.start_at is not None and job.start_at > after:
        after = job.start_at - _EPS   # a tick exactly at start_at fires
    return _PreviewTarget(given, a.timezone or job.timezone, after, anchor=job.start_at or job.created_at, job=job,
                          name=job.name, jitter=job.jitter_seconds)


def _fire_times(target: _PreviewTarget, count: int) -> list[datetime]:
    """The next ``count`` fire times after target.after, none at or past a job's end_at."""
    from ..schedules import next_run_times as preview_times

    given, zone, after = target.given, target.zone, target.after
    named = {"name": target.name, "jitter": target.jitter}
    if "every" in given:
        times = preview_times(every=given["every"], timezone=zone, after=after, count=count, start_at=target.anchor,
                              **named)
    elif "run_at" in given:
        times = preview_times(run_at=given["run_at"], timezone=zone, after=after, count=count)
    elif "cron" in given:
        times = preview_times(given["cron"], zone, after=after, count=count, **named)
    else:
        times = []
    if target.job is not None and target.job.end_at is not None:
        times = [t for t in times if t < target.job.end_at]
    return times


def _resolved(target: _PreviewTarget) -> tuple[str | None, tuple[int, int] | None]:
    """The cron with its H items resolved for the target's name (None for the other kinds), and
    (jitter bound, this name's offset) in seconds when there is a jitter."""
    from ..cron import CronSchedule
    from ..schedules import jitter_offset, parse_jitter

    cron = target.given.get("cron")
    resolved = CronSchedule.parse(cron, target.zone, seed=target.name).resolved if cron else None
    bound = parse_jitter(target.jitter, "--jitter")
    if not bound or target.name is None:
        return resolved, None
    return resolved, (bound, int(jitter_offset(target.name, bound).total_seconds()))


def _schedule_text(given: dict[str, Any]) -> str:
    """The schedule as the preview's heading shows it ("ended" when nothing is left)."""
    from ..schedules import format_duration

    every = given.get("every")
    return (given.get("cron") if "cron" in given
            else f"every {format_duration(every if isinstance(every, int) else parse_every(every))}" if every
            else f"once at {given['run_at'].astimezone(UTC).isoformat()}" if "run_at" in given else "ended")
