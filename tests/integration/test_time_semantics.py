"""Time semantics on the real engine and the real PostgreSQL: missed runs after downtime,
ticks that come while a job runs, the start/end window, the job lifecycle,
run_immediately_if_never_run and the high-frequency warning.

Downtime is simulated by moving a job's next_run_at N ticks into the past with SQL and
then polling by hand (``engine.dispatch_due_jobs()``). Most jobs fire yearly on
1 January 00:00 UTC, so the expected ticks are plain dates and the "next future tick"
is 1 January of next year, whatever the wall clock says. Tests that need ticks to come
while a run executes use 6-field (seconds-first) expressions and wait on the database
clock, never on sleeps.
"""
from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterator

import pytest

import mjsched
from mjsched import BaseScheduledJob, ExecutionContext, JobResult, register_driver
from mjsched.errors import ConfigurationError
from tests.support.pg import Sql, wait_for

pytestmark = pytest.mark.postgres

UTC = timezone.utc
YEARLY = "0 0 1 1 *"
GATES: dict[str, threading.Event] = {}


@register_driver("time-semantics-probe")
class Probe(BaseScheduledJob):
    """Succeeds at once, or waits for the gate named in configuration["gate"]."""

    def execute(self, context: ExecutionContext) -> JobResult:
        gate = GATES.get(context.job.configuration.get("gate", ""))
        if gate is not None and not gate.wait(20):
            return JobResult(success=False, error_message="gate never opened")
        return JobResult(success=True)


@register_driver("time-semantics-by-design")
class ByDesign(Probe):
    high_frequency_by_design = True


@pytest.fixture
def gate() -> Iterator[Callable[[], tuple[str, threading.Event]]]:
    made: list[str] = []

    def make() -> tuple[str, threading.Event]:
        name = f"gate-{len(GATES)}-{threading.get_ident()}-{len(made)}"
        GATES[name] = threading.Event()
        made.append(name)
        return name, GATES[name]
    yield make
    for name in made:
        GATES.pop(name).set()


def jan1(year: int) -> datetime:
    return datetime(year, 1, 1, tzinfo=UTC)


def db_now(sql: Sql) -> datetime:
    return sql.one("SELECT clock_timestamp()")


def job_row(sql: Sql, job_id: str) -> dict[str, Any]:
    return sql.rows("SELECT * FROM mjsched.scheduled_job WHERE id = %s", (job_id,))[0]


def runs(sql: Sql, job_id: str) -> list[dict[str, Any]]:
    return sql.rows("SELECT status, scheduled_for, details, queued_at, started_at, completed_at"
                    "  FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s"
                    " ORDER BY scheduled_for NULLS FIRST, started_at", (job_id,))


def settle(sql: Sql, job_id: str, timeout: float = 10.0) -> None:
    """Wait until the job has no Running run and its lock is free (completion written)."""
    wait_for(lambda: sql.one("SELECT count(*) FROM mjsched.scheduled_job_run"
                             " WHERE scheduled_job_id = %s AND status = 'Running'", (job_id,)) == 0
             and job_row(sql, job_id)["lock_token"] is None,
             timeout=timeout, message=f"job {job_id} to settle")


def down_for(sql: Sql, job_id: str, ticks: int) -> tuple[list[datetime], datetime]:
    """Move a yearly job's next_run_at ``ticks`` ticks behind the latest past tick.

    Returns the ticks that are due (oldest first, the last one being this year's)
    and the first future tick.
    """
    year = db_now(sql).year
    due = [jan1(year - ticks + k) for k in range(ticks + 1)]
    sql.run("UPDATE mjsched.scheduled_job SET next_run_at = %s WHERE id = %s", (due[0], job_id))
    return due, jan1(year + 1)


def create(engine: mjsched.SchedulingEngine, name: str, cron: str = YEARLY, **fields: Any) -> str:
    fields.setdefault("driver", "time-semantics-probe")
    return engine.create_job(name=name, cron=cron, **fields)


def missed_warnings(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno == logging.WARNING and text in r.getMessage()]


# --------------------------------------------------------------------------
# Missed runs after downtime
# --------------------------------------------------------------------------

def test_skip_records_one_skipped_run_and_moves_to_the_next_future_tick(make_engine: Any, sql: Sql) -> None:
    engine = make_engine()
    job = create(engine, "skip", missed_run_policy="Skip")
    due, future = down_for(sql, job, ticks=3)

    assert engine.dispatch_due_jobs().dispatched == 0   # nothing executes
    settle(sql, job)

    (run,) = runs(sql, job)
    assert (run["status"], run["scheduled_for"], run["details"]) == ("Skipped", due[0], {"missed": 3})
    row = job_row(sql, job)
    assert row["next_run_at"] == future
    assert (row["run_count"], row["success_count"], row["failure_count"]) == (0, 0, 0)
    assert engine.dispatch_due_jobs().dispatched == 0 and len(runs(sql, job)) == 1


def test_run_once_runs_the_oldest_missed_tick_once(make_engine: Any, sql: Sql) -> None:
    engine = make_engine()
    job = create(engine, "once")           # RunOnce is the default
    assert engine.get_job(job).missed_run_policy is mjsched.MissedRunPolicy.RUN_ONCE
    due, future = down_for(sql, job, ticks=3)

    assert engine.dispatch_due_jobs().dispatched == 1
    settle(sql, job)

    assert [(r["status"], r["scheduled_for"]) for r in runs(sql, job)] == [("Completed", due[0])]
    row = job_row(sql, job)
    assert row["next_run_at"] == future and row["run_count"] == 1
    assert engine.dispatch_due_jobs().dispatched == 0 and len(runs(sql, job)) == 1


def test_run_all_replays_every_missed_tick_oldest_first_one_per_poll(make_engine: Any, sql: Sql) -> None:
    engine = make_engine()
    job = create(engine, "all", missed_run_policy="RunAll")
    due, future = down_for(sql, job, ticks=4)

    for k, tick in enumerate(due):
        assert engine.dispatch_due_jobs().dispatched == 1, f"poll {k}"
        settle(sql, job)
        served = [r["scheduled_for"] for r in runs(sql, job)]
        assert served == due[:k + 1]
        # the tick after the one served, even though it is past; then the future tick
        assert job_row(sql, job)["next_run_at"] == (due[k + 1] if k + 1 < len(due) else future)
    assert engine.dispatch_due_jobs().dispatched == 0
    assert [r["status"] for r in runs(sql, job)] == ["Completed"] * 5
    assert job_row(sql, job)["run_count"] == 5


def test_run_all_at_the_bound_still_replays(make_engine: Any, sql: Sql) -> None:
    engine = make_engine(max_catch_up_runs=3)
    job = create(engine, "all-at-bound", missed_run_policy="RunAll")
    due, future = down_for(sql, job, ticks=3)
    for _ in due:
        assert engine.dispatch_due_jobs().dispatched == 1
        settle(sql, job)
    assert [r["scheduled_for"] for r in runs(sql, job)] == due
    assert job_row(sql, job)["next_run_at"] == future


def test_run_all_beyond_the_bound_warns_once_and_runs_once(make_engine: Any, sql: Sql,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    engine = make_engine(max_catch_up_runs=3)
    job = create(engine, "all-over-bound", missed_run_policy="RunAll")
    due, future = down_for(sql, job, ticks=5)

    assert engine.dispatch_due_jobs().dispatched == 1
    settle(sql, job)
    assert engine.dispatch_due_jobs().dispatched == 0

    assert [(r["status"], r["scheduled_for"]) for r in runs(sql, job)] == [("Completed", due[0])]
    assert job_row(sql, job)["next_run_at"] == future
    assert len(missed_warnings(caplog, "more than 3 missed ticks")) == 1


def test_run_all_default_bound_is_100(make_engine: Any, sql: Sql) -> None:
    engine = make_engine()
    assert engine.max_catch_up_runs == 100
    with pytest.raises(ConfigurationError) as err:
        make_engine(max_catch_up_runs=0)
    assert err.value.field == "max_catch_up_runs"


def test_a_concurrent_job_follows_the_skip_policy(make_engine: Any, sql: Sql) -> None:
    engine = make_engine()
    job = create(engine, "concurrent-skip", missed_run_policy="Skip", concurrency_mode="Concurrent")
    due, future = down_for(sql, job, ticks=2)
    engine.dispatch_due_jobs()
    settle(sql, job)
    assert [(r["status"], r["scheduled_for"], r["details"]) for r in runs(sql, job)] == \
        [("Skipped", due[0], {"missed": 2})]
    assert job_row(sql, job)["next_run_at"] == future


def test_a_concurrent_job_follows_the_run_once_policy(make_engine: Any, sql: Sql) -> None:
    engine = make_engine()
    job = create(engine, "concurrent-once", concurrency_mode="Concurrent")
    due, future = down_for(sql, job, ticks=2)
    assert engine.dispatch_due_jobs().dispatched == 1
    settle(sql, job)
    wait_for(lambda: runs(sql, job)[0]["status"] == "Completed", message="the run to complete")
    assert [(r["status"], r["scheduled_for"]) for r in runs(sql, job)] == [("Completed", due[0])]
    assert job_row(sql, job)["next_run_at"] == future


def test_a_concurrent_job_follows_the_run_all_policy(make_engine: Any, sql: Sql) -> None:
    engine = make_engine()
    job = create(engine, "concurrent-all", missed_run_policy="RunAll", concurrency_mode="Concurrent")
    due, future = down_for(sql, job, ticks=2)
    for _ in due:
        engine.dispatch_due_jobs()
        wait_for(lambda: all(r["status"] == "Completed" for r in runs(sql, job)), message="runs to complete")
    assert [r["scheduled_for"] for r in runs(sql, job)] == due
    assert job_row(sql, job)["next_run_at"] == future


def test_missed_ticks_of_a_queue_job_are_not_queued(make_engine: Any, sql: Sql, gate: Any) -> None:
    engine = make_engine()
    name, opened = gate()
    job = create(engine, "queue-once", concurrency_mode="Queue", configuration={"gate": name})
    due, future = down_for(sql, job, ticks=3)
    assert engine.dispatch_due_jobs().dispatched == 1   # the run waits at its gate during the poll
    opened.set()
    settle(sql, job)
    assert [(r["status"], r["scheduled_for"]) for r in runs(sql, job)] == [("Completed", due[0])]
    assert job_row(sql, job)["next_run_at"] == future


def test_run_all_of_a_queue_job_replays_without_queueing(make_engine: Any, sql: Sql, gate: Any) -> None:
    engine = make_engine()
    name, opened = gate()
    job = create(engine, "queue-all", concurrency_mode="Queue", missed_run_policy="RunAll",
                 configuration={"gate": name})
    due, future = down_for(sql, job, ticks=2)
    assert engine.dispatch_due_jobs().dispatched == 1
    opened.set()
    settle(sql, job)
    for _ in due[1:]:
        assert engine.dispatch_due_jobs().dispatched == 1
        settle(sql, job)
    assert [(r["status"], r["scheduled_for"], r["queued_at"]) for r in runs(sql, job)] == \
        [("Completed", tick, None) for tick in due]
    assert job_row(sql, job)["next_run_at"] == future


# --------------------------------------------------------------------------
# Ticks that come while the job is running: the concurrency mode decides
# --------------------------------------------------------------------------

def _start_on_time(engine: mjsched.SchedulingEngine, sql: Sql, job: str) -> datetime:
    """Poll right after the job's first tick comes, so the tick is on time (not missed)."""
    tick = job_row(sql, job)["next_run_at"]
    wait_for(lambda: db_now(sql) >= tick, timeout=5, interval=0.005, message="the first tick")
    assert engine.dispatch_due_jobs().dispatched == 1
    return tick


def test_skip_mode_drops_ticks_that_come_while_running_even_under_run_all(make_engine: Any, sql: Sql,
                                                                          gate: Any) -> None:
    engine = make_engine()
    name, opened = gate()
    job = create(engine, "skip-mode-busy", cron="* * * * * *", missed_run_policy="RunAll",
                 configuration={"gate": name})
    tick = _start_on_time(engine, sql, job)
    wait_for(lambda: db_now(sql) >= tick + timedelta(seconds=2.2), timeout=5, message="two more ticks")
    assert engine.dispatch_due_jobs().dispatched == 0   # busy: nothing claimed, nothing queued
    opened.set()
    settle(sql, job)

    (run,) = runs(sql, job)
    assert (run["status"], run["scheduled_for"]) == ("Completed", tick)
    nxt = job_row(sql, job)["next_run_at"]
    # next = the first tick after completion: tick+1s and tick+2s were dropped, not replayed
    assert tick + timedelta(seconds=3) <= nxt <= run["completed_at"] + timedelta(seconds=1)
    sql.run("UPDATE mjsched.scheduled_job SET status = 'Paused' WHERE id = %s", (job,))


def test_queue_mode_keeps_ticks_that_come_while_running_as_queued_runs(make_engine: Any, sql: Sql,
                                                                       gate: Any) -> None:
    engine = make_engine()
    name, opened = gate()
    job = create(engine, "queue-mode-busy", cron="* * * * * *", concurrency_mode="Queue",
                 configuration={"gate": name})
    tick = _start_on_time(engine, sql, job)
    kept = [tick + timedelta(seconds=1), tick + timedelta(seconds=2)]
    wait_for(lambda: db_now(sql) >= tick + timedelta(seconds=2.2), timeout=5, message="two more ticks")
    assert engine.dispatch_due_jobs().dispatched == 0
    queued = sql.rows("SELECT scheduled_for FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s"
                      " AND status = 'Queued' ORDER BY scheduled_for", (job,))
    assert [q["scheduled_for"] for q in queued] == kept
    opened.set()
    settle(sql, job)
    for _ in kept:                                      # FIFO, one per poll
        assert engine.dispatch_due_jobs().dispatched == 1
        settle(sql, job)
    sql.run("UPDATE mjsched.scheduled_job SET status = 'Paused' WHERE id = %s", (job,))
    served = [(r["status"], r["scheduled_for"], r["queued_at"] is not None) for r in runs(sql, job)]
    assert served[:3] == [("Completed", tick, False), ("Completed", kept[0], True), ("Completed", kept[1], True)]


# --------------------------------------------------------------------------
# Lifecycle: status and the [start_at, end_at) window
# --------------------------------------------------------------------------

@pytest.mark.parametrize("status", ["Pending", "Paused", "Disabled", "Expired"])
def test_only_active_jobs_are_claimed(make_engine: Any, sql: Sql, status: str) -> None:
    engine = make_engine()
    idle = create(engine, f"idle-{status}", status=status)
    assert job_row(sql, idle)["next_run_at"] is None       # only Active jobs get a schedule
    sql.run("UPDATE mjsched.scheduled_job SET next_run_at = now() - interval '1 hour' WHERE id = %s", (idle,))
    sql.run("INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, scheduled_for, status, queued_at)"
            " VALUES (%s, now() - interval '2 hours', 'Queued', now())", (idle,))
    control = create(engine, "control")
    sql.run("UPDATE mjsched.scheduled_job SET next_run_at = now() - interval '1 hour' WHERE id = %s",
            (control,))

    # The procedure itself: neither the due tick nor the Queued run of the idle job is claimed.
    batch = engine.backend.claim_due_jobs("probe", 10, 30)
    assert [c.job_id for c in batch.claims] == [control]
    engine.backend.release_job_lock(control, batch.claims[0].lock_token)

    # And through the engine.
    engine.dispatch_due_jobs()
    assert job_row(sql, idle)["status"] == status and job_row(sql, idle)["lock_token"] is None
    assert [r["status"] for r in runs(sql, idle)] == ["Queued"]


def test_paused_time_is_not_downtime(make_engine: Any, sql: Sql) -> None:
    engine = make_engine()
    job = create(engine, "paused")
    engine.pause_job(job)
    down_for(sql, job, ticks=3)                 # ticks pass while it is paused
    assert engine.dispatch_due_jobs().dispatched == 0
    resumed = engine.resume_job(job)
    assert resumed.next_run_at == jan1(db_now(sql).year + 1)
    assert engine.dispatch_due_jobs().dispatched == 0 and runs(sql, job) == []


def test_nothing_is_claimed_before_start_at(make_engine: Any, sql: Sql) -> None:
    engine = make_engine()
    start = db_now(sql).replace(microsecond=0) + timedelta(hours=1)
    job = create(engine, "not-yet", cron="* * * * * *", start_at=start)
    assert job_row(sql, job)["next_run_at"] == start         # a tick exactly at start_at fires
    sql.run("UPDATE mjsched.scheduled_job SET next_run_at = now() - interval '10 seconds' WHERE id = %s", (job,))
    assert engine.backend.claim_due_jobs("probe", 10, 30).claims == []
    assert engine.dispatch_due_jobs().dispatched == 0 and runs(sql, job) == []
    # (a start_at change alone resets next_run_at for rescheduling; keep the due tick explicitly)
    sql.run("UPDATE mjsched.scheduled_job SET start_at = now() - interval '1 second',"
            " next_run_at = now() - interval '10 seconds' WHERE id = %s", (job,))
    assert [c.job_id for c in engine.backend.claim_due_jobs("probe", 10, 30).claims] == [job]


def test_a_job_past_end_at_is_never_claimed_and_the_next_claim_expires_it(make_engine: Any, sql: Sql) -> None:
    engine = make_engine()
    job = create(engine, "ended", end_at=db_now(sql) + timedelta(days=1))
    sql.run("UPDATE mjsched.scheduled_job SET end_at = now() - interval '1 second',"
            " next_run_at = now() - interval '1 hour' WHERE id = %s", (job,))
    # Every claim (every poll, not only the sweep's) expires ended jobs, in SQL, and never claims them.
    assert engine.backend.claim_due_jobs("probe", 10, 30).claims == []
    row = job_row(sql, job)
    assert (row["status"], row["next_run_at"]) == ("Expired", None)
    assert runs(sql, job) == []
    assert engine.backend.sweep_expired_leases().expired_jobs == 0   # idempotent


def test_a_polling_engine_runs_only_inside_the_window_then_expires_the_job(make_engine: Any, sql: Sql) -> None:
    engine = make_engine()
    start = db_now(sql).replace(microsecond=0) + timedelta(seconds=2)
    end = start + timedelta(seconds=2)
    job = create(engine, "window", cron="* * * * * *", start_at=start, end_at=end)
    engine.start_polling()
    try:
        wait_for(lambda: job_row(sql, job)["status"] == "Expired", timeout=10, message="the job to expire")
    finally:
        engine.stop_polling(wait=True, max_wait=10)
    done = runs(sql, job)
    assert done, "a run inside the window"
    assert done[0]["scheduled_for"] == start
    for run in done:
        assert start <= run["scheduled_for"] < end
        assert start <= run["started_at"] < end
    assert {r["scheduled_for"] for r in done} <= {start, start + timedelta(seconds=1)}


@pytest.mark.parametrize("field", ["start_at", "end_at"])
def test_naive_window_bounds_are_refused_before_anything_is_written(make_engine: Any, sql: Sql,
                                                                    field: str) -> None:
    engine = make_engine()
    naive = datetime(2030, 1, 1, 12, 0)
    with pytest.raises(ConfigurationError) as err:
        create(engine, "naive", **{field: naive})
    assert err.value.field == field and "2030" in str(err.value)
    assert sql.one("SELECT count(*) FROM mjsched.scheduled_job") == 0
    job = create(engine, "aware")
    with pytest.raises(ConfigurationError) as err:
        engine.update_job(job, **{field: naive})
    assert err.value.field == field
    assert job_row(sql, job)[field] is None


def test_end_at_must_follow_start_at(make_engine: Any) -> None:
    engine = make_engine()
    start = datetime(2030, 1, 1, tzinfo=UTC)
    with pytest.raises(ConfigurationError) as err:
        create(engine, "backwards", start_at=start, end_at=start)
    assert err.value.field == "end_at"


# --------------------------------------------------------------------------
# run_immediately_if_never_run: the reference's four cases
# --------------------------------------------------------------------------

def test_flag_off_schedules_the_cron_tick(make_engine: Any, sql: Sql) -> None:
    engine = make_engine()
    job = create(engine, "flag-off", run_immediately_if_never_run=False)
    assert job_row(sql, job)["next_run_at"] == jan1(db_now(sql).year + 1)
    assert engine.dispatch_due_jobs().dispatched == 0


def test_flag_on_and_never_run_is_due_at_exactly_db_now_and_runs_at_once(make_engine: Any, sql: Sql) -> None:
    engine = make_engine()
    before = db_now(sql)
    job = create(engine, "flag-on", run_immediately_if_never_run=True)
    after = db_now(sql)
    due = job_row(sql, job)["next_run_at"]
    assert before <= due <= after                   # the database's now, not a cron tick
    assert engine.dispatch_due_jobs().dispatched == 1
    settle(sql, job)
    assert [(r["status"], r["scheduled_for"]) for r in runs(sql, job)] == [("Completed", due)]
    assert job_row(sql, job)["next_run_at"] == jan1(after.year + 1)


def test_flag_on_and_never_run_at_engine_start_up(make_engine: Any, sql: Sql) -> None:
    engine = make_engine()
    job = create(engine, "flag-on-startup", run_immediately_if_never_run=True, status="Paused")
    sql.run("UPDATE mjsched.scheduled_job SET status = 'Active' WHERE id = %s", (job,))  # activated elsewhere
    before = db_now(sql)
    assert engine.dispatch_due_jobs().dispatched == 1   # scheduled at db now, and claimed in the same poll
    settle(sql, job)
    (run,) = runs(sql, job)
    assert run["status"] == "Completed" and before <= run["scheduled_for"] <= run["started_at"]


def test_flag_on_and_has_run_schedules_the_cron_tick(make_engine: Any, sql: Sql) -> None:
    engine = make_engine()
    job = create(engine, "flag-on-ran", run_immediately_if_never_run=True, status="Paused")
    sql.run("UPDATE mjsched.scheduled_job SET status = 'Active', next_run_at = NULL, run_count = 1,"
            " last_run_at = now() - interval '1 day' WHERE id = %s", (job,))
    assert engine.dispatch_due_jobs().dispatched == 0
    assert job_row(sql, job)["next_run_at"] == jan1(db_now(sql).year + 1)
    assert runs(sql, job) == []


def test_a_next_run_at_already_set_is_untouched(make_engine: Any, sql: Sql) -> None:
    engine = make_engine()
    job = create(engine, "flag-on-set", run_immediately_if_never_run=True, status="Paused")
    chosen = datetime(2031, 6, 15, 12, 34, 56, tzinfo=UTC)     # not a tick of the cron
    sql.run("UPDATE mjsched.scheduled_job SET status = 'Active', next_run_at = %s WHERE id = %s", (chosen, job))
    assert engine.dispatch_due_jobs().dispatched == 0
    assert job_row(sql, job)["next_run_at"] == chosen
    assert runs(sql, job) == []


# --------------------------------------------------------------------------
# The high-frequency warning
# --------------------------------------------------------------------------

def _frequency_warnings(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "action", None) == "high_frequency"
            and repr(name) in r.getMessage()]


def test_high_frequency_warning_once_per_job_unless_by_design(make_engine: Any,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="mjsched")
    engine = make_engine()
    create(engine, "every-4-minutes", cron="*/4 * * * *")
    create(engine, "every-5-minutes", cron="*/5 * * * *")
    create(engine, "by-design", cron="*/4 * * * *", driver="time-semantics-by-design")
    engine.start_polling()
    engine.stop_polling()
    engine.start_polling()
    engine.dispatch_due_jobs()
    engine.stop_polling()

    (record,) = _frequency_warnings(caplog, "every-4-minutes")
    assert "fires every 4min" in record.getMessage() and "under 5 min" in record.getMessage()
    assert _frequency_warnings(caplog, "every-5-minutes") == []
    assert _frequency_warnings(caplog, "by-design") == []


def test_a_job_created_while_polling_gets_the_warning(make_engine: Any, sql: Sql,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="mjsched")
    engine = make_engine()
    engine.start_polling()
    try:
        job = create(engine, "late-and-fast", cron="* * * * * *")
        wait_for(lambda: runs(sql, job), timeout=5, message="the job to be claimed")
        wait_for(lambda: _frequency_warnings(caplog, "late-and-fast"), timeout=2, message="the warning")
    finally:
        engine.stop_polling(wait=True, max_wait=5)


# --------------------------------------------------------------------------
# The engine's estimate of the database clock
# --------------------------------------------------------------------------

def test_after_a_slow_claim_the_engine_clock_is_the_claims_end_never_ahead(make_engine: Any, sql: Sql) -> None:
    """The poller sleeps until the next due instant by the engine's estimate of the database
    clock. Set from the claim's db_now (when its transaction began), the estimate trailed the
    database by the claim's own duration, and the next due instant was slept past by as much.
    It must never run ahead either: a tick would be taken for past before it is."""
    key = 7_000_000 + threading.get_ident() % 1_000_000
    # every session opened from here on (the test's own database) parks its claims once they
    # locked their due jobs, until this session lets go of the advisory lock ``key``
    for setting, value in (("mjsched.pause_at", "claim_due_jobs:due_jobs_locked"), ("mjsched.pause_key", str(key))):
        sql.run(f"ALTER DATABASE {sql.one('SELECT current_database()')} SET {setting} = '{value}'")
    engine = make_engine()
    job = create(engine, "slow-claim")
    sql.run("UPDATE mjsched.scheduled_job SET next_run_at = now() - interval '1 second' WHERE id = %s", (job,))
    sql.one("SELECT pg_advisory_lock(%s)", (key,))
    results: list[Any] = []
    poll = threading.Thread(target=lambda: results.append(engine.dispatch_due_jobs()))
    poll.start()
    try:
        wait_for(lambda: sql.one("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                                 " AND wait_event_type = 'Lock' AND wait_event = 'advisory'") == 1,
                 timeout=10, message="the claim to park inside the database")
        time.sleep(0.4)   # the claim's duration: the time that passes is what is measured
    finally:
        sql.one("SELECT pg_advisory_unlock(%s)", (key,))
    poll.join(10)
    assert results and results[0].dispatched == 1
    estimate = engine.parts.clock.now()
    actual = db_now(sql)            # read after the estimate
    assert estimate <= actual, f"the estimate runs {(estimate - actual).total_seconds() * 1000:.1f} ms ahead"
    assert actual - estimate < timedelta(milliseconds=150), \
        f"the estimate trails by {(actual - estimate).total_seconds() * 1000:.0f} ms: the claim's start, not its end"
