"""Real databases for the tests: a fresh PostgreSQL database per test, cloned from a template.

PostgreSQL comes from MJSCHED_TEST_POSTGRES_DSN (CI sets it), else a server the tests
start themselves with the embedded launcher (tests/support/pg.py). Without one the
PostgreSQL tests skip, unless MJSCHED_REQUIRE_POSTGRES=1, where a missing server fails
the run. Under pytest-xdist every worker has its own template database (named after
its pid) and its own per-test databases; the embedded server is shared. SQL Server comes
from MJSCHED_TEST_MSSQL_DSN or Docker (tests/support/mssql.py); without one its tests
skip, unless MJSCHED_REQUIRE_MSSQL=1.

The backend contract suite asks for ``db``: each such test runs once per dialect.
"""
from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from tests.support import mssql, pg
from tests.support.db import Db

REQUIRE_POSTGRES = os.environ.get("MJSCHED_REQUIRE_POSTGRES") == "1"
REQUIRE_MSSQL = os.environ.get("MJSCHED_REQUIRE_MSSQL") == "1"
DIALECTS = [pytest.param("postgres", marks=pytest.mark.postgres), pytest.param("mssql", marks=pytest.mark.mssql)]


# Suites selected by directory, so a new file in them is selected with its suite: the test
# command leaves them out (-m "not chaos and not bench and not interleaving"), .ci/run runs
# them as a second step.
SUITE_MARKS = {"chaos": "chaos", "bench": "bench", "interleaving": "interleaving"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = Path(__file__).resolve().parent
    for item in items:
        try:
            suite = Path(str(item.fspath)).resolve().relative_to(root).parts[0]
        except (ValueError, IndexError):
            continue
        mark = SUITE_MARKS.get(suite)
        if mark is not None and item.get_closest_marker(mark) is None:
            item.add_marker(getattr(pytest.mark, mark))


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """DSN of a PostgreSQL server where tests may create databases (see tests/support/pg.py)."""
    dsn, why = pg.find_server()
    if dsn is None:
        if REQUIRE_POSTGRES:
            pytest.fail(f"MJSCHED_REQUIRE_POSTGRES=1 but no PostgreSQL server: {why}")
        pytest.skip(f"no PostgreSQL server: {why}")
    yield dsn
    pg.stop_embedded()


@pytest.fixture(scope="session")
def pg_template(pg_server: str) -> Iterator[str]:
    """Name of a template database with the mjsched schema installed."""
    name = f"mjsched_tpl_{os.getpid()}"
    pg.drop_database(pg_server, name)
    pg.create_database(pg_server, name)
    from mjsched.backends.postgres import PostgresBackend

    backend = PostgresBackend(pg.with_database(pg_server, name))
    backend.install()
    backend.close()
    yield name
    pg.drop_database(pg_server, name)


@pytest.fixture
def pg_dsn(pg_server: str, pg_template: str) -> Iterator[str]:
    """A fresh database with the schema installed, dropped after the test."""
    name = f"mjsched_t_{uuid.uuid4().hex[:12]}"
    pg.create_database(pg_server, name, template=pg_template)
    yield pg.with_database(pg_server, name)
    pg.drop_database(pg_server, name)


@pytest.fixture
def empty_pg_dsn(pg_server: str) -> Iterator[str]:
    """A fresh database without the schema."""
    name = f"mjsched_e_{uuid.uuid4().hex[:12]}"
    pg.create_database(pg_server, name)
    yield pg.with_database(pg_server, name)
    pg.drop_database(pg_server, name)


@pytest.fixture(scope="session")
def mssql_server() -> Iterator[str]:
    """DSN of a SQL Server where tests may create databases."""
    dsn, reason = mssql.find_server()
    if dsn is None:
        if REQUIRE_MSSQL:
            pytest.fail(f"MJSCHED_REQUIRE_MSSQL=1 but {reason}")
        pytest.skip(reason)
    yield dsn
    mssql.stop_container()


@pytest.fixture(scope="session")
def mssql_database(mssql_server: str) -> Iterator[str]:
    """A database with the schema installed, for the whole session."""
    from mjsched.backends.mssql import MssqlBackend

    name = f"mjsched_t_{os.getpid()}"
    mssql.drop_database(mssql_server, name)
    dsn = mssql.create_database(mssql_server, name)
    backend = MssqlBackend(dsn)
    try:
        backend.install()
    finally:
        backend.close()
    yield dsn
    mssql.drop_database(mssql_server, name)


@pytest.fixture
def mssql_dsn(mssql_database: str) -> Iterator[str]:
    """The session database, emptied before each test (creating one per test is slow on SQL Server)."""
    conn = mssql.Sql(mssql_database)
    try:
        conn.run("DELETE FROM mjsched.scheduled_job_run; DELETE FROM mjsched.scheduled_job; "
                 "DELETE FROM mjsched.scheduled_job_type; DELETE FROM mjsched.engine_instance; "
                 "DELETE FROM mjsched.tag_limit;")
    finally:
        conn.close()
    yield mssql_database


@pytest.fixture
def empty_mssql_dsn(mssql_server: str) -> Iterator[str]:
    """A fresh database without the schema."""
    name = f"mjsched_e_{uuid.uuid4().hex[:12]}"
    dsn = mssql.create_database(mssql_server, name)
    yield dsn
    mssql.drop_database(mssql_server, name)


@pytest.fixture(params=DIALECTS)
def db(request: pytest.FixtureRequest) -> Iterator[Db]:
    """A test database with the schema installed, once per dialect."""
    if request.param == "postgres":
        dsn = request.getfixturevalue("pg_dsn")
        handle = Db("postgres", dsn, pg.Sql(dsn))
    else:
        dsn = request.getfixturevalue("mssql_dsn")
        handle = Db("mssql", dsn, mssql.Sql(dsn))
    yield handle
    handle.close()


@pytest.fixture
def pg_db(pg_dsn: str) -> Iterator[Db]:
    """``db`` for the tests that need PostgreSQL's own machinery (NOTIFY, roles, psycopg2)."""
    handle = Db("postgres", pg_dsn, pg.Sql(pg_dsn))
    yield handle
    handle.close()


@pytest.fixture(params=DIALECTS)
def empty_db_dsn(request: pytest.FixtureRequest) -> str:
    """A fresh database without the schema, once per dialect."""
    return str(request.getfixturevalue("empty_pg_dsn" if request.param == "postgres" else "empty_mssql_dsn"))


@pytest.fixture
def make_engine(request: pytest.FixtureRequest) -> Iterator[Callable[..., Any]]:
    """Factory of engines on the test database (``db``'s when the test asks for it, else
    PostgreSQL's ``pg_dsn``); every engine is closed at teardown."""
    import mjsched

    default_dsn = request.getfixturevalue("db").dsn if "db" in request.fixturenames \
        else request.getfixturevalue("pg_dsn")

    engines: list[mjsched.SchedulingEngine] = []

    def make(**kwargs: Any) -> mjsched.SchedulingEngine:
        if "options" not in kwargs:   # an EngineOptions replaces the tuning arguments (given beside it: refused)
            kwargs.setdefault("lease_timeout", 30.0)
            kwargs.setdefault("max_poll_interval", 1.0)
        engine = mjsched.SchedulingEngine(kwargs.pop("dsn", default_dsn), **kwargs)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        try:
            engine.close()
        except Exception:
            pass


@pytest.fixture
def sql(pg_dsn: str) -> Iterator[pg.Sql]:
    """Direct SQL on the test database, for arranging rows and checking results."""
    conn = pg.Sql(pg_dsn)
    yield conn
    conn.close()


# Tables a test hands over as ``request.node.user_properties.append(("chaos_table", text))``
# (the chaos suite's matrices): printed in the terminal summary, so CI's log shows them
# whether the test passed or not, and under xdist too (reports carry user_properties).
_CHAOS_TABLES: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call":
        _CHAOS_TABLES.extend(str(v) for k, v in report.user_properties if k == "chaos_table")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for table in _CHAOS_TABLES:
        terminalreporter.write_sep("-", "chaos")
        terminalreporter.write_line(table)


@pytest.fixture(autouse=True)
def _fresh_test_driver_events() -> None:
    """Gates and start events of tests/support/drivers.py are per test name, not per process."""
    loaded = sys.modules.get("tests.support.drivers")
    if loaded is not None:
        loaded.forget_set_events()
