"""A poll reads what is due, not every job: no claim step scans the job table.

Every engine polls claim_due_jobs, idle or not, so a step that reads all jobs costs each
engine a full scan per poll: with 20,000 jobs that was 11-16 ms of server time per poll,
and it grows with the table. Counted with pg_stat_xact_user_tables, in the claim's own
transaction (PostgreSQL only: SQL Server's plans are its optimiser's).
"""
from __future__ import annotations

import json
import uuid
from typing import Any

import psycopg2
import pytest

from tests.support.pg import Sql

pytestmark = pytest.mark.postgres

JOBS = 5000


def _seed(sql: Sql) -> None:
    type_id = sql.one("SELECT job_type_id FROM mjsched.ensure_job_type('test-noop', 'thread', NULL)")
    sql.run("""INSERT INTO mjsched.scheduled_job (job_type_id, name, cron_expression, timezone, status,
                                                      concurrency_mode, next_run_at)
                   SELECT %s, 'idle-' || g, '0 0 1 1 *', 'UTC', 'Active',
                          (ARRAY['Skip', 'Queue', 'Concurrent'])[1 + g %% 3], now() + interval '1 day'
                     FROM generate_series(1, %s) AS g""", (type_id, JOBS))
    sql.run("ANALYZE mjsched.scheduled_job")
    sql.run("ANALYZE mjsched.scheduled_job_run")


def _claim_reads(dsn: str) -> tuple[list[Any], dict[str, int]]:
    """Rows claim_due_jobs returned, and the rows its transaction read by sequential scans per table."""
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT * FROM mjsched.claim_due_jobs('probe', 50, 60, NULL, %s::uuid, false)",
                        (str(uuid.uuid4()),))
            claimed = [row for row in cur.fetchall() if row[0] is not None]   # the last row: next due, no job
            cur.execute("SELECT relname, seq_tup_read FROM pg_stat_xact_user_tables WHERE schemaname = 'mjsched'")
            reads = {name: int(n or 0) for name, n in cur.fetchall()}
        conn.rollback()
        return claimed, reads
    finally:
        conn.close()


def test_an_idle_poll_scans_no_table_of_jobs(pg_dsn: str, sql: Sql) -> None:
    _seed(sql)
    claimed, reads = _claim_reads(pg_dsn)
    assert claimed == []
    assert reads.get("scheduled_job", 0) < JOBS / 10, reads


def test_a_poll_with_a_queued_run_reads_that_job_not_every_job(pg_dsn: str, sql: Sql) -> None:
    _seed(sql)
    job_id = sql.one("SELECT id FROM mjsched.scheduled_job WHERE concurrency_mode = 'Queue' LIMIT 1")
    sql.run("""INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, scheduled_for, status, queued_at)
                   VALUES (%s, now() - interval '1 minute', 'Queued', now())""", (job_id,))
    claimed, reads = _claim_reads(pg_dsn)
    assert [str(row[0]) for row in claimed] == [str(job_id)]
    assert reads.get("scheduled_job", 0) < JOBS / 10, reads


def _trigger_calls(cur: Any) -> int:
    cur.execute("SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions "
                "WHERE schemaname = 'mjsched' AND funcname = 'tg_scheduled_job_changed'")
    return int(cur.fetchone()[0])


def test_a_claim_and_its_completion_call_no_row_trigger_and_still_stamp_updated_at(pg_dsn: str, sql: Sql) -> None:
    """The job row trigger (plpgsql) ran for every row of every claim and completion, two calls
    a run, to set updated_at and find that nothing else concerned it: 36-49 us of the server
    per execution in the throughput bench. The engines' statements set updated_at themselves."""
    type_id = sql.one("SELECT job_type_id FROM mjsched.ensure_job_type('test-noop', 'thread', NULL)")
    sql.run("""INSERT INTO mjsched.scheduled_job (job_type_id, name, cron_expression, timezone, status, next_run_at)
                   SELECT %s, 'due-' || g, '0 0 1 1 *', 'UTC', 'Active', now() - interval '1 minute'
                     FROM generate_series(1, 20) AS g""", (type_id,))
    sql.run("UPDATE mjsched.scheduled_job SET updated_at = now() - interval '1 day'")
    conn = psycopg2.connect(pg_dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SET track_functions = 'pl'")
            before = _trigger_calls(cur)   # the backend's counts not yet flushed: earlier transactions' too
            cur.execute("SELECT run_id, lock_token FROM mjsched.claim_due_jobs('probe', 50, 60, NULL, %s::uuid, false) "
                        "WHERE job_id IS NOT NULL", (str(uuid.uuid4()),))
            claimed = cur.fetchall()
            assert len(claimed) == 20
            assert _trigger_calls(cur) == before
            cur.execute("SELECT count(*) FROM mjsched.scheduled_job WHERE updated_at = now()")
            assert cur.fetchone()[0] == 20
        conn.commit()
        with conn.cursor() as cur:
            before = _trigger_calls(cur)
            cur.execute("UPDATE mjsched.scheduled_job SET description = 'edited'")
            assert _trigger_calls(cur) == before + 20         # plain SQL: the trigger stamps it, as before
            cur.execute("SELECT count(*) FROM mjsched.scheduled_job WHERE updated_at = now()")
            assert cur.fetchone()[0] == 20
        conn.commit()
        with conn.cursor() as cur:
            before = _trigger_calls(cur)
            items = [{"run_id": str(r), "token": str(t), "status": "Completed", "error_message": None,
                      "details": None, "next_run_at": "2100-01-01T00:00:00Z"} for r, t in claimed]
            cur.execute("SELECT count(*) FROM mjsched.complete_runs(%s::jsonb, NULL) WHERE completed = 1",
                        (json.dumps(items),))
            assert cur.fetchone()[0] == 20
            assert _trigger_calls(cur) == before
            cur.execute("SELECT count(*) FROM mjsched.scheduled_job WHERE updated_at = now() AND lock_token IS NULL "
                        "AND next_run_at = '2100-01-01T00:00:00Z'")
            assert cur.fetchone()[0] == 20
        conn.commit()
    finally:
        conn.close()
