"""Helpers for tests that talk to a real SQL Server (no fakes).

The server comes from ``MJSCHED_TEST_MSSQL_DSN`` (e.g.
``mssql://sa:pw@127.0.0.1:1433/master?driver=FreeTDS``; the login must be allowed to
create databases), else a SQL Server 2022 container when ``docker info`` answers.
Without either, the tests that need it skip with one line of reason; the lookup is
memoised, so every later skip costs nothing. Nothing here imports pyodbc (or
mjsched's ODBC modules) at import time: on a machine without the ODBC driver manager
(``libodbc.so.2``) ``import pyodbc`` raises ImportError, and that must make the SQL
Server half skip with that reason, not break the collection of every test.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import threading
from typing import Any, Sequence

_SERVER: dict[str, Any] = {}


def odbc_unavailable() -> str | None:
    """Why pyodbc cannot be imported here (one line), or None when it can."""
    try:
        import pyodbc  # noqa: F401
    except ImportError as exc:
        return f"pyodbc cannot be imported ({' '.join(str(exc).split())[:160]}); install unixODBC (libodbc.so.2)"
    return None


def require_pyodbc() -> Any:
    """pyodbc, for a test that needs the module but no server; else skip with the SQL Server
    suite's reason (``pytest.importorskip`` lets an ImportError other than
    ModuleNotFoundError, a missing libodbc.so.2's, fail the test)."""
    import pytest

    missing = odbc_unavailable()
    if missing:
        pytest.skip(f"no SQL Server tests: {missing}")
    import pyodbc

    return pyodbc


def odbc_connection_string(dsn: str) -> str:
    from mjsched.backends.odbc import odbc_connection_string as convert

    return convert(dsn)


def with_database(dsn: str, name: str) -> str:
    from mjsched.backends.odbc import with_database as convert

    return convert(dsn, name)


def _docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def find_server() -> tuple[str | None, str]:
    """(server DSN, "") or (None, one-line reason)."""
    if "dsn" in _SERVER or "reason" in _SERVER:
        return _SERVER.get("dsn"), _SERVER.get("reason", "")
    missing = odbc_unavailable()
    if missing:
        _SERVER["reason"] = f"no SQL Server tests: {missing}"
        return None, _SERVER["reason"]
    dsn = os.environ.get("MJSCHED_TEST_MSSQL_DSN")
    if not dsn and _docker_answers():
        try:
            import pyodbc
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


def stop_container() -> None:
    container = _SERVER.pop("container", None)
    if container is not None:
        container.stop()


def _admin(server: str, statement: str) -> None:
    import pyodbc

    conn = pyodbc.connect(odbc_connection_string(server), autocommit=True, timeout=10)
    try:
        conn.execute(statement)
    finally:
        conn.close()


def create_database(server: str, name: str) -> str:
    """Create ``name`` (READ_COMMITTED_SNAPSHOT ON with MJSCHED_TEST_MSSQL_RCSI=1); its DSN."""
    _admin(server, f"CREATE DATABASE [{name}]")
    if os.environ.get("MJSCHED_TEST_MSSQL_RCSI") == "1":
        _admin(server, f"ALTER DATABASE [{name}] SET READ_COMMITTED_SNAPSHOT ON WITH ROLLBACK IMMEDIATE")
    return with_database(server, name)


def drop_database(server: str, name: str) -> None:
    _admin(server, f"IF DB_ID(N'{name}') IS NOT NULL BEGIN "
                   f"ALTER DATABASE [{name}] SET SINGLE_USER WITH ROLLBACK IMMEDIATE; DROP DATABASE [{name}]; END")


class Sql:
    """A plain autocommit connection for arranging and asserting rows (``?`` placeholders)."""

    def __init__(self, dsn: str) -> None:
        import pyodbc

        from mjsched.backends.odbc import configure_connection

        self.dsn = dsn
        self.conn = pyodbc.connect(odbc_connection_string(dsn), autocommit=True, timeout=10)
        configure_connection(self.conn)
        self._lock = threading.Lock()

    def rows(self, query: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        from mjsched.backends.odbc import to_param

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

    def run(self, query: str, params: Sequence[Any] = ()) -> int:
        from mjsched.backends.odbc import to_param

        with self._lock:
            cur = self.conn.cursor()
            cur.execute(query, [to_param(p) for p in params])
            count = cur.rowcount
            while cur.nextset():
                pass
            return count

    def close(self) -> None:
        self.conn.close()
