"""The SQL Server gateway: what runs everywhere, and what only SQL Server has.

Everywhere (CI included, no server): connections to a closed port and to a server
that never answers fail within a bounded time with ``mjsched.DatabaseError`` naming
host and port and never the password (FreeTDS); DSN forms, type round trips and error
classification.

With a server -- ``MJSCHED_TEST_MSSQL_DSN`` (e.g.
``mssql://sa:pw@127.0.0.1:1433/master?driver=FreeTDS``; the login must be allowed to
create databases), else a SQL Server 2022 container when ``docker info`` answers --
the backend contract suite (the procedure race tests and the engine's reference cases,
parametrized over both dialects) runs against it, and so do the tests at the end of
this file. ``MJSCHED_TEST_MSSQL_RCSI=1`` runs them with READ_COMMITTED_SNAPSHOT ON
(Azure SQL's default). Without a server they skip, fast, with a one-line reason
(with ``MJSCHED_REQUIRE_MSSQL=1`` a missing server fails instead).
"""
from __future__ import annotations

import contextlib
import os
import socket
import struct
import time
import types
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.support import mssql, sqlparity

if mssql.odbc_unavailable():     # no ODBC driver manager (libodbc.so.2): this whole module is SQL Server's
    pytest.skip(str(mssql.odbc_unavailable()), allow_module_level=True)

import pyodbc  # noqa: E402

from mjsched.backends import open_backend  # noqa: E402
from mjsched.backends.mssql import MssqlBackend, split_batches  # noqa: E402
from mjsched.backends.odbc import (  # noqa: E402
    _datetimeoffset,
    _guid,
    is_transient,
    native_error,
    odbc_connection_string,
    parse_dsn,
    to_param,
    with_database,
)
from mjsched.errors import CannotConnect, ConfigurationError, DatabaseError  # noqa: E402

SECRET = "Pa55;w{or}d!"
FREETDS = any("freetds" in d.lower() for d in pyodbc.drivers())
needs_freetds = pytest.mark.skipif(not FREETDS, reason="FreeTDS ODBC driver not installed (apt-get install tdsodbc)")


# == without a server ==========================================================================

@needs_freetds
@pytest.mark.parametrize("dsn", [
    f"mssql://sa:{SECRET.replace(';', '%3B').replace('{', '%7B').replace('}', '%7D')}@127.0.0.1:1/master"
    "?driver=FreeTDS",
    "Driver=FreeTDS;Server=127.0.0.1;Port=1;Database=master;UID=sa;PWD={" + SECRET.replace("}", "}}") + "};",
], ids=["url", "odbc-string"])
def test_a_closed_port_fails_fast_with_host_and_port_and_no_password(dsn: str) -> None:
    backend = MssqlBackend(dsn, connect_timeout=2)
    started = time.monotonic()
    try:
        with pytest.raises(DatabaseError) as caught:
            backend.install()
    finally:
        backend.close()
    assert time.monotonic() - started < 15
    message = str(caught.value)
    assert message.startswith("cannot connect to 127.0.0.1:1: ")   # not "install failed on" (issue 35 item 10)
    assert isinstance(caught.value, CannotConnect) and caught.value.operation == "install"
    assert SECRET not in message and "Pa55" not in message
    assert isinstance(caught.value.__cause__, pyodbc.Error)


@needs_freetds
def test_a_server_that_never_answers_fails_within_the_login_timeout() -> None:
    deaf = socket.socket()
    deaf.bind(("127.0.0.1", 0))
    deaf.listen(16)                     # accepts TCP, never speaks TDS
    port = deaf.getsockname()[1]
    backend = MssqlBackend(f"mssql://sa:{SECRET.replace(';', '%3B')}@127.0.0.1:{port}/master?driver=FreeTDS",
                           connect_timeout=1, retry_max_delay=3)
    started = time.monotonic()
    try:
        with pytest.raises(DatabaseError) as caught:
            backend.db_now()
    finally:
        backend.close()
        deaf.close()
    assert time.monotonic() - started < 15
    assert str(caught.value).startswith(f"cannot connect to 127.0.0.1:{port}: ") and "Pa55" not in str(caught.value)


def test_open_backend_picks_sql_server_for_both_dsn_forms_without_connecting() -> None:
    for dsn in ("mssql://sa:x@db.example:1433/app?driver=FreeTDS",
                "Driver={ODBC Driver 18 for SQL Server};Server=tcp:db.example,1433;Database=app;UID=sa;PWD=x"):
        backend = open_backend(dsn)
        assert isinstance(backend, MssqlBackend) and backend.dialect == "mssql"
        assert backend.where == "db.example:1433"
        assert backend.listener() is None
        backend.close()


def test_dsn_forms_become_odbc_connection_strings() -> None:
    ms = parse_dsn("mssql://app%40corp:p%3Bw%7Dd@db.example:14330/jobs"
                   "?driver=ODBC+Driver+18+for+SQL+Server&TrustServerCertificate=yes&Encrypt=yes")
    assert ms.connection_string == ("DRIVER={ODBC Driver 18 for SQL Server};SERVER=tcp:db.example,14330;"
                                    "DATABASE=jobs;UID=app@corp;PWD={p;w}}d};APP=mjsched;"
                                    "TrustServerCertificate=yes;Encrypt=yes;")
    assert ms.where == "db.example:14330" and ms.password == "p;w}d"
    tds = parse_dsn("mssql://sa:pw@10.0.0.5/jobs?driver=FreeTDS")
    assert tds.connection_string == ("DRIVER=FreeTDS;SERVER=10.0.0.5;PORT=1433;TDS_Version=7.4;"
                                     "ClientCharset=UTF-8;DATABASE=jobs;UID=sa;PWD={pw};APP=mjsched;")
    raw = "Driver=FreeTDS;Server=db;Port=2000;Database=jobs;UID=sa;PWD={a;b}"
    assert parse_dsn(raw).connection_string == raw and parse_dsn(raw).where == "db:2000"
    assert parse_dsn("DRIVER={x};SERVER=tcp:db,1444;PWD=y").where == "db:1444"
    assert "DATABASE=other" in with_database(raw, "other") and "Database=jobs" not in with_database(raw, "other")
    assert with_database("mssql://sa:pw@h:1/a?driver=FreeTDS", "b") == "mssql://sa:pw@h:1/b?driver=FreeTDS"
    assert odbc_connection_string("mssql://u:p@h/d?driver=FreeTDS").startswith("DRIVER=FreeTDS;")
    with pytest.raises(ConfigurationError, match="dsn"):
        parse_dsn("postgresql://localhost/x")


def test_output_converters_give_aware_utc_datetimes_and_lowercase_uuids() -> None:
    raw = struct.pack("<6hI2h", 2026, 3, 29, 3, 30, 15, 123456700, 2, 0)       # +02:00
    assert _datetimeoffset(raw) == datetime(2026, 3, 29, 1, 30, 15, 123456, tzinfo=timezone.utc)
    west = struct.pack("<6hI2h", 2026, 1, 1, 0, 0, 0, 0, -5, -30)              # -05:30
    assert _datetimeoffset(west) == datetime(2026, 1, 1, 5, 30, tzinfo=timezone.utc)
    assert _datetimeoffset(b"2026-01-01 00:00:00.1234567 +01:00") == \
        datetime(2025, 12, 31, 23, 0, 0, 123456, tzinfo=timezone.utc)
    value = uuid.uuid4()
    assert _guid(value.bytes_le) == str(value)
    assert _guid(str(value).upper().encode()) == str(value)
    assert _datetimeoffset(None) is None and _guid(None) is None


def test_parameters_are_iso_strings_in_utc() -> None:
    berlin = timezone(timedelta(hours=2))
    assert to_param(datetime(2026, 7, 1, 12, 0, 0, 5, tzinfo=berlin)) == "2026-07-01T10:00:00.000005+00:00"
    assert to_param(datetime(2026, 7, 1, 12, 0)) == "2026-07-01T12:00:00.000000+00:00"   # naive means UTC
    assert to_param({"a": 1}) == '{"a": 1}' and to_param(True) is True and to_param(None) is None


def test_deadlocks_and_lost_connections_are_retried_nothing_else() -> None:
    deadlock = pyodbc.ProgrammingError("40001", "[40001] [FreeTDS][SQL Server]Transaction (Process ID 52) was "
                                                "deadlocked ... Rerun the transaction. (1205) (SQLExecDirectW)")
    assert native_error(deadlock) == 1205 and is_transient(deadlock)
    assert is_transient(pyodbc.OperationalError("08S01", "[08S01] Communication link failure (0) (SQLExecDirectW)"))
    assert is_transient(pyodbc.OperationalError("HYT00", "[HYT00] Login timeout expired (0) (SQLDriverConnect)"))
    invalid = pyodbc.ProgrammingError("42000", "[42000] [FreeTDS][SQL Server]lease_seconds=0 must be > 0 "
                                               "(50022) (SQLExecDirectW)")
    assert native_error(invalid) == 50022 and not is_transient(invalid)
    assert not is_transient(pyodbc.IntegrityError("23000", "[23000] duplicate key (2601) (SQLExecDirectW)"))
    assert not is_transient(pyodbc.InterfaceError("IM002", "[IM002] Data source name not found (0) (SQLDriverConnect)"))
    assert not is_transient(ValueError("not a database error"))


class _CompatibilityCursor:
    """The fake's cursor: pyodbc's ``cursor.connection`` is the connection (install() sets its
    query ``timeout``); everything else is the fake's."""

    def __init__(self, fake: _CompatibilityOnly) -> None:
        self._fake = fake
        self.connection = types.SimpleNamespace(timeout=0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fake, name)


class _CompatibilityOnly:
    """A pool whose one cursor answers the compatibility query and records every statement."""

    def __init__(self, level: int | None) -> None:
        self.level = level
        self.statements: list[str] = []
        self.description: list[tuple[str]] | None = None
        self._rows: list[tuple[Any, ...]] = []

    @contextlib.contextmanager
    def connection(self) -> Iterator[Any]:
        yield self

    def cursor(self) -> _CompatibilityCursor:
        return _CompatibilityCursor(self)

    def execute(self, sql: str, *params: Any) -> None:
        self.statements.append(sql)
        if "compatibility_level" in sql:
            self.description = [("name",), ("level",)]
            self._rows = [] if self.level is None else [("jobs", self.level)]
        else:
            raise AssertionError(f"unexpected statement: {sql[:80]}")

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self._rows

    def nextset(self) -> bool:
        return False

    def close(self) -> None:
        pass


def test_install_refuses_a_database_below_compatibility_level_130_before_touching_it() -> None:
    """OPENJSON exists only at compatibility level 130+; below it nothing may be applied."""
    backend = MssqlBackend("mssql://sa:x@db.example:1433/jobs?driver=FreeTDS")
    backend.close()                               # its pool never connected; the fake replaces it
    fake = _CompatibilityOnly(120)
    backend._pool = fake  # type: ignore[assignment]
    with pytest.raises(DatabaseError) as caught:
        backend.install()
    message = str(caught.value)
    assert "db.example:1433" in message and "compatibility level 120" in message and "130" in message
    assert "ALTER DATABASE [jobs] SET COMPATIBILITY_LEVEL = 130" in message
    assert len(fake.statements) == 1              # no transaction, no lock, no script
    for level in (130, 160, None):                # at 130+ (or unknown) install goes on to take its lock
        fake = _CompatibilityOnly(level)
        backend._pool = fake  # type: ignore[assignment]
        with pytest.raises(AssertionError, match="unexpected statement: SET LOCK_TIMEOUT -1; SET XACT_ABORT ON; BEGIN TRANSACTION"):
            backend.install()


def test_the_backend_splits_scripts_as_the_parity_reader_does() -> None:
    for path in sorted((Path(__file__).resolve().parents[2] / "sql" / "mssql").rglob("*.sql")):
        text = path.read_text(encoding="utf-8")
        assert split_batches(text) == sqlparity.split_batches(text)
        assert all("\nGO" not in batch.upper() for batch in split_batches(text))


# == the server ==================================================================================
# The procedure race tests and the engine's reference cases run here too: they are the
# backend contract suite (tests/integration/test_procedures.py, test_engine_reference.py),
# parametrized over both dialects. What follows is what only SQL Server has.

@pytest.fixture
def backend(mssql_dsn: str) -> Iterator[MssqlBackend]:
    b = MssqlBackend(mssql_dsn, pool_size=20)
    yield b
    b.close()


@pytest.fixture
def ms_sql(mssql_dsn: str) -> Iterator[mssql.Sql]:
    conn = mssql.Sql(mssql_dsn)
    yield conn
    conn.close()


def new_job(backend: MssqlBackend, *, next_run_at: datetime | None = None, **fields: Any) -> str:
    type_id = backend.ensure_job_type("python")
    values = {"job_type_id": type_id, "name": fields.pop("name", "job"), "cron_expression": "0 0 1 1 *",
              "status": "Active", "configuration": {"callable": "os:getpid"},
              "next_run_at": next_run_at, **fields}
    return backend.insert_job(values)


def past(seconds: float = 60) -> datetime:
    return datetime.now(timezone.utc) - timedelta(seconds=seconds)


# -- SQL Server specifics -------------------------------------------------------------------------

@pytest.mark.mssql
def test_install_is_idempotent_and_versioned_like_postgres(backend: MssqlBackend) -> None:
    assert backend.install() == []
    assert backend.installed_versions() == [s.name for s in sqlparity.versioned_scripts(
        Path(__file__).resolve().parents[2] / "sql" / "mssql")]


@pytest.mark.mssql
def test_install_names_a_compatibility_level_below_130(empty_mssql_dsn: str) -> None:
    admin = mssql.Sql(empty_mssql_dsn)
    try:
        admin.run("ALTER DATABASE CURRENT SET COMPATIBILITY_LEVEL = 120;")
    finally:
        admin.close()
    backend = MssqlBackend(empty_mssql_dsn)
    try:
        with pytest.raises(DatabaseError, match="compatibility level 120"):
            backend.install()
        assert backend.installed_versions() == []      # refused before anything was created
    finally:
        backend.close()


@pytest.mark.mssql
def test_datetimeoffset_and_uuid_round_trip(backend: MssqlBackend) -> None:
    tokyo = timezone(timedelta(hours=9))
    when = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=tokyo)
    job_id = new_job(backend, next_run_at=when, start_at=when - timedelta(days=1))
    assert job_id == str(uuid.UUID(job_id))            # lower-case, canonical
    job = backend.get_job(job_id)
    assert job is not None and job.id == job_id
    assert job.next_run_at == when and job.next_run_at.utcoffset() == timedelta(0)
    assert job.configuration == {"callable": "os:getpid"}
    assert backend.db_now().tzinfo is not None
    assert abs((backend.db_now() - datetime.now(timezone.utc)).total_seconds()) < 60


@pytest.mark.mssql
def test_editing_the_schedule_clears_next_run_unless_the_writer_sets_it(backend: MssqlBackend) -> None:
    job = new_job(backend, next_run_at=past())
    assert backend.update_job(job, {"cron_expression": "*/5 * * * *"})
    assert backend.get_job(job).next_run_at is None  # type: ignore[union-attr]
    nxt = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(minutes=5)
    assert backend.update_job(job, {"cron_expression": "*/10 * * * *", "next_run_at": nxt})
    assert backend.get_job(job).next_run_at == nxt  # type: ignore[union-attr]
    assert backend.update_job(job, {"description": "no schedule change"})
    assert backend.get_job(job).next_run_at == nxt  # type: ignore[union-attr]


@pytest.mark.mssql
def test_the_sql_level_single_completion_reuses_the_batched_one(backend: MssqlBackend, ms_sql: mssql.Sql) -> None:
    new_job(backend, next_run_at=past())
    (claim,) = backend.claim_due_jobs("a", 1, 60).claims
    call = ("EXEC mjsched.complete_job_run @p_run_id = ?, @p_token = ?, @p_status = ?, @p_error_message = ?, "
            "@p_details = ?, @p_next_run_at = ?")
    assert ms_sql.rows(call, (claim.run_id, claim.lock_token, "Failed", "x", '{"k": [1]}', None)) == [{"completed": 1}]
    assert ms_sql.rows(call, (claim.run_id, claim.lock_token, "Failed", "x", None, None)) == [{"completed": 0}]
    run = backend.get_run(claim.run_id)  # type: ignore[arg-type]
    assert run is not None and run.details == {"k": [1]} and run.success is False


@pytest.mark.mssql
def test_permission_probe_and_status_summary(backend: MssqlBackend) -> None:
    assert backend.probe_permissions() == []
    backend.register_engine("e1", "host", 1, "0")
    backend.register_engine("e1", "host", 2, "0")    # an upsert
    summary = backend.status_summary()
    assert [e["pid"] for e in summary["engines"]] == [2]
    assert summary["active_jobs"] == 0 and summary["engines"][0]["silent_for"] >= timedelta(0)
    backend.unregister_engine("e1")
    assert backend.status_summary()["engines"] == []


@pytest.mark.mssql
def test_the_engine_runs_a_job_on_sql_server(mssql_dsn: str) -> None:
    """The engine, unchanged, on the SQL Server backend: execute_job and one poll by hand."""
    import mjsched

    with mjsched.SchedulingEngine(mssql_dsn, lease_timeout=30.0, max_poll_interval=1.0) as engine:
        assert engine.install() == []
        job_id = engine.create_job(name="pid", driver="python", cron="*/5 * * * *",
                                   configuration={"callable": "os:getpid"})
        run = engine.execute_job(job_id)
        assert run.status.value == "Completed" and run.details == {"result": os.getpid()}
        assert [r.id for r in engine.list_runs(job_id=job_id)] == [run.id]
        assert engine.dispatch_due_jobs().dispatched == 0      # the next tick is in the future
        assert engine.get_job(job_id).run_count == 1
