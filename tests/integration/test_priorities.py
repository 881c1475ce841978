"""Priorities on the real PostgreSQL (issue 37 item 4): with one free slot the engine starts the
due jobs by priority, ties by due time; the aging rule (claim_at = next_run_at - priority
minutes) lets a low-priority tick due long enough run before a newer high-priority one, and not
a minute sooner than the rule says; the claim's scan under a backlog is the (status, claim_at)
index; every writer refuses a priority out of -100..100 naming the field and the value, before
anything is written."""
from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable

import psycopg2
import pytest

from mjsched.errors import ConfigurationError
from tests.support import drivers  # noqa: F401 - registers the test-ok driver
from tests.support.pg import Sql

pytestmark = pytest.mark.postgres

NEVER = "0 0 1 1 *"    # a cron whose next tick is months away: each job runs once in a test


def due_jobs(engine: Any, sql: Sql, jobs: dict[str, tuple[int, timedelta]]) -> None:
    """Create each job (name -> (priority, how long ago it fell due)) and make it due."""
    now = sql.one("SELECT now()")
    for name, (priority, ago) in jobs.items():
        job_id = engine.create_job(name, "test-ok", NEVER, priority=priority)
        sql.run("UPDATE mjsched.scheduled_job SET next_run_at = %s WHERE id = %s", (now - ago, job_id))


def start_order(sql: Sql) -> list[str]:
    return [r["name"] for r in sql.rows(
        """SELECT j.name FROM mjsched.scheduled_job_run r JOIN mjsched.scheduled_job j ON j.id = r.scheduled_job_id
            ORDER BY r.started_at, r.id""")]


def test_with_one_slot_the_starts_go_by_priority_then_by_due_time(make_engine: Callable[..., Any],
                                                                   sql: Sql) -> None:
    engine = make_engine(max_concurrent_jobs=1)
    # all due within the last minute: one level of priority (a minute) outweighs the gaps
    due_jobs(engine, sql, {
        "p0-older": (0, timedelta(seconds=50)), "p0-newer": (0, timedelta(seconds=40)),
        "p10-newer": (10, timedelta(seconds=10)), "p10-older": (10, timedelta(seconds=20)),
        "p-5": (-5, timedelta(seconds=55)), "p3": (3, timedelta(seconds=5)),
    })
    runs = engine.run_due_jobs(timeout=60)
    assert len(runs) == 6
    assert start_order(sql) == ["p10-older", "p10-newer", "p3", "p0-older", "p0-newer", "p-5"]


@pytest.mark.parametrize("low_due_minutes, first", [(201, "low"), (199, "high")])
def test_a_low_priority_tick_due_long_enough_runs_before_a_newer_high_priority_one(
        make_engine: Callable[..., Any], sql: Sql, low_due_minutes: int, first: str) -> None:
    """Aging: priority -100 against 100 is 200 minutes; a tick due longer than that before the
    other fell due goes first, whatever the priorities (not starved), and not before."""
    engine = make_engine(max_concurrent_jobs=1)
    due_jobs(engine, sql, {"low": (-100, timedelta(minutes=low_due_minutes)), "high": (100, timedelta(0))})
    assert len(engine.run_due_jobs(timeout=60)) == 2
    assert start_order(sql)[0] == first


def test_a_steady_stream_of_high_priority_ticks_never_starves_a_low_one(make_engine: Callable[..., Any],
                                                                        sql: Sql) -> None:
    """One slot; a priority -100 tick due at T0; every hour (the claim's clock moved on: p_now) a
    new priority 100 tick falls due. The new high ticks go first while they fell due less than
    200 minutes after T0 (hours 0 to 3), then the low tick runs (hour 4): never starved."""
    engine = make_engine(max_concurrent_jobs=1)
    t0 = sql.one("SELECT now()") - timedelta(minutes=10)
    low = engine.create_job("low", "test-ok", NEVER, priority=-100)
    sql.run("UPDATE mjsched.scheduled_job SET next_run_at = %s WHERE id = %s", (t0, low))
    served = []
    for hour in range(8):
        now = t0 + timedelta(hours=hour)
        high = engine.create_job(f"high-{hour}", "test-ok", NEVER, priority=100)
        sql.run("UPDATE mjsched.scheduled_job SET next_run_at = %s WHERE id = %s", (now, high))
        rows = sql.rows("SELECT * FROM mjsched.claim_due_jobs('prio-test', 1, 60, %s) WHERE job_id IS NOT NULL",
                        (now,))
        assert len(rows) == 1
        served.append(rows[0]["name"])
        if rows[0]["name"] == "low":
            break
        # the high tick's run ends; its job is not due again in this test
        sql.run("UPDATE mjsched.scheduled_job_run SET status = 'Completed', completed_at = %s, success = true, "
                "duration_ms = 0 WHERE scheduled_job_id = %s AND status = 'Running'", (now, rows[0]["job_id"]))
        sql.run("UPDATE mjsched.scheduled_job SET next_run_at = %s, lock_token = NULL, locked_at = NULL, "
                "locked_by_instance = NULL, expected_completion_at = NULL WHERE id = %s",
                (t0 + timedelta(days=300), rows[0]["job_id"]))
    assert served == ["high-0", "high-1", "high-2", "high-3", "low"]


def test_the_claim_under_a_backlog_reads_the_claim_index(make_engine: Callable[..., Any], sql: Sql) -> None:
    """20,000 jobs due at once: the batch is the head of (status, claim_at), not a sort of every
    due job."""
    engine = make_engine()
    type_id = engine.get_job(engine.create_job("seed", "test-ok", NEVER)).job_type_id
    sql.run("""INSERT INTO mjsched.scheduled_job (job_type_id, name, cron_expression, timezone, status,
                                                  next_run_at, priority)
               SELECT %s, 'bulk-' || g, %s, 'UTC', 'Active', now() - g * interval '1 second', g %% 7 - 3
                 FROM generate_series(1, 20000) g""", (type_id, NEVER))
    sql.run("ANALYZE mjsched.scheduled_job")
    plan = "\n".join(r["QUERY PLAN"] for r in sql.rows(
        """EXPLAIN SELECT j.id FROM mjsched.scheduled_job j
            WHERE j.status = 'Active' AND mjsched.claim_at(j.next_run_at, j.priority) <= now() + interval '100 minutes'
              AND j.next_run_at <= now()
            ORDER BY mjsched.claim_at(j.next_run_at, j.priority) LIMIT 5 FOR NO KEY UPDATE OF j SKIP LOCKED"""))
    assert "ix_scheduled_job_claim" in plan and "Sort" not in plan, plan


@pytest.mark.parametrize("value", [101, -101, 1.5, "high", True])
def test_a_bad_priority_is_refused_naming_it_before_anything_is_written(
        make_engine: Callable[..., Any], sql: Sql, value: Any) -> None:
    engine = make_engine()
    with pytest.raises(ConfigurationError) as error:
        engine.create_job("bad-priority", "test-ok", NEVER, priority=value)
    assert error.value.field == "priority" and error.value.value == value
    assert sql.one("SELECT count(*) FROM mjsched.scheduled_job WHERE name = 'bad-priority'") == 0
    job = engine.create_job("good", "test-ok", NEVER, priority=5)
    with pytest.raises(ConfigurationError) as error:
        engine.update_job(job, priority=value)
    assert error.value.field == "priority"
    assert engine.get_job(job).priority == 5


def test_priority_through_every_writer(make_engine: Callable[..., Any], sql: Sql) -> None:
    engine = make_engine()
    job = engine.create_job("p", "test-ok", NEVER)
    assert engine.get_job(job).priority == 0
    assert engine.update_job(job, priority=-100).priority == -100
    assert engine.ensure_job("p", "test-ok", NEVER, priority=42).priority == 42
    assert engine.ensure_job("p", "test-ok", NEVER).priority == 0          # not declared: the default
    engine.sync_jobs([{"name": "p", "driver": "test-ok", "cron": NEVER, "priority": 9}])
    assert engine.get_job("p").priority == 9
    changes = [c for c in engine.job_history("p") if c.field == "priority"]
    assert changes and changes[0].new_value == "9"


@pytest.mark.parametrize("value", [101, -101])
def test_the_procedures_refuse_a_bad_priority_naming_it(sql: Sql, make_engine: Callable[..., Any],
                                                        value: int) -> None:
    engine = make_engine()
    type_id = engine.get_job(engine.create_job("seed", "test-ok", NEVER)).job_type_id
    with pytest.raises(psycopg2.Error) as error:
        sql.one("SELECT * FROM mjsched.insert_job(%s::jsonb)",
                (f'{{"job_type_id": "{type_id}", "name": "x", "cron_expression": "{NEVER}", "priority": {value}}}',))
    assert "fields.priority" in str(error.value) and str(value) in str(error.value)
    with pytest.raises(psycopg2.Error) as error:
        sql.run("UPDATE mjsched.scheduled_job SET priority = %s", (value,))
    assert "ck_scheduled_job_priority" in str(error.value)
