"""Spreading herds on the real PostgreSQL (issue 37 item 3): 1,000 ``H 2 * * *`` jobs get the same
next_run_at from two engine processes (another hash seed each: not Python's hash()), spread over
the hour; a jittered job's ticks carry its offset through claims and completions; renaming moves
the time; the procedures and the table refuse a bad jitter."""
from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable
from zoneinfo import ZoneInfo

import psycopg2
import pytest

import mjsched
from mjsched.cron import next_run_times
from mjsched.errors import ConfigurationError
from tests.support import drivers  # noqa: F401 - registers the test-ok driver
from tests.support.pg import Sql, wait_for

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]
UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")
JOBS = 1000

# One engine process: schedules every Active job without a next run (as at start-up or after
# a bulk edit), by hand, and exits. argv: dsn, instance name.
SCHEDULER = """
import sys, time
import mjsched
engine = mjsched.SchedulingEngine(sys.argv[1], instance_name=sys.argv[2])
deadline = time.monotonic() + 60
try:
    while time.monotonic() < deadline:
        engine.dispatch_due_jobs()
        if not engine.backend.unscheduled_jobs(limit=1):
            break
finally:
    engine.close()
"""


def schedule_in_process(dsn: str, name: str, hash_seed: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": hash_seed}
    subprocess.run([sys.executable, "-c", SCHEDULER, dsn, name], env=env, check=True, timeout=120,
                   capture_output=True, text=True)


def next_runs(sql: Sql) -> dict[str, datetime]:
    return {r["name"]: r["next_run_at"] for r in sql.rows(
        "SELECT name, next_run_at FROM mjsched.scheduled_job WHERE name LIKE 'nightly-%%'")}


def test_two_engine_processes_give_a_thousand_h_jobs_the_same_spread_times(
        make_engine: Callable[..., Any], sql: Sql, pg_dsn: str) -> None:
    engine = make_engine()
    seed = engine.create_job("seed", "test-ok", "0 0 1 1 *")
    type_id = engine.get_job(seed).job_type_id
    # 1,000 jobs written by plain SQL, without a next run: the engines schedule them
    sql.run("""INSERT INTO mjsched.scheduled_job (job_type_id, name, cron_expression, timezone, status)
               SELECT %s, 'nightly-' || lpad(g::text, 4, '0'), 'H 2 * * *', 'Europe/Berlin', 'Active'
                 FROM generate_series(0, %s - 1) g""", (type_id, JOBS))
    schedule_in_process(pg_dsn, "engine-a", "1")
    first = next_runs(sql)
    assert len(first) == JOBS and None not in first.values()
    # a restart, on another engine: the times are computed again from nothing
    sql.run("UPDATE mjsched.scheduled_job SET next_run_at = NULL WHERE name LIKE 'nightly-%%'")
    assert set(next_runs(sql).values()) == {None}
    schedule_in_process(pg_dsn, "engine-b", "2")
    assert next_runs(sql) == first
    # what this process computes too, and 02:mm in Berlin, spread: no minute above 3.5 % (35 jobs)
    now = sql.one("SELECT now()")
    for name in ("nightly-0000", "nightly-0421", "nightly-0999"):
        assert first[name] == next_run_times("H 2 * * *", "Europe/Berlin", after=now, count=1, name=name)[0]
    local = [t.astimezone(BERLIN) for t in first.values()]
    assert {t.hour for t in local} <= {2, 3}     # 3: a spring-forward day's gap fires at 03:00
    minutes = Counter(t.minute for t in local)
    assert len(minutes) == 60 and max(minutes.values()) <= 35


def test_a_jittered_job_runs_at_its_offset_through_claims_and_completions(
        make_engine: Callable[..., Any], sql: Sql) -> None:
    """Every 2 s with a jitter of 1 s: 'jittered-b' hashes to an offset of 1 s, so every tick it
    runs is at an odd second. The completion computes the next run from the claimed row: a claim
    that left jitter_seconds out would put the second run on an even second."""
    engine = make_engine(max_poll_interval=0.2)
    job_id = engine.create_job("jittered-b", "test-ok", "*/2 * * * * *", jitter=1, high_frequency_ok=True)
    job = engine.get_job(job_id)
    assert job.jitter_seconds == 1 and job.jitter == timedelta(seconds=1)
    assert job.next_run_at is not None and job.next_run_at.second % 2 == 1
    engine.start_polling()
    try:
        wait_for(lambda: len([r for r in engine.list_runs(job_id) if r.status.value == "Completed"]) >= 3,
                 timeout=20, message="three runs of the jittered job")
    finally:
        engine.stop_polling(wait=True, max_wait=10)
    ticks = [r.scheduled_for for r in engine.list_runs(job_id) if r.scheduled_for is not None]
    assert len(ticks) >= 3 and all(t.second % 2 == 1 and t.microsecond == 0 for t in ticks)
    nxt = engine.get_job(job_id).next_run_at
    assert nxt is not None and nxt.second % 2 == 1


def test_renaming_a_hashed_job_moves_its_time_and_a_plain_one_keeps_it(make_engine: Callable[..., Any]) -> None:
    engine = make_engine()
    hashed = engine.create_job("nightly-report", "test-ok", "H 2 * * *", timezone="Europe/Berlin", jitter="1h")
    plain = engine.create_job("plain-report", "test-ok", "0 2 * * *", timezone="Europe/Berlin")
    before = engine.get_job(hashed).next_run_at
    local = before.astimezone(BERLIN)
    assert (local.minute, local.second) == ((6 + 34) % 60, 27)    # H -> :06, then the offset 34m27s
    after = engine.update_job(hashed, name="renamed-report").next_run_at
    assert after != before and after.astimezone(BERLIN).second == 56     # its own H minute, + 10m56s
    plain_before = engine.get_job(plain).next_run_at
    assert engine.update_job(plain, name="plain-renamed").next_run_at == plain_before


def test_ensure_job_declares_the_jitter(make_engine: Callable[..., Any]) -> None:
    engine = make_engine()
    job = engine.ensure_job("declared", "test-ok", "H H * * *", jitter="90s")
    assert job.jitter_seconds == 90 and job.resolved_cron != "H H * * *"
    again = engine.ensure_job("declared", "test-ok", "H H * * *", jitter="90s")
    assert again.updated_at == job.updated_at                         # unchanged: nothing written
    cleared = engine.ensure_job("declared", "test-ok", "H H * * *")   # jitter not declared: none
    assert cleared.jitter_seconds is None


def test_bad_jitter_is_refused_by_the_api_the_procedures_and_the_table(make_engine: Callable[..., Any],
                                                                       sql: Sql) -> None:
    engine = make_engine()
    with pytest.raises(ConfigurationError, match="jitter="):
        engine.create_job("too-much", "test-ok", "* * * * *", jitter="2d")
    job_id = engine.create_job("ok", "test-ok", "* * * * *", jitter=5, high_frequency_ok=True)
    with pytest.raises(psycopg2.Error, match="fields.jitter_seconds: 100000 must be between 1 and 86400"):
        sql.run("SELECT * FROM mjsched.update_job(%s, '{\"jitter_seconds\": 100000}'::jsonb)", (job_id,))
    with pytest.raises(psycopg2.Error, match="ck_scheduled_job_jitter_seconds"):
        sql.run("UPDATE mjsched.scheduled_job SET jitter_seconds = 0 WHERE id = %s", (job_id,))
    with pytest.raises(psycopg2.Error, match="ck_scheduled_job_jitter_seconds"):
        sql.run("""UPDATE mjsched.scheduled_job SET cron_expression = NULL, run_at = now() + interval '1 day'
                    WHERE id = %s""", (job_id,))
    assert engine.get_job(job_id).jitter_seconds == 5
