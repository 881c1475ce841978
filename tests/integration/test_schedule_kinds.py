"""Interval (every=) and one-off (run_at=) schedules on the real engine and the real PostgreSQL:
an interval's grid, a one-off that runs once and ends Expired, the missed-run policies of each
kind, DST, the high-frequency warning, edits between kinds, and bad input refused before
anything is written (by the API and by the procedures).

Downtime is simulated as in test_time_semantics.py: next_run_at is moved into the past with SQL
and the engine polls by hand (dispatch_due_jobs); waits are on the database, bounded.
"""
from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import psycopg2
import pytest

import mjsched
from mjsched import scheduling
from mjsched.errors import ConfigurationError
from tests.integration.test_time_semantics import Probe, create, db_now, job_row, runs, settle  # noqa: F401
from tests.support.pg import Sql, wait_for

pytestmark = pytest.mark.postgres

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")


def new(engine: mjsched.SchedulingEngine, name: str, **fields: Any) -> str:
    fields.setdefault("driver", "time-semantics-probe")
    return engine.create_job(name=name, **fields)


def job_count(sql: Sql) -> int:
    return int(sql.one("SELECT count(*) FROM mjsched.scheduled_job"))


# --------------------------------------------------------------------------
# every=: the grid
# --------------------------------------------------------------------------

def test_an_every_1s_job_runs_on_its_grid_with_an_engine(make_engine: Any, sql: Sql) -> None:
    engine = make_engine(max_poll_interval=0.5)
    job_id = new(engine, "every-second", every="1s", high_frequency_ok=True)
    job = engine.get_job(job_id)
    assert (job.cron_expression, job.interval_seconds, job.every) == (None, 1, timedelta(seconds=1))
    # anchored at created_at: the first tick is one interval after it
    assert job.next_run_at == job.created_at + timedelta(seconds=1)
    engine.start_polling()
    try:
        wait_for(lambda: len([r for r in runs(sql, job_id) if r["status"] == "Completed"]) >= 4, timeout=15,
                 message="four runs of the every=1s job")
    finally:
        engine.stop_polling(wait=True, max_wait=10)
    served = [r["scheduled_for"] for r in runs(sql, job_id) if r["scheduled_for"] is not None]
    assert len(served) >= 4
    for tick in served:   # every tick is created_at + k seconds, exactly
        assert (tick - job.created_at) % timedelta(seconds=1) == timedelta(0), tick
    gaps = [b - a for a, b in zip(served, served[1:])]
    assert all(g >= timedelta(seconds=1) and g % timedelta(seconds=1) == timedelta(0) for g in gaps), gaps
    assert gaps.count(timedelta(seconds=1)) >= len(gaps) - 1   # at most one tick dropped (Skip mode, a slow poll)


def test_every_with_start_at_is_anchored_at_start_at(make_engine: Any, sql: Sql) -> None:
    engine = make_engine()
    start = db_now(sql).replace(microsecond=0) + timedelta(hours=2, seconds=7)
    job_id = new(engine, "anchored", every=timedelta(minutes=15), start_at=start)
    assert engine.get_job(job_id).next_run_at == start        # the tick at start_at fires
    # a start_at in the past: the first tick after now on the start_at + k * 15 min grid
    past = db_now(sql).replace(microsecond=0) - timedelta(hours=5, seconds=13)
    other = new(engine, "anchored-past", every="15m", start_at=past)
    nxt = engine.get_job(other).next_run_at
    assert (nxt - past) % timedelta(minutes=15) == timedelta(0) and nxt > db_now(sql) - timedelta(seconds=5)
    assert nxt - timedelta(minutes=15) <= db_now(sql)


# --------------------------------------------------------------------------
# run_at=: one run, then Expired
# --------------------------------------------------------------------------

def test_run_at_runs_once_and_the_job_ends_expired(make_engine: Any, sql: Sql) -> None:
    engine = make_engine(max_poll_interval=0.5)
    when = db_now(sql) + timedelta(seconds=2)
    job_id = new(engine, "one-off", run_at=when.astimezone(BERLIN), timezone="Europe/Berlin")
    job = engine.get_job(job_id)
    assert (job.cron_expression, job.run_at, job.next_run_at, job.status.value) == (None, when, when, "Active")
    engine.start_polling()
    try:
        wait_for(lambda: job_row(sql, job_id)["status"] == "Expired", timeout=15, message="the one-off to end")
        settle(sql, job_id)
    finally:
        engine.stop_polling(wait=True, max_wait=10)
    assert [(r["status"], r["scheduled_for"]) for r in runs(sql, job_id)] == [("Completed", when)]
    row = job_row(sql, job_id)
    assert (row["status"], row["next_run_at"], row["run_count"]) == ("Expired", None, 1)
    # a poll of an engine that never polled (the stopped one refuses with EngineStopped) runs nothing
    assert make_engine().dispatch_due_jobs().dispatched == 0 and len(runs(sql, job_id)) == 1
    # resumed, it does not run again: its tick already has a run, so it ends again
    other = make_engine()
    other.resume_job(job_id)
    assert job_row(sql, job_id)["status"] == "Active"
    other.dispatch_due_jobs()
    wait_for(lambda: job_row(sql, job_id)["status"] == "Expired", timeout=10, message="the one-off to end again")
    assert len(runs(sql, job_id)) == 1


# --------------------------------------------------------------------------
# Missed-run policies, each kind
# --------------------------------------------------------------------------

@pytest.mark.parametrize("policy, expected", [
    ("Skip", [("Skipped", 0)]),
    ("RunOnce", [("Completed", 0)]),
    ("RunAll", [("Completed", 0), ("Completed", 1), ("Completed", 2)]),
])
def test_missed_run_policies_of_an_interval(make_engine: Any, sql: Sql, policy: str,
                                            expected: list[tuple[str, int]]) -> None:
    engine = make_engine()
    job_id = new(engine, f"every-missed-{policy}", every="1h", missed_run_policy=policy,
                 start_at=db_now(sql).replace(microsecond=0) - timedelta(days=1, seconds=17))
    future = engine.get_job(job_id).next_run_at
    oldest = future - timedelta(hours=3)      # three ticks passed while no engine ran
    sql.run("UPDATE mjsched.scheduled_job SET next_run_at = %s WHERE id = %s", (oldest, job_id))
    for _ in expected:
        engine.dispatch_due_jobs()
        settle(sql, job_id)
    served = [(r["status"], r["scheduled_for"]) for r in runs(sql, job_id)]
    assert served == [(status, oldest + timedelta(hours=k)) for status, k in expected]
    if policy == "Skip":
        assert runs(sql, job_id)[0]["details"] == {"missed": 2}
    assert job_row(sql, job_id)["next_run_at"] == future
    assert engine.dispatch_due_jobs().dispatched == 0


@pytest.mark.parametrize("policy, late, status", [
    ("Skip", timedelta(minutes=10), "Skipped"),
    ("Skip", timedelta(seconds=5), "Completed"),        # under the 60 s grace: not missed
    ("RunOnce", timedelta(minutes=10), "Completed"),
    ("RunAll", timedelta(days=3), "Completed"),
])
def test_missed_run_policies_of_a_one_off(make_engine: Any, sql: Sql, policy: str, late: timedelta,
                                          status: str) -> None:
    engine = make_engine()
    when = db_now(sql) - late          # the engine was down at run_at
    job_id = new(engine, f"one-off-missed-{policy}-{late.total_seconds():g}", run_at=when,
                 missed_run_policy=policy)
    assert engine.get_job(job_id).next_run_at == when    # past run_at: due at once, the policy decides
    engine.dispatch_due_jobs()
    settle(sql, job_id)
    assert [(r["status"], r["scheduled_for"]) for r in runs(sql, job_id)] == [(status, when)]
    row = job_row(sql, job_id)
    assert (row["status"], row["next_run_at"]) == ("Expired", None)
    # a poll of an engine that never polled (the stopped one refuses with EngineStopped) runs nothing
    assert make_engine().dispatch_due_jobs().dispatched == 0 and len(runs(sql, job_id)) == 1


def test_missed_run_policies_of_a_cron_are_unchanged(make_engine: Any, sql: Sql) -> None:
    engine = make_engine()
    job_id = create(engine, "cron-missed-skip", cron="0 * * * *", missed_run_policy="Skip")
    future = engine.get_job(job_id).next_run_at
    sql.run("UPDATE mjsched.scheduled_job SET next_run_at = %s WHERE id = %s", (future - timedelta(hours=3), job_id))
    engine.dispatch_due_jobs()
    settle(sql, job_id)
    assert [(r["status"], r["details"]) for r in runs(sql, job_id)] == [("Skipped", {"missed": 2})]
    assert job_row(sql, job_id)["next_run_at"] == future


# --------------------------------------------------------------------------
# DST: an interval is absolute time
# --------------------------------------------------------------------------

def test_every_1h_keeps_3600_s_across_the_2027_dst_change_in_berlin(make_engine: Any, sql: Sql) -> None:
    engine = make_engine()
    start = datetime(2027, 3, 27, 22, 0, tzinfo=BERLIN)     # the clocks go 02:00 -> 03:00 on 28 March
    job_id = new(engine, "hourly-berlin", every="1h", timezone="Europe/Berlin", start_at=start)
    job = engine.get_job(job_id)
    ticks = [job.next_run_at]
    while len(ticks) < 8:   # what the engine writes after each run, from the stored row
        ticks.append(scheduling.next_run_after(job, ticks[-1], ticks[-1], catch_up=False))
    assert ticks[0] == start
    assert {b - a for a, b in zip(ticks, ticks[1:])} == {timedelta(seconds=3600)}
    walls = [t.astimezone(BERLIN).strftime("%H:%M") for t in ticks]
    assert walls == ["22:00", "23:00", "00:00", "01:00", "03:00", "04:00", "05:00", "06:00"]
    preview = mjsched.next_run_times(every="1h", timezone="Europe/Berlin", start_at=start,
                                     after=start - timedelta(seconds=1), count=8)
    assert preview == ticks and [t.tzinfo for t in preview] == [BERLIN] * 8
    # and autumn: 03:00 CEST -> 02:00 CET on 31 October 2027, the hour 02:00 is seen twice
    autumn = mjsched.next_run_times(every="1h", timezone="Europe/Berlin",
                                    start_at=datetime(2027, 10, 31, 0, 0, tzinfo=BERLIN),
                                    after=datetime(2027, 10, 30, tzinfo=UTC), count=5)
    assert [t.strftime("%H:%M%z") for t in autumn] == ["00:00+0200", "01:00+0200", "02:00+0200", "02:00+0100",
                                                     "03:00+0100"]


def test_an_interval_replayed_across_a_past_dst_change_keeps_its_spacing(make_engine: Any, sql: Sql) -> None:
    """RunAll replays real runs over the change of 29 March 2026: their ticks are 3600 s apart."""
    engine = make_engine(max_catch_up_runs=100_000)
    start = datetime(2026, 3, 28, 23, 0, tzinfo=BERLIN)
    job_id = new(engine, "replay-berlin", every="1h", timezone="Europe/Berlin", start_at=start,
                 missed_run_policy="RunAll")
    sql.run("UPDATE mjsched.scheduled_job SET next_run_at = %s WHERE id = %s", (start, job_id))
    for _ in range(6):
        engine.dispatch_due_jobs()
        settle(sql, job_id)
    served = [r["scheduled_for"] for r in runs(sql, job_id)]
    assert [r["status"] for r in runs(sql, job_id)] == ["Completed"] * 6
    assert served[0] == start and {b - a for a, b in zip(served, served[1:])} == {timedelta(hours=1)}
    assert [t.astimezone(BERLIN).hour for t in served] == [23, 0, 1, 3, 4, 5]


# --------------------------------------------------------------------------
# The high-frequency warning
# --------------------------------------------------------------------------

def test_a_short_interval_gets_the_high_frequency_warning(make_engine: Any, sql: Sql,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    engine = make_engine()
    fast = new(engine, "every-30s", every="30s")
    new(engine, "every-10m", every="10m")
    new(engine, "once", run_at=db_now(sql) + timedelta(days=1))
    engine.start_polling()
    engine.stop_polling(wait=True, max_wait=5)
    warned = [r.getMessage() for r in caplog.records if getattr(r, "action", None) == "high_frequency"]
    assert len(warned) == 1 and "'every-30s'" in warned[0] and "every 30s" in warned[0], warned
    assert job_row(sql, fast)["frequency_warned"] == "every 30s | UTC"
    caplog.clear()
    engine.start_polling()       # said once per job and schedule ever
    engine.stop_polling(wait=True, max_wait=5)
    assert not [r for r in caplog.records if getattr(r, "action", None) == "high_frequency"]
    assert scheduling.schedule_gap("every 299s", "UTC", db_now(sql)) == timedelta(seconds=299)
    assert scheduling.schedule_gap("every 300s", "UTC", db_now(sql)) is None


# --------------------------------------------------------------------------
# Edits between kinds
# --------------------------------------------------------------------------

def test_update_job_switches_between_the_three_kinds(make_engine: Any, sql: Sql) -> None:
    engine = make_engine()
    job_id = create(engine, "switch", cron="0 3 * * *")
    created = engine.get_job(job_id).created_at
    job = engine.update_job(job_id, every="2h")
    assert (job.cron_expression, job.interval_seconds, job.run_at) == (None, 7200, None)
    assert (job.next_run_at - created) % timedelta(hours=2) == timedelta(0)     # anchored at created_at
    when = datetime(2030, 12, 24, 18, 0, tzinfo=BERLIN)
    job = engine.update_job(job_id, run_at=when)
    assert (job.cron_expression, job.interval_seconds, job.run_at, job.next_run_at) == (None, None, when, when)
    job = engine.update_job(job_id, cron="*/5 * * * *")
    assert (job.cron_expression, job.interval_seconds, job.run_at) == ("*/5 * * * *", None, None)
    # a plain-SQL edit of the interval clears next_run_at (the trigger), so an engine recomputes it
    engine.update_job(job_id, every="1h")
    sql.run("UPDATE mjsched.scheduled_job SET interval_seconds = 60 WHERE id = %s", (job_id,))
    assert job_row(sql, job_id)["next_run_at"] is None
    engine.start_polling()
    engine.stop_polling(wait=True, max_wait=5)
    nxt = job_row(sql, job_id)["next_run_at"]
    assert nxt is not None and (nxt - created) % timedelta(minutes=1) == timedelta(0)


# --------------------------------------------------------------------------
# Bad input: typed errors naming the field and value, nothing written
# --------------------------------------------------------------------------

@pytest.mark.parametrize("fields, field", [
    ({"every": 0}, "every"),
    ({"every": "0s"}, "every"),
    ({"every": "-5s"}, "every"),
    ({"every": timedelta(seconds=-1)}, "every"),
    ({"every": timedelta(milliseconds=1500)}, "every"),
    ({"every": "soon"}, "every"),
    ({"every": "90"}, "every"),
    ({"every": 1.5}, "every"),
    ({"every": "400d"}, "every"),
    ({"cron": "* * * * *", "every": "1m"}, "every"),
    ({"every": "1m", "run_at": datetime(2030, 1, 1, tzinfo=UTC)}, "run_at"),
    ({"cron": "* * * * *", "run_at": datetime(2030, 1, 1, tzinfo=UTC)}, "run_at"),
    ({}, "cron"),
    ({"run_at": datetime(2030, 1, 1, 18, 0)}, "run_at"),
    ({"run_at": "2030-01-01T18:00:00+01:00"}, "run_at"),
    ({"run_at": datetime(2030, 1, 1, tzinfo=UTC), "end_at": datetime(2029, 1, 1, tzinfo=UTC)}, "run_at"),
    ({"run_at": datetime(2030, 1, 1, tzinfo=UTC), "run_immediately_if_never_run": True},
     "run_immediately_if_never_run"),
])
def test_bad_schedules_are_refused_before_anything_is_written(make_engine: Any, sql: Sql, fields: dict[str, Any],
                                                              field: str) -> None:
    engine = make_engine()
    before = job_count(sql)
    with pytest.raises(ConfigurationError) as err:
        new(engine, "bad", **fields)
    assert err.value.field == field, err.value
    assert field in str(err.value)
    assert job_count(sql) == before


def test_bad_schedule_edits_are_refused_and_change_nothing(make_engine: Any, sql: Sql) -> None:
    engine = make_engine()
    job_id = new(engine, "edit-me", every="5m")
    before = job_row(sql, job_id)
    for fields, field in (({"every": "0s"}, "every"), ({"cron": "* * * * *", "every": "1m"}, "every"),
                          ({"every": None}, "every"), ({"run_at": datetime(2030, 1, 1)}, "run_at")):
        with pytest.raises(ConfigurationError) as err:
            engine.update_job(job_id, **fields)
        assert err.value.field == field
    assert job_row(sql, job_id) == before


@pytest.mark.parametrize("fields, named", [
    ({"interval_seconds": 0}, "interval_seconds"),
    ({"interval_seconds": -90}, "interval_seconds"),
    ({"interval_seconds": 31622401}, "interval_seconds"),
    ({"interval_seconds": "soon"}, "interval_seconds"),
    ({"cron_expression": "* * * * *", "interval_seconds": 60}, "exactly one schedule"),
    ({"interval_seconds": 60, "run_at": "2030-01-01T00:00:00+00:00"}, "exactly one schedule"),
    ({"cron_expression": None}, "exactly one schedule"),
    ({"run_at": "9999-12-30T12:00:00+00:00"}, "run_at"),
    ({"run_at": "not a time"}, "run_at"),
])
def test_the_procedures_refuse_bad_schedules(sql: Sql, fields: dict[str, Any], named: str) -> None:
    type_id = sql.one("SELECT job_type_id FROM mjsched.ensure_job_type('time-semantics-probe', 'thread', NULL)")
    before = job_count(sql)
    with pytest.raises(psycopg2.Error) as err:
        sql.one("SELECT job_id FROM mjsched.insert_job(%s::jsonb)",
                (json.dumps({"job_type_id": str(type_id), "name": "p", "status": "Active", **fields}),))
    assert err.value.pgcode == "22023" and named in str(err.value), err.value
    with pytest.raises(psycopg2.Error) as none:
        sql.one("SELECT job_id FROM mjsched.insert_job(%s::jsonb)",
                (json.dumps({"job_type_id": str(type_id), "name": "p"}),))
    assert none.value.pgcode == "22023" and "needs a schedule" in str(none.value)
    assert job_count(sql) == before


def test_the_table_refuses_two_kinds_written_by_plain_sql(make_engine: Any, sql: Sql) -> None:
    engine = make_engine()
    job_id = new(engine, "plain-sql", every="1m")
    with pytest.raises(psycopg2.Error) as err:
        sql.run("UPDATE mjsched.scheduled_job SET cron_expression = '* * * * *' WHERE id = %s", (job_id,))
    assert err.value.pgcode == "23514" and "ck_scheduled_job_schedule_kind" in str(err.value)
    with pytest.raises(psycopg2.Error) as zero:
        sql.run("UPDATE mjsched.scheduled_job SET interval_seconds = 0 WHERE id = %s", (job_id,))
    assert zero.value.pgcode == "23514" and "ck_scheduled_job_interval_seconds" in str(zero.value)


# --------------------------------------------------------------------------
# Races: several engines, one one-off; several engines, one interval
# --------------------------------------------------------------------------

def test_three_engines_run_a_one_off_exactly_once(make_engine: Any, sql: Sql) -> None:
    engines = [make_engine(max_poll_interval=0.2, instance_name=f"race-{i}") for i in range(3)]
    when = db_now(sql) + timedelta(seconds=1)
    job_id = new(engines[0], "raced-one-off", run_at=when)
    for engine in engines:
        engine.start_polling()
    try:
        wait_for(lambda: job_row(sql, job_id)["status"] == "Expired", timeout=15, message="the one-off to end")
        settle(sql, job_id)
        # a few more polls of every engine: nothing more happens
        for engine in engines:
            engine.dispatch_due_jobs()
    finally:
        for engine in engines:
            engine.stop_polling(wait=True, max_wait=5)
    assert [(r["status"], r["scheduled_for"]) for r in runs(sql, job_id)] == [("Completed", when)]
    assert (job_row(sql, job_id)["status"], job_row(sql, job_id)["run_count"]) == ("Expired", 1)


def test_three_engines_serve_each_tick_of_an_interval_once(make_engine: Any, sql: Sql) -> None:
    engines = [make_engine(max_poll_interval=0.2, instance_name=f"grid-{i}") for i in range(3)]
    job_id = new(engines[0], "raced-interval", every="1s", high_frequency_ok=True)
    created = engines[0].get_job(job_id).created_at
    for engine in engines:
        engine.start_polling()
    try:
        wait_for(lambda: len(runs(sql, job_id)) >= 5, timeout=15, message="five ticks")
    finally:
        for engine in engines:
            engine.stop_polling(wait=True, max_wait=5)
    served = [r["scheduled_for"] for r in runs(sql, job_id)]
    assert len(served) == len(set(served))             # a tick never produces two runs
    assert all((t - created) % timedelta(seconds=1) == timedelta(0) for t in served)
    executors = {r["executed_by_instance"] for r in sql.rows(
        "SELECT executed_by_instance FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s", (job_id,))}
    assert executors <= {f"grid-{i}" for i in range(3)}


@pytest.mark.parametrize("mode", ["Skip", "Queue", "Concurrent"])
def test_a_one_off_ends_in_every_concurrency_mode(make_engine: Any, sql: Sql, mode: str) -> None:
    engine = make_engine()
    when = db_now(sql) - timedelta(seconds=5)
    job_id = new(engine, f"one-off-{mode}", run_at=when, concurrency_mode=mode)
    assert engine.dispatch_due_jobs().dispatched == 1
    settle(sql, job_id)
    wait_for(lambda: job_row(sql, job_id)["run_count"] == 1, timeout=10, message="the run's statistics")
    row = job_row(sql, job_id)
    assert (row["status"], row["next_run_at"], row["lock_token"]) == ("Expired", None, None)
    assert [(r["status"], r["scheduled_for"]) for r in runs(sql, job_id)] == [("Completed", when)]
    # a manual run of an Expired one-off (force) does not bring its tick back
    engine.execute_job(job_id, force=True)
    assert job_row(sql, job_id)["status"] == "Expired" and len(runs(sql, job_id)) == 2


def test_a_manual_run_of_a_one_off_keeps_its_tick(make_engine: Any, sql: Sql) -> None:
    engine = make_engine()
    when = db_now(sql) + timedelta(days=1)
    job_id = new(engine, "one-off-manual", run_at=when)
    run = engine.execute_job(job_id)
    assert run.status.value == "Completed" and run.scheduled_for is None
    row = job_row(sql, job_id)
    assert (row["status"], row["next_run_at"]) == ("Active", when)
