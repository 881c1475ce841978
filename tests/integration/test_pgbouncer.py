"""Engines through PgBouncer in transaction pooling (docs/guide/deployment.md, "PgBouncer").

Measured first (PgBouncer 1.18): the engine's sessions get their settings (TimeZone=UTC,
statement_timeout, lock_timeout) as startup options, which PgBouncer refuses ("unsupported
startup parameter: options"): no engine could connect. Told to ignore them
(``ignore_startup_parameters = options``) it drops them silently, and the engine ran with
no statement or lock timeout. application_name passes (PgBouncer tracks it).

Now the backend notices either and sends the settings with every statement (SET LOCAL, in
the statement's own transaction, so nothing leaks into the pooled server sessions), has
no LISTEN (it needs a session of its own; changes are seen at the next poll), and refuses
install() (it holds an advisory lock across transactions), naming the way: install
through a direct connection.
"""
from __future__ import annotations

from typing import Any, Iterator

import psycopg2
import pytest

import mjsched
from tests.support import pgbouncer
from tests.support.pg import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(120)]

JOBS = 10
TICKS = 100


@pytest.fixture
def bouncer(pg_server: str, pg_dsn: str) -> Iterator[pgbouncer.PgBouncer]:
    if pgbouncer.binary() is None:
        pytest.skip("no pgbouncer binary (apt-get install pgbouncer; .ci/run installs it)")
    server = pgbouncer.PgBouncer(pg_server, pool_mode="transaction")
    yield server
    server.stop()


def settings_seen(backend: Any) -> tuple[str, str, str, str]:
    def read(cur: Any) -> Any:
        cur.execute("SELECT current_setting('TimeZone') AS tz, current_setting('statement_timeout') AS st, "
                    "current_setting('lock_timeout') AS lt, current_setting('application_name') AS app")
        return cur.fetchone()
    row = backend._run("settings", read)
    return row["tz"], row["st"], row["lt"], row["app"]


def test_two_engines_through_transaction_pooling_run_each_tick_once(bouncer: Any, pg_dsn: str, sql: Any) -> None:
    sql.run("CREATE TABLE test_counter (name text PRIMARY KEY, n integer NOT NULL)")
    dsn = bouncer.dsn(pg_dsn)
    engines = [mjsched.SchedulingEngine(dsn, instance_name=f"pooled-{i}", lease_timeout=30, max_poll_interval=0.5)
               for i in range(2)]
    try:
        for i in range(JOBS):
            engines[0].create_job(f"count-{i}", "python", every="1s", high_frequency_ok=True,
                                  configuration={"callable": "tests.support.jobs:bump_counter",
                                                 "kwargs": {"dsn": pg_dsn, "name": f"count-{i}"}})
        for engine in engines:
            engine.start_polling()
            assert engine.backend.per_statement_settings
            assert engine.backend.listener() is None
            # the settings hold in every statement: SET LOCAL (lease 30 s: lock wait bound 2 s)
            assert settings_seen(engine.backend) == ("UTC", "6s", "2s", "mjsched")
        wait_for(lambda: sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE status = 'Completed'") >= TICKS,
                 timeout=60, message=f"{TICKS} ticks through PgBouncer")
    finally:
        for engine in engines:
            engine.stop_polling(wait=True, max_wait=10)
            engine.close()

    dup = sql.one("""SELECT count(*) FROM (SELECT scheduled_job_id, scheduled_for FROM mjsched.scheduled_job_run
                      WHERE scheduled_for IS NOT NULL GROUP BY 1, 2 HAVING count(*) > 1) d""")
    assert dup == 0
    completed = sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE status = 'Completed'")
    assert sql.one("SELECT coalesce(sum(n), 0) FROM test_counter") == completed, "two runs of a job overlapped"
    assert sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE status NOT IN ('Completed')") == 0
    ran_by = {r["executed_by_instance"] for r in sql.rows("SELECT DISTINCT executed_by_instance FROM "
                                                          "mjsched.scheduled_job_run")}
    assert ran_by == {"pooled-0", "pooled-1"}

    # nothing leaked into the pooled server sessions: a plain client through the bouncer
    plain = psycopg2.connect(dsn)
    plain.autocommit = True
    try:
        with plain.cursor() as cur:
            cur.execute("SELECT current_setting('statement_timeout'), current_setting('lock_timeout')")
            assert cur.fetchone() == ("0", "0")
    finally:
        plain.close()


def test_install_through_the_pooler_is_refused_naming_the_way(bouncer: Any, pg_dsn: str) -> None:
    engine = mjsched.SchedulingEngine(bouncer.dsn(pg_dsn))
    try:
        with pytest.raises(mjsched.ConfigurationError) as info:
            engine.install()
        assert "direct connection" in str(info.value) and "mjsched init-db" in str(info.value)
        assert [j.name for j in engine.list_jobs()] == []     # the rest works
    finally:
        engine.close()


def test_a_direct_connection_keeps_its_startup_options(make_engine: Any) -> None:
    engine = make_engine(lease_timeout=30)
    assert settings_seen(engine.backend) == ("UTC", "6s", "2s", "mjsched")
    assert not engine.backend.per_statement_settings and engine.backend.listener() is not None
