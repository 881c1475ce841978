"""Retries at the procedures (issue 14 item 2): the completion records the next attempt of
the same tick, claims take it when due under the job's lock, and a tick that comes due
while a retry is pending follows the job's concurrency mode. Raced by several real
connections where two claims could meet. Runs once per dialect (the ``db`` fixture).
"""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Iterator

import pytest

from mjsched.backends.base import Backend, Completion
from mjsched.errors import ConfigurationError
from tests.integration.test_procedures import new_job, race
from tests.support.db import Db

FAR = datetime(2999, 1, 1).astimezone()


@pytest.fixture
def backend(db: Db) -> Iterator[Backend]:
    b = db.backend(pool_size=20)
    yield b
    b.close()


def runs(db: Db, job: str) -> list[dict[str, Any]]:
    return db.rows("SELECT id, scheduled_for, attempt, status, retry_at, completed_at, error_message "
                   "FROM mjsched.scheduled_job_run WHERE scheduled_job_id = ? ORDER BY scheduled_for, attempt",
                   (job,))


def fail_first_attempt(backend: Backend, job: str, *, retry_in: float | None = 30.0, status: str = "Failed",
                       next_run_at: datetime = FAR) -> tuple[Any, datetime]:
    """Claim the job's due tick and end it ``status`` asking for a retry in ``retry_in`` s."""
    batch = backend.claim_due_jobs("a", 10, 60)
    (claim,) = batch.claims
    assert backend.complete_job_runs([Completion(claim.run_id, claim.lock_token, status, "boom", None, next_run_at,
                                                 retry_in=retry_in)]) == {claim.run_id: True}
    return claim, batch.db_now


def test_a_failed_tick_records_its_next_attempt_due_after_the_delay(backend: Backend, db: Db) -> None:
    job = new_job(backend, next_run_at=datetime.now().astimezone() - timedelta(seconds=5))
    first, now = fail_first_attempt(backend, job, retry_in=30.0)
    (failed, retry) = runs(db, job)
    assert (failed["attempt"], failed["status"]) == (1, "Failed")
    assert (retry["attempt"], retry["status"], retry["scheduled_for"]) == (2, "Queued", first.scheduled_for)
    assert abs((retry["retry_at"] - failed["completed_at"]).total_seconds() - 30.0) < 0.01
    assert db.job_value(job, "retry_count") == 1
    assert db.job_value(job, "lock_token") is None
    # not before it is due: no claim; once due: claimed from the queue, the same tick, attempt 2
    assert backend.claim_due_jobs("b", 10, 60, now=now + timedelta(seconds=20)).claims == []
    (claim,) = backend.claim_due_jobs("b", 10, 60, now=retry["retry_at"] + timedelta(seconds=1)).claims
    assert (claim.run_id, claim.scheduled_for, claim.from_queue) == (str(retry["id"]), first.scheduled_for, True)
    assert db.run_status(claim.run_id) == "Running"
    assert db.lock_token(job) == claim.lock_token


def test_next_due_at_wakes_the_engine_for_a_retry(backend: Backend, db: Db) -> None:
    job = new_job(backend, next_run_at=datetime.now().astimezone() - timedelta(seconds=5))
    fail_first_attempt(backend, job, retry_in=45.0)
    (_, retry) = runs(db, job)
    batch = backend.claim_due_jobs("a", 10, 60)
    assert batch.next_due_at == retry["retry_at"]


@pytest.mark.parametrize("status", ["Completed", "Cancelled", "Skipped"])
def test_only_failed_or_timed_out_attempts_are_retried(backend: Backend, db: Db, status: str) -> None:
    job = new_job(backend, next_run_at=datetime.now().astimezone() - timedelta(seconds=5))
    fail_first_attempt(backend, job, status=status)
    assert [r["attempt"] for r in runs(db, job)] == [1]
    assert db.job_value(job, "retry_count") == 0


def test_a_timeout_is_retried(backend: Backend, db: Db) -> None:
    job = new_job(backend, next_run_at=datetime.now().astimezone() - timedelta(seconds=5))
    fail_first_attempt(backend, job, status="Timeout")
    assert [(r["attempt"], r["status"]) for r in runs(db, job)] == [(1, "Timeout"), (2, "Queued")]


def test_a_manual_run_is_not_retried(backend: Backend, db: Db) -> None:
    job = new_job(backend)
    start = backend.start_manual_run(job, "00000000-0000-0000-0000-00000000000a", "a", 60)
    backend.complete_job_runs([Completion(start.run_id, start.lock_token, "Failed", "x", None, None, retry_in=1.0)])
    assert [r["status"] for r in runs(db, job)] == ["Failed"]


def test_a_replayed_completion_records_one_retry(backend: Backend, db: Db) -> None:
    job = new_job(backend, next_run_at=datetime.now().astimezone() - timedelta(seconds=5))
    claim, _ = fail_first_attempt(backend, job)
    again = Completion(claim.run_id, claim.lock_token, "Failed", "boom", None, FAR, retry_in=30.0)
    assert backend.complete_job_runs([again]) == {claim.run_id: True}
    assert [r["attempt"] for r in runs(db, job)] == [1, 2]
    assert db.job_value(job, "retry_count") == 1


@pytest.mark.parametrize("bad", [-1.0, 31536001.0, "soon"])
def test_a_bad_retry_delay_is_refused_before_anything_is_written(backend: Backend, db: Db, bad: Any) -> None:
    job = new_job(backend, next_run_at=datetime.now().astimezone() - timedelta(seconds=5))
    (claim,) = backend.claim_due_jobs("a", 10, 60).claims
    with pytest.raises(ConfigurationError, match="retry_in"):
        backend.complete_job_runs([Completion(claim.run_id, claim.lock_token, "Failed", None, None, FAR,
                                              retry_in=bad)])
    assert db.run_status(claim.run_id) == "Running"
    assert [r["attempt"] for r in runs(db, job)] == [1]


def test_a_retry_due_after_the_window_is_recorded_skipped(backend: Backend, db: Db) -> None:
    now = datetime.now().astimezone()
    job = new_job(backend, next_run_at=now - timedelta(seconds=5), end_at=now + timedelta(seconds=20))
    fail_first_attempt(backend, job, retry_in=60.0)
    (_, retry) = runs(db, job)
    assert (retry["attempt"], retry["status"]) == (2, "Skipped")
    assert "end_at" in retry["error_message"]
    assert db.job_value(job, "retry_count") == 0


def test_a_pending_retry_is_skipped_when_the_job_expires(backend: Backend, db: Db) -> None:
    now = datetime.now().astimezone()
    job = new_job(backend, next_run_at=now - timedelta(seconds=5), end_at=now + timedelta(seconds=120))
    _, db_now = fail_first_attempt(backend, job, retry_in=30.0)
    backend.sweep_expired_leases(now=db_now + timedelta(seconds=125))
    (_, retry) = runs(db, job)
    assert retry["status"] == "Skipped" and "window" in retry["error_message"]
    assert db.job_value(job, "status") == "Expired"


def _pending_retry_and_due_tick(backend: Backend, db: Db, mode: str, *, retry_due: bool) -> tuple[str, Any]:
    """A job whose tick T1 failed (retry pending, due now or in 30 s) and whose next tick is due."""
    job = new_job(backend, next_run_at=datetime.now().astimezone() - timedelta(seconds=10), concurrency_mode=mode)
    first, _ = fail_first_attempt(backend, job, retry_in=0.0 if retry_due else 30.0,
                                  next_run_at=datetime.now().astimezone() - timedelta(seconds=2))
    return job, first


@pytest.mark.parametrize("retry_due", [False, True])
def test_skip_mode_the_next_tick_supersedes_a_pending_retry(backend: Backend, db: Db, retry_due: bool) -> None:
    """Eight engines claim at once: one claim, the new tick; the retry is recorded Skipped."""
    job, first = _pending_retry_and_due_tick(backend, db, "Skip", retry_due=retry_due)
    engines = [db.backend(pool_size=1) for _ in range(8)]
    try:
        batches = race(8, lambda i: engines[i].claim_due_jobs(f"e{i}", 5, 60))
    finally:
        for e in engines:
            e.close()
    claims = [c for b in batches for c in b.claims]
    assert len(claims) == 1 and not claims[0].from_queue and claims[0].scheduled_for > first.scheduled_for
    statuses = [(r["attempt"], r["status"]) for r in runs(db, job)]
    assert statuses == [(1, "Failed"), (2, "Skipped"), (1, "Running")]
    assert "next tick" in runs(db, job)[1]["error_message"]


def test_queue_mode_the_tick_runs_and_the_retry_after_it(backend: Backend, db: Db) -> None:
    job, first = _pending_retry_and_due_tick(backend, db, "Queue", retry_due=False)
    (tick,) = backend.claim_due_jobs("a", 5, 60).claims
    assert not tick.from_queue and tick.scheduled_for > first.scheduled_for
    (_, retry) = [r for r in runs(db, job) if r["scheduled_for"] == first.scheduled_for]
    later = retry["retry_at"] + timedelta(seconds=1)
    assert backend.claim_due_jobs("b", 5, 60, now=later).claims == []        # the tick holds the lock
    backend.complete_job_runs([Completion(tick.run_id, tick.lock_token, "Completed", None, None, FAR)], now=later)
    (again,) = backend.claim_due_jobs("b", 5, 60, now=later).claims
    assert (again.run_id, again.from_queue) == (str(retry["id"]), True)


def test_queue_mode_a_due_retry_goes_before_the_due_tick(backend: Backend, db: Db) -> None:
    """Raced by eight engines: one claim, the retry (the older tick); the tick stays due."""
    job, first = _pending_retry_and_due_tick(backend, db, "Queue", retry_due=True)
    engines = [db.backend(pool_size=1) for _ in range(8)]
    try:
        batches = race(8, lambda i: engines[i].claim_due_jobs(f"e{i}", 5, 60))
    finally:
        for e in engines:
            e.close()
    (claim,) = [c for b in batches for c in b.claims]
    assert claim.from_queue and claim.scheduled_for == first.scheduled_for
    backend.complete_job_runs([Completion(claim.run_id, claim.lock_token, "Completed", None, None, None)])
    (tick,) = backend.claim_due_jobs("a", 5, 60).claims
    assert not tick.from_queue and tick.scheduled_for > first.scheduled_for


def test_concurrent_mode_the_retry_and_the_tick_both_run(backend: Backend, db: Db) -> None:
    job, first = _pending_retry_and_due_tick(backend, db, "Concurrent", retry_due=True)
    (retry,) = backend.claim_due_jobs("a", 5, 60).claims
    assert retry.from_queue
    # the engine lets a Concurrent retry's job lock go, as it does for a tick run
    next_run = db.job_value(job, "next_run_at")
    assert backend.advance_job(job, retry.lock_token, next_run, release=True)
    (tick,) = backend.claim_due_jobs("b", 5, 60).claims
    assert not tick.from_queue and tick.scheduled_for == next_run
    assert sorted((r["attempt"], r["status"]) for r in runs(db, job)) == [(1, "Failed"), (1, "Running"),
                                                                          (2, "Running")]
    # the retry's lease is renewed without the job lock, and it completes on its own
    assert retry.lock_token in backend.renew_leases([retry.lock_token], 60)[0]
    assert backend.complete_job_runs([Completion(retry.run_id, retry.lock_token, "Completed", None, None,
                                                 None)]) == {retry.run_id: True}


def test_one_run_per_tick_and_attempt(backend: Backend, db: Db) -> None:
    job = new_job(backend, next_run_at=datetime.now().astimezone() - timedelta(seconds=5))
    first, _ = fail_first_attempt(backend, job)
    with pytest.raises(Exception):
        db.run("INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, scheduled_for, attempt, status) "
               "VALUES (?, ?, 2, 'Skipped')", (job, first.scheduled_for))
    db.run("INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, scheduled_for, attempt, status) "
           "VALUES (?, ?, 3, 'Skipped')", (job, first.scheduled_for))
