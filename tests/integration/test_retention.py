"""Run-history retention (issue 14 item 3): what purge_runs keeps and deletes at the edges, one
purger at a time, and purging while four engines claim per-second jobs.

The procedure tests run once per dialect (``db``); the engine tests on PostgreSQL.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any, Iterator

import psycopg2
import pytest

import mjsched
from mjsched.backends.base import Backend, Completion
from mjsched.errors import ConfigurationError
from mjsched.retention import PurgeBatch
from tests.support.db import Db
from tests.support.pg import wait_for

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)   # runs are placed around it; purges pass now=
DAY = 86_400.0
FINISHED = ("Completed", "Failed", "Timeout", "Cancelled", "Abandoned", "Skipped")


@pytest.fixture
def backend(db: Db) -> Iterator[Backend]:
    b = db.backend(pool_size=12)
    yield b
    b.close()


def new_job(backend: Backend, name: str, **fields: Any) -> str:
    type_id = backend.ensure_job_type("python")
    return backend.insert_job({"job_type_id": type_id, "name": name, "cron_expression": "0 0 1 1 *",
                               "status": "Paused", "configuration": {"callable": "os:getpid"}, **fields})


def add_run(db: Db, job_id: str, completed: datetime | None, status: str = "Completed",
            scheduled_for: datetime | None = None) -> str:
    """A run row written directly; ``completed`` None for one that has not finished."""
    run_id = str(uuid.uuid4())
    started = (completed or T0) - timedelta(seconds=1)
    lease = (str(uuid.uuid4()), T0 + timedelta(days=3650)) if status == "Running" else (None, None)
    db.run("INSERT INTO mjsched.scheduled_job_run (id, scheduled_job_id, scheduled_for, status, queued_at, "
           "started_at, completed_at, lock_token, lease_expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
           (run_id, job_id, scheduled_for, status, started, None if status == "Queued" else started, completed,
            *lease))
    return run_id


def remaining(db: Db, job_id: str) -> set[str]:
    return {str(r["id"]).lower() for r in db.rows("SELECT id FROM mjsched.scheduled_job_run WHERE scheduled_job_id = ?",
                                                   (job_id,))}


def purge_all(backend: Backend, keep_seconds: float | None, keep_count: int | None, *, now: datetime,
              per_job: bool = True, batch_size: int = 1000, max_jobs: int = 500, job_id: str | None = None,
              dry_run: bool = False) -> tuple[int, int]:
    """Call purge_runs until its pass is done: (rows, calls)."""
    cursor: tuple[Any, Any, Any] = (None, None, None)
    total = calls = 0
    while True:
        batch = backend.purge_runs(keep_seconds, keep_count, per_job=per_job, job_id=job_id, cursor=cursor,
                                   batch_size=batch_size, max_jobs=max_jobs, dry_run=dry_run, now=now)
        calls += 1
        assert not batch.busy
        total += batch.purged
        if batch.done:
            return total, calls
        cursor = (batch.next_job_id, batch.next_completed_at, batch.next_run_id)
        assert calls < 10_000


# -- what is kept and what goes -------------------------------------------------------------------

def test_running_queued_and_unknown_states_are_never_deleted(backend: Backend, db: Db) -> None:
    job = new_job(backend, "statuses")
    old = T0 - timedelta(days=400)
    finished = {s: add_run(db, job, old, s) for s in FINISHED}
    running = add_run(db, job, None, "Running")
    queued = add_run(db, job, None, "Queued")
    # a Running run with a completed_at (no such row today; a later state might look like it)
    odd = add_run(db, job, None, "Running")
    db.run("UPDATE mjsched.scheduled_job_run SET completed_at = ? WHERE id = ?", (old, odd))
    purged, _ = purge_all(backend, 1.0, None, now=T0, per_job=False)
    assert purged == len(FINISHED)
    assert remaining(db, job) == {running, queued, odd}
    assert not set(finished.values()) & remaining(db, job)


def test_the_age_edge_is_strict_and_the_count_keeps_the_newest(backend: Backend, db: Db) -> None:
    job = new_job(backend, "edges")
    at_edge = add_run(db, job, T0 - timedelta(days=1))
    just_older = add_run(db, job, T0 - timedelta(days=1, milliseconds=5))
    newer = add_run(db, job, T0 - timedelta(hours=1))
    assert purge_all(backend, DAY, None, now=T0, per_job=False, dry_run=True)[0] == 1
    assert remaining(db, job) == {at_edge, just_older, newer}          # a dry run deletes nothing
    assert purge_all(backend, DAY, None, now=T0, per_job=False)[0] == 1
    assert remaining(db, job) == {at_edge, newer}                      # exactly D old is kept
    # count only: the newest 2 finished runs stay whatever their age (ties broken by id)
    runs = [add_run(db, job, T0 - timedelta(days=30 + i)) for i in range(5)]
    tie = add_run(db, job, T0 - timedelta(days=30))
    purge_all(backend, None, 2, now=T0, per_job=False)
    assert remaining(db, job) == {at_edge, newer}
    assert not ({*runs, tie} & remaining(db, job))


def test_both_rules_delete_only_what_both_let_go(backend: Backend, db: Db) -> None:
    job = new_job(backend, "both")
    ages = [0.5, 2, 3, 5, 40]               # days
    runs = {a: add_run(db, job, T0 - timedelta(days=a)) for a in ages}
    purge_all(backend, DAY, 3, now=T0, per_job=False)        # older than 1 day AND beyond the newest 3
    assert remaining(db, job) == {runs[0.5], runs[2], runs[3]}
    purge_all(backend, 30 * DAY, 1, now=T0, per_job=False)   # older than 30 days AND beyond the newest 1
    assert remaining(db, job) == {runs[0.5], runs[2], runs[3]}
    purge_all(backend, 2.5 * DAY, 1, now=T0, per_job=False)
    assert remaining(db, job) == {runs[0.5], runs[2]}


def test_a_job_setting_overrides_the_default_per_rule(backend: Backend, db: Db) -> None:
    defaults = new_job(backend, "defaults")
    forever = new_job(backend, "forever", keep_runs_days=0, keep_runs_count=0)
    counted = new_job(backend, "counted", keep_runs_count=2)
    month = new_job(backend, "month", keep_runs_days=30)
    no_age = new_job(backend, "no-age", keep_runs_days=0)
    ages = [0.5, 2, 5, 40]
    runs = {job: {a: add_run(db, job, T0 - timedelta(days=a)) for a in ages}
            for job in (defaults, forever, counted, month, no_age)}
    purge_all(backend, DAY, 3, now=T0)     # the engine's defaults: 1 day and the newest 3
    assert remaining(db, defaults) == {runs[defaults][a] for a in (0.5, 2, 5)}
    assert remaining(db, forever) == set(runs[forever].values())
    assert remaining(db, counted) == {runs[counted][a] for a in (0.5, 2)}       # 1 day (default) and 2 (own)
    assert remaining(db, month) == {runs[month][a] for a in (0.5, 2, 5)}        # 30 days (own) and the newest 3
    assert remaining(db, no_age) == {runs[no_age][a] for a in (0.5, 2, 5)}      # the count alone
    # no default at all: only jobs with settings of their own lose runs
    purge_all(backend, None, None, now=T0 + timedelta(days=100))
    assert remaining(db, defaults) == {runs[defaults][a] for a in (0.5, 2, 5)}
    assert remaining(db, forever) == set(runs[forever].values())
    assert remaining(db, no_age) == {runs[no_age][a] for a in (0.5, 2, 5)}      # no rule on: kept
    assert remaining(db, month) == set()                   # its own 30 days alone: all older, 100 days on
    # per_job=False (runs prune --older-than): the parameters apply to every job, settings ignored
    purge_all(backend, DAY, None, now=T0, per_job=False)
    assert remaining(db, forever) == {runs[forever][0.5]}


def test_a_tick_not_behind_next_run_at_and_a_tick_with_a_pending_run_are_kept(backend: Backend, db: Db) -> None:
    job = new_job(backend, "ticks")
    tick = T0 - timedelta(days=10)
    db.run("UPDATE mjsched.scheduled_job SET status = 'Active', next_run_at = ? WHERE id = ?", (tick, job))
    current = add_run(db, job, T0 - timedelta(days=9), "Abandoned", scheduled_for=tick)   # its tick is still due
    behind = add_run(db, job, T0 - timedelta(days=9), "Completed", scheduled_for=tick - timedelta(minutes=1))
    manual = add_run(db, job, T0 - timedelta(days=9), "Completed")
    purge_all(backend, DAY, None, now=T0, per_job=False)
    assert remaining(db, job) == {current}
    assert behind not in remaining(db, job) and manual not in remaining(db, job)


def test_a_purged_tick_never_runs_again_when_next_run_at_is_moved_back_over_it(backend: Backend, db: Db) -> None:
    """Issue 32, suspect 2 (confirmed on 009e285). A tick's run row is what stops the tick from
    running twice, and the purge deletes the rows of ticks behind next_run_at; an operator who
    moved next_run_at back over such a tick (update_job, or a one-off's run_at put back) had it
    run a second time, where with the row kept the claim only moved the schedule on. Now a claim
    serves a job's ticks in increasing order (a tick at or before the newest tick the job has a
    run of counts as served), and the purge always keeps each job's newest tick run."""
    job = new_job(backend, "rewound", cron_expression="* * * * *")
    tick = T0 - timedelta(minutes=5)
    db.run("UPDATE mjsched.scheduled_job SET status = 'Active', next_run_at = ? WHERE id = ?", (tick, job))
    served: list[str] = []
    for k in range(2):                                   # two ticks run, a minute apart
        at = tick + timedelta(minutes=k, seconds=1)
        (claim,) = backend.claim_due_jobs("a", 1, 60, now=at).claims
        assert claim.run_id is not None and claim.scheduled_for == tick + timedelta(minutes=k)
        assert backend.complete_job_runs([Completion(claim.run_id, claim.lock_token, "Completed", None, None,
                                                     at + timedelta(seconds=59))], now=at + timedelta(seconds=1))
        served.append(claim.run_id)
    purged, _calls = purge_all(backend, 60.0, None, now=T0, per_job=False)   # both finished over a minute ago
    assert backend.update_job(job, {"next_run_at": tick.isoformat()})   # moved back over the purged tick
    (again,) = backend.claim_due_jobs("a", 1, 60, now=T0).claims
    assert again.scheduled_for == tick and again.run_id is None, "the purged tick ran again"
    assert purged == 1 and remaining(db, job) == {served[1].lower()}    # the newest tick's run was kept


def test_batches_pages_and_the_cursor_cover_every_run_once(backend: Backend, db: Db) -> None:
    jobs = [new_job(backend, f"paged-{i}") for i in range(3)]
    for job in jobs:
        for i in range(25):
            add_run(db, job, T0 - timedelta(days=10, seconds=i))
    assert purge_all(backend, DAY, None, now=T0, per_job=False, batch_size=10, max_jobs=2, dry_run=True)[0] == 75
    purged, calls = purge_all(backend, DAY, None, now=T0, per_job=False, batch_size=10, max_jobs=2)
    assert purged == 75 and calls >= 8          # 10 + 10 + 5 per job, pages of 2 jobs
    assert all(remaining(db, job) == set() for job in jobs)
    # one job only
    other = new_job(backend, "other")
    mine = new_job(backend, "mine")
    keep = add_run(db, other, T0 - timedelta(days=10))
    add_run(db, mine, T0 - timedelta(days=10))
    assert purge_all(backend, DAY, None, now=T0, per_job=False, job_id=mine)[0] == 1
    assert remaining(db, other) == {keep} and remaining(db, mine) == set()


def test_bad_arguments_are_refused_naming_the_field(backend: Backend, db: Db) -> None:
    for kwargs, field in ((dict(keep_seconds=-1.0, keep_count=None), "keep_seconds"),
                          (dict(keep_seconds=None, keep_count=-5), "keep_count"),
                          (dict(keep_seconds=1.0, keep_count=None, batch_size=5000), "batch_size"),
                          (dict(keep_seconds=1.0, keep_count=None, max_jobs=0), "max_jobs")):
        with pytest.raises(ConfigurationError) as error:
            backend.purge_runs(**kwargs)
        assert field in str(error.value)
    type_id = backend.ensure_job_type("python")
    for column, value in (("keep_runs_days", -1), ("keep_runs_days", 36501), ("keep_runs_count", -1)):
        with pytest.raises(ConfigurationError) as error:     # check_job_fields, before anything is written
            backend.insert_job({"job_type_id": type_id, "name": "bad", "cron_expression": "* * * * *",
                                "configuration": {"callable": "os:getpid"}, column: value})
        assert column in str(error.value) and str(value) in str(error.value)
    assert db.one("SELECT count(*) FROM mjsched.scheduled_job") == 0


# -- one purger at a time -----------------------------------------------------------------------------

def test_a_second_purger_is_answered_busy_and_does_nothing(pg_db: Db) -> None:
    backend = pg_db.backend()
    try:
        job = new_job(backend, "two")
        for i in range(30):
            add_run(pg_db, job, T0 - timedelta(days=10, seconds=i))
        holder = psycopg2.connect(pg_db.dsn)
        try:
            with holder.cursor() as cur:     # a purge whose transaction is still open holds the lock
                cur.execute("SELECT purged, busy FROM mjsched.purge_runs(%s, NULL, false, NULL, NULL, NULL, NULL, "
                            "10, 500, false, %s)", (DAY, T0))
                assert cur.fetchone() == (10, 0)
            started = time.monotonic()
            answer = backend.purge_runs(DAY, None, per_job=False, now=T0)
            assert answer == PurgeBatch(0, None, None, None, True)
            assert time.monotonic() - started < 2.0      # answered at once, not after a wait
            assert len(remaining(pg_db, job)) == 30      # the holder's batch is not committed yet
        finally:
            holder.commit()
            holder.close()
        assert len(remaining(pg_db, job)) == 20
        assert purge_all(backend, DAY, None, now=T0, per_job=False)[0] == 20
    finally:
        backend.close()


def test_racing_purgers_delete_each_row_once_without_errors(pg_db: Db) -> None:
    backend = pg_db.backend(pool_size=8)
    try:
        jobs = [new_job(backend, f"race-{i}") for i in range(4)]
        pg_db.run("""INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, status, started_at, completed_at)
                     SELECT j, 'Completed', %s - g * interval '1 second', %s - g * interval '1 second'
                       FROM unnest(%s::uuid[]) j, generate_series(1, 5000) g""",
                  (T0 - timedelta(days=5), T0 - timedelta(days=5), jobs))
        totals = [0] * 4
        busy = [0] * 4
        barrier = threading.Barrier(4, timeout=10)

        def purger(i: int) -> None:
            barrier.wait()
            cursor: tuple[Any, Any, Any] = (None, None, None)
            while True:
                batch = backend.purge_runs(DAY, None, per_job=False, cursor=cursor, batch_size=500, now=T0)
                if batch.busy:
                    busy[i] += 1
                    continue
                totals[i] += batch.purged
                if batch.done:
                    return
                cursor = (batch.next_job_id, batch.next_completed_at, batch.next_run_id)
        threads = [threading.Thread(target=purger, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
        assert sum(totals) == 20_000
        assert pg_db.one("SELECT count(*) FROM mjsched.scheduled_job_run") == 0
        assert sum(busy) > 0          # they did meet the lock
    finally:
        backend.close()


# -- the engine ---------------------------------------------------------------------------------------

def test_housekeeping_purges_logs_and_counts(make_engine: Any, sql: Any, caplog: Any) -> None:
    caplog.set_level(logging.INFO, logger="mjsched")
    admin = make_engine()
    job = admin.create_job(name="hk", driver="python", cron="0 0 1 1 *", configuration={"callable": "os:getpid"},
                           keep_runs_count=5)
    sql.run("""INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, status, started_at, completed_at)
               SELECT %s, 'Failed', now() - g * interval '1 minute', now() - g * interval '1 minute'
                 FROM generate_series(1, 3000) g""", (job,))
    engine = make_engine(purge_interval=0.05, purge_batch_size=200, max_poll_interval=0.05)
    engine.start_polling()
    wait_for(lambda: sql.one("SELECT count(*) FROM mjsched.scheduled_job_run") == 5, timeout=30,
             message="the purge to leave the newest 5 runs")
    # the last batch's count and log line follow its commit (2800 of 2995 counted when the
    # rows were already gone, at a load of 14): wait for them, bounded
    wait_for(lambda: engine.stats["runs_purged"] == 2995, timeout=30, message="2,995 runs counted as purged")
    wait_for(lambda: sum(r.purged for r in caplog.records if getattr(r, "action", None) == "runs_purged") == 2995,
             timeout=30, message="the purges logged")
    pytest.importorskip("prometheus_client")
    from mjsched.metrics import EngineMetrics

    text = EngineMetrics(engine, job_metrics=False).render().decode()
    assert "mjsched_runs_purged_total 2995.0" in text


def test_prune_runs_api_keeps_what_it_is_told(make_engine: Any, sql: Any) -> None:
    engine = make_engine()
    a = engine.create_job(name="a", driver="python", cron="0 0 1 1 *", configuration={"callable": "os:getpid"})
    b = engine.create_job(name="b", driver="python", cron="0 0 1 1 *", configuration={"callable": "os:getpid"},
                          keep_runs_days=0, keep_runs_count=0)
    for job in (a, b):
        sql.run("""INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, status, started_at, completed_at)
                   SELECT %s, 'Completed', now() - (g + 0.5) * interval '1 hour', now() - (g + 0.5) * interval '1 hour'
                     FROM generate_series(1, 100) g""", (job,))     # 1.5 h ... 100.5 h old
    assert engine.prune_runs() == 0                                  # no retention configured
    assert engine.prune_runs(timedelta(days=2), dry_run=True) == 2 * 53
    assert engine.prune_runs("2d", keep_last=90, job_id=a) == 10
    assert engine.prune_runs(older_than=3600 * 48, job_id=b) == 53   # explicit values ignore b's settings
    with pytest.raises(ConfigurationError, match="older_than"):
        engine.prune_runs(older_than="-3d")
    with pytest.raises(ConfigurationError, match="keep_last"):
        engine.prune_runs(keep_last=0)
    assert sql.one("SELECT count(*) FROM mjsched.scheduled_job_run") == 200 - 63


def test_job_retention_fields_are_validated_before_anything_is_written(make_engine: Any, sql: Any) -> None:
    engine = make_engine()
    for field, value in (("keep_runs_days", -1), ("keep_runs_days", 1.5), ("keep_runs_count", True),
                         ("keep_runs_count", 10**10)):
        with pytest.raises(ConfigurationError) as error:
            engine.create_job(name="x", driver="python", cron="* * * * *", configuration={"callable": "os:getpid"},
                              **{field: value})
        assert error.value.field == field
    assert sql.one("SELECT count(*) FROM mjsched.scheduled_job") == 0
    job = engine.create_job(name="ok", driver="python", cron="0 0 1 1 *", configuration={"callable": "os:getpid"},
                            keep_runs_days=7)
    assert engine.get_job(job).keep_runs_days == 7 and engine.get_job(job).keep_runs_count is None
    assert engine.update_job(job, keep_runs_days=None, keep_runs_count=3).keep_runs_count == 3
    assert engine.get_job(job).keep_runs_days is None
    with pytest.raises(psycopg2.Error, match="ck_scheduled_job_keep_runs_count"):
        sql.run("UPDATE mjsched.scheduled_job SET keep_runs_count = -1 WHERE id = %s", (job,))
    with pytest.raises(ConfigurationError, match="keep_runs_days"):
        mjsched.SchedulingEngine(sql.dsn, keep_runs_days=-3)


def test_purge_while_four_engines_claim_per_second_jobs(make_engine: Any, sql: Any) -> None:
    """The race of the issue: four engines claim per-second jobs while their housekeeping purges
    200,000 old runs. Every tick of the window runs, on time, no poll fails, nothing deadlocks."""
    admin = make_engine()
    jobs = [admin.create_job(name=f"tick-{i}", driver="python", cron="* * * * * *",
                             configuration={"callable": "os:getpid"}, high_frequency_ok=True) for i in range(8)]
    sql.run("""INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, scheduled_for, status, started_at, completed_at)
               SELECT j, now() - interval '2 days' - g * interval '1 second', 'Completed',
                      now() - interval '2 days' - g * interval '1 second', now() - interval '2 days' - g * interval '1 second'
                 FROM unnest(%s::uuid[]) j, generate_series(1, 25000) g""", (jobs,))
    failures: list[str] = []

    class Watch:
        def on_poll_failed(self) -> None:
            failures.append("poll")

    engines = [make_engine(instance_name=f"racer-{i}", keep_runs_days=1, purge_interval=0.1, purge_batch_size=1000,
                           max_concurrent_jobs=8, max_poll_interval=0.5) for i in range(4)]
    for engine in engines:
        engine.add_listener(Watch())
    start = sql.one("SELECT now()")
    for engine in engines:
        engine.start_polling()
    wait_for(lambda: sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE completed_at < now() - "
                             "interval '1 day'") == 0, timeout=120, message="the old runs to be purged")
    end = sql.one("SELECT now()")
    last = end - timedelta(seconds=1)
    wait_for(lambda: sql.one("SELECT count(DISTINCT scheduled_job_id) FROM mjsched.scheduled_job_run "
                             "WHERE scheduled_for >= %s AND status = 'Completed'", (last,)) == len(jobs),
             timeout=30, message="the window's last ticks to finish")
    for engine in engines:
        engine.stop_polling(wait=True, max_wait=10)
    assert failures == []
    assert sum(e.stats["runs_purged"] for e in engines) == 200_000
    # every tick from a second after the start to a second before the end ran exactly once, on time
    first = start + timedelta(seconds=2)
    rows = sql.rows("""SELECT scheduled_job_id::text AS job, scheduled_for, status,
                              extract(epoch FROM started_at - scheduled_for) AS late
                         FROM mjsched.scheduled_job_run
                        WHERE scheduled_for BETWEEN %s AND %s""", (first, last))
    expected = int((last.replace(microsecond=0) - first.replace(microsecond=0)).total_seconds())
    per_job: dict[str, set[Any]] = {}
    for r in rows:
        per_job.setdefault(r["job"], set()).add(r["scheduled_for"])
    assert expected > 0
    for job in jobs:
        assert len(per_job.get(job, ())) >= expected - 1, (job, len(per_job.get(job, ())), expected)
    assert {r["status"] for r in rows} <= {"Completed", "Running"}
    lateness = sorted(float(r["late"]) for r in rows)
    assert lateness[len(lateness) // 2] < 0.5, lateness[len(lateness) // 2]   # median start within half a second


def test_without_default_rules_a_pass_visits_only_the_jobs_with_rules_of_their_own(backend: Backend, db: Db) -> None:
    """An engine with no keep_runs_* default walked every page of jobs at every pass (100,000
    idle jobs: 14 purge_runs calls a pass, 1.4 statements/s per idle engine in bench.idle);
    without a default only jobs with a rule of their own can lose runs, so only they are paged."""
    for i in range(30):
        new_job(backend, f"plain-{i}")
    ruled = new_job(backend, "ruled", keep_runs_count=1)
    for day in (1, 2, 3):
        add_run(db, ruled, T0 - timedelta(days=day))
    assert purge_all(backend, None, None, now=T0, max_jobs=10) == (2, 1)
    assert purge_all(backend, None, None, now=T0, max_jobs=10, per_job=False) == (0, 1)
    assert purge_all(backend, None, 0, now=T0, max_jobs=10) == (0, 1)            # 0: that rule is off
    assert purge_all(backend, None, 1, now=T0, max_jobs=10)[1] == 4              # a default: every job
