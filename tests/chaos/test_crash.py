"""Chaos (2) and (3): an engine killed with SIGKILL mid-run; the database restarted.

(2) kill -9 of the engine running a long, process-isolated job: its child process
    goes too (no orphan), within lease + one poll the run is Abandoned and the job
    runs again on the surviving engine; the other jobs keep their invariants.
(3) A private cluster restarted with ``pg_ctl restart -m fast`` while three engines
    poll: the engines stay up and resume, completions attempted during the outage
    are retried and land, and no run is left Running once leases expire.
"""
from __future__ import annotations

import os
import time
from typing import Any

import pytest

import mjsched
from tests.chaos.harness import (check_invariants, create_counter_jobs, executions, report, start_workers,
                                 stop_all)
from tests.support.pg import Sql, wait_for
from tests.support.procs import process_alive

pytestmark = [pytest.mark.chaos, pytest.mark.postgres, pytest.mark.slow]

LEASE = 3.0
POLL = 0.5
SLACK = 1.5   # a loaded two-core machine: process start, scheduling, one extra poll
TICK = 1.0    # the jobs fire every second


def _events(workdir: str, key: str) -> list[tuple[str, str, float, int, str]]:
    try:
        with open(os.path.join(workdir, f"{key}.events")) as fh:
            return [(w[0], w[1], float(w[2]), int(w[3]), w[4]) for w in (line.split() for line in fh)]
    except FileNotFoundError:
        return []


@pytest.mark.timeout(120)
def test_kill_minus_nine_mid_job(pg_dsn: str, crud: Any, sql: Sql, workdir: str) -> None:
    options = dict(cap=6, lease=LEASE, heartbeat=0.5, max_poll=POLL, drain=2)
    victim = start_workers(pg_dsn, workdir, 1, prefix="victim", **options)[0]
    workers = [victim]
    try:
        healthy = create_counter_jobs(crud, workdir, 10)
        long_id = crud.create_job(name="long", driver="python", cron="* * * * * *", isolation="process",
                                  configuration={"callable": "tests.chaos.jobs:long_job",
                                                 "kwargs": {"dir": workdir, "key": "long", "seconds": 60}})
        started = wait_for(lambda: [e for e in _events(workdir, "long") if e[0] == "start"], timeout=15,
                           message="the long job to start on the victim")[0]
        _, long_run, _, child_pid, instance = started
        assert instance == "victim-0" and child_pid != victim.pid
        survivor = start_workers(pg_dsn, workdir, 1, prefix="survivor", **options)[0]
        workers.append(survivor)
        time.sleep(2)
        killed_at = victim.kill9()

        wait_for(lambda: not process_alive(child_pid), timeout=5,
                 message=f"isolated child {child_pid} to die with its engine")
        child_gone_s = time.time() - killed_at
        wait_for(lambda: sql.one("SELECT status FROM mjsched.scheduled_job_run WHERE id = %s", (long_run,))
                 == "Abandoned", timeout=LEASE + POLL + SLACK + 5, interval=0.05, message="the long run Abandoned")
        abandoned_s = time.time() - killed_at
        rerun = wait_for(lambda: [e for e in _events(workdir, "long") if e[0] == "start" and e[4] == "survivor-0"],
                         timeout=LEASE + POLL + TICK + SLACK + 5, interval=0.05,
                         message="the long job to run again")[0]
        rerun_s = rerun[2] - killed_at
        time.sleep(2)
    finally:
        stats = stop_all([w for w in workers if w.alive()])
    wait_for(lambda: sql.one("SELECT swept FROM mjsched.sweep_expired_leases()") is not None and
             sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE status = 'Running'") == 0,
             timeout=LEASE + 5, interval=0.2, message="no run left Running")
    figures = check_invariants(sql, workdir, healthy, killed_instances=frozenset({"victim-0"}))
    victim_abandoned = sql.one("""SELECT count(*) FROM mjsched.scheduled_job_run
                                   WHERE executed_by_instance = 'victim-0' AND status = 'Abandoned'""")
    report("kill9", lease_s=LEASE, poll_s=POLL, child_gone_s=round(child_gone_s, 2),
           abandoned_after_s=round(abandoned_s, 2), rerun_after_s=round(rerun_s, 2),
           victim_runs_abandoned=victim_abandoned, survivor_dispatched=stats[0]["engine"]["dispatched"],
           figures=figures.line())
    assert abandoned_s <= LEASE + POLL + SLACK, abandoned_s
    assert rerun_s <= LEASE + POLL + TICK + SLACK, rerun_s   # the abandoned tick is not re-run: the next one is
    runs = sql.rows("SELECT executed_by_instance, status FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s "
                    "ORDER BY started_at", (long_id,))
    assert runs[0] == {"executed_by_instance": "victim-0", "status": "Abandoned"}, runs
    assert {r["executed_by_instance"] for r in runs[1:]} == {"survivor-0"}, runs


@pytest.mark.timeout(150)
def test_database_restart_while_engines_poll(private_cluster: Any, private_dsn: str, workdir: str) -> None:
    crud = mjsched.SchedulingEngine(private_dsn, pool_size=2)

    # 40 jobs, 3 x 12 slots: no two engines can take every job, so all three must work.
    workers = start_workers(private_dsn, workdir, 3, cap=12, lease=10, heartbeat=1, max_poll=1)
    outages: list[tuple[float, float]] = []
    try:
        jobs = create_counter_jobs(crud, workdir, 20)
        # Slow jobs whose ends are spread over every instant, so some end during an outage.
        for i in range(20):
            key = f"slow{i:02d}"
            jobs[key] = crud.create_job(name=key, driver="python", cron="* * * * * *",
                                        configuration={"callable": "tests.chaos.jobs:bump",
                                                       "kwargs": {"dir": workdir, "key": key, "hold": 1 + i / 10}})
        crud.close()
        time.sleep(5)
        for _attempt in range(3):
            began = time.time()
            private_cluster.restart("fast")
            outages.append((began, time.time()))
            time.sleep(4)
            if _ended_during(workdir, jobs, outages):
                break
        time.sleep(4)
        assert all(w.alive() for w in workers), [w.tail() for w in workers if not w.alive()]
        probe = Sql(private_dsn)   # opened after the restarts, which close every connection
        seen = {r["instance"]: r["last_seen_at"].timestamp() for r in probe.rows(
            "SELECT instance, last_seen_at FROM mjsched.engine_instance WHERE stopped_at IS NULL")}
        probe.close()
    finally:
        stats = stop_all(workers)
    sql = Sql(private_dsn)
    up = outages[-1][1]
    resumed = {}
    for w in workers:   # each engine talked to the database again (heartbeats) and ran jobs again
        first = sql.one("""SELECT min(started_at) FROM mjsched.scheduled_job_run
                            WHERE executed_by_instance = %s AND started_at > to_timestamp(%s)""", (w.instance, up))
        assert first is not None, f"{w.instance} never ran a job after the restart: {w.tail()}"
        assert seen.get(w.instance, 0) > up, f"{w.instance} has not renewed its leases since the restart"
        resumed[w.instance] = round(first.timestamp() - up, 2)
    wait_for(lambda: sql.one("SELECT swept FROM mjsched.sweep_expired_leases()") is not None and
             sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE status = 'Running'") == 0,
             timeout=15, interval=0.2, message="no run left Running once leases expire")
    figures = check_invariants(sql, workdir, jobs)
    during = _ended_during(workdir, jobs, outages)
    retries = sum(_count_lines(workdir, w.instance, ("completion_retry", "in complete_runs")) for w in workers)
    sql.close()
    report("db_restart", restarts=len(outages), outage_s=[round(b - a, 2) for a, b in outages],
           resumed_after_s=resumed, completions_during_outage=during, completion_retries_logged=retries,
           poll_failures=sum(s["poller_failures"] for s in stats), figures=figures.line())
    assert during >= 1, "no job ended during an outage in three restarts"
    assert max(resumed.values()) <= 5.0, resumed


def _ended_during(workdir: str, jobs: dict[str, str], outages: list[tuple[float, float]]) -> int:
    return sum(1 for key in jobs for e in executions(workdir, key) for a, b in outages if a <= e.end <= b)


def _count_lines(workdir: str, instance: str, needles: tuple[str, ...]) -> int:
    try:
        with open(os.path.join(workdir, f"{instance}.log"), errors="replace") as fh:
            return sum(1 for line in fh if any(n in line for n in needles))
    except OSError:
        return 0

