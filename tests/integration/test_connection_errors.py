"""Connection failures on PostgreSQL: a wrong DSN or login fails at once with a typed
error; only what may mend itself (a server down or restarting) is retried, and that
within a bounded time."""
from __future__ import annotations

import logging
import socket
import time
from typing import Any
from urllib.parse import urlsplit

import pytest

import mjsched
from mjsched.backends.postgres import PostgresBackend
from tests.support import pg
from tests.support.stall_proxy import StallingProxy

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
    with caplog.at_level("DEBUG", logger="mjsched"):     # each retry is a DEBUG line; the caller says it failed
        error, took = _fails(f"postgresql://postgres@127.0.0.1:{port}/postgres", retry_max_delay=1.0)
    assert isinstance(error, mjsched.DatabaseError) and f"127.0.0.1:{port}" in str(error)
    assert [r for r in caplog.records if getattr(r, "action", None) == "db_retry"], "a refused connection is retried"
    assert took < 10.0


def test_the_engine_reports_a_malformed_dsn_option_on_install(pg_server: str) -> None:
    dsn = pg_server + ("&" if "?" in pg_server else "?") + "sslmode=bogus"
    with mjsched.SchedulingEngine(dsn) as engine:
        with pytest.raises(mjsched.ConfigurationError, match="dsn"):
            engine.install()


def test_a_refused_connection_says_cannot_connect_not_which_routine_needed_it() -> None:
    """Issue 35 item 10: the message began with an internal routine ("db_now failed on ...")."""
    port = _closed_port()
    error, _ = _fails(f"postgresql://postgres@127.0.0.1:{port}/postgres", retry_max_delay=0.5)
    assert isinstance(error, mjsched.CannotConnect)
    assert str(error) == f"cannot connect to 127.0.0.1:{port}: Connection refused"
    assert (error.where, error.reason, error.operation) == (f"127.0.0.1:{port}", "Connection refused", "db_now")


def test_a_refused_login_says_cannot_connect_and_why(pg_server: str) -> None:
    dsn = pg.with_user(pg_server, "mjsched_no_such_role")   # whatever user the tests' server has
    error, _ = _fails(dsn)
    assert isinstance(error, mjsched.CannotConnect)
    assert str(error).startswith("cannot connect to ") and 'role "mjsched_no_such_role" does not exist' in str(error)
    assert "failed on" not in str(error) and "FATAL" not in str(error)


def test_an_error_on_an_open_connection_still_names_the_call(pg_dsn: str) -> None:
    backend = PostgresBackend(pg_dsn)
    try:
        with pytest.raises(mjsched.DatabaseError) as caught:
            backend._rows("probe", "SELECT 1/0")
    finally:
        backend.close()
    assert not isinstance(caught.value, mjsched.CannotConnect)
    assert str(caught.value).startswith("probe failed on ") and "division by zero" in str(caught.value)


def test_a_database_outage_is_one_line_per_failed_poll_and_one_when_it_is_back(
        pg_dsn: str, make_engine: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 35 item 10: each failed poll logged five lines (four retries and the failure)."""
    parts = urlsplit(pg_dsn)
    with StallingProxy(parts.hostname or "127.0.0.1", parts.port or 5432) as proxy:
        engine = make_engine(dsn=pg_dsn.replace(f"{parts.hostname}:{parts.port}", f"127.0.0.1:{proxy.port}"),
                             max_poll_interval=0.5)
        engine.start_polling()
        try:
            caplog.set_level(logging.WARNING, logger="mjsched")
            caplog.clear()
            proxy.cut()
            failed = lambda: [r for r in caplog.records if getattr(r, "action", None) == "poll_failed"]  # noqa: E731
            pg.wait_for(lambda: len(failed()) >= 4, timeout=60, message="four failed polls")
            proxy.restore()
            back = pg.wait_for(lambda: [r for r in caplog.records if getattr(r, "action", None) == "poll_recovered"],
                               timeout=30, message="the poll that gets through")
        finally:
            engine.stop_polling(wait=True, max_wait=5)
        records = caplog.records[:caplog.records.index(back[0]) + 1]
    others = [r.getMessage() for r in records if getattr(r, "action", None) not in ("poll_failed", "poll_recovered")]
    assert others == []          # no retry lines, no purge or claim-replay lines: one line per failed poll
    polls = [r for r in records if getattr(r, "action", None) == "poll_failed"]
    assert len(records) == len(polls) + 1 and len(polls) >= 4
    assert all(r.getMessage().startswith("poll failed") for r in polls)
    assert "cannot connect to 127.0.0.1:" in polls[-1].getMessage()
    assert len(back) == 1 and back[0].getMessage().startswith("reconnected to the database: polls succeed again after ")
    assert back[0].failed_polls == len(polls)
