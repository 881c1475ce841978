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
