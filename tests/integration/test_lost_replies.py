"""A claim whose reply is lost after it committed costs nothing: the retry replays it.

The fault is real: the statement runs and commits on the server, then the
connection is closed before the reply is read (tests/chaos/faults.py).
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

import pytest

import mjsched
from tests.chaos.faults import FaultPlan
from tests.support import drivers  # noqa: F401 - registers the test drivers
from tests.support.pg import wait_for

pytestmark = pytest.mark.postgres
NEVER = "0 0 1 1 *"


def due_jobs(engine: mjsched.SchedulingEngine, sql: Any, count: int) -> list[str]:
    jobs = [engine.create_job(f"lost-{i}", "test-ok", NEVER) for i in range(count)]
    for job in jobs:
        sql.run("UPDATE mjsched.scheduled_job SET next_run_at = now() - interval '1 second' WHERE id = %s", (job,))
    return jobs


def completed(sql: Any) -> int:
    return int(sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE status = 'Completed'"))


def test_the_backend_retry_replays_a_claim_whose_reply_was_lost(make_engine: Callable[..., Any], sql: Any) -> None:
    plan = FaultPlan(force_after={"claim_due_jobs": 1})
    engine = make_engine(connection_factory=plan.connection_factory(), max_concurrent_jobs=5)
    due_jobs(engine, sql, 3)
    assert engine.dispatch_due_jobs().dispatched == 3        # not 0 with 3 jobs locked until their lease lapses
    assert plan.snapshot().get("after:claim_due_jobs") == 1
    wait_for(lambda: completed(sql) == 3, message="the three runs to complete")
    assert sql.one("SELECT count(*) FROM mjsched.scheduled_job WHERE lock_token IS NOT NULL") == 0


def test_a_claim_that_raised_is_replayed_by_the_next_poll(make_engine: Callable[..., Any], sql: Any,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    plan = FaultPlan(force_after={"claim_due_jobs": 1})
    engine = make_engine(connection_factory=plan.connection_factory(), retry_attempts=1)   # no retry inside
    due_jobs(engine, sql, 3)
    with pytest.raises(mjsched.DatabaseError):
        engine.dispatch_due_jobs()
    assert sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE status = 'Running'") == 3  # it committed
    with caplog.at_level(logging.WARNING, logger="mjsched"):
        assert engine.dispatch_due_jobs().dispatched == 3
    assert any(getattr(r, "action", None) == "claim_replayed" for r in caplog.records)
    wait_for(lambda: completed(sql) == 3, message="the three runs to complete")
    assert engine.dispatch_due_jobs().dispatched == 0         # the replay is over: a fresh claim finds nothing


def test_a_replay_never_starts_a_run_twice(make_engine: Callable[..., Any], sql: Any,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The claim's reply arrived and one run started, then the poll died: the next poll
    replays the claim and starts only the run not yet started."""
    engine = make_engine(max_concurrent_jobs=5)
    jobs = due_jobs(engine, sql, 2)
    original = engine._dispatcher.start_claim
    started: list[str] = []

    class PollDies(BaseException):
        """What no handler of the poll catches (an ordinary exception hands its claim back)."""

    def start_then_die(job: Any, *args: Any) -> int:
        started.append(job.id)
        original(job, *args)
        raise PollDies("the poll dies after starting one run")
    monkeypatch.setattr(engine._dispatcher, "start_claim", start_then_die)
    with pytest.raises(PollDies):
        engine.dispatch_due_jobs()
    monkeypatch.setattr(engine._dispatcher, "start_claim", original)
    assert len(started) == 1
    assert engine.dispatch_due_jobs().dispatched == 1       # the other job only
    wait_for(lambda: completed(sql) == 2, message="both runs to complete")
    assert sorted(r["job"] for r in sql.rows("SELECT scheduled_job_id::text AS job FROM mjsched.scheduled_job_run")) \
        == sorted(jobs)


def test_a_claim_that_raised_just_before_a_stop_is_handed_back(make_engine: Callable[..., Any], sql: Any) -> None:
    plan = FaultPlan(force_after={"claim_due_jobs": 1})
    engine = make_engine(connection_factory=plan.connection_factory(), retry_attempts=1, lease_timeout=30)
    jobs = due_jobs(engine, sql, 2)
    engine.start_polling()
    wait_for(lambda: plan.snapshot().get("after:claim_due_jobs") == 1, message="the claim's reply to be lost")
    engine.stop_polling(wait=True, max_wait=5)        # before the poller's retry (0.5 s later) replays it
    wait_for(lambda: sql.one("SELECT count(*) FROM mjsched.scheduled_job WHERE lock_token IS NOT NULL") == 0,
             timeout=5, message="the locks to be released, not left to lapse (lease 30 s)")
    statuses = [r["status"] for r in sql.rows("SELECT status FROM mjsched.scheduled_job_run")]
    assert statuses == ["Skipped"] * len(jobs)
    assert sql.one("SELECT sum(run_count) FROM mjsched.scheduled_job") == 0


def test_stop_polling_without_wait_never_waits_for_the_hand_back(make_engine: Callable[..., Any], sql: Any,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    plan = FaultPlan(force_after={"claim_due_jobs": 1})
    engine = make_engine(connection_factory=plan.connection_factory(), retry_attempts=1, lease_timeout=30)
    due_jobs(engine, sql, 2)
    engine.start_polling()
    wait_for(lambda: plan.snapshot().get("after:claim_due_jobs") == 1, message="the claim's reply to be lost")
    real_claim = engine.backend.claim_due_jobs
    monkeypatch.setattr(engine.backend, "claim_due_jobs",
                        lambda *a, **k: (time.sleep(3), real_claim(*a, **k))[1])   # the database is slow now
    started = time.monotonic()
    engine.stop_polling(wait=False)
    assert time.monotonic() - started < 1.0
    wait_for(lambda: sql.one("SELECT count(*) FROM mjsched.scheduled_job WHERE lock_token IS NOT NULL") == 0,
             timeout=10, message="the hand-back, in the background")


class PollHoldsTheLock:
    """The dispatcher's lock, with the poller's poll paused once it holds it until ``go``
    is set: stop_polling() then closes the gate while that poll is under way (its
    close_gate cannot take the lock, so the poll owns the claim left to hand back)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.held = threading.Event()
        self.go = threading.Event()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        got = self._lock.acquire(blocking, timeout)
        if got and threading.current_thread().name.startswith("mjsched-poller") and not self.held.is_set():
            self.held.set()
            assert self.go.wait(5), "the test never let the poll go on"
        return got

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


def locks_held(sql: Any) -> int:
    return int(sql.one("SELECT count(*) FROM mjsched.scheduled_job WHERE lock_token IS NOT NULL"))


def test_a_poll_that_finds_the_gate_closed_hands_back_the_claim_left_unanswered(
        make_engine: Callable[..., Any], sql: Any) -> None:
    """The poll took the lock just before stop_polling(wait=False) closed the gate: it
    finds the gate closed and polls no more, so it hands back what the failed claim took."""
    plan = FaultPlan(force_after={"claim_due_jobs": 1})
    engine = make_engine(connection_factory=plan.connection_factory(), retry_attempts=1, lease_timeout=30)
    jobs = due_jobs(engine, sql, 2)
    with pytest.raises(mjsched.DatabaseError):
        engine.dispatch_due_jobs()                       # it committed: two jobs locked, no reply
    assert locks_held(sql) == 2
    gate = PollHoldsTheLock()
    engine._dispatcher._lock = gate
    engine.start_polling()
    assert gate.held.wait(5), "the poller's first poll never took the lock"
    engine.stop_polling(wait=False)
    gate.go.set()
    wait_for(lambda: locks_held(sql) == 0, timeout=5,
             message="the locks to be handed back, not left to lapse (lease 30 s)")
    wait_for(lambda: [r["status"] for r in sql.rows("SELECT status FROM mjsched.scheduled_job_run")]
             == ["Skipped"] * len(jobs), timeout=5, message="both runs recorded Skipped")


def test_a_poll_that_fails_after_the_gate_closed_hands_back_the_claim(
        make_engine: Callable[..., Any], sql: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The poll's replay was in the database when the gate closed, and failed: no poll
    follows, so the claim is replayed and handed back in the background."""
    plan = FaultPlan(force_after={"claim_due_jobs": 2})
    engine = make_engine(connection_factory=plan.connection_factory(), retry_attempts=1, lease_timeout=30)
    jobs = due_jobs(engine, sql, 2)
    with pytest.raises(mjsched.DatabaseError):
        engine.dispatch_due_jobs()
    in_claim, closed = threading.Event(), threading.Event()
    real_claim = engine.backend.claim_due_jobs

    def claim_after_the_stop(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name.startswith("mjsched-poller") and not in_claim.is_set():
            in_claim.set()
            assert closed.wait(5), "the test never closed the gate"
        return real_claim(*args, **kwargs)      # the poller's: the reply is lost again
    monkeypatch.setattr(engine.backend, "claim_due_jobs", claim_after_the_stop)
    engine.start_polling()
    assert in_claim.wait(5), "the poller never replayed the claim"
    engine.stop_polling(wait=False)
    closed.set()
    wait_for(lambda: plan.snapshot().get("after:claim_due_jobs") == 2, message="the replay's reply to be lost")
    wait_for(lambda: locks_held(sql) == 0, timeout=5,
             message="the locks to be handed back, not left to lapse (lease 30 s)")
    wait_for(lambda: [r["status"] for r in sql.rows("SELECT status FROM mjsched.scheduled_job_run")]
             == ["Skipped"] * len(jobs), timeout=5, message="both runs recorded Skipped")
