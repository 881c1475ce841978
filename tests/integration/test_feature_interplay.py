"""Where the features of issue 14 meet: a one-off job's retries, cancelling a pending retry,
and run_due_jobs with a retry policy. Each feature has its own file; these are the corners
between them, against the real PostgreSQL."""
from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable

import pytest

import mjsched
from tests.integration.test_engine_retries import Flaky  # noqa: F401 - registers test-flaky
from tests.support.pg import wait_for

pytestmark = pytest.mark.postgres
QUICK = mjsched.RetryPolicy(max_attempts=3, initial_delay=0.2, factor=1.0, max_delay=1.0, jitter=0.0)


def runs(sql: Any, job: str) -> list[dict[str, Any]]:
    return sql.rows("SELECT status, attempt, error_message FROM mjsched.scheduled_job_run "
                    "WHERE scheduled_job_id = %s ORDER BY attempt", (job,))


def test_a_one_off_job_is_retried_before_it_ends(make_engine: Callable[..., Any], sql: Any) -> None:
    """run_at= with retry=: the one tick is retried like any tick, and the job ends Expired
    after it (a pending retry is not dropped by the one-off's end)."""
    engine = make_engine()
    when = engine.backend.db_now() + timedelta(milliseconds=300)
    job = engine.create_job("once-flaky", "test-flaky", run_at=when, retry=QUICK,
                            configuration={"fail": 2})
    engine.start_polling()
    wait_for(lambda: [r["status"] for r in runs(sql, job)] == ["Failed", "Failed", "Completed"], timeout=20,
             message="three attempts of the one tick")
    assert [r["attempt"] for r in runs(sql, job)] == [1, 2, 3]
    wait_for(lambda: engine.get_job(job).status is mjsched.JobStatus.EXPIRED, message="the one-off to end")


def test_a_pending_retry_can_be_cancelled_and_never_runs(make_engine: Callable[..., Any], sql: Any) -> None:
    engine = make_engine()
    slow = mjsched.RetryPolicy(max_attempts=2, initial_delay=3600.0, factor=1.0, max_delay=3600.0, jitter=0.0)
    job = engine.create_job("retry-later", "test-flaky", "0 3 * * *", retry=slow, configuration={"fail": 5})
    sql.run("UPDATE mjsched.scheduled_job SET next_run_at = now() - interval '1 second' WHERE id = %s", (job,))
    (first,) = engine.run_due_jobs(timeout=30)
    assert first.status is mjsched.RunStatus.FAILED
    (pending,) = [r for r in engine.list_runs(job) if r.attempt == 2]
    assert pending.status is mjsched.RunStatus.QUEUED and pending.retry_at is not None
    engine.cancel_run(pending.id)
    assert engine.backend.get_run(pending.id).status is mjsched.RunStatus.CANCELLED
    with pytest.raises(mjsched.RunNotCancellable):
        engine.cancel_run(pending.id)


def test_run_due_jobs_returns_the_attempts_it_ran_and_leaves_later_retries_queued(
        make_engine: Callable[..., Any], sql: Any) -> None:
    """A script's pass runs what is due now; a retry due after the failure is not waited for
    (it is due later) and stays Queued for the next pass or a polling engine."""
    engine = make_engine()
    job = engine.create_job("script-flaky", "test-flaky", "0 3 * * *", retry=QUICK, configuration={"fail": 1})
    sql.run("UPDATE mjsched.scheduled_job SET next_run_at = now() - interval '1 second' WHERE id = %s", (job,))
    (first,) = engine.run_due_jobs(timeout=30)
    assert (first.status, first.attempt) == (mjsched.RunStatus.FAILED, 1)
    wait_for(lambda: sql.one("SELECT retry_at <= now() FROM mjsched.scheduled_job_run "
                             "WHERE scheduled_job_id = %s AND attempt = 2", (job,)) is True,
             message="the retry to come due")
    (second,) = engine.run_due_jobs(timeout=30)
    assert (second.status, second.attempt) == (mjsched.RunStatus.COMPLETED, 2)


# -- found by review after the merge: each failed before its fix ------------------------------------------
def served_one_off(engine: mjsched.SchedulingEngine, name: str, **fields: Any) -> str:
    when = engine.backend.db_now() - timedelta(seconds=1)
    job = engine.create_job(name, "test-flaky", run_at=when, configuration=fields.pop("configuration",
                                                                                       {"fail": 0}), **fields)
    engine.run_due_jobs(timeout=30)
    assert engine.get_job(job).status is mjsched.JobStatus.EXPIRED
    return job


def db_time_passes(sql: Any, seconds: float) -> None:
    """Wait until the database clock is ``seconds`` past now (its clock decides what is due)."""
    target = sql.one("SELECT now() + make_interval(secs => %s)", (seconds,))
    wait_for(lambda: sql.one("SELECT now() >= %s", (target,)), timeout=seconds + 10,
             message=f"{seconds}s of database time")


def test_purging_a_served_one_off_never_lets_it_run_again(make_engine: Callable[..., Any], sql: Any) -> None:
    """Its served run is what stops the tick running twice: retention keeps it, so resuming
    the job (or declaring it Active again) runs nothing."""
    engine = make_engine()
    job = served_one_off(engine, "once-purged")
    db_time_passes(sql, 0.2)
    engine.prune_runs(older_than=0.05)
    assert [r["status"] for r in runs(sql, job)] == ["Completed"]        # kept: it guards the tick
    engine.resume_job(job)
    assert engine.run_due_jobs(timeout=30) == []
    assert engine.get_job(job).status is mjsched.JobStatus.EXPIRED


def test_declaring_a_served_one_off_again_keeps_its_pending_retry(make_engine: Callable[..., Any],
                                                                   sql: Any) -> None:
    engine = make_engine()
    policy = mjsched.RetryPolicy(max_attempts=3, initial_delay=1.0, factor=1.0, max_delay=1.0, jitter=0.0)
    spec = dict(name="once-declared", driver="test-flaky", run_at=engine.backend.db_now() - timedelta(seconds=1),
                retry=policy, configuration={"fail": 1}, status="Active")
    engine.sync_jobs([spec])
    job = engine.get_job("once-declared").id
    (first,) = engine.run_due_jobs(timeout=30)
    assert first.status is mjsched.RunStatus.FAILED
    again = engine.sync_jobs([spec])                   # the application restarts and declares its jobs
    assert again.unchanged == ["once-declared"]
    engine.resume_job(job)                             # an operator's resume does not drop the retry either
    engine.run_due_jobs(timeout=30)
    db_time_passes(sql, 1.0)
    engine.run_due_jobs(timeout=30)
    assert [(r["status"], r["attempt"]) for r in runs(sql, job)] == [("Failed", 1), ("Completed", 2)]


def test_a_one_off_retry_left_when_its_window_closes_ends_skipped(make_engine: Callable[..., Any],
                                                                  sql: Any) -> None:
    engine = make_engine()
    now = engine.backend.db_now()
    policy = mjsched.RetryPolicy(max_attempts=3, initial_delay=0.5, factor=1.0, max_delay=0.5, jitter=0.0)
    job = engine.create_job("once-window", "test-flaky", run_at=now - timedelta(seconds=1),
                            end_at=now + timedelta(seconds=2), retry=policy, configuration={"fail": 1})
    engine.run_due_jobs(timeout=30)
    assert [r["status"] for r in runs(sql, job)] == ["Failed", "Queued"]
    db_time_passes(sql, 2.5)                          # no engine ran it in time: the window closed
    engine.run_due_jobs(timeout=30)
    (retry,) = [r for r in runs(sql, job) if r["attempt"] == 2]
    assert retry["status"] == "Skipped" and "window ended" in retry["error_message"]


def test_an_admin_write_of_one_schedule_kind_replaces_the_schedule(make_engine: Callable[..., Any],
                                                                   sql: Any) -> None:
    engine = make_engine()
    job = engine.create_job("kinds", "test-flaky", every="1m", configuration={"fail": 0})
    sql.run("SELECT * FROM mjsched.update_job(%s, '{\"cron_expression\": \"*/5 * * * *\"}'::jsonb)", (job,))
    stored = engine.get_job(job)
    assert (stored.cron_expression, stored.interval_seconds, stored.run_at) == ("*/5 * * * *", None, None)


def test_a_schedule_edited_between_a_concurrent_claim_and_its_advance_keeps_the_edit(
        make_engine: Callable[..., Any], sql: Any) -> None:
    """Issue 32, suspect 1 (confirmed on 009e285: the edit's next run was overwritten with the
    old cron's). A Concurrent job's claim is followed by advance_job, which moves the schedule
    on and drops the job lock; an operator's edit committed in between must stand."""
    engine = make_engine()
    job = engine.create_job("concurrent-edited", "test-ok", "* * * * *", concurrency_mode="Concurrent")
    sql.run("UPDATE mjsched.scheduled_job SET next_run_at = date_trunc('minute', now()) WHERE id = %s", (job,))
    batch = engine.backend.claim_due_jobs(engine.instance_name, 1, engine.lease_timeout)
    (claim,) = batch.claims
    edited = engine.update_job(job, cron="0 3 * * *").next_run_at      # committed after the claim
    ready: list[Any] = []
    assert engine.parts.dispatcher.start_claim(batch.jobs[job], claim, batch.db_now, ready) == 1   # the advance
    for run in ready:
        run.start()
    wait_for(lambda: sql.one("SELECT status FROM mjsched.scheduled_job_run WHERE id = %s", (claim.run_id,))
             == "Completed", message="the claimed run to complete")
    row = sql.rows("SELECT next_run_at, lock_token FROM mjsched.scheduled_job WHERE id = %s", (job,))[0]
    assert row == {"next_run_at": edited, "lock_token": None}
