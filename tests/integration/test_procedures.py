"""The lock and lease procedures, raced by several real connections at once.

The contract suite: every test runs once per dialect (the ``db`` fixture), on
PostgreSQL always and on SQL Server when a server is given (tests/support/mssql.py).
"""
from __future__ import annotations

import dataclasses
import json
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterator

import pytest

from mjsched.backends import open_backend
from mjsched.backends.base import Backend, Completion
from mjsched.errors import ConfigurationError, JobNameTaken
from tests.support.db import Db


@pytest.fixture
def backend(db: Db) -> Iterator[Backend]:
    b = db.backend(pool_size=20)
    yield b
    b.close()


def new_job(backend: Backend, *, next_run_at: datetime | None = None, **fields: Any) -> str:
    type_id = backend.ensure_job_type("python")
    values = {"job_type_id": type_id, "name": fields.pop("name", "job"), "cron_expression": "0 0 1 1 *",
              "status": "Active", "configuration": {"callable": "os:getpid"},
              "next_run_at": next_run_at, **fields}
    return backend.insert_job(values)


def race(n: int, fn: Callable[[int], Any]) -> list[Any]:
    """Run ``fn(i)`` on ``n`` threads released together by a barrier."""
    barrier = threading.Barrier(n, timeout=10)

    def go(i: int) -> Any:
        barrier.wait()
        return fn(i)
    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(go, range(n)))


def token() -> str:
    return str(uuid.uuid4())


def past(seconds: float = 60) -> datetime:
    return datetime.now(timezone.utc) - timedelta(seconds=seconds)


def test_sixteen_racing_acquirers_exactly_one_wins(backend: Backend, db: Db) -> None:
    job = new_job(backend)
    tokens = [token() for _ in range(16)]
    won = race(16, lambda i: backend.acquire_job_lock(job, tokens[i], f"engine-{i}", 60))
    assert sum(won) == 1
    holder = tokens[won.index(True)]
    assert db.lock_token(job) == holder


def test_release_with_wrong_token_changes_nothing(backend: Backend, db: Db) -> None:
    job = new_job(backend)
    mine = token()
    assert backend.acquire_job_lock(job, mine, "a", 60)
    results = race(8, lambda i: backend.release_job_lock(job, token()))
    assert results == [False] * 8
    assert db.lock_token(job) == mine
    assert backend.release_job_lock(job, mine) is True
    assert backend.release_job_lock(job, mine) is False  # idempotent
    assert db.lock_token(job) is None


def test_lease_expiry_hands_the_lock_over_and_fences_the_old_holder(backend: Backend, db: Db) -> None:
    job = new_job(backend, next_run_at=past())
    batch = backend.claim_due_jobs("old", 10, 30)
    (claim,) = batch.claims
    later = batch.db_now + timedelta(seconds=31)  # the database's own clock, moved past the lease
    newer = [token() for _ in range(8)]
    won = race(8, lambda i: backend.acquire_job_lock(job, newer[i], f"new-{i}", 30, now=later))
    assert sum(won) == 1
    # the old holder's run was abandoned by the takeover; its writes change nothing now
    assert backend.release_job_lock(job, claim.lock_token) is False
    assert backend.extend_job_leases([claim.lock_token], 30, now=later) == set()
    assert backend.complete_job_run(claim.run_id, claim.lock_token, "Completed", None, None, later) is False
    assert db.lock_token(job) == newer[won.index(True)]
    # a takeover counts the abandoned run like the sweep does (once, as a failure)
    assert db.job_value(job, "run_count") == 1
    assert db.job_value(job, "failure_count") == 1
    assert db.run_status(claim.run_id) == "Abandoned"


def test_live_lease_cannot_be_taken(backend: Backend) -> None:
    job = new_job(backend)
    assert backend.acquire_job_lock(job, token(), "a", 60)
    assert not backend.acquire_job_lock(job, token(), "b", 60)


def test_two_engines_claim_a_thousand_due_jobs_each_exactly_once(backend: Backend, db: Db) -> None:
    db.insert_due_jobs(backend.ensure_job_type("python"), 1000)
    engines = [db.backend(pool_size=2) for _ in range(2)]
    claimed: list[list[str]] = [[], []]
    barrier = threading.Barrier(2, timeout=10)

    def drain(i: int) -> None:
        barrier.wait()
        while True:
            batch = engines[i].claim_due_jobs(f"engine-{i}", 50, 60)
            if not batch.claims:
                return
            claimed[i].extend(c.job_id for c in batch.claims)
    try:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(drain, range(2)))
    finally:
        for e in engines:
            e.close()
    both = claimed[0] + claimed[1]
    assert len(both) == 1000 and len(set(both)) == 1000
    assert claimed[0] and claimed[1], "both engines should have won some jobs"
    assert db.count_runs("Running") == 1000
    assert db.one("""SELECT count(*) FROM (SELECT scheduled_job_id FROM mjsched.scheduled_job_run
                       GROUP BY 1 HAVING count(*) > 1) d""") == 0


def test_claim_respects_max_jobs_and_reports_next_due(backend: Backend) -> None:
    for i in range(5):
        new_job(backend, name=f"due{i}", next_run_at=past())
    future = datetime.now(timezone.utc) + timedelta(hours=1)
    new_job(backend, name="later", next_run_at=future)
    batch = backend.claim_due_jobs("a", 3, 60)
    assert len(batch.claims) == 3
    assert batch.due_left == 2
    assert batch.next_due_at is not None and batch.next_due_at <= future
    again = backend.claim_due_jobs("b", 10, 60)
    assert len(again.claims) == 2 and again.locked_out == 3


def test_sweep_abandons_only_running_runs(backend: Backend, db: Db) -> None:
    jobs = [new_job(backend, name=f"s{i}", next_run_at=past()) for i in range(3)]
    batch = backend.claim_due_jobs("a", 10, 30)
    assert len(batch.claims) == 3
    done, running, queued_job = batch.claims[0], batch.claims[1], batch.claims[2]
    assert backend.complete_job_run(done.run_id, done.lock_token, "Completed", None, None, None)
    # a Queued run and a Completed run must survive the sweep untouched
    db.run("UPDATE mjsched.scheduled_job SET concurrency_mode = 'Queue' WHERE id = ?", (queued_job.job_id,))
    tick = batch.db_now + timedelta(seconds=1)     # came due while the job ran
    assert backend.enqueue_job_run(queued_job.job_id, tick, now=tick + timedelta(seconds=1))
    later = batch.db_now + timedelta(seconds=31)
    results = race(4, lambda i: backend.sweep_expired_leases(now=later))
    assert sum(r.swept for r in results) == 2  # the two Running runs, once each, across racing sweeps
    statuses = {str(r["id"]): r["status"] for r in db.rows("SELECT id, status FROM mjsched.scheduled_job_run")}
    assert statuses[done.run_id] == "Completed"
    assert statuses[running.run_id] == "Abandoned"
    assert sorted(statuses.values()).count("Queued") == 1
    assert db.one("SELECT count(*) FROM mjsched.scheduled_job WHERE lock_token IS NOT NULL") == 0
    assert db.job_value(running.job_id, "failure_count") == 1
    assert jobs  # all three jobs exist


def test_sweep_is_a_no_op_when_nothing_is_stale(backend: Backend) -> None:
    new_job(backend, next_run_at=past())
    backend.claim_due_jobs("a", 10, 60)
    result = backend.sweep_expired_leases()
    assert (result.swept, result.locks_freed, result.expired_jobs) == (0, 0, 0)


def test_heartbeat_racing_the_sweep_one_of_them_wins(backend: Backend, db: Db) -> None:
    new_job(backend, next_run_at=past())
    (claim,) = backend.claim_due_jobs("a", 1, 30).claims
    at = datetime.now(timezone.utc) + timedelta(seconds=31)

    def act(i: int) -> Any:
        if i % 2:
            return backend.sweep_expired_leases(now=at).swept
        return len(backend.extend_job_leases([claim.lock_token], 30, now=at))
    outcome = race(6, act)
    status = db.run_status(claim.run_id)
    if status == "Running":
        assert sum(outcome[1::2]) == 0          # every sweep lost to the renewal
    else:
        assert status == "Abandoned" and sum(outcome[1::2]) == 1


def test_extend_renews_only_matching_tokens_in_one_call(backend: Backend) -> None:
    for i in range(4):
        new_job(backend, name=f"e{i}", next_run_at=past())
    claims = backend.claim_due_jobs("a", 10, 30).claims
    stranger = token()
    renewed = backend.extend_job_leases([c.lock_token for c in claims] + [stranger], 60)
    assert renewed == {c.lock_token for c in claims}


def test_racing_completions_of_one_run_land_once(backend: Backend, db: Db) -> None:
    job = new_job(backend, next_run_at=past())
    (claim,) = backend.claim_due_jobs("a", 1, 60).claims
    nxt = datetime.now(timezone.utc) + timedelta(hours=1)
    landed = race(8, lambda i: backend.complete_job_run(claim.run_id, claim.lock_token, "Completed", None,
                                                         {"i": i}, nxt))
    assert sum(landed) >= 1   # exact replays of the landed completion may also answer 1 (idempotent)
    row = db.rows("SELECT run_count, success_count, lock_token, next_run_at FROM mjsched.scheduled_job "
                  "WHERE id = ?", (job,))[0]
    assert row["run_count"] == 1 and row["success_count"] == 1 and row["lock_token"] is None
    assert abs((row["next_run_at"] - nxt).total_seconds()) < 1e-3


def test_a_replayed_completion_is_acknowledged_and_counted_once(backend: Backend, db: Db) -> None:
    job = new_job(backend, next_run_at=past())
    (claim,) = backend.claim_due_jobs("a", 1, 60).claims
    item = Completion(claim.run_id, claim.lock_token, "Completed", None, {"n": 1}, None)
    assert backend.complete_job_runs([item]) == {claim.run_id: True}
    assert backend.complete_job_runs([item]) == {claim.run_id: True}     # the retry after a lost reply
    other = Completion(claim.run_id, claim.lock_token, "Failed", "late", None, None)
    assert backend.complete_job_runs([other]) == {claim.run_id: False}   # not a replay: a different outcome
    assert db.job_value(job, "run_count") == 1


def test_batched_completion_is_fenced_per_run(backend: Backend, db: Db) -> None:
    for i in range(3):
        new_job(backend, name=f"b{i}", next_run_at=past())
    a, b, c = backend.claim_due_jobs("a", 10, 60).claims
    items = [Completion(a.run_id, a.lock_token, "Completed"),
             Completion(b.run_id, token(), "Completed"),            # wrong token
             Completion(c.run_id, c.lock_token, "Failed", "boom", {"x": 1})]
    assert backend.complete_job_runs(items) == {a.run_id: True, b.run_id: False, c.run_id: True}
    assert db.run_status(b.run_id) == "Running"
    assert db.one("SELECT error_message FROM mjsched.scheduled_job_run WHERE id = ?", (c.run_id,)) == "boom"


def test_completion_rejects_an_unknown_status(backend: Backend) -> None:
    new_job(backend, next_run_at=past())
    (claim,) = backend.claim_due_jobs("a", 1, 60).claims
    with pytest.raises(ConfigurationError):
        backend.complete_job_run(claim.run_id, claim.lock_token, "Running", None, None, None)


def test_a_tick_can_never_have_two_runs(backend: Backend, db: Db) -> None:
    tick = past()
    job = new_job(backend, next_run_at=tick)
    (first,) = backend.claim_due_jobs("a", 1, 30).claims
    # lease lapses without completion; a new engine takes the same tick over
    later = datetime.now(timezone.utc) + timedelta(seconds=31)
    (second,) = backend.claim_due_jobs("b", 1, 30, now=later).claims
    assert second.run_id is None and second.scheduled_for == first.scheduled_for
    assert db.count_runs(job_id=job) == 1


def test_enqueue_keeps_one_run_per_tick_and_bounds_the_queue(backend: Backend, db: Db) -> None:
    job = new_job(backend, concurrency_mode="Queue", max_queued_runs=3, next_run_at=past())
    (running,) = backend.claim_due_jobs("a", 1, 600).claims
    tick = running.db_now + timedelta(seconds=1)
    now = tick + timedelta(seconds=30)
    assert sum(race(16, lambda i: backend.enqueue_job_run(job, tick, now=now))) == 1
    ticks = [tick + timedelta(seconds=i + 1) for i in range(10)]
    assert sum(race(10, lambda i: backend.enqueue_job_run(job, ticks[i], now=now))) == 2
    assert db.count_runs("Queued") == 3


def test_enqueue_keeps_only_ticks_that_came_due_while_the_job_runs(backend: Backend, db: Db) -> None:
    job = new_job(backend, concurrency_mode="Queue", max_queued_runs=5, next_run_at=past())
    assert not backend.enqueue_job_run(job, past(1))            # not running: nothing to queue behind
    (running,) = backend.claim_due_jobs("a", 1, 600).claims
    started = running.db_now
    now = started + timedelta(seconds=10)
    assert not backend.enqueue_job_run(job, started - timedelta(seconds=1), now=now)   # before the run began
    assert not backend.enqueue_job_run(job, now + timedelta(seconds=1), now=now)       # not due yet
    assert backend.enqueue_job_run(job, started + timedelta(seconds=1), now=now)
    assert db.count_runs("Queued") == 1


def test_a_claim_reports_the_database_clock_at_its_end(backend: Backend) -> None:
    """replied_at: the clock as the claim ended (the engine's clock estimate starts from it;
    db_now is the claim's start); under a test clock, the test clock."""
    new_job(backend, name="due", next_run_at=past())
    batch = backend.claim_due_jobs("a", 5, 60)
    assert len(batch.claims) == 1
    assert batch.db_now is not None and batch.replied_at is not None
    assert batch.db_now <= batch.replied_at <= datetime.now(timezone.utc) + timedelta(seconds=5)
    later = datetime.now(timezone.utc) + timedelta(hours=2)
    assert backend.claim_due_jobs("a", 5, 60, now=later).replied_at == later


def test_queued_runs_are_claimed_before_new_ticks(backend: Backend, db: Db) -> None:
    job = new_job(backend, concurrency_mode="Queue", next_run_at=past(5))
    queued_tick = past(30)
    db.queue_tick(job, queued_tick)
    (claim,) = backend.claim_due_jobs("a", 5, 60).claims
    assert claim.from_queue and claim.scheduled_for == queued_tick
    assert db.run_status(claim.run_id) == "Running"


def test_each_claim_carries_its_job_as_the_claim_left_it(backend: Backend, db: Db) -> None:
    """The claim's rows hold the jobs' rows (one round trip per poll), read after the claim
    took the locks, without lock_token; a replay answers them again."""
    tick = new_job(backend, name="tick", next_run_at=past(5), max_runtime_seconds=600)
    queued = new_job(backend, name="queued", concurrency_mode="Queue", next_run_at=past(5))
    db.queue_tick(queued, past(30))
    claim_id = str(uuid.uuid4())
    batch = backend.claim_due_jobs("a", 5, 60, claim_id=claim_id)
    assert sorted(batch.jobs) == sorted([tick, queued]) == sorted(c.job_id for c in batch.claims)
    for job_id, job in batch.jobs.items():
        assert job == dataclasses.replace(backend.get_job(job_id), lock_token=None)
        assert job.locked_by_instance == "a" and job.expected_completion_at is not None and job.lock_token is None
    assert batch.jobs[tick].driver == "python" and batch.jobs[tick].name == "tick"
    assert batch.jobs[tick].expected_completion_at - batch.db_now >= timedelta(seconds=600)   # the claim's lease
    assert batch.jobs[queued].concurrency_mode.value == "Queue"
    again = backend.claim_due_jobs("a", 5, 60, claim_id=claim_id, replay=True)
    assert again.jobs == batch.jobs


def test_initialize_next_run_is_compare_and_set(backend: Backend) -> None:
    job = new_job(backend)
    when = [datetime.now(timezone.utc) + timedelta(minutes=i) for i in range(8)]
    assert sum(race(8, lambda i: backend.initialize_next_run(job, when[i]))) == 1


def test_install_from_several_engines_at_once(empty_db_dsn: str) -> None:
    backends = [open_backend(empty_db_dsn) for _ in range(4)]
    try:
        applied = race(4, lambda i: backends[i].install())
        assert sorted(len(a) for a in applied)[-1] >= 2 and sum(1 for a in applied if a) == 1
        assert backends[0].installed_versions() == sorted(max(applied, key=len))
        assert backends[1].install() == []       # idempotent once installed
    finally:
        for b in backends:
            b.close()


def test_bad_procedure_arguments_are_typed_errors(backend: Backend) -> None:
    job = new_job(backend)
    with pytest.raises(ConfigurationError, match="lease_seconds"):
        backend.acquire_job_lock(job, token(), "a", 0)
    with pytest.raises(ConfigurationError, match="max_jobs"):
        backend.claim_due_jobs("a", -1, 60)


def test_an_insert_under_its_own_id_answers_the_job_an_earlier_attempt_inserted(backend: Backend, db: Db) -> None:
    """insert_job takes the new job's id from its caller: a retry after a lost reply, or racing
    an attempt still under way, answers the job inserted under that id; the id or the name of
    another job is refused."""
    job_id = token()
    assert race(4, lambda i: new_job(backend, id=job_id, name="once")) == [job_id] * 4
    assert new_job(backend, id=job_id, name="once") == job_id
    assert db.one("SELECT count(*) FROM mjsched.scheduled_job") == 1
    for other in ({"name": "other"}, {"name": "once", "job_type_id": backend.ensure_job_type("shell")}):
        with pytest.raises(ConfigurationError, match="fields.id") as refused:
            new_job(backend, id=job_id, **other)
        assert not isinstance(refused.value, JobNameTaken)
    with pytest.raises(JobNameTaken) as taken:
        new_job(backend, id=token(), name="once")
    assert taken.value.existing_id == job_id
    for bad in ("not-a-uuid", 5, job_id + "0"):
        with pytest.raises(ConfigurationError, match="fields.id"):
            new_job(backend, id=bad, name="bad")
    assert db.one("SELECT count(*) FROM mjsched.scheduled_job") == 1
    # a caller of the previous release sends no id: the job gets one
    fields = json.dumps({"job_type_id": backend.ensure_job_type("python"), "name": "no-id",
                         "cron_expression": "0 0 1 1 *"})
    call = ("SELECT job_id FROM mjsched.insert_job(?::jsonb)" if db.dialect == "postgres"
            else "EXEC mjsched.insert_job @p_fields = ?")
    assert str(db.one(call, (fields,))) == str(db.one("SELECT id FROM mjsched.scheduled_job WHERE name = 'no-id'"))


def _claims(batch: Any) -> list[tuple[Any, ...]]:
    return sorted((c.job_id, c.run_id, c.lock_token, c.scheduled_for, c.from_queue) for c in batch.claims)


def test_a_replayed_claim_answers_the_same_claims_and_takes_nothing_new(backend: Backend, db: Db) -> None:
    for i in range(5):
        new_job(backend, name=f"r{i}", next_run_at=past(10 - i))
    claim_id = token()
    first = backend.claim_due_jobs("a", 3, 60, claim_id=claim_id)
    assert len(first.claims) == 3 and all(c.run_id for c in first.claims)
    # the reply was lost: several retries of it race, each a replay of the same claim
    replies = race(6, lambda i: backend.claim_due_jobs("a", 3, 60, claim_id=claim_id, replay=True))
    assert all(_claims(r) == _claims(first) for r in replies)
    assert db.count_runs("Running") == 3
    assert replies[0].db_now is not None and replies[0].next_due_at is not None
    # a replay under another instance's name, or of a claim that never committed, claims as usual
    assert backend.claim_due_jobs("b", 3, 60, claim_id=claim_id, replay=True).claims != first.claims
    assert db.count_runs("Running") == 5


def test_a_replay_of_a_claim_that_never_committed_claims_as_usual(backend: Backend, db: Db) -> None:
    new_job(backend, next_run_at=past())
    batch = backend.claim_due_jobs("a", 5, 60, claim_id=token(), replay=True)
    assert len(batch.claims) == 1 and batch.claims[0].run_id
    assert db.count_runs("Running") == 1


def test_a_replay_keeps_queued_runs_and_served_ticks_as_they_were_claimed(backend: Backend, db: Db) -> None:
    served = new_job(backend, name="served", next_run_at=past(20))
    (old,) = backend.claim_due_jobs("zombie", 1, 30).claims          # the served tick's first run
    queued = new_job(backend, name="queued", concurrency_mode="Queue", next_run_at=past(5))
    db.queue_tick(queued, past(30))
    later = old.db_now + timedelta(seconds=31)
    claim_id = token()
    first = backend.claim_due_jobs("a", 5, 30, now=later, claim_id=claim_id)
    again = backend.claim_due_jobs("a", 5, 30, now=later, claim_id=claim_id, replay=True)
    assert _claims(again) == _claims(first)
    kinds = {c.job_id: (c.from_queue, c.run_id is None) for c in again.claims}
    assert kinds == {queued: (True, False), served: (False, True)}


def test_a_replay_after_the_lease_was_taken_over_answers_nothing_for_that_job(backend: Backend, db: Db) -> None:
    job = new_job(backend, next_run_at=past())
    claim_id = token()
    first = backend.claim_due_jobs("a", 1, 30, claim_id=claim_id)
    later = first.db_now + timedelta(seconds=31)
    assert backend.acquire_job_lock(job, token(), "b", 30, now=later)
    again = backend.claim_due_jobs("a", 1, 30, now=later, claim_id=claim_id, replay=True)
    assert again.claims == []          # nothing of the old claim is ours now, and nothing else is due
    assert db.run_status(first.claims[0].run_id) == "Abandoned"


def test_a_guarded_completion_sets_the_next_run_only_if_nobody_moved_it(backend: Backend, db: Db) -> None:
    tick = past()
    jobs = [new_job(backend, name=f"g{i}", next_run_at=tick) for i in range(2)]
    claims = {c.job_id: c for c in backend.claim_due_jobs("a", 2, 60).claims}
    seen = backend.get_job(jobs[0]).next_run_at              # what the engine saw at the claim
    edited = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(days=3)
    assert backend.update_job(jobs[1], {"cron_expression": "0 12 * * *", "next_run_at": edited})  # edited mid-run
    nxt = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(hours=1)
    items = [Completion(claims[j].run_id, claims[j].lock_token, "Completed", None, None, nxt,
                        guard=True, expected_next_run_at=seen) for j in jobs]
    assert backend.complete_job_runs(items) == {claims[j].run_id: True for j in jobs}
    assert db.job_value(jobs[0], "next_run_at") == nxt        # untouched since the claim: moved on
    assert db.job_value(jobs[1], "next_run_at") == edited     # edited during the run: the edit stands
    assert db.lock_token(jobs[1]) is None                     # the lock is released either way


def test_a_guarded_advance_keeps_a_schedule_edited_since_the_claim(backend: Backend, db: Db) -> None:
    """Issue 32, suspect 1 (confirmed): a Concurrent claim drops its job lock with advance_job
    right after the claim; an edit that lands between the two had its next_run_at overwritten
    with one computed from the row the claim read. Guarded like a completion, the advance moves
    next_run_at only while it is still the tick it claimed; the lock is released either way."""
    tick = past()
    jobs = [new_job(backend, name=f"c{i}", concurrency_mode="Concurrent", next_run_at=tick) for i in range(2)]
    claims = {c.job_id: c for c in backend.claim_due_jobs("a", 2, 60).claims}
    edited = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(days=3)
    assert backend.update_job(jobs[1], {"cron_expression": "0 12 * * *", "next_run_at": edited})
    nxt = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(hours=1)   # from the old cron
    for job in jobs:
        c = claims[job]
        assert backend.advance_job(job, c.lock_token, nxt, release=True, guard=True,
                                   expected_next_run_at=c.scheduled_for)
    assert db.job_value(jobs[0], "next_run_at") == nxt         # untouched since the claim: moved on
    assert db.job_value(jobs[1], "next_run_at") == edited      # edited since the claim: the edit stands
    assert [db.lock_token(j) for j in jobs] == [None, None]    # both locks let go
    assert [db.run_status(claims[j].run_id) for j in jobs] == ["Running", "Running"]   # the runs go on


def test_a_replay_after_its_own_leases_lapsed_claims_afresh_and_keeps_the_new_run(backend: Backend,
                                                                                    db: Db) -> None:
    job = new_job(backend, concurrency_mode="Queue", next_run_at=past(5))
    db.queue_tick(job, past(30))
    claim_id = token()
    (first,) = backend.claim_due_jobs("a", 1, 30, claim_id=claim_id).claims      # starts the queued run
    later = first.db_now + timedelta(seconds=31)                                  # ...whose lease lapses
    (again,) = backend.claim_due_jobs("a", 1, 30, now=later, claim_id=claim_id, replay=True).claims
    assert again.run_id != first.run_id and again.lock_token == first.lock_token  # same derived token
    assert db.run_status(first.run_id) == "Abandoned"
    assert db.run_status(again.run_id) == "Running"        # not abandoned along with the lapsed one
