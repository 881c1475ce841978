"""An outside row lock delays only its own job (issue 12 item 4), and a deleted job is
logged as deleted (item 6).

The outside lock is what an operator's psql session leaves behind after "edit it with
SQL": ``BEGIN; SELECT ... FROM mjsched.scheduled_job WHERE id = ... FOR UPDATE;`` and
nothing more. Completions, renewals and claims must go around it, never wait on it.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterator

import psycopg2
import pytest

import mjsched
from mjsched.backends.base import Completion
from mjsched.backends.postgres import PostgresBackend
from tests.chaos.harness import EVERY_SECOND
from tests.support import drivers
from tests.support.pg import Sql, wait_for

pytestmark = pytest.mark.postgres

LEASE = 2.0


class AdminLock:
    """An open transaction holding FOR UPDATE on one job row, as a psql session would."""

    def __init__(self, dsn: str, job_id: str) -> None:
        self.conn = psycopg2.connect(dsn)
        with self.conn.cursor() as cur:
            cur.execute("SELECT id FROM mjsched.scheduled_job WHERE id = %s FOR UPDATE", (job_id,))

    def release(self) -> None:
        self.conn.rollback()
        self.conn.close()


@pytest.fixture
def backend(pg_dsn: str) -> Iterator[PostgresBackend]:
    b = PostgresBackend(pg_dsn, pool_size=12, call_timeout=10.0)
    yield b
    b.close()


def completed_runs(sql: Sql, job: str, since: Any = None) -> int:
    return int(sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s "
                       "AND status = 'Completed' AND (%s::timestamptz IS NULL OR started_at >= %s::timestamptz)",
                       (job, since, since)))


def test_a_row_lock_held_longer_than_the_lease_delays_only_its_own_job(
        pg_dsn: str, make_engine: Callable[..., mjsched.SchedulingEngine], sql: Sql,
        caplog: pytest.LogCaptureFixture) -> None:
    """Five per-second jobs; an admin session holds one job's row for 2.5 leases while that
    job's run finishes. The other four keep running once a second, none of their runs is
    Abandoned, and the held job's completion lands once the lock is released. On 1539633
    complete_runs waited on the held row with every other completion of its batch,
    and the writer thread with it."""
    caplog.set_level(logging.WARNING, logger="mjsched")
    tag = uuid.uuid4().hex[:8]
    engine = make_engine(lease_timeout=LEASE, max_concurrent_jobs=10, max_poll_interval=0.5)
    held = engine.create_job("held", "test-block", EVERY_SECOND, configuration={"gate": f"held-{tag}"})
    others = [engine.create_job(f"free-{i}", "test-ok", EVERY_SECOND) for i in range(4)]
    engine.start_polling()
    assert drivers.started(f"held-{tag}").wait(10)
    wait_for(lambda: all(completed_runs(sql, j) for j in others), timeout=10, message="every free job ran")
    lock = AdminLock(pg_dsn, held)
    try:
        hold_started = sql.one("SELECT clock_timestamp()")
        drivers.gate(f"held-{tag}").set()       # the held job's run returns: its completion meets the lock
        threading.Event().wait(LEASE * 2.5)     # the hold itself
        hold_ended = sql.one("SELECT clock_timestamp()")
        during = {j: int(sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s "
                                 "AND status = 'Completed' AND started_at BETWEEN %s AND %s",
                                 (j, hold_started, hold_ended))) for j in others}
        held_status = sql.rows("SELECT status FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s "
                               "ORDER BY started_at", (held,))
    finally:
        # read before the release: the completion it lets through may take its own clock
        # reading before this session's next query does (4 ms before, at a load of 14)
        released_at = sql.one("SELECT clock_timestamp()")
        lock.release()
    seconds = (hold_ended - hold_started).total_seconds()
    print(f"[row-lock] hold {seconds:.1f}s, executions of the four free jobs during it: {during}")
    assert [r["status"] for r in held_status] == ["Running"]     # its completion waited, nothing else did
    for job, n in during.items():            # one a second each, give or take a tick at either end
        assert n >= seconds - 2, (job, n, seconds)
    assert sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE status = 'Abandoned' "
                   "AND scheduled_job_id = ANY(%s::uuid[])", (others,)) == 0
    wait_for(lambda: sql.one("SELECT completed_at FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s "
                             "AND status = 'Completed' ORDER BY started_at LIMIT 1", (held,)),
             timeout=5, message="the held job's completion")
    first = sql.rows("SELECT status, completed_at FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s "
                     "ORDER BY started_at LIMIT 1", (held,))[0]
    assert first["status"] == "Completed" and first["completed_at"] >= released_at
    print(f"[row-lock] held job's completion landed {(first['completed_at'] - released_at).total_seconds():.2f}s "
          "after the release")
    assert sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE status = 'Abandoned'") == 0
    assert "completion_deferred" in {getattr(r, "action", None) for r in caplog.records}


def test_complete_runs_skips_a_held_job_row_and_completes_the_rest(
        pg_dsn: str, backend: PostgresBackend, sql: Sql) -> None:
    """One call with three runs, one of whose job rows is held: two complete at once, the
    held one comes back busy (None) with nothing written, and completes after the release."""
    type_id = backend.ensure_job_type("python")
    jobs = [backend.insert_job({"job_type_id": type_id, "name": f"j{i}", "cron_expression": "0 0 1 1 *",
                                "status": "Active", "configuration": {"callable": "os:getpid"}})
            for i in range(3)]
    sql.run("UPDATE mjsched.scheduled_job SET next_run_at = now() - interval '1 second'")
    claims = {c.job_id: c for c in backend.claim_due_jobs("e", 3, 60).claims}
    items = [Completion(claims[j].run_id, claims[j].lock_token, "Completed") for j in jobs]
    lock = AdminLock(pg_dsn, jobs[1])
    try:
        started = time.monotonic()
        out = backend.complete_runs(items)
        assert time.monotonic() - started < 2.0                      # not waited on the held row
        assert out == {claims[jobs[0]].run_id: True, claims[jobs[1]].run_id: None, claims[jobs[2]].run_id: True}
        assert sql.one("SELECT status FROM mjsched.scheduled_job_run WHERE id = %s",
                       (claims[jobs[1]].run_id,)) == "Running"
        # a manual start of the held job is refused at once too, not made to wait
        started = time.monotonic()
        assert backend.start_manual_run(jobs[1], str(uuid.uuid4()), "e", 60).outcome == "locked"
        assert time.monotonic() - started < 2.0
    finally:
        lock.release()
    assert backend.complete_runs(items) == {claims[j].run_id: True for j in jobs}   # replays answer True
    assert sql.one("SELECT count(*) FROM mjsched.scheduled_job WHERE lock_token IS NULL") == 3


def test_racing_completions_of_shared_jobs_finish_each_run_once(backend: PostgresBackend, sql: Sql) -> None:
    """Eight connections complete overlapping batches (each run sent by two callers) at once:
    every run ends Completed exactly once and is counted once; a caller whose job row was
    held by a racing caller gets busy (None), never a wrong answer, and completes on retry."""
    type_id = backend.ensure_job_type("python")
    jobs = [backend.insert_job({"job_type_id": type_id, "name": f"r{i}", "cron_expression": "0 0 1 1 *",
                                "status": "Active", "configuration": {"callable": "os:getpid"}})
            for i in range(16)]
    sql.run("UPDATE mjsched.scheduled_job SET next_run_at = now() - interval '1 second'")
    claims = backend.claim_due_jobs("e", 16, 60).claims
    items = [Completion(c.run_id, c.lock_token, "Completed") for c in claims]
    batches = [items[(i * 2) % 16:(i * 2) % 16 + 4] for i in range(8)]    # each run in two batches
    barrier = threading.Barrier(8, timeout=10)

    def complete(i: int) -> dict[str, Any]:
        barrier.wait()
        answers: dict[str, Any] = {}
        left = batches[i]
        for _ in range(50):
            out = backend.complete_runs(left)
            answers.update({k: v for k, v in out.items() if v is not None})
            left = [it for it in left if out.get(it.run_id) is None]
            if not left:
                break
            time.sleep(0.01)
        return answers
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(complete, range(8)))
    for i, answers in enumerate(results):
        assert answers == {it.run_id: True for it in batches[i]}, (i, answers)
    assert sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE status = 'Completed'") == 16
    assert sql.one("SELECT sum(run_count) FROM mjsched.scheduled_job") == 16
    assert sql.one("SELECT count(*) FROM mjsched.scheduled_job WHERE lock_token IS NOT NULL") == 0


def test_deleting_a_job_mid_run_is_logged_as_a_deletion(
        make_engine: Callable[..., mjsched.SchedulingEngine], caplog: pytest.LogCaptureFixture) -> None:
    """Item 6: on 1539633 the keeper logged "token mismatch: the slot has been handed off"."""
    caplog.set_level(logging.WARNING, logger="mjsched")
    tag = uuid.uuid4().hex[:8]
    engine = make_engine(lease_timeout=LEASE, max_poll_interval=0.5)
    job = engine.create_job("doomed", "test-block", EVERY_SECOND, configuration={"gate": f"doomed-{tag}"})
    engine.start_polling()
    assert drivers.started(f"doomed-{tag}").wait(10)
    engine.delete_job(job)
    wait_for(lambda: any("was deleted" in r.getMessage() for r in caplog.records), timeout=LEASE * 2,
             message="the deletion logged")
    assert not any("handed off" in r.getMessage() for r in caplog.records)
    drivers.gate(f"doomed-{tag}").set()


def test_claims_and_sweeps_go_around_a_lapsed_run_another_session_holds(
        pg_dsn: str, backend: PostgresBackend, sql: Sql) -> None:
    """An operator holds FOR UPDATE on a Running run whose lease lapsed. A claim takes the
    other due job at once and leaves the held one; a sweep returns at once; once the
    lock is released the next claim takes the held job over (its run Abandoned, counted
    once). On the previous commit both waited on the row until statement_timeout, and the
    claim failed with every other job of its batch."""
    type_id = backend.ensure_job_type("python")
    held, free = [backend.insert_job({"job_type_id": type_id, "name": n, "cron_expression": "0 0 1 1 *",
                                      "status": "Active", "configuration": {"callable": "os:getpid"}})
                  for n in ("held", "free")]
    sql.run("UPDATE mjsched.scheduled_job SET next_run_at = now() - interval '1 second' WHERE id = %s", (held,))
    (old,) = backend.claim_due_jobs("old", 1, 0.2).claims
    wait_for(lambda: sql.one("SELECT expected_completion_at < now() FROM mjsched.scheduled_job WHERE id = %s",
                             (held,)), timeout=5, message="the lease lapsing")
    sql.run("UPDATE mjsched.scheduled_job SET next_run_at = now() - interval '1 second'")
    admin = psycopg2.connect(pg_dsn)
    try:
        with admin.cursor() as cur:
            cur.execute("SELECT id FROM mjsched.scheduled_job_run WHERE id = %s FOR UPDATE", (old.run_id,))
        started = time.monotonic()
        swept = backend.sweep_expired_leases()
        claims = backend.claim_due_jobs("new", 5, 60).claims
        took = time.monotonic() - started
        assert took < 2.0, took
        assert (swept.swept, swept.locks_freed) == (0, 0)
        assert [c.job_id for c in claims] == [free]
        assert sql.one("SELECT status FROM mjsched.scheduled_job_run WHERE id = %s", (old.run_id,)) == "Running"
    finally:
        admin.rollback()
        admin.close()
    claims = backend.claim_due_jobs("new", 5, 60).claims
    assert [c.job_id for c in claims] == [held]
    assert sql.one("SELECT status FROM mjsched.scheduled_job_run WHERE id = %s", (old.run_id,)) == "Abandoned"
    assert sql.one("SELECT failure_count FROM mjsched.scheduled_job WHERE id = %s", (held,)) == 1


def test_a_manual_start_never_waits_on_a_lapsed_run_another_session_holds(
        pg_dsn: str, backend: PostgresBackend, sql: Sql) -> None:
    """start_manual_run over a lapsed lease whose run an operator holds answers 'locked' at
    once and changes nothing; after the release it takes the job over."""
    type_id = backend.ensure_job_type("python")
    job = backend.insert_job({"job_type_id": type_id, "name": "m", "cron_expression": "0 0 1 1 *",
                              "status": "Active", "configuration": {"callable": "os:getpid"}})
    sql.run("UPDATE mjsched.scheduled_job SET next_run_at = now() - interval '1 second'")
    (old,) = backend.claim_due_jobs("old", 1, 0.2).claims
    wait_for(lambda: sql.one("SELECT expected_completion_at < now() FROM mjsched.scheduled_job WHERE id = %s",
                             (job,)), timeout=5, message="the lease lapsing")
    admin = psycopg2.connect(pg_dsn)
    try:
        with admin.cursor() as cur:
            cur.execute("SELECT id FROM mjsched.scheduled_job_run WHERE id = %s FOR UPDATE", (old.run_id,))
        started = time.monotonic()
        assert backend.start_manual_run(job, str(uuid.uuid4()), "e", 60).outcome == "locked"
        assert time.monotonic() - started < 2.0
        assert sql.one("SELECT lock_token::text FROM mjsched.scheduled_job WHERE id = %s", (job,)) == old.lock_token
    finally:
        admin.rollback()
        admin.close()
    assert backend.start_manual_run(job, str(uuid.uuid4()), "e", 60).outcome == "started"
    assert sql.one("SELECT status FROM mjsched.scheduled_job_run WHERE id = %s", (old.run_id,)) == "Abandoned"


@pytest.mark.postgres
def test_execute_job_waits_a_moment_for_a_row_that_is_only_busy(make_engine: Callable[..., Any], sql: Any,
                                                                 pg_dsn: str) -> None:
    """start_manual_run answers 'locked' at once when another session holds the job's row; a
    claim or completion holds it for milliseconds, so execute_job asks again for a moment
    instead of failing (a job a run holds is still refused at once)."""
    engine = make_engine()
    job = engine.create_job("busy-row", "shell", "0 3 * * *", configuration={"command": ["true"]})
    holder = psycopg2.connect(pg_dsn)
    cur = holder.cursor()
    cur.execute("SELECT 1 FROM mjsched.scheduled_job WHERE id = %s FOR UPDATE", (job,))
    release = threading.Timer(0.3, holder.rollback)
    release.start()
    try:
        run = engine.execute_job(job)
    finally:
        release.cancel()
        holder.close()
    assert run.status.value == "Completed"
