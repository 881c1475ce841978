"""The hot paths keep index plans as the history grows under an engine's long-lived session.

plpgsql keeps a statement's plan for the session. An engine connects while the run table
is new (a fresh install, a bench database) and never analyzed, so a statement whose plan
depended on the table being small went on scanning the whole history as it grew, until an
ANALYZE came: the completion's lookup of its runs' jobs was a sequential scan of every run
(4 ms a completion at 15,000 runs), and the claim's count of the due jobs left read the job
table from its start, past every job already served.
"""
from __future__ import annotations

import collections
import json
import re
from typing import Any

import psycopg2
import pytest

from tests.support.db import Db

pytestmark = pytest.mark.postgres

JOBS = 20000
BATCH = 50


def _cycle(cur: Any) -> int:
    """One engine poll's SQL: claim a batch, complete it. Returns how many runs it finished."""
    cur.execute("SELECT run_id, lock_token FROM mjsched.claim_due_jobs('plan-test', %s, 60, NULL) "
                "WHERE job_id IS NOT NULL", (BATCH,))
    items = [{"run_id": str(r), "token": str(t), "status": "Completed", "error_message": None,
              "details": None, "next_run_at": "2100-01-01T00:00:00Z"} for r, t in cur.fetchall()]
    cur.execute("SELECT count(*) FROM mjsched.complete_runs(%s::jsonb, NULL) WHERE completed = 1",
                (json.dumps(items),))
    return int(cur.fetchone()[0])


def _explain_every_statement(cur: Any) -> None:
    """From now on this session reports each statement's plan as run, the procedures' own included."""
    cur.execute("LOAD 'auto_explain'")
    cur.execute("SET auto_explain.log_min_duration = 0")
    cur.execute("SET auto_explain.log_nested_statements = on")
    cur.execute("SET auto_explain.log_analyze = on")
    cur.execute("SET client_min_messages = log")


def _executed_nodes(notices: list[str]) -> list[str]:
    return [line.strip() for notice in notices for line in notice.splitlines()
            if "actual time" in line and "never executed" not in line]


@pytest.mark.parametrize("run_table", ["never analyzed", "analyzed empty"])
def test_claims_and_completions_keep_index_plans_as_the_history_grows(pg_dsn: str, pg_db: Db, run_table: str) -> None:
    """'analyzed empty' is a new install after an ANALYZE, or a history purged to nothing:
    a plan made once for the session (plan_cache_mode = force_generic_plan on the claim,
    tried in d1c1287) then believed the run table empty for good, and a throughput round of
    bench.history ran at 856 executions/s instead of 5,000."""
    conn = psycopg2.connect(pg_dsn)
    conn.autocommit = True
    conn.notices = collections.deque()     # all of them (a list keeps only the last 50)
    try:
        cur = conn.cursor()
        for table in ("scheduled_job", "scheduled_job_run"):   # no ANALYZE but this test's own
            cur.execute(f"ALTER TABLE mjsched.{table} SET (autovacuum_enabled = off)")
        if run_table == "analyzed empty":
            cur.execute("ANALYZE mjsched.scheduled_job_run")
        cur.execute("INSERT INTO mjsched.scheduled_job_type (name, driver_class) VALUES ('plan', 'plan') RETURNING id")
        pg_db.insert_due_jobs(str(cur.fetchone()[0]), JOBS)
        cur.execute("ANALYZE mjsched.scheduled_job")   # every job due: the statistics a backlog starts with
        for _ in range(8):                             # past plpgsql's first custom plans: the kept plans
            assert _cycle(cur) == BATCH
        # the history grows under the same session (other jobs' old runs), statistics untouched
        cur.execute("""INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, scheduled_for, status, started_at,
                                                              completed_at, success)
                       SELECT j.id, now() - g * interval '1 minute', 'Completed', now(), now(), true
                         FROM (SELECT id FROM mjsched.scheduled_job ORDER BY id DESC LIMIT 1000) j,
                              generate_series(1, 20) g""")
        for _ in range(12):                            # and served jobs pile up ahead of the due ones
            assert _cycle(cur) == BATCH

        _explain_every_statement(cur)
        conn.notices.clear()
        assert _cycle(cur) == BATCH
        nodes = _executed_nodes(list(conn.notices))
    finally:
        conn.close()

    assert any("scheduled_job_run_pkey" in n for n in nodes), "the completion's lookup of its runs was not reported"
    history_scans = [n for n in nodes if re.search(r"Seq Scan on scheduled_job_run\b", n)]
    assert not history_scans, history_scans
    # the count of due jobs left (a full batch) reads the due index, not every served job before them
    job_scans = [n for n in nodes if re.search(r"Seq Scan on scheduled_job\b", n)]
    assert not job_scans, job_scans


def test_a_purge_pass_without_a_default_rule_reads_only_the_jobs_with_rules(pg_dsn: str, pg_db: Db) -> None:
    """Every engine calls purge_runs every purge_interval (10 s; up to 80 s while nothing is purged). Without a default rule only the
    jobs with a rule of their own can lose runs, but each call read every job row: 1.3 s of PostgreSQL
    at 1,000,000 jobs in bench.scaling, where the claims beside it ran 3-4x slower (12 ms, not 3)."""
    conn = psycopg2.connect(pg_dsn)
    conn.autocommit = True
    conn.notices = collections.deque()
    try:
        cur = conn.cursor()
        cur.execute("ALTER TABLE mjsched.scheduled_job SET (autovacuum_enabled = off)")
        cur.execute("INSERT INTO mjsched.scheduled_job_type (name, driver_class) VALUES ('plan', 'plan') RETURNING id")
        pg_db.insert_due_jobs(str(cur.fetchone()[0]), JOBS)
        cur.execute("UPDATE mjsched.scheduled_job SET keep_runs_count = 5 WHERE name IN ('j7', 'j70')")
        cur.execute("UPDATE mjsched.scheduled_job SET keep_runs_days = 30 WHERE name = 'j700'")
        cur.execute("ANALYZE mjsched.scheduled_job")
        for _ in range(8):    # past plpgsql's first custom plans
            cur.execute("SELECT purged, next_job_id, busy FROM mjsched.purge_runs(NULL, NULL, true)")
            assert cur.fetchone() == (0, None, 0)
        _explain_every_statement(cur)
        conn.notices.clear()
        cur.execute("SELECT purged, next_job_id, busy FROM mjsched.purge_runs(NULL, NULL, true)")
        assert cur.fetchone() == (0, None, 0)
        notices = list(conn.notices)
    finally:
        conn.close()

    job_scans = [n for n in _executed_nodes(notices) if re.search(r" on scheduled_job\b", n)]
    assert job_scans, "purge_runs's reads of the job table were not reported"
    assert not [n for n in job_scans if "Seq Scan" in n], job_scans
    passed_over = sum(int(n) for n in re.findall(r"Rows Removed by Filter: (\d+)", "\n".join(notices)))
    assert passed_over < 100, f"{passed_over} rows read and passed over: {job_scans}"


def test_next_due_at_reads_the_head_of_each_index_not_every_running_run(pg_dsn: str, pg_db: Db) -> None:
    """Every claim ends with next_due_at. Its min() over the Running runs' leases was planned
    over the token index (the lease index has the same predicate), reading the heap tuple of
    every Running run and of the dead versions the last completions left: 0.6-0.9 ms a call at
    250 Running runs against 70-100 us for the head of the lease index (bench: 4 engines, cap 50)."""
    conn = psycopg2.connect(pg_dsn)
    conn.autocommit = True
    conn.notices = collections.deque()
    try:
        cur = conn.cursor()
        for table in ("scheduled_job", "scheduled_job_run"):
            cur.execute(f"ALTER TABLE mjsched.{table} SET (autovacuum_enabled = off)")
        cur.execute("INSERT INTO mjsched.scheduled_job_type (name, driver_class) VALUES ('plan', 'plan') RETURNING id")
        pg_db.insert_due_jobs(str(cur.fetchone()[0]), 2000)
        cur.execute("ANALYZE mjsched.scheduled_job")
        for _ in range(6):       # 300 Running runs, left running: what 6 engines at cap 50 hold
            cur.execute("SELECT count(*) FROM mjsched.claim_due_jobs('plan-test', %s, 60, NULL) "
                        "WHERE job_id IS NOT NULL", (BATCH,))
            assert cur.fetchone()[0] == BATCH
        for _ in range(8):       # past plpgsql's first custom plans
            cur.execute("SELECT mjsched.next_due_at(now())")
        _explain_every_statement(cur)
        conn.notices.clear()
        cur.execute("SELECT mjsched.next_due_at(now())")
        assert cur.fetchone()[0] is not None      # the leases lapse in 60 s
        nodes = _executed_nodes(list(conn.notices))
    finally:
        conn.close()

    scans = [n for n in nodes if re.search(r"Scan .*on scheduled_job(_run)?\b", n)]
    assert any("scheduled_job_run" in n for n in scans), f"next_due_at's reads of the runs were not reported: {nodes}"
    wide = [n for n in scans if int(re.search(r"actual time=\S+ rows=(\d+)", n).group(1)) > 1]
    assert not wide, wide
