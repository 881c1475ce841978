"""An engine used after a fork (issue 35 item 5; docs/guide/deployment.md).

A forked child shares its parent's database sockets and has none of its threads. Its copy
of the engine refuses every call with EngineForked naming the fix, except the shutdown
calls (stop_polling, close), which return at once doing nothing; it never touches the
inherited connections, not even to close them (a close sends Terminate on the parent's
socket and ends the parent's session). The parent's engine goes on unharmed: the same
database sessions, still polling. A bare backend in the child opens connections of its own.

Both kinds of fork: ``os.fork`` (Python's at-fork hooks mark the copies at once) and a fork
none of mjsched's hooks sees, as one made in C by uWSGI's master (the process id gives it
away at the first call; tests/support/forks.py says how it is stood in for)."""
from __future__ import annotations

import os
import time
from typing import Any

import pytest

import mjsched
from mjsched.engine import control
from mjsched.engine.facade import ANSWERED_AFTER_FORK
from tests.support.forks import FORKS, in_child
from tests.support.sockets import database_sockets
from tests.support.pg import Sql, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(90)]

FIXES = ("post_fork", "--preload", "lazy-apps", "mjsched run", "docs/guide/deployment.md")


def public_calls() -> list[str]:
    """Every public method of SchedulingEngine (a method added tomorrow is in this list too)."""
    return sorted(name for name, value in vars(mjsched.SchedulingEngine).items()
                  if callable(value) and (not name.startswith("_") or name == "__enter__"))


def sessions(sql: Sql) -> set[int]:
    return {r["pid"] for r in sql.rows("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                                       "AND application_name = 'mjsched'")}


def runs_done(sql: Sql, job_id: str) -> int:
    return int(sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s AND status = 'Completed'",
                       (job_id,)))


def use_the_copy(engine: Any) -> dict[str, Any]:
    """In the child: every public call of the inherited engine, its shutdown calls, and a read
    through its backend; what each did, for ``check_the_copy``."""
    out: dict[str, Any] = {"not_refused": [], "messages": []}
    for name in public_calls():
        if name in ANSWERED_AFTER_FORK:
            continue
        try:
            getattr(engine, name)()
            out["not_refused"].append(name)
        except mjsched.EngineForked as exc:
            out["messages"].append(str(exc))
            out["parent_pid"] = exc.parent_pid
        except Exception as exc:  # noqa: BLE001
            out["not_refused"].append(f"{name}: {type(exc).__name__}: {exc}")
    started = time.monotonic()
    out["stop_polling"] = engine.stop_polling(wait=True, max_wait=30)
    out["close"] = engine.close()
    engine.__exit__(None, None, None)    # the end of a with-block begun before the fork
    control._close_open_engines()          # what this process's exit does
    out["quiet_seconds"] = time.monotonic() - started
    out["is_polling"], out["inflight"] = engine.is_polling, engine.inflight
    # what the copy still answers without a call: every public property, and its counters
    properties = [name for name, value in vars(type(engine)).items()
                  if isinstance(value, property) and not name.startswith("_")]
    out["properties"] = {name: repr(getattr(engine, name))[:60] for name in properties}
    out["stats"] = engine.stats.snapshot()
    # the copy's backend is usable on connections of this process's own
    out["jobs_seen"] = [j.name for j in engine.backend.list_jobs()]
    return out


def check_the_copy(result: dict[str, Any], jobs: tuple[str, ...] = ("tick",)) -> None:
    """Every call refused naming the fixes, the shutdown calls quiet at once, the backend readable."""
    assert result["not_refused"] == []
    assert result["parent_pid"] == os.getpid()
    assert result["messages"] and all(f"{fix}" in m for m in result["messages"] for fix in FIXES)
    assert any(m.startswith("start_polling(): ") for m in result["messages"])
    assert any(m.startswith("execute_job(): ") for m in result["messages"])
    assert result["stop_polling"] is None and result["close"] is None and result["quiet_seconds"] < 1.0
    assert (result["is_polling"], result["inflight"]) == (False, 0)
    assert {"is_polling", "inflight", "leaked"} <= set(result["properties"])
    assert result["stats"]["dispatched"] >= 1
    assert sorted(result["jobs_seen"]) == sorted(jobs)


def polling_with_a_run(make_engine: Any, sql: Sql) -> tuple[Any, str]:
    """A polling engine whose per-second job has run once: its threads and sessions are busy."""
    engine = make_engine(max_poll_interval=0.5)
    job_id = engine.create_job("tick", "python", every="1s", configuration={"callable": "os:getpid"})
    engine.start_polling()
    wait_for(lambda: runs_done(sql, job_id) >= 1, timeout=20, message="a first run before the fork")
    return engine, job_id


def check_the_parent_goes_on(engine: Any, sql: Sql, job_id: str, before: set[int],
                             jobs: tuple[str, ...] = ("tick",)) -> None:
    """The parent's sessions were left alone (none ended by the child), and it goes on."""
    after_child = runs_done(sql, job_id)
    assert before <= sessions(sql), "a session of the parent ended: the child closed or used it"
    wait_for(lambda: runs_done(sql, job_id) >= after_child + 2, timeout=20,
             message="runs after the child touched its copy")
    assert engine.is_polling and sorted(j.name for j in engine.list_jobs()) == sorted(jobs)
    assert before <= sessions(sql)


@pytest.mark.parametrize("fork", list(FORKS), ids=list(FORKS))
def test_a_forked_copy_refuses_and_the_parent_goes_on(make_engine: Any, pg_dsn: str, fork: str) -> None:
    sql = Sql(pg_dsn)
    try:
        engine, job_id = polling_with_a_run(make_engine, sql)
        before = sessions(sql)
        assert before, "the polling engine has sessions open"
        check_the_copy(in_child(FORKS[fork], lambda: use_the_copy(engine)))
        check_the_parent_goes_on(engine, sql, job_id, before)
    finally:
        sql.close()


def test_a_child_that_drops_its_copy_never_ends_the_parents_sessions(make_engine: Any, pg_dsn: str) -> None:
    """The inherited sockets point at /dev/null in the child: even a close of an inherited
    connection, or its release when the copy is freed, sends nothing to the parent's session."""
    engine = make_engine()
    engine.list_jobs()    # a connection open and idle in the pool at the fork
    sql = Sql(pg_dsn)
    try:
        before = sessions(sql)
        inherited = list(engine.backend._pool._idle)
        assert inherited

        def child() -> dict[str, Any]:
            targets = [os.readlink(f"/proc/self/fd/{conn.fileno()}") for conn in inherited]
            for conn in inherited:
                conn.close()     # what pool.close() did at exit before: Terminate on the parent's socket
            return {"targets": targets}

        assert set(in_child(os.fork, child)["targets"]) == {os.devnull}
        assert before <= sessions(sql)
        assert engine.list_jobs() == []
    finally:
        sql.close()


def test_a_fork_while_a_connection_is_being_opened_waits_until_it_is_recorded(pg_dsn: str) -> None:
    """A fork that falls between a connect and the pool's record of it (gunicorn forking its
    workers while a preloaded engine's threads open their connections) would hand the child a
    socket no after-fork hook knows: the fork waits until the connection is recorded, so the
    child abandons it like every other (its descriptor points at /dev/null there)."""
    import threading

    import psycopg2

    from mjsched.backends.pool import ConnectionPool
    from mjsched.backends.postgres import abandon_inherited

    opened, release = threading.Event(), threading.Event()

    def slow_connect() -> Any:
        conn = psycopg2.connect(pg_dsn)   # the socket is open here, not yet the pool's
        opened.set()
        release.wait(10)
        return conn

    pool = ConnectionPool(slow_connect, lambda conn, exc: True, max_size=1, abandon=abandon_inherited)
    lent: list[Any] = []

    def borrow() -> None:
        with pool.connection() as conn:
            lent.append(conn)

    borrower = threading.Thread(target=borrow, daemon=True)
    borrower.start()
    assert opened.wait(10)
    threading.Timer(0.3, release.set).start()    # the connect returns while the fork waits for it
    started = time.monotonic()
    child = in_child(os.fork, lambda: {"sockets": sorted(database_sockets(os.getpid(), pg_dsn))})
    waited = time.monotonic() - started
    borrower.join(10)
    assert lent and child["sockets"] == [], child
    assert waited >= 0.2, f"the fork did not wait for the connection being opened ({waited:.2f}s)"
    lent[0].close()
