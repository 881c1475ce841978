"""Chaos (4) and (5): the invariants of (1) under injected database faults.

(4) Engine connections are killed at random with ``pg_terminate_backend`` for 20 s.
(5) Every statement an engine sends fails just before it reaches the server, or just
    after it committed (reply lost), with probability 0.1 each, and one connection in
    ten fails to open (a FlakyJdbcSchedulerTest for psycopg2: tests/chaos/faults.py).
In both, no (job, tick) runs twice, the unsynchronised counters equal the Completed
runs, no completion is lost (every executed run is Completed) or doubled (no run is
executed twice, no Completed run lacks an execution), and no run stays Running
once the leases of runs whose claim reply was lost have expired.
"""
from __future__ import annotations

import random
import threading
import time
from typing import Any

import pytest

from tests.chaos.harness import (check_invariants, create_counter_jobs, fault_totals, report, start_workers,
                                 stop_all)
from tests.support.pg import Sql, wait_for

pytestmark = [pytest.mark.chaos, pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(180)]

ENGINES = 4
JOBS = 100
SECONDS = 20
LEASE = 6.0


def _finish(sql: Sql, workdir: str, jobs: dict[str, str], workers: list[Any]) -> tuple[Any, list[dict[str, Any]]]:
    stats = stop_all(workers)
    holds = [h for s in stats for h in s.get("holds", [])]
    # Claims whose reply was lost left Running runs nobody executes; their lease lapses.
    wait_for(lambda: sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE status = 'Running' "
                             "AND lease_expires_at >= now()") == 0, timeout=LEASE + 5,
             message="orphaned leases to lapse")
    swept = sql.one("SELECT swept FROM mjsched.sweep_expired_leases()")
    figures = check_invariants(sql, workdir, jobs, holds=holds, hold_seconds=LEASE + 1.0 + 1.0)
    return figures, [*stats, {"swept_after_stop": swept}]


def test_connections_killed_at_random(pg_dsn: str, crud: Any, sql: Any, workdir: str) -> None:
    workers = start_workers(pg_dsn, workdir, ENGINES, cap=10, lease=LEASE, heartbeat=1)
    killer = Sql(pg_dsn)
    kills = 0
    stop = threading.Event()

    def kill_loop() -> None:
        nonlocal kills
        rnd = random.Random(4)
        while not stop.wait(rnd.uniform(0.05, 0.25)):
            pids = killer.rows("""SELECT pid FROM pg_stat_activity
                                   WHERE datname = current_database() AND application_name = 'mjsched'
                                     AND pid <> pg_backend_pid()""")
            if pids:
                pid = rnd.choice(pids)["pid"]
                if killer.one("SELECT pg_terminate_backend(%s)", (pid,)):
                    kills += 1

    try:
        jobs = create_counter_jobs(crud, workdir, JOBS)
        thread = threading.Thread(target=kill_loop, daemon=True)
        thread.start()
        started = time.monotonic()
        while time.monotonic() - started < SECONDS:
            assert all(w.alive() for w in workers), [w.tail() for w in workers if not w.alive()]
            time.sleep(0.5)
        stop.set()
        thread.join(5)
    finally:
        stop.set()
        figures, stats = _finish(sql, workdir, jobs, workers)
        killer.close()
    report("connection_kills", seconds=SECONDS, connections_terminated=kills,
           poll_failures=sum(s.get("poller_failures", 0) for s in stats),
           renew_failures=sum(s.get("keeper_failures", 0) for s in stats), figures=figures.line())
    assert kills >= SECONDS * 2, f"only {kills} connections were terminated"
    assert figures.by_status.get("Completed", 0) >= JOBS * SECONDS * 0.5, figures.line()


def test_faults_at_the_commit_boundary(pg_dsn: str, crud: Any, sql: Any, workdir: str) -> None:
    workers = [w for i in range(ENGINES) for w in start_workers(
        pg_dsn, workdir, 1, prefix=f"flaky{i}", cap=10, lease=LEASE, heartbeat=1,
        fault_before=0.1, fault_after=0.1, fault_connect=0.1, seed=1000 + i)]
    try:
        jobs = create_counter_jobs(crud, workdir, JOBS)
        started = time.monotonic()
        while time.monotonic() - started < SECONDS:
            assert all(w.alive() for w in workers), [w.tail() for w in workers if not w.alive()]
            time.sleep(0.5)
    finally:
        figures, stats = _finish(sql, workdir, jobs, workers)
    faults = fault_totals(stats)
    by_statement: dict[str, int] = {}
    for s in stats:
        for key, value in (s.get("faults") or {}).items():
            if key.startswith("after:"):
                by_statement[key[6:]] = by_statement.get(key[6:], 0) + value
    report("commit_boundary", seconds=SECONDS, faults=faults, reply_lost_by_statement=by_statement,
           lock_holds_recorded=sum(len(s.get("holds", [])) for s in stats[:-1]),
           fenced=sum(s.get("engine", {}).get("fenced_completions", 0) for s in stats[:-1]),
           figures=figures.line())
    assert faults.get("before", 0) > 100 and faults.get("after", 0) > 100, faults
    assert by_statement.get("complete_runs", 0) > 0 and by_statement.get("claim_due_jobs", 0) > 0, by_statement
    assert figures.by_status.get("Completed", 0) >= JOBS * SECONDS * 0.4, figures.line()
