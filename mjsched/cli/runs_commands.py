"""The ``runs`` verbs: the history (and --follow, a live tail), ``runs show``, ``runs cancel`` and
``runs prune``; and how a run reads on the command line (shared with execute and run --once).

A listing shows each run's short id (mjsched/engine/refs.py: the last 12 hex digits of a
PostgreSQL run id, the first 8 of a SQL Server one); ``show`` and ``cancel`` take it back, as
they take the full id or any unique prefix of it."""
from __future__ import annotations

import json
import time
from typing import Any

from ..engine.refs import short_run_id
from ..errors import SchedulerError
from ..redaction import redact
from .context import Context, UsageError, resolve_job
from .terminal import EXIT_FAILED, EXIT_OK, clip, duration, jsonable, table, ts


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
    """The runs as a table (VERSION: the job's version the run started with, "-" before it
    started); a PARAMETERS column only when a listed run has some
    (execute_job(parameters=...)), masked like details."""
    with_parameters = any(r.parameters for r in runs)
    return table(["RUN", "JOB", "VERSION", "STATUS", "ATTEMPT", "SCHEDULED FOR (UTC)", "STARTED (UTC)", "DURATION", "BY",
                  "ERROR"] + (["PARAMETERS"] if with_parameters else []),
                 [[short_run_id(r.id), clip(names.get(r.scheduled_job_id, r.scheduled_job_id[:8]), 28),
                   "-" if r.job_version is None else str(r.job_version), r.status.value,
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
    run_id = engine.get_run(ctx.args.run).id
    engine.cancel_run(run_id, requested_by=default_requester())
    run = engine.backend.get_run(run_id)
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


def cmd_runs_show(ctx: Context) -> int:
    """One run in full: its id, job, status, parameters, error and details."""
    engine = ctx.engine()
    run = engine.get_run(ctx.args.run)
    if ctx.json:
        ctx.emit_json(run)
        return EXIT_OK
    names = {j.id: j.name for j in engine.list_jobs()}
    lines = run_lines(run, names.get(run.scheduled_job_id))
    lines[1:1] = [f"attempt: {attempt_text(run)}",
                  f"scheduled for: {ts(run.scheduled_for) + ' UTC' if run.scheduled_for else 'manual'}",
                  f"started: {ts(run.started_at)} UTC" + (f", ended {ts(run.completed_at)} UTC"
                                                          if run.completed_at else ""),
                  f"engine: {run.executed_by_instance or '-'}"]
    for line in lines:
        ctx.emit(line)
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
                             f"{run.status.value:<9} {short_run_id(run.id)} {duration(run.duration_ms):>8} "
                             f"{clip(run.error_message or '', 60)}")
            seen.update((r.id, r.status.value) for r in runs)
            first = False
            time.sleep(ctx.args.interval)
    except KeyboardInterrupt:
        return EXIT_OK
