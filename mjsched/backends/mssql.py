"""SQL Server gateway: the only module that imports pyodbc (with its small pool).

DSN forms:

``mssql://user:password@host:1433/database?driver=ODBC+Driver+18+for+SQL+Server&TrustServerCertificate=yes``
    Query keys other than ``driver`` are passed to the ODBC driver as they are
    (``Encrypt``, ``TrustServerCertificate``, ``ApplicationIntent``, ``TDS_Version`` ...).
    ``driver=FreeTDS`` (or any driver name containing "FreeTDS") builds a FreeTDS
    connection string (SERVER + PORT, TDS_Version 7.4, UTF-8).
``Driver={ODBC Driver 18 for SQL Server};Server=tcp:host,1433;Database=db;UID=...;PWD=...``
    A raw ODBC connection string (anything containing ``Driver=``), used verbatim.

Every lock decision is made by the procedures in ``sql/mssql``; this module only calls
them by name (``EXEC mjsched.<name> @p_x = ?``) and turns rows into models. Times go to
the server as ISO 8601 strings with an offset (unambiguous under any DATEFORMAT or
language) and come back as aware UTC datetimes; uniqueidentifiers come back as
lower-case strings, as PostgreSQL prints them.
"""
from __future__ import annotations

import contextlib
import json
import math
import logging
import uuid
from datetime import datetime, timedelta
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

import pyodbc

from .. import sqlfiles
from ..redaction import redact_dsn
from ..errors import CannotConnect, ConfigurationError, DatabaseError, JobNameTaken, SchemaNotInstalled
from .. import audit
from ..models import ClaimBatch, Job, JobChange, JobRun
from .base import (NAME_CONSTRAINT, NEW_JOB_ID, Backend, CancelOutcome, CancelRequest, Completion, Listener,
                   ManualStart, SweepResult, cancel_outcome, cancel_requests, claim_batch, completion_outcomes,
                   completions_json, deleted_or_replayed, manual_start, naming, replayed_attempts, with_new_job_id)
from .base import UnscheduledJob, drivers_text
from ..retention import PurgeBatch
from .pool import while_connecting
from .watchdog import DEFAULT_CALL_TIMEOUT
from .odbc import (
    INSTALL_LOCK,
    INVALID_PARAMETER,
    JOB_COLUMNS,
    _BATCH_SPLIT,
    _SCHEMA_MISSING_NATIVE,
    _drain,
    _message,
    _rows_of,
    _sqlstate,
    clean_message,
    configure_connection,
    is_transient,
    native_error,
    odbc_pool,
    parse_dsn,
    to_param,
)

log = logging.getLogger(__name__)


def _audited(statement: str) -> str:
    """``statement`` with who makes the job change around it, for the audit trail's trigger
    (013_audit.sql): session context set before and cleared after, in one batch (the first
    result set is the procedure's). Parameters: via, app user, then the statement's."""
    return ("SET NOCOUNT ON; EXEC sys.sp_set_session_context @key = N'mjsched.via', @value = ?; "
            "EXEC sys.sp_set_session_context @key = N'mjsched.app_user', @value = ?; " + statement +
            " EXEC sys.sp_set_session_context @key = N'mjsched.via', @value = NULL;"
            " EXEC sys.sp_set_session_context @key = N'mjsched.app_user', @value = NULL;")
T = TypeVar("T")


def _changer(user: str | None) -> tuple[str, str | None]:
    """(via, app user) for the audit trail of a call that names its user itself (pause_jobs,
    set_tag_limit): that user, else the one the application set (audit.changes_by)."""
    via, current_user = audit.current()
    return via, user if user is not None else current_user

UNIQUE_VIOLATION = {2627, 2601}   # a UNIQUE constraint's violation; a unique index's

# The scripts need OPENJSON, which SQL Server offers only at database compatibility
# level 130 (SQL Server 2016) or higher, whatever the server's version.
MIN_COMPATIBILITY_LEVEL = 130


def odbc_timeouts(connect_timeout: float, statement_timeout: float,
                  call_timeout: float = DEFAULT_CALL_TIMEOUT) -> tuple[int, int]:
    """(login timeout, query timeout) in whole seconds, as pyodbc takes them: the login
    timeout bounds connecting; the query timeout (``conn.timeout``, SQL_ATTR_QUERY_TIMEOUT)
    is enforced by the driver on the client, so a call gets no reply for at most the
    smaller of statement_timeout and the engine's per-call bound (never 0, which means
    no bound at all)."""
    if not call_timeout or not call_timeout > 0:
        raise ConfigurationError("call_timeout", call_timeout, "must be a positive number of seconds")
    return max(1, int(round(connect_timeout))), max(1, math.ceil(min(statement_timeout, call_timeout)))


class MssqlBackend(Backend):
    dialect = "mssql"

    def __init__(self, dsn: str, *, pool_size: int = 8, connect_timeout: float = 5.0,
                 statement_timeout: float = 60.0, retry_attempts: int = 5,
                 retry_max_delay: float = 15.0, install_lock_timeout: float = 120.0,
                 call_timeout: float = DEFAULT_CALL_TIMEOUT, lock_timeout: float | None = None) -> None:
        if lock_timeout is not None and (isinstance(lock_timeout, bool) or not lock_timeout > 0):
            raise ConfigurationError("lock_timeout", lock_timeout, "must be a positive number of seconds or None")
        # SET LOCK_TIMEOUT for every session (None: the server's default, wait for ever)
        self._lock_timeout_ms = None if lock_timeout is None else max(1, int(lock_timeout * 1000))
        self._target = parse_dsn(dsn)
        self._safe_dsn = redact_dsn(dsn)
        self._connect_timeout, self._query_timeout = odbc_timeouts(connect_timeout, statement_timeout, call_timeout)
        self.call_timeout = float(call_timeout)
        self._statement_timeout = max(1, int(round(statement_timeout)))
        self._install_lock_timeout = install_lock_timeout
        self._retry_attempts = retry_attempts
        self._retry_max_delay = retry_max_delay
        self._pool = odbc_pool(self._connect, max_size=pool_size)

    @property
    def where(self) -> str:
        """``host:port`` of the server, for messages."""
        return self._target.where

    # -- plumbing ----------------------------------------------------------------------
    def _connect(self) -> Any:
        conn = pyodbc.connect(self._target.connection_string, autocommit=True, timeout=self._connect_timeout)
        try:
            conn.timeout = self._query_timeout
            configure_connection(conn, self._lock_timeout_ms)
        except BaseException:
            with contextlib.suppress(Exception):
                conn.close()
            raise
        return conn

    def _scrub(self, text: str) -> str:
        text = redact_dsn(text)
        if self._target.password:
            text = text.replace(self._target.password, "***")
        return text

    def _describe(self, exc: BaseException | None) -> str:
        return self._scrub(clean_message(exc)) if exc is not None else "?"

    @contextlib.contextmanager
    def _translate(self, what: str) -> Iterator[None]:
        try:
            yield
        except DatabaseError:
            raise
        except pyodbc.Error as exc:
            number = native_error(exc)
            message = self._scrub(clean_message(exc))
            if number == INVALID_PARAMETER:
                raise ConfigurationError(what, None, message) from exc
            if number in UNIQUE_VIOLATION and NAME_CONSTRAINT in message:
                raise JobNameTaken(None) from exc     # naming() says which name
            if number in _SCHEMA_MISSING_NATIVE and "mjsched" in message.lower():
                raise SchemaNotInstalled(f"{what}: the mjsched schema is missing or outdated; "
                                         "run engine.install() or `mjsched init-db`") from exc
            raw = _message(exc)
            if _sqlstate(exc) == "IM002" or "can't open lib" in raw.lower():
                raise CannotConnect(self.where, f"ODBC driver {self._target.driver!r} is not installed "
                                                f"(`odbcinst -q -d` lists the installed ones): {message}", what) from exc
            if while_connecting(exc) or "(SQLDriverConnect)" in raw:
                raise CannotConnect(self.where, f"{message} (login timeout {self._connect_timeout}s)", what) from exc
            raise DatabaseError(f"{what} failed on {self.where}: {message}") from exc

    _is_transient = staticmethod(is_transient)

    def _run(self, what: str, fn: Callable[[Any], T]) -> T:
        """``fn(cursor)`` on a pooled connection; transient failures are retried."""
        def once() -> T:
            with self._pool.connection() as conn:
                cur = conn.cursor()
                try:
                    return fn(cur)
                finally:
                    with contextlib.suppress(Exception):
                        cur.close()
        return self._retried(what, once)

    def _rows(self, what: str, query: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        def go(cur: Any) -> list[dict[str, Any]]:
            cur.execute(query, [to_param(p) for p in params])
            return _rows_of(cur)
        return self._run(what, go)

    def _call(self, procedure: str, **params: Any) -> list[dict[str, Any]]:
        """``EXEC mjsched.<procedure> @p_x = ?, ...``: parameters by name, in the given order."""
        names = ", ".join(f"@p_{name} = ?" for name in params)
        return self._rows(procedure, f"EXEC mjsched.{procedure} {names};" if names else
                          f"EXEC mjsched.{procedure};", list(params.values()))

    def _scalar(self, procedure: str, **params: Any) -> Any:
        rows = self._call(procedure, **params)
        return next(iter(rows[0].values())) if rows else None

    # -- schema --------------------------------------------------------------------------
    def _check_compatibility(self, cur: Any) -> None:
        """Refuse, before any script runs, a database whose compatibility level is below 130.

        Below it OPENJSON is unknown to the server ("Invalid object name 'OPENJSON'"),
        which would surface midway through the scripts or, worse, only when a procedure
        is first called. A level that cannot be read (no row) is let through: the
        scripts then report what is missing themselves.
        """
        cur.execute("SELECT DB_NAME() AS name, compatibility_level AS level "
                    "FROM sys.databases WHERE name = DB_NAME();")
        rows = _rows_of(cur)
        level = rows[0]["level"] if rows else None
        if level is not None and int(level) < MIN_COMPATIBILITY_LEVEL:
            name = str(rows[0]["name"]).replace("]", "]]")
            raise DatabaseError(
                f"install failed on {self.where}: database [{name}] has compatibility level {level}; "
                f"mjsched needs {MIN_COMPATIBILITY_LEVEL} or higher (OPENJSON). Nothing was installed. "
                f"Raise it with ALTER DATABASE [{name}] SET COMPATIBILITY_LEVEL = {MIN_COMPATIBILITY_LEVEL} "
                "(or higher, up to what the server supports)")

    def install(self) -> list[str]:
        # wait for another installer at most until just before the statement timeout
        lock_ms = int(max(1.0, min(self._install_lock_timeout, self._statement_timeout - 1)) * 1000)

        def go(cur: Any) -> list[str]:
            applied: list[str] = []
            cur.connection.timeout = self._statement_timeout   # install's own, longer bound (reset after)
            self._check_compatibility(cur)
            # the upgrade waits for engines' row locks (held for milliseconds), bounded by the above
            cur.execute("SET LOCK_TIMEOUT -1; SET XACT_ABORT ON; BEGIN TRANSACTION;")
            try:
                cur.execute("SET NOCOUNT ON; DECLARE @r int; "
                            "EXEC @r = sys.sp_getapplock @Resource = ?, @LockMode = N'Exclusive', "
                            "@LockOwner = N'Transaction', @LockTimeout = ?; SELECT @r AS r;",
                            (INSTALL_LOCK, lock_ms))
                status = _rows_of(cur)[0]["r"]
                if status is None or status < 0:
                    raise DatabaseError(f"install failed on {self.where}: could not take the install lock "
                                        f"{INSTALL_LOCK!r} (sp_getapplock returned {status})")
                cur.execute("IF SCHEMA_ID(N'mjsched') IS NULL EXEC sys.sp_executesql N'CREATE SCHEMA mjsched';")
                _drain(cur)
                cur.execute("""IF OBJECT_ID(N'mjsched.schema_version', N'U') IS NULL
                               CREATE TABLE mjsched.schema_version (
                                   name nvarchar(100) NOT NULL CONSTRAINT pk_schema_version PRIMARY KEY,
                                   checksum nvarchar(64) NOT NULL,
                                   applied_at datetimeoffset NOT NULL
                                       CONSTRAINT df_schema_version_applied_at DEFAULT SYSDATETIMEOFFSET());""")
                _drain(cur)
                cur.execute("SELECT name, checksum FROM mjsched.schema_version;")
                have = {r["name"]: r["checksum"] for r in _rows_of(cur)}
                stale = False
                for script in sqlfiles.scripts(self.dialect):
                    # once one script is (re)applied, every later one runs again too (all are idempotent)
                    stale = stale or have.get(script.name) != script.checksum
                    if not stale:
                        continue
                    for batch in split_batches(script.text):
                        cur.execute(batch)
                        _drain(cur)
                    cur.execute("""UPDATE mjsched.schema_version SET checksum = ?, applied_at = SYSDATETIMEOFFSET()
                                    WHERE name = ?;
                                   IF @@ROWCOUNT = 0
                                       INSERT INTO mjsched.schema_version (name, checksum) VALUES (?, ?);""",
                                (script.checksum, script.name, script.name, script.checksum))
                    _drain(cur)
                    applied.append(script.name)
                cur.execute("COMMIT TRANSACTION;")
            except BaseException:
                with contextlib.suppress(Exception):
                    cur.execute("IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;")
                raise
            return applied

        def bounded_install(cur: Any) -> list[str]:
            try:
                return go(cur)
            finally:
                with contextlib.suppress(Exception):
                    cur.connection.timeout = self._query_timeout
                    if self._lock_timeout_ms is not None:   # the session's own bound again (pooled)
                        cur.execute(f"SET LOCK_TIMEOUT {self._lock_timeout_ms};")
        return self._run("install", bounded_install)

    def installed_versions(self) -> list[str]:
        try:
            rows = self._read("installed_versions")
        except SchemaNotInstalled:
            return []
        return [r["name"] for r in rows]

    # -- procedures ------------------------------------------------------------------------
    def acquire_job_lock(self, job_id: str, token: str, instance: str, lease_seconds: float,
                         require_due: bool = False, now: datetime | None = None) -> bool:
        return bool(self._scalar("acquire_job_lock", job_id=job_id, token=token, instance=instance,
                                 lease_seconds=lease_seconds, require_due=bool(require_due), now=now))

    def release_job_lock(self, job_id: str, token: str) -> bool:
        return bool(self._scalar("release_job_lock", job_id=job_id, token=token))

    def extend_job_leases(self, tokens: Sequence[str], lease_seconds: float,
                          instance: str | None = None, now: datetime | None = None) -> set[str]:
        rows = self._call("extend_job_leases", tokens=json.dumps([str(t) for t in tokens]),
                          lease_seconds=lease_seconds, instance=instance, now=now)
        return {str(r["lock_token"]).lower() for r in rows}

    def renew_leases(self, tokens: Sequence[str], lease_seconds: float, instance: str | None = None,
                     now: datetime | None = None) -> tuple[set[str], set[str]]:
        rows = self._call("renew_leases", tokens=json.dumps([str(t) for t in tokens]),
                          lease_seconds=lease_seconds, instance=instance, now=now)
        return ({str(r["lock_token"]).lower() for r in rows if r["renewed"]},
                {str(r["lock_token"]).lower() for r in rows if not r["renewed"]})

    def claim_due_jobs(self, instance: str, max_jobs: int, lease_seconds: float,
                       now: datetime | None = None, claim_id: str | None = None,
                       replay: bool = False) -> ClaimBatch:
        claim_id = claim_id or str(uuid.uuid4())

        def attempt(cur: Any, again: bool) -> list[dict[str, Any]]:
            cur.execute("EXEC mjsched.claim_due_jobs @p_instance = ?, @p_max_jobs = ?, @p_lease_seconds = ?, "
                        "@p_now = ?, @p_claim_id = ?, @p_replay = ?;",
                        [to_param(p) for p in (instance, max_jobs, lease_seconds, now, claim_id, again)])
            return _rows_of(cur)
        return claim_batch(self._run("claim_due_jobs", replayed_attempts(replay, attempt)))

    def complete_runs(self, items: Sequence[Completion],
                      now: datetime | None = None) -> dict[str, bool | None]:
        if not items:
            return {}
        payload = completions_json(items, to_param)
        return completion_outcomes(self._call("complete_runs", items=payload, now=now))

    def sweep_expired_leases(self, now: datetime | None = None) -> SweepResult:
        r = self._call("sweep_expired_leases", now=now)[0]
        return SweepResult(int(r["swept"]), int(r["locks_freed"]), int(r["expired_jobs"]))

    def enqueue_job_run(self, job_id: str, scheduled_for: datetime, now: datetime | None = None) -> bool:
        return bool(self._scalar("enqueue_job_run", job_id=job_id, scheduled_for=scheduled_for, now=now))

    def advance_job(self, job_id: str, token: str, next_run_at: datetime | None, release: bool,
                    guard: bool = False, expected_next_run_at: datetime | None = None) -> bool:
        return bool(self._scalar("advance_job", job_id=job_id, token=token, next_run_at=next_run_at,
                                 release=bool(release), guard=bool(guard),
                                 expected_next_run_at=expected_next_run_at))

    def begin_job_run(self, job_id: str, token: str, instance: str,
                      scheduled_for: datetime | None = None, now: datetime | None = None) -> str | None:
        value = self._scalar("begin_job_run", job_id=job_id, token=token, instance=instance,
                             scheduled_for=scheduled_for, now=now)
        return str(value) if value else None

    def start_manual_run(self, job_id: str, request_id: str, instance: str, lease_seconds: float,
                         force: bool = False, replay: bool = False, now: datetime | None = None,
                         parameters: Mapping[str, Any] | None = None) -> ManualStart:
        payload = json.dumps(dict(parameters)) if parameters is not None else None

        def attempt(cur: Any, again: bool) -> list[dict[str, Any]]:
            cur.execute("EXEC mjsched.start_manual_run @p_job_id = ?, @p_request_id = ?, @p_instance = ?, "
                        "@p_lease_seconds = ?, @p_force = ?, @p_replay = ?, @p_now = ?"
                        + (", @p_parameters = ?;" if payload is not None else ";"),
                        [to_param(p) for p in (job_id, request_id, instance, lease_seconds, force, again, now)]
                        + ([payload] if payload is not None else []))
            return _rows_of(cur)
        return manual_start(self._run("start_manual_run", replayed_attempts(replay, attempt)))

    def cancel_run(self, run_id: str, requested_by: str, now: datetime | None = None,
                   request_id: str | None = None) -> CancelOutcome:
        return cancel_outcome(self._call("cancel_run", run_id=run_id, requested_by=requested_by, now=now,
                                         request_id=request_id or str(uuid.uuid4())))

    def cancel_requests(self, tokens: Sequence[str]) -> list[CancelRequest]:
        if not tokens:
            return []
        return cancel_requests(self._call("cancel_requests", tokens=json.dumps([str(t) for t in tokens])))

    def release_engine_locks(self, instance: str, reason: str | None = None,
                             now: datetime | None = None) -> tuple[int, int]:
        r = self._call("release_engine_locks", instance=instance, reason=reason, now=now)[0]
        return int(r["runs_abandoned"]), int(r["locks_freed"])

    def engines_holding_locks(self, host: str) -> list[dict[str, Any]]:
        return self._call("engines_holding_locks", host=host)

    def force_unlock_job(self, job_id: str, reason: str | None = None,
                         now: datetime | None = None) -> tuple[str | None, int] | None:
        rows = self._call("force_unlock_job", job_id=job_id, reason=reason, now=now)
        return (rows[0]["locked_by_instance"], int(rows[0]["runs_abandoned"])) if rows else None

    def initialize_next_run(self, job_id: str, next_run_at: datetime) -> bool:
        return bool(self._scalar("initialize_next_run", job_id=job_id, next_run_at=next_run_at))

    def initialize_next_runs(self, items: Sequence[tuple[str, datetime]]) -> int:
        if not items:
            return 0
        payload = json.dumps([{"job_id": job_id, "next_run_at": to_param(when)} for job_id, when in items])
        return int(self._scalar("initialize_next_runs", items=payload) or 0)

    def register_engine(self, instance: str, host: str, pid: int, version: str,
                        heartbeat_seconds: float | None = None, max_concurrent_jobs: int | None = None,
                        allowed_drivers: Iterable[str] | None = None) -> None:
        self._call("register_engine", instance=instance, host=host, pid=pid, version=version,
                   heartbeat_seconds=heartbeat_seconds, max_concurrent_jobs=max_concurrent_jobs,
                   allowed_drivers=drivers_text(allowed_drivers))

    def unregister_engine(self, instance: str) -> None:
        self._call("unregister_engine", instance=instance)

    def probe_permissions(self) -> list[str]:
        rows = self._call("probe_permissions")
        return [r["procedure_name"] for r in rows if not r["can_execute"]]

    # -- rows --------------------------------------------------------------------------------
    def ensure_job_type(self, driver: str, isolation: str = "thread",
                        default_max_runtime: float | None = None) -> str:
        type_id = self._scalar("ensure_job_type", driver=driver, isolation=to_param(isolation),
                               default_max_runtime=default_max_runtime)
        if type_id is None:
            raise ConfigurationError("driver", driver, "a job type of this name exists with another driver_class")
        return str(type_id)

    @staticmethod
    def _adapt(fields: Mapping[str, Any], keys: Iterable[str] = JOB_COLUMNS) -> dict[str, Any]:
        unknown = set(fields) - set(keys)
        if unknown:
            raise ConfigurationError(sorted(unknown)[0], fields[sorted(unknown)[0]], "not a job column")
        return {key: to_param(value) for key, value in fields.items()}

    def _fields_json(self, fields: Mapping[str, Any], keys: Iterable[str] = JOB_COLUMNS) -> str:
        values = self._adapt(fields, keys)
        if isinstance(values.get("configuration"), str):   # nested JSON, not a string value
            values["configuration"] = json.loads(values["configuration"])
        return json.dumps(values, default=str)

    def insert_job(self, fields: Mapping[str, Any]) -> str:
        values = self._fields_json(with_new_job_id(fields), (NEW_JOB_ID, *JOB_COLUMNS))   # the same on every retry
        with naming(fields, self.jobs_named):
            rows = self._rows("insert_job", _audited("EXEC mjsched.insert_job @p_fields = ?;"),
                              [*audit.current(), values])
            return str(next(iter(rows[0].values())))

    def update_job(self, job_id: str, fields: Mapping[str, Any]) -> bool:
        with naming(fields, self.jobs_named):
            rows = self._rows("update_job", _audited("EXEC mjsched.update_job @p_job_id = ?, @p_fields = ?;"),
                              [*audit.current(), job_id, self._fields_json(fields)])
            return bool(rows and next(iter(rows[0].values())))

    def delete_job(self, job_id: str) -> bool:
        changer = audit.current()

        def attempt(cur: Any) -> bool:
            cur.execute(_audited("EXEC mjsched.delete_job @p_job_id = ?;"), [*changer, to_param(job_id)])
            rows = _rows_of(cur)
            return bool(rows and next(iter(rows[0].values())))
        return self._run("delete_job", deleted_or_replayed(attempt))

    def _column_privileges(self, table: str) -> list[dict[str, Any]]:
        return self._read("column_privileges", table)

    def _read(self, name: str, *params: Any) -> list[dict[str, Any]]:
        """Read query ``name`` of sql/mssql/queries.sql, with the columns this role may read."""
        return self._rows(name, self._query(name), params)

    @staticmethod
    def _quote_identifier(name: str) -> str:
        return "[" + name.replace("]", "]]") + "]"

    def get_jobs(self, job_ids: Iterable[str]) -> list[Job]:
        ids = [str(i) for i in job_ids]
        if not ids:
            return []
        return [Job.from_row(r) for r in self._read("get_jobs", json.dumps(ids))]

    def jobs_named(self, name: str) -> list[Job]:
        return [Job.from_row(r) for r in self._read("jobs_named", name)]

    def list_jobs(self, status: str | None = None, tag: str | None = None) -> list[Job]:
        return [Job.from_row(r) for r in self._read("list_jobs", status, tag)]

    def pause_jobs(self, tag: str, reason: str | None, until: datetime | None, user: str | None) -> int:
        rows = self._rows("pause_jobs", _audited("EXEC mjsched.pause_jobs @p_tag = ?, @p_reason = ?, @p_until = ?, "
                                                 "@p_user = ?;"),
                          [*_changer(user), tag, reason, to_param(until), user])
        return int(next(iter(rows[0].values())) or 0) if rows else 0

    def resume_jobs(self, tag: str) -> int:
        rows = self._rows("resume_jobs", _audited("EXEC mjsched.resume_jobs @p_tag = ?;"), [*audit.current(), tag])
        return int(next(iter(rows[0].values())) or 0) if rows else 0

    def set_tag_limit(self, tag: str, max_running: int | None, user: str | None) -> None:
        self._rows("set_tag_limit", _audited("EXEC mjsched.set_tag_limit @p_tag = ?, @p_max_running = ?, @p_user = ?;"),
                   [*_changer(user), tag, max_running, user])

    def tag_summary(self) -> list[dict[str, Any]]:
        return self._read("tag_summary")

    def waiting_for_tag(self, job_id: str | None = None) -> list[dict[str, Any]]:
        return self._read("waiting_for_tag", job_id)

    def unscheduled_jobs(self, limit: int = 500, after: str | None = None) -> list[UnscheduledJob]:
        return [UnscheduledJob.from_row(r) for r in self._read("unscheduled_jobs", int(limit), after)]

    def active_schedules(self) -> list[dict[str, Any]]:
        rows = self._read("active_schedules")
        for row in rows:
            row["job_ids"] = [i.lower() for i in (row.get("job_ids") or "").split(",") if i]
        return rows

    def note_frequency_warned(self, items: Sequence[tuple[str, str]]) -> int:
        if not items:
            return 0
        payload = json.dumps([{"job_id": job_id, "schedule": key} for job_id, key in items])
        return int(self._scalar("note_frequency_warned", items=payload) or 0)

    def purge_runs(self, keep_seconds: float | None, keep_count: int | None, *, per_job: bool = True,
                   job_id: str | None = None, cursor: tuple[str | None, Any, str | None] = (None, None, None),
                   batch_size: int = 1000, max_jobs: int = 500, dry_run: bool = False,
                   now: datetime | None = None) -> PurgeBatch:
        rows = self._call("purge_runs", keep_seconds=keep_seconds, keep_count=keep_count, per_job=bool(per_job),
                          job_id=job_id, from_job_id=cursor[0], after_completed_at=to_param(cursor[1]),
                          after_run_id=cursor[2], batch_size=batch_size, max_jobs=max_jobs, dry_run=bool(dry_run),
                          now=to_param(now))
        return PurgeBatch.from_row(rows[0])

    def list_runs(self, job_id: str | None = None, status: str | None = None, limit: int = 100) -> list[JobRun]:
        """Newest first; one job's runs through job_runs (two index range scans merged)."""
        rows = (self._read("list_runs", status, int(limit)) if job_id is None
                else self._read("job_runs", job_id, status, int(limit)))
        return [JobRun.from_row(r) for r in rows]

    def job_history(self, job_id: str | None, name: str | None, limit: int = 100) -> list[JobChange]:
        return [JobChange.from_row(r) for r in self._read("job_history", job_id, name, int(limit))]

    def set_job_alerts(self, job_id: str, rules: Mapping[str, Any]) -> bool:
        rows = self._rows("set_job_alerts", _audited("EXEC mjsched.set_job_alerts @p_job_id = ?, @p_rules = ?;"),
                          [*audit.current(), job_id, json.dumps(dict(rules))])
        return bool(rows and next(iter(rows[0].values())))

    def job_alert_rules(self, job_id: str) -> dict[str, Any] | None:
        rows = self._read("job_alert_rules", job_id)
        return rows[0] if rows else None

    def evaluate_alerts(self, call: str, limit: int = 100, now: datetime | None = None) -> list[dict[str, Any]]:
        return self._call("evaluate_alerts", call=call, limit=limit, now=now)

    def open_alerts(self, job_id: str | None = None, limit: int = 200) -> list[dict[str, Any]]:
        return self._read("open_alerts", job_id, int(limit))

    def open_alert_counts(self) -> dict[str, int]:
        return {str(r["kind"]): int(r["open"]) for r in self._read("open_alert_counts")}

    def purge_job_changes(self, keep_seconds: float | None, batch_size: int = 1000,
                          now: datetime | None = None) -> int:
        return int(self._scalar("purge_job_changes", keep_seconds=keep_seconds, batch_size=batch_size,
                                now=now) or 0)

    def get_run(self, run_id: str) -> JobRun | None:
        rows = self._read("get_run", run_id)
        return JobRun.from_row(rows[0]) if rows else None

    def runs_by_ref(self, digits: str, tail: str | None, limit: int) -> list[JobRun]:
        return [JobRun.from_row(r) for r in self._read("runs_by_ref", digits, tail, int(limit))]

    def db_now(self) -> datetime:
        return self._read("db_now")[0]["now"]  # type: ignore[no-any-return]

    def why_facts(self, job_id: str, tick: datetime | None = None,
                  at: datetime | None = None) -> dict[str, Any] | None:
        rows = self._read("why_facts", job_id, tick, at)
        return rows[0] if rows else None

    def status_summary(self) -> dict[str, Any]:
        engines = self._read("status_engines")
        for e in engines:
            e["silent_for"] = timedelta(milliseconds=int(e.pop("silent_for_ms") or 0))
        running = self._read("status_running")
        counts = self._read("status_counts")
        return {"engines": engines, "running_by_instance": {r["instance"]: r["runs"] for r in running}, **counts[0]}

    # -- change feed -----------------------------------------------------------------------
    def listener(self) -> Listener | None:
        """None: SQL Server has no NOTIFY; the poller's bounded idle interval covers changes."""
        return None

    def close(self) -> None:
        self._pool.close()

    def run_statement(self, what: str, statement: str,
                      params: Sequence[Any] | Mapping[str, Any] = ()) -> list[dict[str, Any]]:
        if isinstance(params, Mapping):
            raise TypeError("SQL Server statements take their values in order (? placeholders), not by name")
        return self._rows(what, statement, params)


def split_batches(text: str) -> list[str]:
    """The batches of a T-SQL script, split on ``GO`` lines (as sqlcmd and SSMS do)."""
    return [b for b in _BATCH_SPLIT.split(text) if b.strip()]
