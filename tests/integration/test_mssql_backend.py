"""The SQL Server gateway: what runs everywhere, and the procedure contract suite that runs
the moment a server is given.

Everywhere (CI included, no server): connections to a closed port and to a server
that never answers fail within a bounded time with ``mjsched.DatabaseError`` naming
host and port and never the password (FreeTDS); DSN forms, type round trips and error
classification.

With a server -- ``MJSCHED_TEST_MSSQL_DSN`` (e.g.
``mssql://sa:pw@127.0.0.1:1433/master?driver=FreeTDS``; the login must be allowed to
create databases), else a SQL Server 2022 container when ``docker info`` answers --
the procedure race tests of tests/integration/test_procedures.py, ported to
MssqlBackend, run against a fresh database. ``MJSCHED_TEST_MSSQL_RCSI=1`` runs them with
READ_COMMITTED_SNAPSHOT ON (Azure SQL's default). Without a server they skip, fast,
with a one-line reason (with ``MJSCHED_REQUIRE_MSSQL=1`` a missing server fails instead).
"""
from __future__ import annotations

import os
import shutil
import socket
import struct
import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import pyodbc
import pytest

from mjsched.backends.base import Completion, open_backend
from mjsched.backends.mssql import MssqlBackend, split_batches
from mjsched.backends.odbc import (
    _datetimeoffset,
    _guid,
    configure_connection,
    is_transient,
    native_error,
    odbc_connection_string,
    parse_dsn,
    to_param,
    with_database,
)
from mjsched.errors import ConfigurationError, DatabaseError
from tests.support import sqlparity

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
    assert "127.0.0.1:1" in message
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
    assert f"127.0.0.1:{port}" in str(caught.value) and "Pa55" not in str(caught.value)


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


def test_the_backend_splits_scripts_as_the_parity_reader_does() -> None:
    for path in sorted((Path(__file__).resolve().parents[2] / "sql" / "mssql").glob("*.sql")):
        text = path.read_text(encoding="utf-8")
        assert split_batches(text) == sqlparity.split_batches(text)
        assert all("\nGO" not in batch.upper() for batch in split_batches(text))


# == the server ==================================================================================

_SERVER: dict[str, Any] = {}


def _docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _find_server() -> tuple[str | None, str]:
    """(server DSN, "") or (None, one-line reason); memoised, so later skips cost nothing."""
    if "dsn" in _SERVER or "reason" in _SERVER:
        return _SERVER.get("dsn"), _SERVER.get("reason", "")
    dsn = os.environ.get("MJSCHED_TEST_MSSQL_DSN")
    if not dsn and _docker_answers():
        try:
            from testcontainers.community.mssql import SqlServerContainer

            container = SqlServerContainer("mcr.microsoft.com/mssql/server:2022-latest")
            container.start()
            _SERVER["container"] = container
            driver = next((d for d in pyodbc.drivers() if "ODBC Driver 18" in d), "FreeTDS")
            dsn = (f"mssql://sa:{container.password}@{container.get_container_host_ip()}:"
                   f"{container.get_exposed_port(1433)}/master?driver={driver.replace(' ', '+')}"
                   "&TrustServerCertificate=yes")
        except Exception as exc:   # noqa: BLE001 - any failure to start is a reason to skip
            _SERVER["reason"] = f"SQL Server container did not start: {str(exc).strip().splitlines()[0][:120]}"
            return None, _SERVER["reason"]
    if not dsn:
        _SERVER["reason"] = "no SQL Server: set MJSCHED_TEST_MSSQL_DSN (no Docker for testcontainers)"
        return None, _SERVER["reason"]
    _SERVER["dsn"] = dsn
    return dsn, ""


def _admin(server: str, statement: str) -> None:
    conn = pyodbc.connect(odbc_connection_string(server), autocommit=True, timeout=10)
    try:
        conn.execute(statement)
    finally:
        conn.close()


def _create_database(server: str, name: str) -> str:
    _admin(server, f"CREATE DATABASE [{name}]")
    if os.environ.get("MJSCHED_TEST_MSSQL_RCSI") == "1":
        _admin(server, f"ALTER DATABASE [{name}] SET READ_COMMITTED_SNAPSHOT ON WITH ROLLBACK IMMEDIATE")
    return with_database(server, name)


def _drop_database(server: str, name: str) -> None:
    _admin(server, f"IF DB_ID(N'{name}') IS NOT NULL BEGIN "
                   f"ALTER DATABASE [{name}] SET SINGLE_USER WITH ROLLBACK IMMEDIATE; DROP DATABASE [{name}]; END")


@pytest.fixture(scope="session")
def mssql_server() -> Iterator[str]:
    dsn, reason = _find_server()
    if dsn is None:
        if os.environ.get("MJSCHED_REQUIRE_MSSQL") == "1":
            pytest.fail(f"MJSCHED_REQUIRE_MSSQL=1 but {reason}")
        pytest.skip(reason)
    yield dsn
    container = _SERVER.pop("container", None)
    if container is not None:
        container.stop()


@pytest.fixture(scope="session")
def mssql_database(mssql_server: str) -> Iterator[str]:
    """A database with the schema installed, for the whole session."""
    name = f"mjsched_t_{os.getpid()}"
    _drop_database(mssql_server, name)
    dsn = _create_database(mssql_server, name)
    backend = MssqlBackend(dsn)
    try:
        backend.install()
    finally:
        backend.close()
    yield dsn
    _drop_database(mssql_server, name)


class Sql:
    """A plain autocommit connection for arranging and asserting rows."""

    def __init__(self, dsn: str) -> None:
        self.conn = pyodbc.connect(odbc_connection_string(dsn), autocommit=True, timeout=10)
        configure_connection(self.conn)
        self._lock = threading.Lock()

    def rows(self, query: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        with self._lock:
            cur = self.conn.cursor()
            cur.execute(query, [to_param(p) for p in params])
            while cur.description is None and cur.nextset():
                pass
            if cur.description is None:
                return []
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row)) for row in cur.fetchall()]

    def one(self, query: str, params: Sequence[Any] = ()) -> Any:
        rows = self.rows(query, params)
        return next(iter(rows[0].values())) if rows else None

    def run(self, query: str, params: Sequence[Any] = ()) -> None:
        with self._lock:
            cur = self.conn.cursor()
            cur.execute(query, [to_param(p) for p in params])
            while cur.nextset():
                pass

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def mssql_dsn(mssql_database: str) -> Iterator[str]:
    """The session database, emptied before each test."""
    sql = Sql(mssql_database)
    try:
        sql.run("DELETE FROM mjsched.scheduled_job_run; DELETE FROM mjsched.scheduled_job; "
                "DELETE FROM mjsched.scheduled_job_type; DELETE FROM mjsched.engine_instance;")
    finally:
        sql.close()
    yield mssql_database


@pytest.fixture
def empty_mssql_dsn(mssql_server: str) -> Iterator[str]:
    name = f"mjsched_e_{uuid.uuid4().hex[:12]}"
    dsn = _create_database(mssql_server, name)
    yield dsn
    _drop_database(mssql_server, name)


@pytest.fixture
def backend(mssql_dsn: str) -> Iterator[MssqlBackend]:
    b = MssqlBackend(mssql_dsn, pool_size=20)
    yield b
    b.close()


@pytest.fixture
def sql(mssql_dsn: str) -> Iterator[Sql]:
    conn = Sql(mssql_dsn)
    yield conn
    conn.close()


def new_job(backend: MssqlBackend, *, next_run_at: datetime | None = None, **fields: Any) -> str:
    type_id = backend.ensure_job_type("python")
    values = {"job_type_id": type_id, "name": fields.pop("name", "job"), "cron_expression": "0 0 1 1 *",
              "status": "Active", "configuration": {"callable": "os:getpid"},
              "next_run_at": next_run_at, **fields}
    return backend.insert_job(values)


def race(n: int, fn: Callable[[int], Any]) -> list[Any]:
    """Run ``fn(i)`` on ``n`` threads released together by a barrier."""
    barrier = threading.Barrier(n, timeout=10)

    def go(i: int) -> Any:
        barrier.wait()
        return fn(i)
    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(go, range(n)))


def token() -> str:
    return str(uuid.uuid4())


def past(seconds: float = 60) -> datetime:
    return datetime.now(timezone.utc) - timedelta(seconds=seconds)


# -- the procedure contract (ported from tests/integration/test_procedures.py) ----------------------

@pytest.mark.mssql
def test_sixteen_racing_acquirers_exactly_one_wins(backend: MssqlBackend, sql: Sql) -> None:
    job = new_job(backend)
    tokens = [token() for _ in range(16)]
    won = race(16, lambda i: backend.acquire_job_lock(job, tokens[i], f"engine-{i}", 60))
    assert sum(won) == 1
    holder = tokens[won.index(True)]
    assert sql.one("SELECT lock_token FROM mjsched.scheduled_job WHERE id = ?", (job,)) == holder


@pytest.mark.mssql
def test_release_with_wrong_token_changes_nothing(backend: MssqlBackend, sql: Sql) -> None:
    job = new_job(backend)
    mine = token()
    assert backend.acquire_job_lock(job, mine, "a", 60)
    results = race(8, lambda i: backend.release_job_lock(job, token()))
    assert results == [False] * 8
    assert sql.one("SELECT lock_token FROM mjsched.scheduled_job WHERE id = ?", (job,)) == mine
    assert backend.release_job_lock(job, mine) is True
    assert backend.release_job_lock(job, mine) is False  # idempotent
    assert sql.one("SELECT lock_token FROM mjsched.scheduled_job WHERE id = ?", (job,)) is None


@pytest.mark.mssql
def test_lease_expiry_hands_the_lock_over_and_fences_the_old_holder(backend: MssqlBackend, sql: Sql) -> None:
    job = new_job(backend, next_run_at=past())
    batch = backend.claim_due_jobs("old", 10, 30)
    (claim,) = batch.claims
    assert batch.db_now is not None
    later = batch.db_now + timedelta(seconds=31)  # the database's own clock, moved past the lease
    newer = [token() for _ in range(8)]
    won = race(8, lambda i: backend.acquire_job_lock(job, newer[i], f"new-{i}", 30, now=later))
    assert sum(won) == 1
    assert backend.release_job_lock(job, claim.lock_token) is False
    assert backend.extend_job_leases([claim.lock_token], 30, now=later) == set()
    assert claim.run_id is not None
    assert backend.complete_job_run(claim.run_id, claim.lock_token, "Completed", None, None, later) is False
    row = sql.rows("SELECT lock_token AS t, run_count FROM mjsched.scheduled_job WHERE id = ?", (job,))[0]
    assert row["t"] == newer[won.index(True)]
    assert row["run_count"] == 0
    assert sql.one("SELECT status FROM mjsched.scheduled_job_run WHERE id = ?", (claim.run_id,)) == "Abandoned"


@pytest.mark.mssql
def test_live_lease_cannot_be_taken(backend: MssqlBackend) -> None:
    job = new_job(backend)
    assert backend.acquire_job_lock(job, token(), "a", 60)
    assert not backend.acquire_job_lock(job, token(), "b", 60)


@pytest.mark.mssql
def test_two_engines_claim_a_thousand_due_jobs_each_exactly_once(backend: MssqlBackend, mssql_dsn: str,
                                                                 sql: Sql) -> None:
    type_id = backend.ensure_job_type("python")
    sql.run("""INSERT INTO mjsched.scheduled_job (job_type_id, name, cron_expression, status, next_run_at)
               SELECT ?, CONCAT(N'j', g.n), N'0 0 1 1 *', N'Active', DATEADD(millisecond, -g.n, SYSDATETIMEOFFSET())
                 FROM (SELECT TOP (1000) ROW_NUMBER() OVER (ORDER BY (SELECT NULL)) AS n
                         FROM sys.all_objects AS a CROSS JOIN sys.all_objects AS b) AS g""", (type_id,))
    engines = [MssqlBackend(mssql_dsn, pool_size=2) for _ in range(2)]
    claimed: list[list[str]] = [[], []]
    barrier = threading.Barrier(2, timeout=10)

    def drain(i: int) -> None:
        barrier.wait()
        while True:
            batch = engines[i].claim_due_jobs(f"engine-{i}", 50, 60)
            if not batch.claims:
                return
            claimed[i].extend(c.job_id for c in batch.claims)
    try:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(drain, range(2)))
    finally:
        for e in engines:
            e.close()
    both = claimed[0] + claimed[1]
    assert len(both) == 1000 and len(set(both)) == 1000
    assert claimed[0] and claimed[1], "both engines should have won some jobs"
    assert sql.one("SELECT COUNT(*) FROM mjsched.scheduled_job_run WHERE status = N'Running'") == 1000
    assert sql.one("""SELECT COUNT(*) FROM (SELECT scheduled_job_id FROM mjsched.scheduled_job_run
                       GROUP BY scheduled_job_id HAVING COUNT(*) > 1) AS d""") == 0


@pytest.mark.mssql
def test_claim_respects_max_jobs_and_reports_next_due(backend: MssqlBackend) -> None:
    for i in range(5):
        new_job(backend, name=f"due{i}", next_run_at=past())
    future = datetime.now(timezone.utc) + timedelta(hours=1)
    new_job(backend, name="later", next_run_at=future)
    batch = backend.claim_due_jobs("a", 3, 60)
    assert len(batch.claims) == 3
    assert batch.due_left == 2
    assert batch.next_due_at is not None and batch.next_due_at <= future
    again = backend.claim_due_jobs("b", 10, 60)
    assert len(again.claims) == 2 and again.locked_out == 3


@pytest.mark.mssql
def test_sweep_abandons_only_running_runs(backend: MssqlBackend, sql: Sql) -> None:
    for i in range(3):
        new_job(backend, name=f"s{i}", next_run_at=past())
    batch = backend.claim_due_jobs("a", 10, 30)
    assert len(batch.claims) == 3 and batch.db_now is not None
    done, running, queued_job = batch.claims[0], batch.claims[1], batch.claims[2]
    assert done.run_id is not None
    assert backend.complete_job_run(done.run_id, done.lock_token, "Completed", None, None, None)
    sql.run("UPDATE mjsched.scheduled_job SET concurrency_mode = N'Queue' WHERE id = ?", (queued_job.job_id,))
    assert backend.enqueue_job_run(queued_job.job_id, datetime.now(timezone.utc) + timedelta(minutes=5))
    later = batch.db_now + timedelta(seconds=31)
    results = race(4, lambda i: backend.sweep_expired_leases(now=later))
    assert sum(r.swept for r in results) == 2  # the two Running runs, once each, across racing sweeps
    statuses = {r["id"]: r["status"] for r in sql.rows("SELECT id, status FROM mjsched.scheduled_job_run")}
    assert statuses[done.run_id] == "Completed"
    assert statuses[running.run_id] == "Abandoned"
    assert list(statuses.values()).count("Queued") == 1
    assert sql.one("SELECT COUNT(*) FROM mjsched.scheduled_job WHERE lock_token IS NOT NULL") == 0
    assert sql.one("SELECT failure_count FROM mjsched.scheduled_job WHERE id = ?", (running.job_id,)) == 1


@pytest.mark.mssql
def test_sweep_is_a_no_op_when_nothing_is_stale(backend: MssqlBackend) -> None:
    new_job(backend, next_run_at=past())
    backend.claim_due_jobs("a", 10, 60)
    result = backend.sweep_expired_leases()
    assert (result.swept, result.locks_freed, result.expired_jobs) == (0, 0, 0)


@pytest.mark.mssql
def test_heartbeat_racing_the_sweep_one_of_them_wins(backend: MssqlBackend, sql: Sql) -> None:
    new_job(backend, next_run_at=past())
    (claim,) = backend.claim_due_jobs("a", 1, 30).claims
    at = datetime.now(timezone.utc) + timedelta(seconds=31)

    def act(i: int) -> Any:
        if i % 2:
            return backend.sweep_expired_leases(now=at).swept
        return len(backend.extend_job_leases([claim.lock_token], 30, now=at))
    outcome = race(6, act)
    status = sql.one("SELECT status FROM mjsched.scheduled_job_run WHERE id = ?", (claim.run_id,))
    if status == "Running":
        assert sum(outcome[1::2]) == 0          # every sweep lost to the renewal
    else:
        assert status == "Abandoned" and sum(outcome[1::2]) == 1


@pytest.mark.mssql
def test_extend_renews_only_matching_tokens_in_one_call(backend: MssqlBackend) -> None:
    for i in range(4):
        new_job(backend, name=f"e{i}", next_run_at=past())
    claims = backend.claim_due_jobs("a", 10, 30).claims
    renewed = backend.extend_job_leases([c.lock_token for c in claims] + [token()], 60)
    assert renewed == {c.lock_token for c in claims}


@pytest.mark.mssql
def test_racing_completions_of_one_run_land_once(backend: MssqlBackend, sql: Sql) -> None:
    job = new_job(backend, next_run_at=past())
    (claim,) = backend.claim_due_jobs("a", 1, 60).claims
    assert claim.run_id is not None
    run_id = claim.run_id
    nxt = datetime.now(timezone.utc) + timedelta(hours=1)
    landed = race(8, lambda i: backend.complete_job_run(run_id, claim.lock_token, "Completed", None, {"i": i}, nxt))
    assert sum(landed) == 1
    row = sql.rows("SELECT run_count, success_count, lock_token, next_run_at FROM mjsched.scheduled_job "
                   "WHERE id = ?", (job,))[0]
    assert row["run_count"] == 1 and row["success_count"] == 1 and row["lock_token"] is None
    assert abs((row["next_run_at"] - nxt).total_seconds()) < 1e-3


@pytest.mark.mssql
def test_batched_completion_is_fenced_per_run(backend: MssqlBackend, sql: Sql) -> None:
    for i in range(3):
        new_job(backend, name=f"b{i}", next_run_at=past())
    a, b, c = backend.claim_due_jobs("a", 10, 60).claims
    assert a.run_id and b.run_id and c.run_id
    items = [Completion(a.run_id, a.lock_token, "Completed"),
             Completion(b.run_id, token(), "Completed"),            # wrong token
             Completion(c.run_id, c.lock_token, "Failed", "boom", {"x": 1})]
    assert backend.complete_job_runs(items) == {a.run_id: True, b.run_id: False, c.run_id: True}
    assert sql.one("SELECT status FROM mjsched.scheduled_job_run WHERE id = ?", (b.run_id,)) == "Running"
    assert sql.one("SELECT error_message FROM mjsched.scheduled_job_run WHERE id = ?", (c.run_id,)) == "boom"
    assert backend.get_run(c.run_id).details == {"x": 1}  # type: ignore[union-attr]


@pytest.mark.mssql
def test_completion_rejects_an_unknown_status(backend: MssqlBackend) -> None:
    new_job(backend, next_run_at=past())
    (claim,) = backend.claim_due_jobs("a", 1, 60).claims
    assert claim.run_id is not None
    with pytest.raises(ConfigurationError):
        backend.complete_job_run(claim.run_id, claim.lock_token, "Running", None, None, None)


@pytest.mark.mssql
def test_a_tick_can_never_have_two_runs(backend: MssqlBackend, sql: Sql) -> None:
    job = new_job(backend, next_run_at=past())
    (first,) = backend.claim_due_jobs("a", 1, 30).claims
    later = datetime.now(timezone.utc) + timedelta(seconds=31)
    (second,) = backend.claim_due_jobs("b", 1, 30, now=later).claims
    assert second.run_id is None and second.scheduled_for == first.scheduled_for
    assert sql.one("SELECT COUNT(*) FROM mjsched.scheduled_job_run WHERE scheduled_job_id = ?", (job,)) == 1


@pytest.mark.mssql
def test_enqueue_keeps_one_run_per_tick_and_bounds_the_queue(backend: MssqlBackend, sql: Sql) -> None:
    job = new_job(backend, concurrency_mode="Queue", max_queued_runs=3)
    tick = datetime.now(timezone.utc).replace(microsecond=0)
    assert sum(race(16, lambda i: backend.enqueue_job_run(job, tick))) == 1
    ticks = [tick + timedelta(seconds=i + 1) for i in range(10)]
    assert sum(race(10, lambda i: backend.enqueue_job_run(job, ticks[i]))) == 2
    assert sql.one("SELECT COUNT(*) FROM mjsched.scheduled_job_run WHERE status = N'Queued'") == 3


@pytest.mark.mssql
def test_queued_runs_are_claimed_before_new_ticks(backend: MssqlBackend, sql: Sql) -> None:
    job = new_job(backend, concurrency_mode="Queue", next_run_at=past(5))
    queued_tick = past(30)
    assert backend.enqueue_job_run(job, queued_tick)
    (claim,) = backend.claim_due_jobs("a", 5, 60).claims
    assert claim.from_queue and claim.scheduled_for == queued_tick
    assert sql.one("SELECT status FROM mjsched.scheduled_job_run WHERE id = ?", (claim.run_id,)) == "Running"


@pytest.mark.mssql
def test_initialize_next_run_is_compare_and_set(backend: MssqlBackend) -> None:
    job = new_job(backend)
    when = [datetime.now(timezone.utc) + timedelta(minutes=i) for i in range(8)]
    assert sum(race(8, lambda i: backend.initialize_next_run(job, when[i]))) == 1


@pytest.mark.mssql
def test_install_from_several_engines_at_once(empty_mssql_dsn: str) -> None:
    backends = [MssqlBackend(empty_mssql_dsn) for _ in range(4)]
    try:
        applied = race(4, lambda i: backends[i].install())
        assert sorted(len(a) for a in applied)[-1] >= 2 and sum(1 for a in applied if a) == 1
        assert backends[0].installed_versions() == sorted(max(applied, key=len))
    finally:
        for b in backends:
            b.close()


@pytest.mark.mssql
def test_bad_procedure_arguments_are_typed_errors(backend: MssqlBackend) -> None:
    job = new_job(backend)
    with pytest.raises(ConfigurationError, match="lease_seconds"):
        backend.acquire_job_lock(job, token(), "a", 0)
    with pytest.raises(ConfigurationError, match="max_jobs"):
        backend.claim_due_jobs("a", -1, 60)


# -- SQL Server specifics -------------------------------------------------------------------------

@pytest.mark.mssql
def test_install_is_idempotent_and_versioned_like_postgres(backend: MssqlBackend) -> None:
    assert backend.install() == []
    assert backend.installed_versions() == [p.stem for p in sqlparity.versioned_scripts(
        Path(__file__).resolve().parents[2] / "sql" / "mssql")]


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
def test_the_sql_level_single_completion_reuses_the_batched_one(backend: MssqlBackend, sql: Sql) -> None:
    new_job(backend, next_run_at=past())
    (claim,) = backend.claim_due_jobs("a", 1, 60).claims
    call = ("EXEC mjsched.complete_job_run @p_run_id = ?, @p_token = ?, @p_status = ?, @p_error_message = ?, "
            "@p_details = ?, @p_next_run_at = ?")
    assert sql.rows(call, (claim.run_id, claim.lock_token, "Failed", "x", '{"k": [1]}', None)) == [{"completed": 1}]
    assert sql.rows(call, (claim.run_id, claim.lock_token, "Failed", "x", None, None)) == [{"completed": 0}]
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
