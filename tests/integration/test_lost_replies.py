"""A claim whose reply is lost after it committed costs nothing: the retry replays it.

The fault is real: the statement runs and commits on the server, then the
connection is closed before the reply is read (tests/chaos/faults.py).
"""
from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from typing import Any, Callable

import pytest

import mjsched
from mjsched.engine.dispatch import PendingClaim
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
    original = PendingClaim.first_time
    started: list[str] = []

    class PollDies(BaseException):
        """What no handler of the poll catches (an ordinary exception hands its claim back)."""

    def die_at_the_second(pending: PendingClaim, claim: Any) -> bool:
        if started:   # the first claim's run is prepared: the poll dies as it turns to the next claim
            raise PollDies("the poll dies after starting one run")
        started.append(claim.job_id)
        return original(pending, claim)
    monkeypatch.setattr(PendingClaim, "first_time", die_at_the_second)
    with pytest.raises(PollDies):
        engine.dispatch_due_jobs()
    monkeypatch.setattr(PendingClaim, "first_time", original)
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
    engine.parts.dispatcher._lock = gate
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


# -- cancel_run ------------------------------------------------------------------------------------------

def queued_run(engine: mjsched.SchedulingEngine, sql: Any, name: str) -> tuple[str, str]:
    """A Queue job with one Queued run of a tick a minute ago, as enqueue_job_run leaves one."""
    job = engine.create_job(name, "test-ok", NEVER, concurrency_mode="Queue")
    run = sql.one("INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, scheduled_for, status, queued_at) "
                  "VALUES (%s, now() - interval '1 minute', 'Queued', now()) RETURNING id::text", (job,))
    return job, str(run)


def test_a_cancel_whose_reply_was_lost_answers_what_it_did(make_engine: Callable[..., Any], sql: Any) -> None:
    """Issue 32 item 3: the cancel of a Queued run commits and its reply is lost; the backend's
    retry finds the run Cancelled by that same request and answers 'cancelled' (on 009e285 the
    caller got RunNotCancellable for its own cancel). Counted once."""
    plan = FaultPlan(force_after={"cancel_run": 1})
    engine = make_engine(connection_factory=plan.connection_factory())
    job, run = queued_run(engine, sql, "cancel-lost-reply")
    engine.cancel_run(run, requested_by="alice@ops")
    assert plan.snapshot().get("after:cancel_run") == 1
    assert sql.one("SELECT status FROM mjsched.scheduled_job_run WHERE id = %s", (run,)) == "Cancelled"
    assert sql.one("SELECT run_count FROM mjsched.scheduled_job WHERE id = %s", (job,)) == 1
    with pytest.raises(mjsched.RunNotCancellable):       # a new request is still refused
        engine.cancel_run(run, requested_by="bob@ops")


def test_a_replayed_cancel_of_a_running_run_answers_requested(make_engine: Callable[..., Any], sql: Any) -> None:
    """The same for a Running run: the replay answers 'requested' with the first request's
    time and requester, not 'already_requested' as if someone else had asked."""
    plan = FaultPlan(force_after={"cancel_run": 1})
    engine = make_engine(connection_factory=plan.connection_factory())
    job = engine.create_job("cancel-running", "test-ok", NEVER)
    token = "6d6a7363-0000-4000-8000-000000000001"
    assert engine.backend.acquire_job_lock(job, token, "elsewhere", 30.0)
    run = engine.backend.begin_job_run(job, token, "elsewhere")
    outcome = engine.backend.cancel_run(run, "alice@ops")
    assert plan.snapshot().get("after:cancel_run") == 1
    assert (outcome.outcome, outcome.requested_by) == ("requested", "alice@ops")
    assert engine.backend.cancel_run(run, "bob@ops").outcome == "already_requested"


# -- every other state-changing procedure ------------------------------------------------------------------
# One test per routine: the call commits, its reply is lost, the backend retries it (or, for a
# routine only the previous release calls, the same statement runs again, as that release's
# retry does). Each checks what docs/guide/protocol.md's replay table says: the work is done
# once, and the answer is the one the table gives. tests/integration/test_replay_catalog.py
# checks that every state-changing routine installed has a row there and an entry here.

TOKEN = "6d6a7363-0000-4000-8000-0000000000a1"


def losing(make_engine: Callable[..., Any], routine: str, **options: Any) -> tuple[mjsched.SchedulingEngine, FaultPlan]:
    """An engine whose backend loses the reply of the first call of ``routine``."""
    plan = FaultPlan(force_after={routine: 1})
    return make_engine(connection_factory=plan.connection_factory(), **options), plan


def was_lost(plan: FaultPlan, routine: str) -> None:
    assert plan.snapshot().get(f"after:{routine}") == 1, f"no reply of {routine} was lost"


def twice(sql: Any, query: str, params: tuple[Any, ...]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A routine only the previous release calls, replayed as that release's backend does:
    the statement commits (its reply lost), and the same statement runs again."""
    return sql.rows(query, params), sql.rows(query, params)


def held_run(engine: mjsched.SchedulingEngine, sql: Any, name: str, lease: float = 30.0) -> tuple[str, str]:
    """A job locked by TOKEN with a Running run (a manual run another engine started)."""
    job = engine.create_job(name, "test-ok", NEVER)
    started = engine.backend.start_manual_run(job, str(uuid.uuid4()), "elsewhere", lease)
    assert started.outcome == "started" and started.run_id and started.lock_token
    sql.run("UPDATE mjsched.scheduled_job SET lock_token = %s WHERE id = %s", (TOKEN, job))
    sql.run("UPDATE mjsched.scheduled_job_run SET lock_token = %s WHERE id = %s", (TOKEN, started.run_id))
    return job, started.run_id


def runs_by_status(sql: Any, job: str) -> dict[str, int]:
    return {r["status"]: int(r["n"]) for r in sql.rows(
        "SELECT status, count(*) AS n FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s GROUP BY 1", (job,))}


def test_lost_reply_acquire_job_lock(make_engine: Callable[..., Any], sql: Any) -> None:
    engine, plan = losing(make_engine, "acquire_job_lock")
    job = engine.create_job("acquire", "test-ok", NEVER)
    assert engine.backend.acquire_job_lock(job, TOKEN, "e1", 30.0) is True     # the replay finds its own lock
    was_lost(plan, "acquire_job_lock")
    assert str(sql.one("SELECT lock_token FROM mjsched.scheduled_job WHERE id = %s", (job,))) == TOKEN


def test_lost_reply_begin_job_run(make_engine: Callable[..., Any], sql: Any) -> None:
    engine, plan = losing(make_engine, "begin_job_run")
    job = engine.create_job("begin", "test-ok", NEVER)
    assert engine.backend.acquire_job_lock(job, TOKEN, "e1", 30.0)
    run = engine.backend.begin_job_run(job, TOKEN, "e1")
    was_lost(plan, "begin_job_run")
    assert run is not None and runs_by_status(sql, job) == {"Running": 1}
    assert str(sql.one("SELECT id FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s", (job,))) == run


def test_lost_reply_advance_job(make_engine: Callable[..., Any], sql: Any) -> None:
    """The replay after a release is fenced (the token is no longer the job's): it answers
    False and changes nothing; the engine does not act on advance_job's answer."""
    engine, plan = losing(make_engine, "advance_job")
    job = engine.create_job("advance", "test-ok", NEVER)
    assert engine.backend.acquire_job_lock(job, TOKEN, "e1", 30.0)
    nxt = sql.one("SELECT date_trunc('second', now()) + interval '1 hour'")
    assert engine.backend.advance_job(job, TOKEN, nxt, release=True) is False
    was_lost(plan, "advance_job")
    row = sql.rows("SELECT next_run_at, lock_token FROM mjsched.scheduled_job WHERE id = %s", (job,))[0]
    assert (row["next_run_at"], row["lock_token"]) == (nxt, None)


def test_lost_reply_complete_runs_of_the_previous_release(make_engine: Callable[..., Any], sql: Any) -> None:
    """complete_job_runs and complete_job_run (the previous release's completions): the
    replay of a completion its token already made reports it completed; counted once."""
    engine = make_engine()
    for routine in ("complete_job_runs", "complete_job_run"):
        job, run = held_run(engine, sql, f"old-{routine}")
        if routine == "complete_job_runs":
            items = json.dumps([{"run_id": run, "token": TOKEN, "status": "Completed", "error_message": None,
                                 "details": None, "next_run_at": None}])
            first, again = twice(sql, "SELECT run_id::text, completed FROM mjsched.complete_job_runs(%s::jsonb)",
                                 (items,))
        else:
            first, again = twice(sql, "SELECT completed FROM mjsched.complete_job_run(%s, %s, 'Completed', NULL, "
                                      "NULL, NULL)", (run, TOKEN))
        assert [r["completed"] for r in first] == [r["completed"] for r in again] == [1], routine
        assert runs_by_status(sql, job) == {"Completed": 1}, routine
        assert sql.one("SELECT run_count FROM mjsched.scheduled_job WHERE id = %s", (job,)) == 1, routine


def test_lost_reply_delete_job(make_engine: Callable[..., Any], sql: Any) -> None:
    """The replay finds the job gone, deleted by the lost call: the caller's delete succeeds
    (on 009e285 it raised JobNotFound for its own delete)."""
    engine, plan = losing(make_engine, "delete_job")
    job = engine.create_job("delete-me", "test-ok", NEVER)
    engine.delete_job(job)
    was_lost(plan, "delete_job")
    assert sql.one("SELECT count(*) FROM mjsched.scheduled_job WHERE id = %s", (job,)) == 0
    with pytest.raises(mjsched.JobNotFound):          # a job that was never there is still not found
        engine.delete_job(str(uuid.uuid4()))


def test_lost_reply_ensure_job_type(make_engine: Callable[..., Any], sql: Any) -> None:
    engine, plan = losing(make_engine, "ensure_job_type")
    first = engine.backend.ensure_job_type("lost.reply:driver")
    was_lost(plan, "ensure_job_type")
    assert first == engine.backend.ensure_job_type("lost.reply:driver")
    assert sql.one("SELECT count(*) FROM mjsched.scheduled_job_type WHERE driver_class = 'lost.reply:driver'") == 1


def test_lost_reply_extend_job_leases(make_engine: Callable[..., Any], sql: Any) -> None:
    engine, plan = losing(make_engine, "extend_job_leases")
    job, _ = held_run(engine, sql, "extend")
    assert engine.backend.extend_job_leases([TOKEN], 60.0, "elsewhere") == {TOKEN}
    was_lost(plan, "extend_job_leases")
    assert sql.one("SELECT expected_completion_at > now() + interval '50 seconds' FROM mjsched.scheduled_job "
                   "WHERE id = %s", (job,))


def test_lost_reply_renew_leases(make_engine: Callable[..., Any], sql: Any) -> None:
    engine, plan = losing(make_engine, "renew_leases")
    job, _ = held_run(engine, sql, "renew")
    assert engine.backend.renew_leases([TOKEN], 60.0, "elsewhere") == ({TOKEN}, set())
    was_lost(plan, "renew_leases")
    assert sql.one("SELECT lease_expires_at > now() + interval '50 seconds' FROM mjsched.scheduled_job_run "
                   "WHERE scheduled_job_id = %s", (job,))


def test_lost_reply_force_unlock_job(make_engine: Callable[..., Any], sql: Any) -> None:
    """The replay finds nothing held and reports None (as the table says, 0); the run was
    abandoned and counted once, by the lost call."""
    engine, plan = losing(make_engine, "force_unlock_job")
    job, run = held_run(engine, sql, "unlock")
    assert engine.backend.force_unlock_job(job, "operator") is None
    was_lost(plan, "force_unlock_job")
    assert runs_by_status(sql, job) == {"Abandoned": 1}
    assert sql.one("SELECT (lock_token IS NULL AND run_count = 1) FROM mjsched.scheduled_job WHERE id = %s", (job,))


def test_lost_reply_initialize_next_runs(make_engine: Callable[..., Any], sql: Any) -> None:
    """initialize_next_runs and initialize_next_run: compare-and-set on next_run_at IS NULL,
    so the replay sets nothing (0 / False) and the first value stays."""
    for routine in ("initialize_next_runs", "initialize_next_run"):
        engine, plan = losing(make_engine, routine)
        job = engine.create_job(f"init-{routine}", "test-ok", NEVER)
        sql.run("UPDATE mjsched.scheduled_job SET next_run_at = NULL WHERE id = %s", (job,))
        when = sql.one("SELECT date_trunc('second', now()) + interval '1 day'")
        if routine == "initialize_next_runs":
            assert engine.backend.initialize_next_runs([(job, when)]) == 0
        else:
            assert engine.backend.initialize_next_run(job, when) is False
        was_lost(plan, routine)
        assert sql.one("SELECT next_run_at FROM mjsched.scheduled_job WHERE id = %s", (job,)) == when


def test_lost_reply_insert_job(make_engine: Callable[..., Any], sql: Any) -> None:
    """The backend chooses the new job's id before the call, so the retry carries the id the
    lost call inserted under: insert_job finds its own job (same id, name and job type) and
    answers that id. No error, and one job."""
    engine, plan = losing(make_engine, "insert_job")
    job = engine.create_job("inserted-once", "test-ok", NEVER)
    was_lost(plan, "insert_job")
    assert sql.rows("SELECT id::text AS id FROM mjsched.scheduled_job WHERE name = 'inserted-once'") == [{"id": job}]
    assert sql.one("SELECT count(*) FROM mjsched.scheduled_job") == 1


def test_lost_reply_update_job(make_engine: Callable[..., Any], sql: Any) -> None:
    engine, plan = losing(make_engine, "update_job")
    job = engine.create_job("update-me", "test-ok", NEVER)
    assert engine.update_job(job, description="changed").description == "changed"
    was_lost(plan, "update_job")


def test_lost_reply_pause_jobs(make_engine: Callable[..., Any], sql: Any) -> None:
    """The replay finds the jobs Paused by the lost call and answers 0; each keeps one record."""
    engine, plan = losing(make_engine, "pause_jobs")
    job = engine.create_job("paused-by-tag", "test-ok", NEVER, tags=["lost"])
    assert engine.pause_jobs(tag="lost", reason="replayed") == 0
    was_lost(plan, "pause_jobs")
    assert engine.get_job(job).status is mjsched.JobStatus.PAUSED and engine.get_job(job).pause_reason == "replayed"
    assert sql.one("SELECT count(*) FROM mjsched.job_pause") == 1


def test_lost_reply_resume_jobs(make_engine: Callable[..., Any], sql: Any) -> None:
    engine, plan = losing(make_engine, "resume_jobs")
    job = engine.create_job("resumed-by-tag", "test-ok", NEVER, tags=["lost"])
    engine.pause_jobs(tag="lost")
    assert engine.resume_jobs(tag="lost") == 0          # the replay finds it Active
    was_lost(plan, "resume_jobs")
    assert engine.get_job(job).status is mjsched.JobStatus.ACTIVE
    assert sql.one("SELECT count(*) FROM mjsched.job_pause") == 0


def test_lost_reply_set_tag_limit(make_engine: Callable[..., Any], sql: Any) -> None:
    engine, plan = losing(make_engine, "set_tag_limit")
    engine.set_tag_limit("lost", 3)
    was_lost(plan, "set_tag_limit")
    assert sql.one("SELECT max_running FROM mjsched.tag_limit WHERE tag = 'lost'") == 3


def test_lost_reply_note_frequency_warned(make_engine: Callable[..., Any], sql: Any) -> None:
    engine, plan = losing(make_engine, "note_frequency_warned")
    job = engine.create_job("noted", "test-ok", NEVER)
    assert engine.backend.note_frequency_warned([(job, "every-second")]) == 0     # the replay finds it noted
    was_lost(plan, "note_frequency_warned")
    assert engine.backend.note_frequency_warned([(job, "every-second")]) == 0


def test_lost_reply_purge_runs(make_engine: Callable[..., Any], sql: Any) -> None:
    """The replay deletes nothing more and reports 0: the lost batch's count is not reported."""
    engine, plan = losing(make_engine, "purge_runs")
    job = engine.create_job("purged", "test-ok", NEVER)
    sql.run("""INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, scheduled_for, status, started_at, completed_at)
               SELECT %s, now() - make_interval(days => 30 + g), 'Completed', now() - make_interval(days => 30 + g),
                      now() - make_interval(days => 30 + g) FROM generate_series(1, 3) g""", (job,))
    batch = engine.backend.purge_runs(86400.0, None, per_job=False)
    was_lost(plan, "purge_runs")
    # the job's newest tick run is always kept: it is what marks its ticks served (protocol.md)
    assert batch.purged == 0 and runs_by_status(sql, job) == {"Completed": 1}


def test_lost_reply_purge_job_changes(make_engine: Callable[..., Any], sql: Any) -> None:
    """The replay deletes nothing more (the rows are gone) and reports 0; the audit trail of
    the update whose reply was lost holds its change once."""
    engine, plan = losing(make_engine, "purge_job_changes")
    job = engine.create_job("audited", "test-ok", NEVER)
    sql.run("UPDATE mjsched.job_change SET changed_at = now() - interval '40 days' WHERE job_id = %s", (job,))
    assert engine.backend.purge_job_changes(30 * 86400.0) == 0
    was_lost(plan, "purge_job_changes")
    assert sql.one("SELECT count(*) FROM mjsched.job_change WHERE job_id = %s", (job,)) == 0
    engine, plan = losing(make_engine, "update_job")
    engine.update_job(job, description="once")
    was_lost(plan, "update_job")
    assert sql.rows("SELECT field, new_value FROM mjsched.job_change WHERE job_id = %s", (job,)) == \
        [{"field": "description", "new_value": "once"}]


def test_lost_reply_evaluate_alerts(make_engine: Callable[..., Any], sql: Any) -> None:
    """The replay (same call token) answers the alert the lost call opened: it is delivered
    once, and one row exists."""
    engine, plan = losing(make_engine, "evaluate_alerts", alert_interval=None)
    job = engine.create_job("late", "test-ok", NEVER, alert_late_start=60)
    sql.run("UPDATE mjsched.scheduled_job SET status = 'Active', next_run_at = now() - interval '5 minutes' "
            "WHERE id = %s", (job,))
    assert [(a.kind, a.event) for a in engine.parts.alerts.run_pass()] == [("late_start", "opened")]
    was_lost(plan, "evaluate_alerts")
    assert sql.one("SELECT count(*) FROM mjsched.job_alert WHERE job_id = %s", (job,)) == 1


def test_lost_reply_set_job_alerts(make_engine: Callable[..., Any], sql: Any) -> None:
    """The replay writes the same rules; the audit trail holds the change once."""
    engine, plan = losing(make_engine, "set_job_alerts")
    job = engine.create_job("watched", "test-ok", NEVER, alert_too_long=60)
    was_lost(plan, "set_job_alerts")
    assert engine.job_alerts(job)["alert_too_long"] == 60
    assert sql.one("SELECT count(*) FROM mjsched.job_change WHERE job_id = %s AND field LIKE 'alerts.%%'",
                   (job,)) == 1


def test_lost_reply_register_and_unregister_engine(make_engine: Callable[..., Any], sql: Any) -> None:
    for routine in ("register_engine", "unregister_engine"):
        engine, plan = losing(make_engine, routine)
        if routine == "register_engine":
            engine.backend.register_engine("lost-e", "h", 1, "v")
        else:
            engine.backend.unregister_engine("lost-e")
        was_lost(plan, routine)
    assert sql.one("SELECT count(*) FROM mjsched.engine_instance WHERE instance = 'lost-e' "
                   "AND stopped_at IS NOT NULL") == 1


def test_lost_reply_release_engine_locks(make_engine: Callable[..., Any], sql: Any) -> None:
    engine, plan = losing(make_engine, "release_engine_locks")
    job, _ = held_run(engine, sql, "released")
    assert engine.backend.release_engine_locks("elsewhere", "gone") == (0, 0)     # the replay finds nothing held
    was_lost(plan, "release_engine_locks")
    assert runs_by_status(sql, job) == {"Abandoned": 1}
    assert sql.one("SELECT (lock_token IS NULL AND run_count = 1) FROM mjsched.scheduled_job WHERE id = %s", (job,))


def test_lost_reply_release_job_lock(make_engine: Callable[..., Any], sql: Any) -> None:
    engine, plan = losing(make_engine, "release_job_lock")
    job = engine.create_job("release", "test-ok", NEVER)
    assert engine.backend.acquire_job_lock(job, TOKEN, "e1", 30.0)
    assert engine.backend.release_job_lock(job, TOKEN) is False                 # the replay finds it free
    was_lost(plan, "release_job_lock")
    assert sql.one("SELECT lock_token FROM mjsched.scheduled_job WHERE id = %s", (job,)) is None


def test_lost_reply_sweep_expired_leases(make_engine: Callable[..., Any], sql: Any) -> None:
    engine, plan = losing(make_engine, "sweep_expired_leases")
    job, _ = held_run(engine, sql, "lapsed")
    sql.run("UPDATE mjsched.scheduled_job SET expected_completion_at = now() - interval '1 minute' WHERE id = %s",
            (job,))
    sql.run("UPDATE mjsched.scheduled_job_run SET lease_expires_at = now() - interval '1 minute' "
            "WHERE scheduled_job_id = %s", (job,))
    assert engine.backend.sweep_expired_leases().swept == 0                    # the replay finds nothing lapsed
    was_lost(plan, "sweep_expired_leases")
    assert runs_by_status(sql, job) == {"Abandoned": 1}
    assert sql.one("SELECT (lock_token IS NULL AND run_count = 1) FROM mjsched.scheduled_job WHERE id = %s", (job,))


def test_lost_reply_enqueue_job_run(make_engine: Callable[..., Any], sql: Any) -> None:
    """The replay finds the tick queued (UNIQUE) and answers False; one Queued run."""
    engine, plan = losing(make_engine, "enqueue_job_run")
    job, _ = held_run(engine, sql, "enqueue")
    sql.run("UPDATE mjsched.scheduled_job SET concurrency_mode = 'Queue' WHERE id = %s", (job,))
    sql.run("UPDATE mjsched.scheduled_job_run SET started_at = now() - interval '1 minute' WHERE scheduled_job_id = %s",
            (job,))
    tick = sql.one("SELECT date_trunc('second', now()) - interval '1 second'")
    assert engine.backend.enqueue_job_run(job, tick) is False
    was_lost(plan, "enqueue_job_run")
    assert runs_by_status(sql, job) == {"Running": 1, "Queued": 1}


# Routine -> its lost-reply test ("path::name"), for tests/integration/test_replay_catalog.py.
HERE = "tests/integration/test_lost_replies.py"
LOST_REPLY_TESTS: dict[str, str] = {
    "claim_due_jobs": f"{HERE}::test_the_backend_retry_replays_a_claim_whose_reply_was_lost",
    "start_manual_run": "tests/integration/test_protocol_v3.py::test_a_lost_reply_of_a_manual_start_is_replayed",
    "check_fence": "tests/integration/test_fencing_tokens.py::test_lost_reply_check_fence",
    "complete_runs": "tests/chaos/test_replayed_completion.py::test_lost_reply_of_a_completion_keeps_its_notification",
    "cancel_run": f"{HERE}::test_a_cancel_whose_reply_was_lost_answers_what_it_did",
    "acquire_job_lock": f"{HERE}::test_lost_reply_acquire_job_lock",
    "begin_job_run": f"{HERE}::test_lost_reply_begin_job_run",
    "advance_job": f"{HERE}::test_lost_reply_advance_job",
    "complete_job_runs": f"{HERE}::test_lost_reply_complete_runs_of_the_previous_release",
    "complete_job_run": f"{HERE}::test_lost_reply_complete_runs_of_the_previous_release",
    "delete_job": f"{HERE}::test_lost_reply_delete_job",
    "ensure_job_type": f"{HERE}::test_lost_reply_ensure_job_type",
    "extend_job_leases": f"{HERE}::test_lost_reply_extend_job_leases",
    "renew_leases": f"{HERE}::test_lost_reply_renew_leases",
    "force_unlock_job": f"{HERE}::test_lost_reply_force_unlock_job",
    "initialize_next_runs": f"{HERE}::test_lost_reply_initialize_next_runs",
    "initialize_next_run": f"{HERE}::test_lost_reply_initialize_next_runs",
    "insert_job": f"{HERE}::test_lost_reply_insert_job",
    "update_job": f"{HERE}::test_lost_reply_update_job",
    "note_frequency_warned": f"{HERE}::test_lost_reply_note_frequency_warned",
    "purge_runs": f"{HERE}::test_lost_reply_purge_runs",
    "purge_job_changes": f"{HERE}::test_lost_reply_purge_job_changes",
    "evaluate_alerts": f"{HERE}::test_lost_reply_evaluate_alerts",
    "set_job_alerts": f"{HERE}::test_lost_reply_set_job_alerts",
    "register_engine": f"{HERE}::test_lost_reply_register_and_unregister_engine",
    "unregister_engine": f"{HERE}::test_lost_reply_register_and_unregister_engine",
    "release_engine_locks": f"{HERE}::test_lost_reply_release_engine_locks",
    "release_job_lock": f"{HERE}::test_lost_reply_release_job_lock",
    "sweep_expired_leases": f"{HERE}::test_lost_reply_sweep_expired_leases",
    "enqueue_job_run": f"{HERE}::test_lost_reply_enqueue_job_run",
    "pause_jobs": f"{HERE}::test_lost_reply_pause_jobs",
    "resume_jobs": f"{HERE}::test_lost_reply_resume_jobs",
    "set_tag_limit": f"{HERE}::test_lost_reply_set_tag_limit",
}
