"""The ``sql`` driver: run one statement against a PostgreSQL database.

Configuration:

``dsn``
    ``postgresql://user:password@host:port/dbname?...`` (``postgres://`` too).
    Required. The password never reaches a log line or a result.
``statement``
    One SQL statement (psycopg2 placeholders: ``%s`` or ``%(name)s``). Required.
``parameters``
    A list (for ``%s``) or an object (for ``%(name)s``). Optional. An object also
    gets ``mjsched_fencing_token`` (the run's fencing token) and ``mjsched_run_id``
    unless it sets them itself: ``UPDATE t SET ..., fence = %(mjsched_fencing_token)s
    WHERE fence < %(mjsched_fencing_token)s``.
``fence``
    ``true``: before its COMMIT the transaction calls ``mjsched.check_fence`` (the
    job's database must be the scheduler's), which refuses unless the run still holds
    its lease, and holds the run's row until the commit, so nothing the job wrote is
    committed by a run whose lease was lost (an engine paused past its lease). ``false``:
    no check. Absent: the check is made when the job's database has ``mjsched.check_fence``
    (the scheduler's own database; set ``false`` for a database that holds another
    installation's schema, where this run is unknown and the check would refuse). A fenced
    run's ``details`` also hold its ``fencing_token``. See docs/guide/reliability.md,
    "Fencing tokens".

The statement runs in one transaction that is committed on success and rolled
back on error. ``details`` holds ``rowcount`` and, when the statement returns
rows, ``columns`` and ``rows`` (the first :data:`MAX_ROWS`, each a list of
JSON-safe values). Setting ``context.cancel_event`` cancels the running
statement on the server.
"""
from __future__ import annotations

import json
import threading
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..errors import ConfigurationError
from .base import BaseScheduledJob, ExecutionContext, JobResult
from .base import driver_named

MAX_ROWS = 20
CONNECT_TIMEOUT = 10
_SCHEMES = ("postgresql", "postgres")


def redact_dsn(dsn: str) -> str:
    """``dsn`` with its password (if any) replaced by ``***``."""
    try:
        parts = urlsplit(dsn)
    except ValueError:
        return "<unparseable dsn>"
    if parts.password is None:
        netloc = parts.netloc
    else:
        userinfo, _, hostinfo = parts.netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:***@{hostinfo}"
    query = "&".join(
        "password=***" if item.lower().startswith("password=") else item
        for item in parts.query.split("&")
    ) if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _scrub(message: str, dsn: str) -> str:
    try:
        password = urlsplit(dsn).password
    except ValueError:
        password = None
    if password:
        message = message.replace(password, "***")
    return message.replace(dsn, redact_dsn(dsn))


def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


@driver_named("sql")
class SqlJob(BaseScheduledJob):
    """Run one SQL statement in a transaction; see the module docstring."""

    isolation = "thread"
    configuration_keys = frozenset({"dsn", "statement", "parameters"})

    def validate_configuration(self, configuration: dict[str, Any]) -> None:
        if not isinstance(configuration, dict):
            raise ConfigurationError("configuration", configuration, "must be an object")
        dsn = configuration.get("dsn")
        if not isinstance(dsn, str) or not dsn:
            raise ConfigurationError("configuration.dsn", _redacted_value(dsn), "required: a postgresql:// URL")
        try:
            parts = urlsplit(dsn)
        except ValueError as exc:
            raise ConfigurationError("configuration.dsn", redact_dsn(dsn), f"not a URL: {exc}") from exc
        if parts.scheme not in _SCHEMES:
            raise ConfigurationError("configuration.dsn", redact_dsn(dsn), "must be a postgresql:// URL")
        statement = configuration.get("statement")
        if not isinstance(statement, str) or not statement.strip():
            raise ConfigurationError("configuration.statement", statement, "required: a non-empty SQL string")
        fence = configuration.get("fence")
        if fence is not None and not isinstance(fence, bool):
            raise ConfigurationError("configuration.fence", fence, "must be true, false or absent")
        parameters = configuration.get("parameters")
        if parameters is not None:
            if isinstance(parameters, dict):
                if not all(isinstance(k, str) for k in parameters):
                    raise ConfigurationError("configuration.parameters", parameters, "object keys must be strings")
            elif not isinstance(parameters, (list, tuple)):
                raise ConfigurationError("configuration.parameters", parameters, "must be a list or an object")

    def execute(self, context: ExecutionContext) -> JobResult:
        import psycopg2  # imported here so that importing mjsched needs no driver

        configuration = context.job.configuration
        self.validate_configuration(configuration)
        dsn: str = configuration["dsn"]
        statement: str = configuration["statement"]
        parameters = configuration.get("parameters")
        if isinstance(parameters, list):
            parameters = tuple(parameters)
        elif isinstance(parameters, dict):
            parameters = _with_run_parameters(parameters, statement, context)
        fence: bool | None = configuration.get("fence")

        context.logger.info("sql job connecting to %s", redact_dsn(dsn), extra={"action": "sql_connect"})
        try:
            conn = psycopg2.connect(dsn, connect_timeout=CONNECT_TIMEOUT, application_name="mjsched-sql-driver")
        except Exception as exc:
            return JobResult(False, _scrub(f"could not connect: {type(exc).__name__}: {exc}".strip(), dsn), None)

        done = threading.Event()
        watcher = _cancel_on_request(conn, context.cancel_event, done)
        try:
            return JobResult(True, None, _run_statement(conn, statement, parameters, fence, context))
        except Exception as exc:
            message = f"{type(exc).__name__}: {str(exc).strip()}"
            if context.cancel_event.is_set():
                message = f"cancelled: {message}"
            return JobResult(False, _scrub(message, dsn), {"sqlstate": getattr(exc, "pgcode", None)})
        finally:
            done.set()
            conn.close()
            watcher.join(1.0)


def _cancel_on_request(conn: Any, cancel_event: threading.Event, done: threading.Event) -> threading.Thread:
    """A thread that cancels the running statement on the server when the run is cancelled
    (``conn.cancel()``: the statement ends with an error, the transaction rolls back)."""
    def watch() -> None:
        while not done.is_set():
            if cancel_event.wait(0.1):
                if not done.is_set():
                    try:
                        conn.cancel()
                    except Exception:  # the statement may just have finished
                        pass
                return

    watcher = threading.Thread(target=watch, name="mjsched-sql-cancel", daemon=True)
    watcher.start()
    return watcher


def _run_statement(conn: Any, statement: str, parameters: Any, fence: bool | None,
                   context: ExecutionContext) -> dict[str, Any]:
    """The job's statement in one transaction (committed on success, rolled back on error),
    fenced when asked; the details its run records."""
    with conn:
        with conn.cursor() as cur:
            cur.execute(statement, parameters)
            details: dict[str, Any] = {"rowcount": cur.rowcount}
            if cur.description is not None:
                details["columns"] = [col.name for col in cur.description]
                details["rows"] = _json_safe([list(row) for row in cur.fetchmany(MAX_ROWS)])
            if _fences(cur, fence, context):
                details["fencing_token"] = _check_fence(cur, context)
    return details


def _with_run_parameters(parameters: dict[str, Any], statement: str, context: ExecutionContext) -> dict[str, Any]:
    """``parameters`` with the run's own values under names the configuration leaves free;
    the fencing token is read only for a statement that names it."""
    extra: dict[str, Any] = {"mjsched_run_id": context.run.id}
    if "mjsched_fencing_token" in statement:
        extra["mjsched_fencing_token"] = context.fencing_token
    return {**extra, **parameters}


def _fences(cur: Any, fence: bool | None, context: ExecutionContext) -> bool:
    """Whether this transaction must pass the fence: as configured, else when the run holds a
    lock (an engine's run) and the job's database is a scheduler's (it has mjsched.check_fence)."""
    if fence is not None:
        return fence
    if context.run.lock_token is None:
        return False
    cur.execute("SELECT to_regprocedure('mjsched.check_fence(uuid, uuid, timestamp with time zone)') IS NOT NULL")
    return bool(cur.fetchone()[0])


def _check_fence(cur: Any, context: ExecutionContext) -> int | None:
    """Last statement before the COMMIT: raises (so the transaction rolls back) unless the run
    still holds its lease; holds the run's row until the commit, so no take-over can come between."""
    if context.run.lock_token is None:
        raise RuntimeError("mjsched fence: the run has no lock token to check")
    cur.execute("SELECT fencing_token FROM mjsched.check_fence(%s::uuid, %s::uuid)",
                (context.run.id, context.run.lock_token))
    token = cur.fetchone()[0]
    context.logger.debug("run %s passed its fence (token %s)", context.run.id, token,
                         extra={"action": "sql_fence_passed"})
    return token


def _redacted_value(value: Any) -> Any:
    return redact_dsn(value) if isinstance(value, str) else value
