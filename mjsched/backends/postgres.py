"""PostgreSQL gateway: the only module that imports psycopg2 (with its pool)."""
from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import select
import threading
import uuid
from datetime import datetime
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

import psycopg2
import psycopg2.errors
import psycopg2.extensions
import psycopg2.extras

from .. import sqlfiles
from ..decoding import safe_caster
from ..redaction import redact_dsn
from ..errors import CannotConnect, ConfigurationError, DatabaseError, JobNameTaken, SchemaNotInstalled
from .. import audit
from ..forking import ProcessGuard, opening, track
from ..models import ClaimBatch, Job, JobChange, JobRun
from .base import (NAME_CONSTRAINT, NEW_JOB_ID, Backend, CancelOutcome, CancelRequest, Completion, Listener,
                   ManualStart, SweepResult, cancel_outcome, cancel_requests, claim_batch, completion_outcomes,
                   completions_json, deleted_or_replayed, drivers_text, manual_start, naming, replayed_attempts,
                   with_new_job_id)
from .base import UnscheduledJob
from ..retention import PurgeBatch
from .pg_install import PgInstaller
from .pool import ConnectionPool, while_connecting
from .watchdog import DEFAULT_CALL_TIMEOUT, CallAbandoned, CallWatchdog, shutdown_socket

log = logging.getLogger(__name__)
# Who makes a job change, for the audit trail's triggers (013_audit.sql): transaction-local
# settings, sent in the same statement as the change (autocommit: one implicit transaction).
_AUDITED = "SELECT set_config('mjsched.via', %s, true), set_config('mjsched.app_user', coalesce(%s, ''), true); "
T = TypeVar("T")


def _changer(user: str | None) -> tuple[str, str | None]:
    """(via, app user) for the audit trail of a call that names its user itself (pause_jobs,
    set_tag_limit): that user, else the one the application set (audit.changes_by)."""
    via, current_user = audit.current()
    return via, user if user is not None else current_user

NOTIFY_CHANNEL = "mjsched_job_changed"

JOB_COLUMNS = (
    "job_type_id", "name", "description", "cron_expression", "timezone", "start_at", "end_at",
    "status", "configuration", "owner", "concurrency_mode", "missed_run_policy",
    "run_immediately_if_never_run", "max_runtime_seconds", "isolation", "max_queued_runs",
    "notify_on_success", "notify_on_failure", "notify_to", "next_run_at", "high_frequency_ok",
    "keep_runs_days", "keep_runs_count",
    "interval_seconds", "run_at",
    "retry_max_attempts", "retry_initial_delay", "retry_factor", "retry_max_delay", "retry_jitter",
    "notify_final_attempt_only", "tags", "jitter_seconds", "priority",
)
_TRANSIENT_SQLSTATES = {"40001", "40P01", "55P03", "57P01", "57P02", "57P03", "08000", "08003",
                        "08006", "08001", "08004", "53300"}


# libpq's connection errors carry no SQLSTATE; these messages are a wrong DSN or login,
# which no retry will mend (a server starting up or refusing connections is retried).
_MALFORMED_DSN = re.compile(r"invalid \w+ value|invalid connection option|invalid (dsn|uri|URI)")
_REJECTED_LOGIN = re.compile(r'(role|database) "[^"]*" does not exist|password authentication failed'
                             r"|no pg_hba\.conf entry|password supplied|SSL (is not enabled|required)")


def is_transient(exc: BaseException) -> bool:
    """Connection lost or abandoned, deadlock, serialization failure, server shutting down."""
    if isinstance(exc, CallAbandoned):
        return True
    if isinstance(exc, (psycopg2.OperationalError, psycopg2.InterfaceError)):
        code = getattr(exc, "pgcode", None)
        if code is None:
            return not is_permanent_connect_error(exc)
        return code in _TRANSIENT_SQLSTATES or code.startswith("08")
    return getattr(exc, "pgcode", None) in _TRANSIENT_SQLSTATES


def is_permanent_connect_error(exc: BaseException) -> bool:
    """A connection refused for a reason a retry cannot change (bad DSN, unknown role or database)."""
    text = str(exc)
    return bool(_MALFORMED_DSN.search(text) or _REJECTED_LOGIN.search(text))


def session_settings(statement_timeout_ms: int, lock_timeout_ms: int | None = None) -> dict[str, str]:
    """The settings every engine session runs with: sent as startup options, or, through a
    connection pooler that refuses or drops them, with every statement (SET LOCAL)."""
    settings = {"TimeZone": "UTC", "statement_timeout": str(statement_timeout_ms)}
    if lock_timeout_ms is not None:
        settings["lock_timeout"] = str(lock_timeout_ms)
    return settings


# PgBouncer refuses a startup parameter it does not know (``options``) unless told to ignore it
POOLER_REFUSAL = "unsupported startup parameter"


_LIBPQ_CONNECT_PREFIX = re.compile(r'^connection to server (at|on socket) "[^"]*"(, port \d+)? failed:\s*'
                                   r'|^(FATAL|ERROR):\s+')


def connect_reason(first_line: str) -> str:
    """libpq's reason without what the message names anyway ("connection to server at ...,
    port ... failed: FATAL:"): 'Connection refused', 'role "x" does not exist'."""
    return _LIBPQ_CONNECT_PREFIX.sub("", _LIBPQ_CONNECT_PREFIX.sub("", first_line, count=1), count=1) or first_line


def _utc_opts(dsn: str, connect_timeout: float, statement_timeout_ms: int, call_timeout: float,
              lock_timeout_ms: int | None = None) -> dict[str, Any]:
    """Every bound libpq can enforce itself: connection set-up (connect_timeout, whole
    seconds, libpq's minimum is 2), keepalives and tcp_user_timeout (a peer that stops
    ACKing: a dead host or route, not a middlebox that keeps ACKing -- the call
    watchdog covers that), statement_timeout (the server gives up on a query no
    later than the client gives up on the call), and lock_timeout when given (a
    statement never waits long on a lock an outsider holds: watchdog.lock_timeout_for_lease)."""
    options = " ".join(f"-c {name}={value}" for name, value in
                       session_settings(statement_timeout_ms, lock_timeout_ms).items())
    return {
        "dsn": dsn,
        "connect_timeout": max(2, int(round(connect_timeout))),
        "application_name": "mjsched",
        "options": options,
        "keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3,
        "tcp_user_timeout": int(call_timeout * 1000),
    }


def _row_safe_casters() -> list[Any]:
    """The typecasters every engine connection reads with, so that no stored value can fail
    the fetch of the rows beside it (a claim's reply arrives after its commit):
    json and jsonb arrive as their text, decoded per row and field by the row models
    (mjsched/decoding.py: bounded depth, errors named by field), and the date and time types,
    which psycopg2 cannot hold past year 9999, become an Undecodable instead of raising."""
    ext = psycopg2.extensions
    text = ext.new_type((114, 3802), "MJSCHED_JSON_TEXT", lambda value, _cursor: value)
    casters = [text, ext.new_array_type((199, 3807), "MJSCHED_JSON_TEXT_ARRAY", text)]
    for base, array, name in ((ext.PYDATETIMETZ, ext.PYDATETIMETZARRAY, "timestamptz"),
                              (ext.PYDATETIME, ext.PYDATETIMEARRAY, "timestamp"),
                              (ext.PYDATE, ext.PYDATEARRAY, "date"),
                              (ext.PYINTERVAL, ext.PYINTERVALARRAY, "interval")):
        safe = ext.new_type(base.values, f"MJSCHED_SAFE_{name.upper()}", safe_caster(base, name))
        casters += [safe, ext.new_array_type(array.values, f"MJSCHED_SAFE_{name.upper()}_ARRAY", safe)]
    return casters


ROW_SAFE_CASTERS = _row_safe_casters()


def register_row_safe_casters(conn: Any) -> None:
    """Read on ``conn`` with ROW_SAFE_CASTERS (the connection's own, no global change)."""
    for caster in ROW_SAFE_CASTERS:
        psycopg2.extensions.register_type(caster, conn)


def abandon_inherited(conn: Any) -> None:
    """A connection inherited across a fork is the parent's session: its descriptor is pointed
    at /dev/null, so nothing this process does with it later (a stray query, ``close()`` and
    the Terminate message it sends) reaches the parent's session; the parent's socket itself
    is untouched. The object is left to the garbage collector (psycopg2 never closes a
    connection made by another process when it frees it)."""
    try:
        fd = conn.fileno()
    except psycopg2.Error:
        return    # closed: no socket left to share
    null = os.open(os.devnull, os.O_RDWR)
    try:
        os.dup2(null, fd, inheritable=False)
    finally:
        os.close(null)


def _abandon(conn: Any) -> None:
    """The watchdog's way out of a call blocked in recv: shut the socket down (a cancel
    request would travel the same stalled path and hang as well)."""
    shutdown_socket(conn.fileno())


class DictRowCursor(psycopg2.extensions.cursor):
    """A cursor whose fetches return plain dicts (column name -> value); a subclass with a
    ``prefix`` sends it before every statement, in the statement's transaction (the session
    settings through a pooler in transaction mode: ``SET LOCAL ...;``).

    psycopg2's RealDictCursor fills each row through a Python ``__setitem__`` per column,
    which cost about 20 µs per job row read after a claim (60 columns); here the C cursor
    builds tuples and ``dict(zip(...))`` names them. Duplicate names keep the last value,
    as RealDictCursor's rows do."""

    prefix = ""

    def execute(self, query: Any, vars: Any = None) -> Any:  # noqa: A002 - psycopg2's name
        return super().execute(self.prefix + query if self.prefix else query, vars)

    def _names(self) -> list[str]:
        return [d[0] for d in self.description]

    def fetchone(self) -> dict[str, Any] | None:  # type: ignore[override]
        row = super().fetchone()
        return None if row is None else dict(zip(self._names(), row))

    def fetchmany(self, size: int | None = None) -> list[dict[str, Any]]:  # type: ignore[override]
        rows = super().fetchmany() if size is None else super().fetchmany(size)
        names = self._names() if rows else []
        return [dict(zip(names, r)) for r in rows]

    def fetchall(self) -> list[dict[str, Any]]:  # type: ignore[override]
        rows = super().fetchall()
        names = self._names() if rows else []
        return [dict(zip(names, r)) for r in rows]

    def __iter__(self) -> Iterator[dict[str, Any]]:  # type: ignore[override]
        return iter(self.fetchall())


class PostgresBackend(Backend):
    dialect = "postgres"

    def __init__(self, dsn: str, *, pool_size: int = 8, connect_timeout: float = 5.0,
                 statement_timeout: float = 60.0, retry_attempts: int = 5,
                 retry_max_delay: float = 15.0, call_timeout: float = DEFAULT_CALL_TIMEOUT,
                 connection_factory: Callable[..., Any] | None = None, lock_timeout: float | None = None) -> None:
        if not call_timeout or not call_timeout > 0:
            raise ConfigurationError("call_timeout", call_timeout, "must be a positive number of seconds")
        if lock_timeout is not None and (isinstance(lock_timeout, bool) or not lock_timeout > 0):
            raise ConfigurationError("lock_timeout", lock_timeout, "must be a positive number of seconds or None")
        self._dsn = dsn
        self._safe_dsn = redact_dsn(dsn)
        self.call_timeout = float(call_timeout)
        # install() may wait for engines' row locks and runs long scripts: its own, longer bound
        self.install_timeout = max(self.call_timeout, statement_timeout + 5.0)
        self._statement_timeout_ms = int(statement_timeout * 1000)
        # the server cancels a slow statement (a lock wait) before the watchdog would abandon it
        settings = (int(min(statement_timeout, 0.8 * self.call_timeout) * 1000),
                    None if lock_timeout is None else max(1, int(lock_timeout * 1000)))
        self._kwargs = _utc_opts(dsn, connect_timeout, settings[0], self.call_timeout, settings[1])
        self._settings = session_settings(*settings)
        self._cursor: type[DictRowCursor] = DictRowCursor   # settings_per_statement() changes it
        self._watchdog = CallWatchdog()
        if connection_factory is not None:
            self._kwargs["connection_factory"] = connection_factory
        self._pool: ConnectionPool[Any] = ConnectionPool(self._connect, _broken_after, max_size=pool_size,
                                                         abandon=abandon_inherited)
        self._retry_attempts = retry_attempts
        self._retry_max_delay = retry_max_delay
        try:
            params = psycopg2.extensions.parse_dsn(dsn)
        except psycopg2.ProgrammingError as exc:
            raise ConfigurationError("dsn", self._safe_dsn, f"not a valid PostgreSQL DSN: {exc}") from None
        self._where = f"{params.get('host', 'localhost')}:{params.get('port', '5432')}"

    # -- plumbing ----------------------------------------------------------------------
    def _connect(self) -> Any:
        try:
            conn = psycopg2.connect(**self._kwargs)
        except psycopg2.OperationalError as exc:
            if "options" not in self._kwargs or POOLER_REFUSAL not in str(exc):
                raise
            self._settings_per_statement("refused the startup options")
            conn = psycopg2.connect(**self._kwargs)
        try:
            conn.autocommit = True
            register_row_safe_casters(conn)
            if "options" in self._kwargs and not self._options_took(conn):
                self._settings_per_statement("dropped the startup options (ignore_startup_parameters?)")
        except BaseException:
            with contextlib.suppress(Exception):
                conn.close()
            raise
        return conn

    def _options_took(self, conn: Any) -> bool:
        """Whether the session runs with the startup options (a pooler may drop them silently)."""
        with self._watchdog.bounded("connect", conn, self.call_timeout, _abandon):
            with conn.cursor(cursor_factory=DictRowCursor) as cur:
                cur.execute("SELECT source FROM pg_settings WHERE name = 'statement_timeout'")
                row = cur.fetchone()
                return bool(row and row["source"] == "client")

    @property
    def per_statement_settings(self) -> bool:
        """The server refused or dropped the startup options: a connection pooler (PgBouncer)
        stands between. Every statement then sets them itself (SET LOCAL, in its own
        transaction), and the engine has no LISTEN (docs/guide/deployment.md, "PgBouncer")."""
        return bool(self._cursor.prefix)

    def _settings_per_statement(self, what: str) -> None:
        if self.per_statement_settings:
            return
        prefix = "".join(f"SET LOCAL {name} = '{value}'; " for name, value in self._settings.items())
        self._cursor = type("SettingsCursor", (DictRowCursor,), {"prefix": prefix})
        self._kwargs = {k: v for k, v in self._kwargs.items() if k != "options"}
        log.warning("%s %s: a connection pooler in between? Each statement sets %s itself (SET LOCAL), and "
                    "changes to jobs are seen at the next poll, not at once (no LISTEN through a pooler); "
                    "docs/guide/deployment.md", self._where, what, ", ".join(self._settings),
                    extra={"action": "settings_per_statement"})

    @contextlib.contextmanager
    def _translate(self, what: str) -> Iterator[None]:
        try:
            yield
        except DatabaseError:
            raise
        except CallAbandoned as exc:
            raise DatabaseError(f"{what} failed on {self._where}: {exc}") from exc
        except psycopg2.Error as exc:
            if getattr(exc, "pgcode", None) == "22023":
                raise ConfigurationError(what, None, str(exc.diag.message_primary)) from exc
            if getattr(exc, "pgcode", None) == "23505" and exc.diag.constraint_name == NAME_CONSTRAINT:
                raise JobNameTaken(None) from exc     # naming() says which name
            if _MALFORMED_DSN.search(str(exc)):
                raise ConfigurationError("dsn", self._safe_dsn,
                                         f"not a valid PostgreSQL DSN: {str(exc).strip()}") from exc
            if getattr(exc, "pgcode", None) == "3F000" or (
                    getattr(exc, "pgcode", None) in ("42883", "42P01") and "mjsched" in str(exc)):
                raise SchemaNotInstalled(f"{what}: the mjsched schema is missing or outdated; "
                                         "run engine.install() or `mjsched init-db`") from exc
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            if while_connecting(exc):
                raise CannotConnect(self._where, redact_dsn(connect_reason(message)), what) from exc
            raise DatabaseError(f"{what} failed on {self._where}: {redact_dsn(message)}") from exc

    _is_transient = staticmethod(is_transient)

    @property
    def where(self) -> str:
        return self._where

    def _run(self, what: str, fn: Callable[[Any], T], bound: float | None = None) -> T:
        """``fn(cursor)`` on a pooled connection, each attempt bounded by ``bound`` seconds
        (default: the call timeout) by the watchdog; transient failures are retried."""
        bound = bound or self.call_timeout

        def once() -> T:
            with self._pool.connection() as conn:
                with self._watchdog.bounded(what, conn, bound, _abandon):
                    with conn.cursor(cursor_factory=self._cursor) as cur:
                        return fn(cur)
        return self._retried(what, once)

    def _rows(self, what: str, query: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[dict[str, Any]]:
        def go(cur: Any) -> list[dict[str, Any]]:
            cur.execute(query, params)
            return list(cur.fetchall()) if cur.description else []
        return self._run(what, go)

    def _scalar(self, what: str, query: str, params: Sequence[Any] = ()) -> Any:
        rows = self._rows(what, query, params)
        return next(iter(rows[0].values())) if rows else None

    # -- schema --------------------------------------------------------------------------
    def install(self) -> list[str]:
        """Apply the stale scripts (pg_install.PgInstaller says how an upgrade stays safe for
        the engines polling meanwhile). Two transactions and the drain between them, each
        bounded by the statement timeout."""
        installer = PgInstaller(self._statement_timeout_ms / 1000.0)

        def install(cur: Any) -> list[str]:
            if self.per_statement_settings:   # known once a connection was made
                raise ConfigurationError("dsn", self._safe_dsn, "install() holds a lock across transactions, which a "
                                         "connection pooler in transaction mode cannot give: install through a direct "
                                         "connection to the server (`mjsched init-db --dsn <the server's URL>`)")
            return installer.install(cur, sqlfiles.scripts(self.dialect))
        return self._run("install", install, bound=2 * self.install_timeout + self._statement_timeout_ms / 1000.0)

    def installed_versions(self) -> list[str]:
        try:
            rows = self._read("installed_versions")
        except SchemaNotInstalled:
            return []
        return [r["name"] for r in rows]

    # -- procedures ------------------------------------------------------------------------
    def acquire_job_lock(self, job_id: str, token: str, instance: str, lease_seconds: float,
                         require_due: bool = False, now: datetime | None = None) -> bool:
        return bool(self._scalar("acquire_job_lock",
                                 "SELECT acquired FROM mjsched.acquire_job_lock(%s::uuid, %s::uuid, %s, %s, %s, %s)",
                                 (job_id, token, instance, lease_seconds, require_due, now)))

    def release_job_lock(self, job_id: str, token: str) -> bool:
        return bool(self._scalar("release_job_lock",
                                 "SELECT released FROM mjsched.release_job_lock(%s::uuid, %s::uuid)",
                                 (job_id, token)))

    def extend_job_leases(self, tokens: Sequence[str], lease_seconds: float,
                          instance: str | None = None, now: datetime | None = None) -> set[str]:
        rows = self._rows("extend_job_leases",
                          "SELECT lock_token FROM mjsched.extend_job_leases(%s::uuid[], %s, %s, %s)",
                          (list(tokens), lease_seconds, instance, now))
        return {str(r["lock_token"]) for r in rows}

    def renew_leases(self, tokens: Sequence[str], lease_seconds: float, instance: str | None = None,
                     now: datetime | None = None) -> tuple[set[str], set[str]]:
        rows = self._rows("renew_leases",
                          "SELECT lock_token, renewed FROM mjsched.renew_leases(%s::uuid[], %s, %s, %s)",
                          (list(tokens), lease_seconds, instance, now))
        return ({str(r["lock_token"]) for r in rows if r["renewed"]},
                {str(r["lock_token"]) for r in rows if not r["renewed"]})

    def claim_due_jobs(self, instance: str, max_jobs: int, lease_seconds: float,
                       now: datetime | None = None, claim_id: str | None = None,
                       replay: bool = False) -> ClaimBatch:
        claim_id = claim_id or str(uuid.uuid4())

        def attempt(cur: Any, again: bool) -> list[dict[str, Any]]:
            cur.execute("SELECT * FROM mjsched.claim_due_jobs(%s, %s, %s, %s, %s::uuid, %s)",
                        (instance, max_jobs, lease_seconds, now, claim_id, again))
            return list(cur.fetchall())
        return claim_batch(self._run("claim_due_jobs", replayed_attempts(replay, attempt)))

    def complete_runs(self, items: Sequence[Completion],
                      now: datetime | None = None) -> dict[str, bool | None]:
        if not items:
            return {}
        payload = completions_json(items, datetime.isoformat)
        rows = self._rows("complete_runs",
                          "SELECT run_id, completed, busy FROM mjsched.complete_runs(%s::jsonb, %s)",
                          (payload, now))
        return completion_outcomes(rows)

    def sweep_expired_leases(self, now: datetime | None = None) -> SweepResult:
        rows = self._rows("sweep_expired_leases", "SELECT * FROM mjsched.sweep_expired_leases(%s)", (now,))
        r = rows[0]
        return SweepResult(int(r["swept"]), int(r["locks_freed"]), int(r["expired_jobs"]))

    def enqueue_job_run(self, job_id: str, scheduled_for: datetime, now: datetime | None = None) -> bool:
        return bool(self._scalar("enqueue_job_run",
                                 "SELECT enqueued FROM mjsched.enqueue_job_run(%s::uuid, %s, %s)",
                                 (job_id, scheduled_for, now)))

    def advance_job(self, job_id: str, token: str, next_run_at: datetime | None, release: bool,
                    guard: bool = False, expected_next_run_at: datetime | None = None) -> bool:
        return bool(self._scalar("advance_job",
                                 "SELECT advanced FROM mjsched.advance_job(%s::uuid, %s::uuid, %s, %s, %s, %s)",
                                 (job_id, token, next_run_at, release, guard, expected_next_run_at)))

    def begin_job_run(self, job_id: str, token: str, instance: str,
                      scheduled_for: datetime | None = None, now: datetime | None = None) -> str | None:
        value = self._scalar("begin_job_run",
                             "SELECT run_id FROM mjsched.begin_job_run(%s::uuid, %s::uuid, %s, %s, %s)",
                             (job_id, token, instance, scheduled_for, now))
        return str(value) if value else None

    def start_manual_run(self, job_id: str, request_id: str, instance: str, lease_seconds: float,
                         force: bool = False, replay: bool = False, now: datetime | None = None,
                         parameters: Mapping[str, Any] | None = None) -> ManualStart:
        payload = json.dumps(dict(parameters)) if parameters is not None else None

        def attempt(cur: Any, again: bool) -> list[dict[str, Any]]:
            if payload is None:   # the call of the previous release: works against either schema
                cur.execute("SELECT * FROM mjsched.start_manual_run(%s::uuid, %s::uuid, %s, %s, %s, %s, %s)",
                            (job_id, request_id, instance, lease_seconds, force, again, now))
            else:
                cur.execute("SELECT * FROM mjsched.start_manual_run(%s::uuid, %s::uuid, %s, %s, %s, %s, %s, "
                            "%s::jsonb)", (job_id, request_id, instance, lease_seconds, force, again, now, payload))
            return list(cur.fetchall())
        return manual_start(self._run("start_manual_run", replayed_attempts(replay, attempt)))

    def cancel_run(self, run_id: str, requested_by: str, now: datetime | None = None,
                   request_id: str | None = None) -> CancelOutcome:
        return cancel_outcome(self._rows("cancel_run", "SELECT * FROM mjsched.cancel_run(%s::uuid, %s, %s, %s::uuid)",
                                         (run_id, requested_by, now, request_id or str(uuid.uuid4()))))

    def cancel_requests(self, tokens: Sequence[str]) -> list[CancelRequest]:
        if not tokens:
            return []
        return cancel_requests(self._rows("cancel_requests", "SELECT * FROM mjsched.cancel_requests(%s::uuid[])",
                                          (list(tokens),)))

    def release_engine_locks(self, instance: str, reason: str | None = None,
                             now: datetime | None = None) -> tuple[int, int]:
        r = self._rows("release_engine_locks", "SELECT * FROM mjsched.release_engine_locks(%s, %s, %s)",
                       (instance, reason, now))[0]
        return int(r["runs_abandoned"]), int(r["locks_freed"])

    def engines_holding_locks(self, host: str) -> list[dict[str, Any]]:
        return self._rows("engines_holding_locks", "SELECT * FROM mjsched.engines_holding_locks(%s)", (host,))

    def force_unlock_job(self, job_id: str, reason: str | None = None,
                         now: datetime | None = None) -> tuple[str | None, int] | None:
        rows = self._rows("force_unlock_job", "SELECT * FROM mjsched.force_unlock_job(%s::uuid, %s, %s)",
                          (job_id, reason, now))
        return (rows[0]["locked_by_instance"], int(rows[0]["runs_abandoned"])) if rows else None

    def initialize_next_run(self, job_id: str, next_run_at: datetime) -> bool:
        return bool(self._scalar("initialize_next_run",
                                 "SELECT initialized FROM mjsched.initialize_next_run(%s::uuid, %s)",
                                 (job_id, next_run_at)))

    def initialize_next_runs(self, items: Sequence[tuple[str, datetime]]) -> int:
        if not items:
            return 0
        payload = json.dumps([{"job_id": job_id, "next_run_at": when.isoformat()} for job_id, when in items])
        return int(self._scalar("initialize_next_runs",
                                "SELECT initialized FROM mjsched.initialize_next_runs(%s::jsonb)", (payload,)) or 0)

    def register_engine(self, instance: str, host: str, pid: int, version: str,
                        heartbeat_seconds: float | None = None, max_concurrent_jobs: int | None = None,
                        allowed_drivers: Iterable[str] | None = None) -> None:
        self._rows("register_engine", "SELECT * FROM mjsched.register_engine(%s, %s, %s, %s, %s, %s, %s)",
                   (instance, host, pid, version, heartbeat_seconds, max_concurrent_jobs,
                    drivers_text(allowed_drivers)))

    def unregister_engine(self, instance: str) -> None:
        self._rows("unregister_engine", "SELECT * FROM mjsched.unregister_engine(%s)", (instance,))

    def probe_permissions(self) -> list[str]:
        rows = self._rows("probe_permissions", "SELECT * FROM mjsched.probe_permissions()")
        return [r["procedure_name"] for r in rows if not r["can_execute"]]

    # -- rows --------------------------------------------------------------------------------
    def ensure_job_type(self, driver: str, isolation: str = "thread",
                        default_max_runtime: float | None = None) -> str:
        type_id = self._scalar("ensure_job_type",
                               "SELECT job_type_id FROM mjsched.ensure_job_type(%s, %s, %s)",
                               (driver, isolation, default_max_runtime))
        if type_id is None:
            raise ConfigurationError("driver", driver, "a job type of this name exists with another driver_class")
        return str(type_id)

    @staticmethod
    def _fields_json(fields: Mapping[str, Any], keys: Iterable[str] = JOB_COLUMNS) -> str:
        unknown = set(fields) - set(keys)
        if unknown:
            key = sorted(unknown)[0]
            raise ConfigurationError(key, fields[key], "not a job column")

        def plain(value: Any) -> Any:
            if isinstance(value, datetime):
                return value.isoformat()
            if hasattr(value, "value") and isinstance(getattr(value, "value"), str):
                return value.value  # str enums
            return value
        return json.dumps({k: plain(v) for k, v in fields.items()})

    def insert_job(self, fields: Mapping[str, Any]) -> str:
        values = self._fields_json(with_new_job_id(fields), (NEW_JOB_ID, *JOB_COLUMNS))   # the same on every retry
        with naming(fields, self.jobs_named):
            return str(self._scalar("create_job", _AUDITED + "SELECT job_id FROM mjsched.insert_job(%s::jsonb)",
                                    (*audit.current(), values)))

    def update_job(self, job_id: str, fields: Mapping[str, Any]) -> bool:
        with naming(fields, self.jobs_named):
            return bool(self._scalar("update_job",
                                     _AUDITED + "SELECT updated FROM mjsched.update_job(%s::uuid, %s::jsonb)",
                                     (*audit.current(), job_id, self._fields_json(fields))))

    def delete_job(self, job_id: str) -> bool:
        changer = audit.current()

        def attempt(cur: Any) -> bool:
            cur.execute(_AUDITED + "SELECT deleted FROM mjsched.delete_job(%s::uuid)", (*changer, job_id))
            row = cur.fetchone()
            return bool(row and row["deleted"])
        return self._run("delete_job", deleted_or_replayed(attempt))

    def _column_privileges(self, table: str) -> list[dict[str, Any]]:
        return self._read("column_privileges", {"table": f"mjsched.{table}"})

    def _read(self, name: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        return self._rows(name, self._query(name), params or {})

    def get_jobs(self, job_ids: Iterable[str]) -> list[Job]:
        ids = list(job_ids)
        if not ids:
            return []
        return [Job.from_row(r) for r in self._read("get_jobs", {"ids": ids})]

    def jobs_named(self, name: str) -> list[Job]:
        return [Job.from_row(r) for r in self._read("jobs_named", {"name": name})]

    def list_jobs(self, status: str | None = None, tag: str | None = None) -> list[Job]:
        return [Job.from_row(r) for r in self._read("list_jobs", {"status": status, "tag": tag})]

    def pause_jobs(self, tag: str, reason: str | None, until: datetime | None, user: str | None) -> int:
        return int(self._scalar("pause_jobs", _AUDITED + "SELECT paused FROM mjsched.pause_jobs(%s, %s, %s, %s)",
                                (*_changer(user), tag, reason, until, user)) or 0)

    def resume_jobs(self, tag: str) -> int:
        return int(self._scalar("resume_jobs", _AUDITED + "SELECT resumed FROM mjsched.resume_jobs(%s)",
                                (*audit.current(), tag)) or 0)

    def set_tag_limit(self, tag: str, max_running: int | None, user: str | None) -> None:
        self._rows("set_tag_limit", _AUDITED + "SELECT changed FROM mjsched.set_tag_limit(%s, %s, %s)",
                   (*_changer(user), tag, max_running, user))

    def tag_summary(self) -> list[dict[str, Any]]:
        return self._read("tag_summary")

    def waiting_for_tag(self, job_id: str | None = None) -> list[dict[str, Any]]:
        return self._read("waiting_for_tag", {"job_id": job_id})

    def unscheduled_jobs(self, limit: int = 500, after: str | None = None) -> list[UnscheduledJob]:
        return [UnscheduledJob.from_row(r) for r in self._read("unscheduled_jobs", {"after": after, "limit": limit})]

    def active_schedules(self) -> list[dict[str, Any]]:
        return self._read("active_schedules")

    def note_frequency_warned(self, items: Sequence[tuple[str, str]]) -> int:
        if not items:
            return 0
        payload = json.dumps([{"job_id": job_id, "schedule": key} for job_id, key in items])
        return int(self._scalar("note_frequency_warned",
                                "SELECT noted FROM mjsched.note_frequency_warned(%s::jsonb)", (payload,)) or 0)

    def purge_runs(self, keep_seconds: float | None, keep_count: int | None, *, per_job: bool = True,
                   job_id: str | None = None, cursor: tuple[str | None, Any, str | None] = (None, None, None),
                   batch_size: int = 1000, max_jobs: int = 500, dry_run: bool = False,
                   now: datetime | None = None) -> PurgeBatch:
        rows = self._rows("purge_runs", "SELECT * FROM mjsched.purge_runs(%s, %s, %s, %s::uuid, %s::uuid, %s, "
                                        "%s::uuid, %s, %s, %s, %s)",
                          (keep_seconds, keep_count, per_job, job_id, cursor[0], cursor[1], cursor[2], batch_size,
                           max_jobs, dry_run, now))
        return PurgeBatch.from_row(rows[0])

    def list_runs(self, job_id: str | None = None, status: str | None = None, limit: int = 100) -> list[JobRun]:
        """Newest first; one job's runs through job_runs (two index range scans merged)."""
        params = {"job": job_id, "status": status, "limit": limit}
        rows = self._read("list_runs", params) if job_id is None else self._read("job_runs", params)
        return [JobRun.from_row(r) for r in rows]

    def job_history(self, job_id: str | None, name: str | None, limit: int = 100) -> list[JobChange]:
        return [JobChange.from_row(r) for r in self._read("job_history", {"job": job_id, "name": name,
                                                                            "limit": int(limit)})]

    def set_job_alerts(self, job_id: str, rules: Mapping[str, Any]) -> bool:
        return bool(self._scalar("set_job_alerts",
                                 _AUDITED + "SELECT updated FROM mjsched.set_job_alerts(%s::uuid, %s::jsonb)",
                                 (*audit.current(), job_id, json.dumps(dict(rules)))))

    def job_alert_rules(self, job_id: str) -> dict[str, Any] | None:
        rows = self._read("job_alert_rules", {"job": job_id})
        return rows[0] if rows else None

    def evaluate_alerts(self, call: str, limit: int = 100, now: datetime | None = None) -> list[dict[str, Any]]:
        return self._rows("evaluate_alerts", "SELECT * FROM mjsched.evaluate_alerts(%s::uuid, %s, %s)",
                          (call, limit, now))

    def open_alerts(self, job_id: str | None = None, limit: int = 200) -> list[dict[str, Any]]:
        return self._read("open_alerts", {"job": job_id, "limit": int(limit)})

    def open_alert_counts(self) -> dict[str, int]:
        return {str(r["kind"]): int(r["open"]) for r in self._read("open_alert_counts")}

    def purge_job_changes(self, keep_seconds: float | None, batch_size: int = 1000,
                          now: datetime | None = None) -> int:
        return int(self._scalar("purge_job_changes", "SELECT purged FROM mjsched.purge_job_changes(%s, %s, %s)",
                                (keep_seconds, batch_size, now)) or 0)

    def get_run(self, run_id: str) -> JobRun | None:
        rows = self._read("get_run", {"id": run_id})
        return JobRun.from_row(rows[0]) if rows else None

    def runs_by_ref(self, digits: str, tail: str | None, limit: int) -> list[JobRun]:
        """A prefix is a range of the primary key (the uuid's bytes in the order its text shows)."""
        rows = self._read("runs_by_ref", {"low": digits.ljust(32, "0"), "high": digits.ljust(32, "f"),
                                          "tail": tail, "limit": int(limit)})
        return [JobRun.from_row(r) for r in rows]

    def db_now(self) -> datetime:
        return self._read("db_now")[0]["now"]  # type: ignore[no-any-return]

    def why_facts(self, job_id: str, tick: datetime | None = None,
                  at: datetime | None = None) -> dict[str, Any] | None:
        rows = self._read("why_facts", {"job": job_id, "tick": tick, "at": at})
        return rows[0] if rows else None

    def status_summary(self) -> dict[str, Any]:
        engines = self._read("status_engines")
        running = self._read("status_running")
        counts = self._read("status_counts")
        return {"engines": engines, "running_by_instance": {r["instance"]: r["runs"] for r in running}, **counts[0]}

    # -- change feed -----------------------------------------------------------------------
    def listener(self) -> Listener | None:
        """None through a pooler (per_statement_settings): LISTEN needs a session of its own,
        which transaction pooling does not give; the poller's bounded interval covers changes."""
        if self.per_statement_settings:
            return None
        return PgListener(self._kwargs, self._watchdog, self.call_timeout)

    def close(self) -> None:
        self._pool.close()

    def run_statement(self, what: str, statement: str,
                      params: Sequence[Any] | Mapping[str, Any] = ()) -> list[dict[str, Any]]:
        return self._rows(what, statement, params)


def _broken_after(conn: Any, exc: BaseException) -> bool:
    """psycopg2's rules: connection-level errors drop the connection; otherwise roll
    back an open transaction and keep it."""
    if isinstance(exc, (psycopg2.OperationalError, psycopg2.InterfaceError, CallAbandoned)) or conn.closed:
        return True
    if conn.get_transaction_status() != psycopg2.extensions.TRANSACTION_STATUS_IDLE:
        try:
            conn.rollback()
        except psycopg2.Error:
            return True
    return False


class PgListener(Listener):
    """LISTEN on the job-change channel over a dedicated connection; reconnects lazily."""

    def __init__(self, connect_kwargs: dict[str, Any], watchdog: CallWatchdog | None = None,
                 call_timeout: float = DEFAULT_CALL_TIMEOUT) -> None:
        self._kwargs = dict(connect_kwargs)
        self._watchdog = watchdog or CallWatchdog()
        self._call_timeout = call_timeout
        self._kwargs.pop("connection_factory", None)
        self._conn: Any = None
        self._lock = threading.Lock()
        self._wakeup = threading.Event()
        self._pipe_r, self._pipe_w = os.pipe()   # interrupt() writes here to end a select at once
        self._pipe_lock = threading.Lock()
        self._process = ProcessGuard()
        track(self)

    def after_fork_in_child(self) -> None:
        """The inherited LISTEN connection is the parent's session: abandoned, never used
        here; new locks, and a pipe of this process's own (the parent's would wake its select).
        Adopted last: another thread's process check passes only once all this is done."""
        conn, self._conn = self._conn, None
        self._lock, self._pipe_lock, self._wakeup = threading.Lock(), threading.Lock(), threading.Event()
        if conn is not None:
            with contextlib.suppress(Exception):
                abandon_inherited(conn)
        was_open = self._pipe_r >= 0
        for fd in (self._pipe_r, self._pipe_w):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)   # this process's copies only
        self._pipe_r, self._pipe_w = os.pipe() if was_open else (-1, -1)
        self._process.adopt()

    def _connect(self) -> Any:
        conn = psycopg2.connect(**self._kwargs)
        conn.autocommit = True
        try:
            with self._watchdog.bounded("LISTEN", conn, self._call_timeout, _abandon):
                with conn.cursor() as cur:
                    cur.execute(f"LISTEN {NOTIFY_CHANNEL}")
        except BaseException:
            with contextlib.suppress(Exception):
                conn.close()
            raise
        return conn

    def _same_process(self) -> None:
        """A fork Python's at-fork hooks did not see (one made in C) is caught here."""
        self._process.settle(self.after_fork_in_child)

    def wait(self, timeout: float) -> bool:
        self._same_process()
        with self._lock:
            try:
                if self._conn is None or self._conn.closed:
                    with opening():   # recorded before any fork (forking.py)
                        self._conn = self._connect()
                conn = self._conn
                if not conn.notifies and not self._wakeup.is_set():
                    ready, _, _ = select.select([conn, self._pipe_r], [], [], timeout)
                    if conn in ready:
                        conn.poll()
                    if self._pipe_r in ready:
                        os.read(self._pipe_r, 64)
                changed = bool(conn.notifies)
                conn.notifies.clear()
                return changed
            except (psycopg2.Error, OSError, ValueError, CallAbandoned) as exc:
                log.debug("job-change listener lost its connection: %s", redact_dsn(str(exc)))
                with contextlib.suppress(Exception):
                    if self._conn is not None:
                        self._conn.close()
                self._conn = None
                raise DatabaseError(f"LISTEN connection failed: {redact_dsn(str(exc).strip())}") from exc

    def interrupt(self) -> None:
        self._same_process()
        self._wakeup.set()
        with self._pipe_lock:   # never write to a descriptor close() has just given back
            if self._pipe_w >= 0:
                with contextlib.suppress(OSError):
                    os.write(self._pipe_w, b"x")

    def close(self) -> None:
        self.interrupt()
        with self._lock:
            if self._conn is not None:
                with contextlib.suppress(Exception):
                    self._conn.close()
                self._conn = None
            with self._pipe_lock:
                fds, self._pipe_r, self._pipe_w = (self._pipe_r, self._pipe_w), -1, -1
                for fd in fds:
                    if fd >= 0:
                        with contextlib.suppress(OSError):
                            os.close(fd)
