"""A poll reads what is due, not every job: no claim step scans the job table.

Every engine polls claim_due_jobs, idle or not, so a step that reads all jobs costs each
engine a full scan per poll: with 20,000 jobs that was 11-16 ms of server time per poll,
and it grows with the table. Counted with pg_stat_xact_user_tables, in the claim's own
transaction (PostgreSQL only: SQL Server's plans are its optimiser's).
"""
from __future__ import annotations

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
