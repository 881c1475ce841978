"""Connection failures on PostgreSQL: a wrong DSN or login fails at once with a typed
error; only what may mend itself (a server down or restarting) is retried, and that
within a bounded time."""
from __future__ import annotations

import socket
import time
import pytest

import mjsched
from mjsched.backends.postgres import PostgresBackend
from tests.support import pg

pytestmark = pytest.mark.postgres


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _fails(dsn: str, **options: float) -> tuple[BaseException, float]:
    backend = PostgresBackend(dsn, connect_timeout=2, **options)
    started = time.monotonic()
    try:
        with pytest.raises(mjsched.SchedulerError) as caught:
            backend.db_now()
    finally:
        backend.close()
    return caught.value, time.monotonic() - started


def test_a_malformed_dsn_option_is_a_configuration_error_not_retried(pg_server: str,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    dsn = pg_server + ("&" if "?" in pg_server else "?") + "sslmode=bogus"
    with caplog.at_level("WARNING", logger="mjsched"):
        error, took = _fails(dsn)
    assert isinstance(error, mjsched.ConfigurationError) and error.field == "dsn"
    assert "sslmode" in str(error)
    assert not [r for r in caplog.records if getattr(r, "action", None) == "db_retry"]
    assert took < 1.0


@pytest.mark.parametrize("what", ["database", "role"])
def test_an_unknown_database_or_role_fails_at_once(pg_server: str, what: str,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    dsn = pg.with_database(pg_server, "mjsched_no_such_db") if what == "database" \
        else pg.with_user(pg_server, "mjsched_no_such_role")
    with caplog.at_level("WARNING", logger="mjsched"):
        error, took = _fails(dsn)
    assert isinstance(error, mjsched.DatabaseError) and "does not exist" in str(error)
    assert pg.host_port(pg_server) in str(error)
    assert not [r for r in caplog.records if getattr(r, "action", None) == "db_retry"]
    assert took < 1.0


def test_a_server_that_is_down_is_retried_within_a_bound(caplog: pytest.LogCaptureFixture) -> None:
    port = _closed_port()
    with caplog.at_level("WARNING", logger="mjsched"):
        error, took = _fails(f"postgresql://postgres@127.0.0.1:{port}/postgres", retry_max_delay=1.0)
    assert isinstance(error, mjsched.DatabaseError) and f"127.0.0.1:{port}" in str(error)
    assert [r for r in caplog.records if getattr(r, "action", None) == "db_retry"], "a refused connection is retried"
    assert took < 10.0


def test_the_engine_reports_a_malformed_dsn_option_on_install(pg_server: str) -> None:
    dsn = pg_server + ("&" if "?" in pg_server else "?") + "sslmode=bogus"
    with mjsched.SchedulingEngine(dsn) as engine:
        with pytest.raises(mjsched.ConfigurationError, match="dsn"):
            engine.install()
