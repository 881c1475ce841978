"""A call of the previous release that is in flight while install() runs finishes without error.

Issue 32 item 4: the rolling-upgrade test failed under load with the old engine's
claim_due_jobs raising "there is no unique or exclusion constraint matching the ON CONFLICT
specification". The cause is not a non-atomic install (install() is one transaction): a call
of the previous release that began before the install committed runs the body it began
with, and when its first statement waited for the install's table locks, that old body ran
on after the commit against the new per-attempt UNIQUE index (009_retries), which its
``ON CONFLICT (scheduled_job_id, scheduled_for)`` cannot infer.

Here the window is made exact instead of waited for under load: the install is held right
after it has taken the tables, an old-release claim is started and seen waiting on them,
then the install goes on. The old call must claim its due job without error.
"""
from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import psycopg2
import psycopg2.extensions
import pytest

from mjsched.backends.postgres import PostgresBackend
from tests.support import pg
from tests.upgrade.test_rolling_upgrade import _previous_release, _scripts

pytestmark = pytest.mark.postgres
HOLD_TIMEOUT = 20.0


class HeldAfterTableLock:
    """A connection factory whose first ``LOCK TABLE`` returns only once ``go`` is set:
    install() then holds the tables for as long as the test wants."""

    def __init__(self) -> None:
        self.locked = threading.Event()
        self.go = threading.Event()

    def factory(self) -> type[psycopg2.extensions.connection]:
        hold = self

        class Cursor(psycopg2.extensions.cursor):
            def execute(self, query: Any, vars: Any = None) -> Any:  # noqa: A002 - psycopg2's name
                result = super().execute(query, vars)
                if str(query).lstrip().upper().startswith("LOCK TABLE") and not hold.locked.is_set():
                    hold.locked.set()
                    assert hold.go.wait(HOLD_TIMEOUT), "the test never let the install go on"
                return result

        class Connection(psycopg2.extensions.connection):
            def cursor(self, *args: Any, **kwargs: Any) -> Any:
                base = kwargs.get("cursor_factory") or psycopg2.extensions.cursor
                kwargs["cursor_factory"] = type("Held" + base.__name__, (Cursor, base), {})
                return super().cursor(*args, **kwargs)
        return Connection


def _install_previous(dsn: str, tree: Path) -> None:
    """The previous release's schema, as its install() leaves it (scripts in order, one transaction)."""
    conn = psycopg2.connect(dsn)
    try:
        with conn, conn.cursor() as cur:
            cur.execute("CREATE SCHEMA IF NOT EXISTS mjsched")
            for text in _scripts(tree).values():
                cur.execute(text)
    finally:
        conn.close()


def _waiting_on_a_lock(sql: pg.Sql, pid: int) -> bool:
    return bool(sql.one("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", (pid,)))


def test_an_old_claim_waiting_on_the_install_finishes_without_error(empty_pg_dsn: str, tmp_path: Path) -> None:
    old_tree = _previous_release(tmp_path / "previous")
    dsn = empty_pg_dsn
    _install_previous(dsn, old_tree)
    sql = pg.Sql(dsn)
    try:
        type_id = sql.one("INSERT INTO mjsched.scheduled_job_type (name, driver_class) VALUES ('t', 't') RETURNING id")
        job = sql.one("""INSERT INTO mjsched.scheduled_job (job_type_id, name, cron_expression, status, next_run_at)
                         VALUES (%s, 'due', '0 0 1 1 *', 'Active', now() - interval '1 second') RETURNING id""",
                      (type_id,))
        old = psycopg2.connect(dsn)
        old.autocommit = True
        old_pid = old.get_backend_pid()
        hold = HeldAfterTableLock()
        backend = PostgresBackend(dsn, connection_factory=hold.factory(), retry_attempts=1)
        outcome: dict[str, Any] = {}

        def install() -> None:
            try:
                outcome["applied"] = backend.install()
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                outcome["install_error"] = exc

        def old_claim() -> None:
            try:
                with old.cursor() as cur:
                    cur.execute("SELECT job_id, run_id FROM mjsched.claim_due_jobs('old-engine', 5, 30, NULL, %s, false)",
                                (str(uuid.uuid4()),))
                    outcome["claimed"] = [r for r in cur.fetchall() if r[0] is not None]
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                outcome["claim_error"] = exc

        installer = threading.Thread(target=install, daemon=True)
        installer.start()
        try:
            assert hold.locked.wait(HOLD_TIMEOUT), "install() never took the tables"
            claimer = threading.Thread(target=old_claim, daemon=True)
            claimer.start()
            pg.wait_for(lambda: _waiting_on_a_lock(sql, old_pid), timeout=10,
                        message="the old release's claim to wait for the install's locks")
        finally:
            hold.go.set()
        installer.join(60)
        claimer.join(60)
        old.close()
        backend.close()
        assert not installer.is_alive() and not claimer.is_alive()
        assert "install_error" not in outcome, outcome["install_error"]
        assert "claim_error" not in outcome, f"the old release's claim failed: {outcome['claim_error']}"
        assert [str(r[0]) for r in outcome["claimed"]] == [str(job)]
        # the install is complete: the per-attempt index is in place
        assert sql.one("""SELECT i.indnatts FROM pg_index i
                           WHERE i.indexrelid = 'mjsched.uq_scheduled_job_run_tick'::regclass""") == 3
    finally:
        sql.close()
