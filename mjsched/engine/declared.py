"""Jobs declared in code, idempotently: ``ensure_job`` and ``sync_jobs`` (issue 14 item 1).

A declaration is the whole definition of a job, keyed by its name (names are unique,
sql/*/005_job_names.sql). Making a job match it:

- no job of that name: it is created, as ``create_job`` would (status Active unless given);
- a job of that name: every field the declaration gives, and every definition field it does
  not give (reset to what ``create_job`` would give it: DEFAULTS), is compared with the stored
  value, and only the fields that differ are updated, in one ``update_job``. So the schedule
  (next_run_at) is recomputed only when cron, every, run_at, timezone or start_at changed,
  and the job keeps its id, statistics and run history;
- ``status`` is compared only when the declaration gives it: an operator's pause survives a
  restart of the application that declares the job.

Two engines declaring the same job at once end with one job: the loser's insert hits the
unique name, and it updates the winner's job to match instead (at most ATTEMPTS rounds).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, Mapping

from .. import alerts, validation
from ..errors import ConfigurationError, JobNameTaken, JobNotFound, SchedulerError
from ..models import FieldChange, Job, JobStatus, SyncResult

log = logging.getLogger(__name__)

REMOVE_MISSING = ("keep", "pause", "delete")
ATTEMPTS = 3     # rounds of "create, or else update" while other callers create or delete the same name

# The schedule kinds a declaration may give (exactly one of them).
SCHEDULE_KINDS: tuple[str, ...] = ("cron", "every", "run_at")

# What a definition field a declaration does not give is set to: what create_job gives it.
# status is not here (kept unless declared); neither are name, driver and the schedule (required).
DEFAULTS: dict[str, Any] = {
    "timezone": "UTC", "configuration": None, "description": None, "owner": None,
    "concurrency_mode": "Skip", "missed_run_policy": "RunOnce", "run_immediately_if_never_run": False,
    "max_runtime": None, "isolation": None, "max_queued_runs": 5, "start_at": None, "end_at": None,
    "notify_on_success": False, "notify_on_failure": True, "notify_to": None, "high_frequency_ok": False,
    "keep_runs_days": None, "keep_runs_count": None, "retry": None, "notify_final_attempt_only": True,
    "tags": (),
    "jitter": None, "priority": 0,
}
# The API keyword of a column validation.job_fields returns, where the two differ.
FIELD_OF_COLUMN = {"cron_expression": "cron", "max_runtime_seconds": "max_runtime", "interval_seconds": "every",
                   "jitter_seconds": "jitter"}
RETRY_COLUMNS = ("retry_max_attempts", "retry_initial_delay", "retry_factor", "retry_max_delay", "retry_jitter")


@dataclass(frozen=True)
class Declaration:
    """One declared job: ``fields`` are create_job's keywords, every definition field filled."""

    name: str
    fields: dict[str, Any]
    status_declared: bool
    rules: dict[str, Any] | None = None     # deadline alerts (alerts.py): the whole set, none when not declared

    def create_kwargs(self) -> dict[str, Any]:
        return {**self.fields, **{k: v for k, v in alerts.as_keywords(self.rules).items() if v is not None}}


def declare(spec: Any) -> Declaration:
    """A declaration from a dict of create_job's keywords; raises, naming the field, before
    anything is read or written."""
    if not isinstance(spec, Mapping):
        raise ConfigurationError("jobs[]", spec, "each declared job must be a dict of create_job's keywords")
    fields = dict(spec)
    rules = alerts.merged(None, alerts.pop_rules(fields) or {})    # not declared: none
    for kind in SCHEDULE_KINDS:
        if fields.get(kind) is None:
            fields.pop(kind, None)
    if not any(kind in fields for kind in SCHEDULE_KINDS):
        raise ConfigurationError("cron", None, "a declared job needs a schedule: "
                                               + " or ".join(f"{k}=" for k in SCHEDULE_KINDS))
    full = {**DEFAULTS, **fields}
    values = validation.job_fields(full, creating=True)       # every check create_job makes, nothing written
    if isinstance(full["configuration"], Mapping):
        full["configuration"] = values["configuration"]       # as stored: a python job's function by its path
    return Declaration(name=str(full["name"]), fields=full, status_declared="status" in fields, rules=rules)


def alert_change(admin: Any, job: Job, decl: Declaration) -> FieldChange | None:
    """The job's alert rules against the declared ones (create_job's keywords), None when the same."""
    old = alerts.as_keywords(admin.backend.job_alert_rules(job.id))
    new = alerts.as_keywords(decl.rules)
    return None if old == new else FieldChange(old, new)


def differences(job: Job, decl: Declaration) -> dict[str, FieldChange]:
    """The fields (create_job's keywords) whose stored value differs from the declared one."""
    wanted = validation.job_fields(decl.fields, creating=True)
    if not decl.status_declared or _served_one_off(job, wanted):
        wanted.pop("status", None)
    out: dict[str, FieldChange] = {}
    for column, new in wanted.items():
        if column in RETRY_COLUMNS:
            continue
        old = _plain(getattr(job, column, None))
        if not _same(old, new):
            out[FIELD_OF_COLUMN.get(column, column)] = FieldChange(old, new)
    if any(not _same(getattr(job, c, None), wanted.get(c)) for c in RETRY_COLUMNS):   # one policy, five columns
        out["retry"] = FieldChange(job.retry, decl.fields.get("retry"))
    return out


def update_kwargs(decl: Declaration, changes: Mapping[str, FieldChange]) -> dict[str, Any]:
    """update_job's keywords for ``changes``. A new driver comes with its configuration, which
    update_job would otherwise reset, changed or not."""
    out = {key: change.new for key, change in changes.items()}
    if "driver" in out:
        out["configuration"] = validation.configuration(decl.fields.get("configuration"))
    return out


def ensure(admin: Any, decl: Declaration) -> tuple[str, Job, dict[str, FieldChange]]:
    """Make the job ``decl`` names match it: ("created" | "updated" | "unchanged", job, changes).
    ``admin`` is the engine (create_job, update_job, get_job and its backend)."""
    for _ in range(ATTEMPTS):
        job = _named(admin, decl.name)
        if job is None:
            try:
                job_id = admin.create_job(**decl.create_kwargs())
            except JobNameTaken:
                continue            # created by another caller meanwhile: make that one match
            return "created", admin.get_job(job_id), {}
        changes = differences(job, decl)
        rules = alert_change(admin, job, decl)
        if not changes and rules is None:
            return "unchanged", job, {}
        kwargs = update_kwargs(decl, changes)
        try:
            updated = admin.update_job(job.id, **kwargs) if kwargs else job
        except JobNotFound:
            continue                # deleted by another caller meanwhile: create it again
        if rules is not None:
            admin.backend.set_job_alerts(job.id, alerts.merged(None, decl.rules or {}))
            changes = {**changes, "alerts": rules}
        log.info("job %r (%s) updated to match its declaration: %s", decl.name, job.id, ", ".join(sorted(changes)),
                 extra={"action": "job_declared_update"})   # field names only: a configuration may hold secrets
        return "updated", updated, changes
    raise SchedulerError(f"name={decl.name!r}: the job was created or deleted by others {ATTEMPTS} times while "
                         "this call made it match its declaration; call again")


def sync(admin: Any, specs: Any, remove_missing: str = "keep", dry_run: bool = False,
         tag: str | None = None) -> SyncResult:
    """Make the jobs match the declared set ``specs``; see ``SchedulingEngine.sync_jobs``.
    With ``tag``, every declaration carries it and only the jobs carrying it can be missing."""
    if remove_missing not in REMOVE_MISSING:
        raise ConfigurationError("remove_missing", remove_missing, f"must be one of {', '.join(REMOVE_MISSING)}")
    decls = declarations(specs)
    if tag is not None:
        decls = [with_tag(decl, tag) for decl in decls]
    result = SyncResult(dry_run=bool(dry_run))
    kept: set[str] = set()
    for decl in decls:
        if dry_run:
            outcome, job, changes = _plan(admin, decl)
        else:
            outcome, job, changes = ensure(admin, decl)
        getattr(result, outcome).append(decl.name)
        if changes:
            result.changes[decl.name] = changes
        if job is not None:
            kept.add(job.id)
    if remove_missing != "keep":
        _remove_missing(admin, kept, remove_missing, dry_run, result, tag)
    if not dry_run:
        log.info("synced %d declared job(s): %d created, %d updated, %d unchanged, %d %s", len(decls),
                 len(result.created), len(result.updated), len(result.unchanged), len(result.removed),
                 "paused" if remove_missing == "pause" else "deleted" if remove_missing == "delete" else "removed",
                 extra={"action": "jobs_synced"})
    return result


def declarations(specs: Any) -> list[Declaration]:
    """Every declaration of ``specs`` checked, and names declared once, before any is applied."""
    if isinstance(specs, (str, bytes, Mapping)) or not isinstance(specs, Iterable):
        raise ConfigurationError("jobs", specs, "must be a list of dicts, one per job")
    out: list[Declaration] = []
    where: dict[str, int] = {}
    for i, spec in enumerate(specs):
        label = spec.get("name") if isinstance(spec, Mapping) and isinstance(spec.get("name"), str) else f"jobs[{i}]"
        try:
            decl = declare(spec)
        except ConfigurationError as exc:
            exc.args = (f"job {label!r}: {exc.args[0] if exc.args else exc}",)
            raise
        if decl.name in where:
            raise ConfigurationError("name", decl.name, f"declared twice (jobs[{where[decl.name]}] and jobs[{i}])")
        where[decl.name] = i
        out.append(decl)
    return out


def _plan(admin: Any, decl: Declaration) -> tuple[str, Job | None, dict[str, FieldChange]]:
    job = _named(admin, decl.name)
    if job is None:
        return "created", None, {}
    changes = differences(job, decl)
    rules = alert_change(admin, job, decl)
    if rules is not None:
        changes = {**changes, "alerts": rules}
    return ("updated" if changes else "unchanged"), job, changes


def with_tag(decl: Declaration, tag: str) -> Declaration:
    """``decl`` with ``tag`` among its tags (a sync scoped to a tag owns the jobs carrying it)."""
    tags = validation.job_fields({"tags": decl.fields.get("tags")}, creating=False)["tags"]
    return Declaration(name=decl.name, fields={**decl.fields, "tags": tuple(sorted({*tags, tag}))},
                       status_declared=decl.status_declared)


def _remove_missing(admin: Any, kept: set[str], how: str, dry_run: bool, result: SyncResult,
                    tag: str | None = None) -> None:
    for job in admin.list_jobs(tag=tag):
        if job.id in kept:
            continue
        if how == "pause":
            if job.status is not JobStatus.ACTIVE:
                continue            # Paused, Disabled, Pending, Expired: nothing runs already
            result.changes[job.name] = {"status": FieldChange(job.status.value, JobStatus.PAUSED.value)}
            if not dry_run:
                try:
                    admin.pause_job(job.id)
                except JobNotFound:
                    continue
        else:
            result.changes[job.name] = {"deleted": FieldChange(False, True)}
            if not dry_run:
                try:
                    admin.delete_job(job.id)
                except JobNotFound:
                    continue
        result.removed.append(job.name)
        if not dry_run:
            log.info("job %r (%s) %s: no declaration names it", job.name, job.id,
                     "paused" if how == "pause" else "deleted", extra={"action": f"job_undeclared_{how}"})


def _named(admin: Any, name: str) -> Job | None:
    jobs = admin.backend.jobs_named(name)
    if len(jobs) > 1:     # only on a schema older than 005_job_names, whose upgrade renames the copies
        raise ConfigurationError("name", name, f"{len(jobs)} jobs have this name (the schema is older than "
                                               "005_job_names: run install() to resolve them)")
    return jobs[0] if jobs else None


def _served_one_off(job: Job, wanted: Mapping[str, Any]) -> bool:
    """A one-off whose tick was served is Expired for good: declaring it Active again with the
    same run_at changes nothing (a new run_at is a new tick, and that is a change)."""
    return (job.status is JobStatus.EXPIRED and job.run_at is not None and wanted.get("status") == "Active"
            and _same(job.run_at, wanted.get("run_at")))


def _plain(value: Any) -> Any:
    """A stored value as job_fields returns the declared one (enums as their values)."""
    return value.value if hasattr(value, "value") and isinstance(getattr(value, "value"), str) else value


def _same(old: Any, new: Any) -> bool:
    if isinstance(old, datetime) and isinstance(new, datetime):
        return old == new                  # the same instant, whatever the offset
    if isinstance(old, bool) or isinstance(new, bool):
        return old is new or (old == new and type(old) is type(new))
    return bool(old == new)
