"""A process paused past its lease writes nothing (issue 37 item 5).

Engine E0 (a process) runs a ``sql`` job whose statement writes one row to a target table in
the scheduler's database, after a 2 s pg_sleep; while the statement runs, E0 gets SIGSTOP.
The server finishes the statement and waits, transaction open, for a client that does not
answer. E1 starts, takes the job over once E0's lease lapsed, and runs its next ticks, each
writing its row. Then E0 gets SIGCONT: its driver goes on to COMMIT -- and the fence
(mjsched.check_fence, last before the COMMIT) refuses it, so the transaction rolls back.

Counted in the target table: 0 rows from E0's run, exactly one row from every run of E1 that
completed, and E1's fencing tokens all larger than E0's. Without the fence (``fence: false``)
E0's row is committed when it resumes: the test's ``unfenced`` case shows the gap it closes.
"""
from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from tests.chaos.harness import EVERY_SECOND, Worker, report, stop_all
from tests.support.pg import Sql, wait_for

pytestmark = [pytest.mark.chaos, pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(150)]

LEASE = 2.0
STATEMENT = ("INSERT INTO public.fence_target (run_id, token) "
             "SELECT %(mjsched_run_id)s::uuid, %(mjsched_fencing_token)s FROM pg_sleep(%(sleep)s)")


def _target(sql: Sql) -> list[dict[str, Any]]:
    return sql.rows("SELECT run_id::text AS run_id, token FROM public.fence_target ORDER BY token")


def _runs(sql: Sql, job: str) -> list[dict[str, Any]]:
    return sql.rows("SELECT id::text AS id, status, executed_by_instance AS engine, fencing_token "
                    "FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s ORDER BY fencing_token", (job,))


def _sleeping_backend(sql: Sql, run_id: str) -> int | None:
    """The server process running E0's statement, once it is in its pg_sleep."""
    return sql.one("SELECT pid FROM pg_stat_activity WHERE application_name = 'mjsched-sql-driver' "
                   "AND state = 'active' AND query LIKE '%%fence_target%%' AND query LIKE %s LIMIT 1",
                   (f"%{run_id}%",))


def _ended(sql: Sql, pid: int) -> bool:
    """E0's driver is done with its transaction: committed or rolled back, and disconnected."""
    return not sql.one("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,))


@pytest.mark.parametrize("fence", [None, False], ids=["fenced", "unfenced"])
def test_an_engine_paused_past_its_lease_writes_nothing(crud: Any, pg_dsn: str, sql: Sql, workdir: str,
                                                        fence: bool | None) -> None:
    sql.run("CREATE TABLE public.fence_target (run_id uuid NOT NULL, token bigint NOT NULL, "
            "written_at timestamptz NOT NULL DEFAULT clock_timestamp())")
    configuration: dict[str, Any] = {"dsn": pg_dsn, "statement": STATEMENT, "parameters": {"sleep": 2.0}}
    if fence is not None:
        configuration["fence"] = fence
    job = crud.create_job(name="fenced-writer", driver="sql", cron=EVERY_SECOND, configuration=configuration,
                          high_frequency_ok=True)
    e0 = Worker(pg_dsn, "E0", workdir, lease=LEASE).wait_ready()
    workers = [e0]
    stopped = False
    try:
        first = wait_for(lambda: next((r for r in _runs(sql, job) if r["engine"] == "E0"), None), timeout=20,
                         message="E0's first run")
        backend = wait_for(lambda: _sleeping_backend(sql, first["id"]), timeout=10,
                           message="E0's statement in its pg_sleep")
        os.kill(e0.pid, signal.SIGSTOP)
        stopped = True
        e1 = Worker(pg_dsn, "E1", workdir, lease=LEASE).wait_ready()
        workers.append(e1)
        wait_for(lambda: any(r["engine"] == "E1" and r["status"] == "Completed" for r in _runs(sql, job)),
                 timeout=40, message="a run of E1 completed while E0 is stopped")
        paused_run = next(r for r in _runs(sql, job) if r["id"] == first["id"])
        assert paused_run["status"] != "Running", paused_run          # taken over while E0 was stopped
        os.kill(e0.pid, signal.SIGCONT)
        stopped = False
        wait_for(lambda: _ended(sql, backend), timeout=20, message="E0's driver to end its transaction")
    finally:
        if stopped:
            os.kill(e0.pid, signal.SIGCONT)
        stop_all(workers)
    runs, rows = _runs(sql, job), _target(sql)
    written = {r["run_id"]: 0 for r in rows}
    for r in rows:
        written[r["run_id"]] += 1
    e0_rows = written.get(first["id"], 0)
    e1_completed = [r for r in runs if r["engine"] == "E1" and r["status"] == "Completed"]
    completed = {r["id"] for r in runs if r["status"] == "Completed"}    # E0 may claim again once resumed
    report("fenced_writes", fence=fence, e0_rows=e0_rows, e1_completed=len(e1_completed), rows=len(rows),
           e0_token=first["fencing_token"], e1_tokens=[r["fencing_token"] for r in e1_completed])
    assert all(r["fencing_token"] > first["fencing_token"] for r in runs if r["engine"] == "E1")
    assert e1_completed, runs
    assert all(written.get(r) == 1 for r in completed), (runs, rows)   # every completed run wrote once
    if fence is False:
        assert e0_rows == 1, "without the fence the paused run's write is committed when it resumes"
        return
    assert e0_rows == 0, (runs, rows)                        # the paused run wrote nothing
    assert set(written) <= completed, (runs, rows)               # and only the completed runs wrote
