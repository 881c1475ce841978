"""Rows as frozen dataclasses, and the enumerations whose values are the SQL CHECK values."""
from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable, Mapping, TypeVar

from .decoding import Undecodable, decode_json
from .frozen import quick_init

E = TypeVar("E", bound=enum.Enum)


class JobStatus(str, enum.Enum):
    PENDING = "Pending"
    ACTIVE = "Active"
    PAUSED = "Paused"
    DISABLED = "Disabled"
    EXPIRED = "Expired"


class RunStatus(str, enum.Enum):
    QUEUED = "Queued"
    RUNNING = "Running"
    COMPLETED = "Completed"
    FAILED = "Failed"
    TIMEOUT = "Timeout"
    CANCELLED = "Cancelled"
    ABANDONED = "Abandoned"
    SKIPPED = "Skipped"


class ConcurrencyMode(str, enum.Enum):
    SKIP = "Skip"
    QUEUE = "Queue"
    CONCURRENT = "Concurrent"


class MissedRunPolicy(str, enum.Enum):
    SKIP = "Skip"
    RUN_ONCE = "RunOnce"
    RUN_ALL = "RunAll"


class Isolation(str, enum.Enum):
    THREAD = "thread"
    PROCESS = "process"


_MEMBERS: dict[type[enum.Enum], dict[Any, enum.Enum]] = {}


def enum_member(cls: type[E], value: Any) -> E:
    """``cls(value)`` by a dict of its members by value: the Enum call walks EnumMeta.__call__
    and took 1.3 µs, and a claimed job's row has four enum columns. Any other value still
    goes through the call, whose ValueError names it."""
    members = _MEMBERS.get(cls)
    if members is None:
        members = _MEMBERS[cls] = {m.value: m for m in cls}
    try:
        member = members.get(value)
    except TypeError:     # unhashable: not a value of cls
        member = None
    return member if member is not None else cls(value)   # type: ignore[return-value]


def _undecodable_of(obj: Any) -> tuple[str, ...]:
    return obj.__dict__.get("_undecodable", ())   # type: ignore[no-any-return]


def _decoded(values: dict[str, Any], converters: Mapping[str, Callable[[Any], Any]]) -> tuple[str, ...]:
    """``values`` converted field by field, each failure an Undecodable in its field's place
    (the slow path of a from_row whose fast path raised or met a marker): a row is never
    refused whole for one bad value. Returns the fields that failed."""
    failed: list[str] = []
    for name, convert in converters.items():
        value = values.get(name)
        if isinstance(value, Undecodable):     # the driver could not read it (decoding.safe_caster)
            failed.append(name)
            values[name] = Undecodable(name, value.reason)
            continue
        try:
            values[name] = convert(value)
        except Exception as exc:  # noqa: BLE001 - whatever a stored value makes a conversion raise
            values[name] = Undecodable(name, f"{type(exc).__name__}: {exc}"[:300])
            failed.append(name)
            continue
        if isinstance(values[name], Undecodable):
            failed.append(name)
    return tuple(failed)



def _field_values(cls: type, row: Mapping[str, Any]) -> dict[str, Any]:
    """Every field of dataclass ``cls``, None where ``row`` lacks the column; columns that
    are no field are dropped. The field names are read once per class (dataclasses.fields()
    per row cost more than the rest of a from_row); one pass over them, not a copy of the
    row trimmed of its other columns (a claim's rows carry 14 more: 5.4 -> 2.1 µs a row)."""
    names: tuple[str, ...] | None = cls.__dict__.get("_field_names")
    if names is None:
        names = tuple(f.name for f in dataclasses.fields(cls))
        setattr(cls, "_field_names", names)   # not a field: no annotation
    get = row.get
    return {name: get(name) for name in names}


@dataclass(frozen=True)
class Job:
    """One ``scheduled_job`` row (read-only; change it through the engine)."""

    id: str
    job_type_id: str
    driver: str
    name: str
    description: str | None
    cron_expression: str | None               # None for an interval (every) or one-off (run_at) job
    timezone: str
    start_at: datetime | None
    end_at: datetime | None
    status: JobStatus
    configuration: dict[str, Any]
    owner: str | None
    concurrency_mode: ConcurrencyMode
    missed_run_policy: MissedRunPolicy
    run_immediately_if_never_run: bool
    max_runtime_seconds: float | None
    isolation: Isolation | None
    max_queued_runs: int
    notify_on_success: bool
    notify_on_failure: bool
    notify_to: str | None
    next_run_at: datetime | None
    last_run_at: datetime | None
    run_count: int
    success_count: int
    failure_count: int
    last_duration_ms: int | None
    total_duration_ms: int
    lock_token: str | None
    locked_at: datetime | None
    locked_by_instance: str | None
    expected_completion_at: datetime | None
    created_at: datetime
    updated_at: datetime
    last_success_at: datetime | None = None   # the newest Completed run's end (for "no success in 26 h")
    high_frequency_ok: bool = False           # the job's opt-out of the high-frequency warning
    frequency_warned: str | None = None       # the schedule last warned for ("cron | timezone")
    keep_runs_days: int | None = None         # run-history retention; None: the engine's setting, 0: off
    keep_runs_count: int | None = None
    interval_seconds: int | None = None       # every=: ticks start_at (else created_at) + k * interval
    run_at: datetime | None = None            # run_at=: the one run; the job is Expired once it is served

    @property
    def every(self) -> timedelta | None:
        """The interval of an ``every=`` job, else None."""
        return None if self.interval_seconds is None else timedelta(seconds=self.interval_seconds)

    @property
    def schedule_kind(self) -> str:
        """'cron', 'every' or 'run_at': which of the three schedule kinds the job has."""
        return "every" if self.interval_seconds is not None else "run_at" if self.run_at is not None else "cron"

    @property
    def schedule_text(self) -> str:
        """The cron expression, 'every <n>s' or 'at <ISO instant>' (schedules.schedule_text)."""
        if self.cron_expression is not None:   # the common kind, read per claimed job: no import
            return self.cron_expression
        from .schedules import schedule_text

        return schedule_text(self.cron_expression, self.interval_seconds, self.run_at)
    # The job's own retry policy (all None: none; the driver's default applies): see ``retry``.
    retry_max_attempts: int | None = None
    retry_initial_delay: float | None = None
    retry_factor: float | None = None
    retry_max_delay: float | None = None
    retry_jitter: float | None = None
    notify_final_attempt_only: bool = True    # failures notify only when no retry follows
    retry_count: int = 0                      # retries scheduled (each attempt also counts in run_count)
    tags: tuple[str, ...] = ()                # the job's tags, sorted (job_tag, 010_tags.sql)
    # A Paused job's pause_jobs record (job_pause): when, by which database login and application
    # user, why, and until when (None: until resumed). None when it was paused another way.
    paused_at: datetime | None = None
    paused_by: str | None = None
    paused_by_user: str | None = None
    pause_reason: str | None = None
    paused_until: datetime | None = None
    jitter_seconds: int | None = None         # every tick moves by a stable offset in [0, this] (schedules.py)
    priority: int = 0                         # -100..100: higher is claimed first when slots are short

    @property
    def jitter(self) -> timedelta | None:
        """The job's jitter bound, or None: its ticks move by ``jitter_offset`` within it."""
        return None if self.jitter_seconds is None else timedelta(seconds=self.jitter_seconds)

    @property
    def resolved_cron(self) -> str | None:
        """The cron expression with its ``H`` items resolved for this job's name (``H 2 * * *``
        -> ``37 2 * * *``); the expression itself without any; None for the other kinds."""
        if self.cron_expression is None:
            return None
        from .cron import CronSchedule, uses_hash

        if not uses_hash(self.cron_expression):
            return self.cron_expression
        return CronSchedule.parse(self.cron_expression, self.timezone, seed=self.name).resolved

    @property
    def retry(self) -> Any:
        """The job's own ``mjsched.RetryPolicy``, or None (then its driver's default applies)."""
        from .retry import COLUMNS, RetryPolicy

        return RetryPolicy.from_row({k: getattr(self, k) for k in COLUMNS})

    @property
    def undecodable(self) -> tuple[str, ...]:
        """The fields whose stored value could not be decoded (each holds a
        ``decoding.Undecodable`` saying why): such a row is never run (engine/dispatch.py)."""
        return _undecodable_of(self)

    @classmethod
    def from_row(cls, row: Mapping[str, Any], **columns: Any) -> "Job":
        """``columns`` stand in for (or add to) the row's own: a claim's row names its job
        ``job_id`` and carries the claim's token, not the job's. Never raises for a stored
        value: one that cannot be decoded is an Undecodable in its field (``undecodable``)."""
        values = _field_values(cls, row)
        values.update(columns)
        failed: tuple[str, ...] = ()
        try:
            values["id"] = str(values["id"])
            values["job_type_id"] = str(values["job_type_id"])
            values["status"] = enum_member(JobStatus, values["status"])
            values["concurrency_mode"] = enum_member(ConcurrencyMode, values["concurrency_mode"])
            values["missed_run_policy"] = enum_member(MissedRunPolicy, values["missed_run_policy"])
            values["isolation"] = enum_member(Isolation, values["isolation"]) if values["isolation"] else None
            values["configuration"] = decode_json(values["configuration"], "configuration") or {}
            values["lock_token"] = str(values["lock_token"]) if values["lock_token"] else None
            values["run_immediately_if_never_run"] = bool(values["run_immediately_if_never_run"])
            values["notify_on_success"] = bool(values["notify_on_success"])
            values["notify_on_failure"] = bool(values["notify_on_failure"])
            values["high_frequency_ok"] = bool(values["high_frequency_ok"])
            values["notify_final_attempt_only"] = values["notify_final_attempt_only"] is None \
                or bool(values["notify_final_attempt_only"])
            values["retry_count"] = int(values["retry_count"] or 0)
            values["tags"] = _tags(values["tags"]) if values["tags"] else ()
            for key in ("retry_initial_delay", "retry_factor", "retry_max_delay", "retry_jitter"):
                if values[key] is not None:
                    values[key] = float(values[key])
            if values["max_runtime_seconds"] is not None:
                values["max_runtime_seconds"] = float(values["max_runtime_seconds"])
            if values["interval_seconds"] is not None:
                values["interval_seconds"] = int(values["interval_seconds"])
            if values["jitter_seconds"] is not None:
                values["jitter_seconds"] = int(values["jitter_seconds"])
            values["priority"] = int(values.get("priority") or 0)
            if Undecodable in map(type, values.values()):   # a marker of decode_json or of the driver
                raise ValueError("undecodable")
        except Exception:  # noqa: BLE001 - a value no rule checked: decode field by field, naming it
            values = _field_values(cls, row)
            values.update(columns)
            failed = _decoded(values, _JOB_CONVERTERS)
        if "__post_init__" in cls.__dict__:
            job = cls(**values)
        else:
            # Every field is in ``values``, and the frozen __init__ would only store them one by one
            # through object.__setattr__ (48 of them, about 8 µs per claimed job): store them at once.
            job = object.__new__(cls)
            job.__dict__.update(values)
        if failed:
            job.__dict__["_undecodable"] = failed   # not a field: no column of its own
        return job


def _tags(value: Any) -> tuple[str, ...]:
    """The tags column of a read (comma-joined, sorted; tags hold no comma) as a tuple."""
    if not value:
        return ()
    if isinstance(value, str):
        return tuple(value.split(","))
    return tuple(value)


def _optional(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else convert(value)


def _kept(value: Any) -> Any:
    return value


_JOB_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    **{f.name: _kept for f in dataclasses.fields(Job)},
    "id": str, "job_type_id": str,
    "status": lambda v: enum_member(JobStatus, v),
    "concurrency_mode": lambda v: enum_member(ConcurrencyMode, v),
    "missed_run_policy": lambda v: enum_member(MissedRunPolicy, v),
    "isolation": lambda v: enum_member(Isolation, v) if v else None,
    "configuration": lambda v: decode_json(v, "configuration") or {},
    "lock_token": lambda v: str(v) if v else None,
    **{k: bool for k in ("run_immediately_if_never_run", "notify_on_success", "notify_on_failure",
                         "high_frequency_ok")},
    "notify_final_attempt_only": lambda v: v is None or bool(v),
    "retry_count": lambda v: int(v or 0),
    "tags": _tags,
    **{k: _optional(float) for k in ("retry_initial_delay", "retry_factor", "retry_max_delay", "retry_jitter",
                                     "max_runtime_seconds")},
    "interval_seconds": _optional(int),
    "jitter_seconds": _optional(int),
    "priority": lambda v: int(v or 0),
}


@quick_init
@dataclass(frozen=True)
class JobRun:
    """One ``scheduled_job_run`` row: a tick served (or a manual run)."""

    id: str
    scheduled_job_id: str
    scheduled_for: datetime | None
    status: RunStatus
    success: bool | None
    error_message: str | None
    details: dict[str, Any] | None
    queued_at: datetime | None
    started_at: datetime | None
    completed_at: datetime | None
    duration_ms: int | None
    executed_by_instance: str | None
    lock_token: str | None
    lease_expires_at: datetime | None
    # What execute_job(parameters=...) merged over the job's configuration for this run only
    # (None for a scheduled run); the driver saw the merged configuration.
    parameters: dict[str, Any] | None = None
    # An operator's cancel_run of this run: when and by whom (the run itself may have finished
    # first, with its own outcome).
    cancel_requested_at: datetime | None = None
    cancel_requested_by: str | None = None
    attempt: int = 1                     # 1 for a tick's first run; a retry of the same tick counts on
    retry_at: datetime | None = None     # a Queued retry: when it is due
    job_version: int | None = None       # the job's version (scheduled_job.version) the run started with
    # Monotonic per job: every start under the job's lock takes the next one (None: not started,
    # or started before the fencing tokens). See docs/guide/reliability.md, "Fencing tokens".
    fencing_token: int | None = None

    @property
    def undecodable(self) -> tuple[str, ...]:
        """The fields whose stored value could not be decoded (each holds an Undecodable)."""
        return _undecodable_of(self)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "JobRun":
        """Never raises for a stored value: one that cannot be decoded (details nested a
        thousand levels deep) is an Undecodable in its field (``undecodable``)."""
        values = _field_values(cls, row)
        failed: tuple[str, ...] = ()
        try:
            values["id"] = str(values["id"])
            values["scheduled_job_id"] = str(values["scheduled_job_id"])
            values["status"] = enum_member(RunStatus, values["status"])
            values["details"] = decode_json(values["details"], "details")
            values["parameters"] = decode_json(values["parameters"], "parameters")
            values["lock_token"] = str(values["lock_token"]) if values["lock_token"] else None
            values["attempt"] = int(values["attempt"] or 1)
            if values["success"] is not None:
                values["success"] = bool(values["success"])
            if Undecodable in map(type, values.values()):
                raise ValueError("undecodable")
        except Exception:  # noqa: BLE001 - decode field by field, naming the one that fails
            values = _field_values(cls, row)
            failed = _decoded(values, _RUN_CONVERTERS)
        run = cls(**values)
        if failed:
            run.__dict__["_undecodable"] = failed
        return run

    @property
    def finished(self) -> bool:
        return self.status not in (RunStatus.QUEUED, RunStatus.RUNNING)


_RUN_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    **{f.name: _kept for f in dataclasses.fields(JobRun)},
    "id": str, "scheduled_job_id": str,
    "status": lambda v: enum_member(RunStatus, v),
    "details": lambda v: decode_json(v, "details"),
    "parameters": lambda v: decode_json(v, "parameters"),
    "lock_token": lambda v: str(v) if v else None,
    "attempt": lambda v: int(v or 1),
    "success": _optional(bool),
}


@dataclass(frozen=True)
class DispatchResult:
    """What one poll did: runs swept, runs dispatched, due jobs held by others, due jobs left
    waiting because every slot was busy (they start as slots free), and the runs it started."""

    swept: int = 0
    dispatched: int = 0
    locked_out: int = 0
    due_left_waiting: int = 0
    run_ids: tuple[str, ...] = ()   # the runs this poll handed to the pool, in claim order

    @property
    def skipped_at_capacity(self) -> int:
        """``due_left_waiting`` under its first name (SPEC), kept for code that reads it."""
        return self.due_left_waiting


@quick_init
@dataclass(frozen=True)
class Claim:
    """A tick (or queued run) that ``claim_due_jobs`` handed to this engine."""

    job_id: str
    run_id: str | None          # None: the tick already had a run; only advance past it
    lock_token: str
    scheduled_for: datetime | None
    db_now: datetime
    from_queue: bool = False

    @property
    def is_tick(self) -> bool:
        """A due tick's claim (its run serves ``scheduled_for``), not a queued run's claim."""
        return self.scheduled_for is not None and not self.from_queue


@dataclass(frozen=True)
class ClaimBatch:
    claims: list[Claim] = field(default_factory=list)
    # Each claimed job's row as its claim left it, by job id (the claim's own result, so a
    # poll is one round trip). lock_token is None in these rows: the claim's is Claim.lock_token.
    jobs: dict[str, Job] = field(default_factory=dict)
    next_due_at: datetime | None = None
    db_now: datetime | None = None
    due_left: int = 0          # claimable due jobs left for want of slots
    locked_out: int = 0        # due jobs held by other engines' live leases
    # The database clock as the claim ended (None from a procedure older than this field):
    # db_now is the claim's start, older by the claim's own duration.
    replied_at: datetime | None = None


@dataclass(frozen=True)
class FieldChange:
    """One field a declaration changes: its stored value and the declared one."""

    old: Any
    new: Any


@dataclass(frozen=True)
class JobChange:
    """One row of a job's audit trail (``job_history``): a field changed by whom and how.

    ``action`` is 'created', 'updated' or 'deleted'; ``field`` is a column name,
    'configuration.<key>' for one key of the configuration, or '*' for a whole definition
    (created or deleted, as JSON). ``via`` is the path ('api', 'cli', 'dashboard',
    'ensure_job', 'cli/sync_jobs', ..., or 'sql' for plain SQL); ``db_login`` the database
    login that made it; ``app_user`` who the application said it was (``mjsched.changes_by``).
    Values are as stored: surfaces mask credentials when they show them."""

    id: int
    job_id: str
    job_name: str
    version: int
    changed_at: datetime
    action: str
    field: str
    old_value: str | None
    new_value: str | None
    db_login: str
    app_user: str | None
    via: str

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "JobChange":
        return cls(id=int(row["id"]), job_id=str(row["job_id"]).lower(), job_name=str(row["job_name"]),
                   version=int(row["version"]), changed_at=row["changed_at"], action=str(row["action"]),
                   field=str(row["field"]), old_value=row.get("old_value"), new_value=row.get("new_value"),
                   db_login=str(row["db_login"]), app_user=row.get("app_user"), via=str(row["via"]))


@dataclass(frozen=True)
class SyncResult:
    """What ``sync_jobs`` did (or, with ``dry_run``, would do), by job name.

    ``changes`` maps each updated (and each removed) job's name to the fields that change,
    field -> FieldChange(old, new); ``removed`` holds the jobs paused or deleted because no
    declaration names them."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changes: dict[str, dict[str, FieldChange]] = field(default_factory=dict)
    dry_run: bool = False
