"""Real databases for the tests: a fresh PostgreSQL database per test, cloned from a template.

PostgreSQL comes from MJSCHED_TEST_POSTGRES_DSN (CI sets it), else the local server
on 127.0.0.1:5432. Without one the PostgreSQL tests skip, unless
MJSCHED_REQUIRE_POSTGRES=1, where a missing server fails the run. SQL Server comes
from MJSCHED_TEST_MSSQL_DSN or Docker (the mssql_dsn fixture in
tests/integration/test_mssql_backend.py).
"""
from __future__ import annotations

import os
import uuid
from typing import Any, Callable, Iterator

import pytest

from tests.support import pg

REQUIRE_POSTGRES = os.environ.get("MJSCHED_REQUIRE_POSTGRES") == "1"


@pytest.fixture(scope="session")
def pg_server() -> str:
    """DSN of a PostgreSQL server where tests may create databases."""
    dsn, why = pg.find_server()
    if dsn is None:
        if REQUIRE_POSTGRES:
            pytest.fail(f"MJSCHED_REQUIRE_POSTGRES=1 but no PostgreSQL server: {why}")
        pytest.skip(f"no PostgreSQL server: {why}")
    return dsn


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


@pytest.fixture
def make_engine(pg_dsn: str) -> Iterator[Callable[..., Any]]:
    """Factory of engines on the test database; every engine is closed at teardown."""
    import mjsched

    engines: list[mjsched.SchedulingEngine] = []

    def make(**kwargs: Any) -> mjsched.SchedulingEngine:
        kwargs.setdefault("lease_timeout", 30.0)
        kwargs.setdefault("max_poll_interval", 1.0)
        engine = mjsched.SchedulingEngine(kwargs.pop("dsn", pg_dsn), **kwargs)
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
