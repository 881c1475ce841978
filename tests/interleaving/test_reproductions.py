"""Deterministic reproductions of the races the rounds find at random (issue 11, item 1).

A controller connection holds one row lock (or one uncommitted row version) to force the
interleaving that the rounds only hit now and then; every wait is bounded, and which
call blocks where is read from pg_stat_activity, so the tests do not depend on how a
fixed procedure orders its locks -- only on the invariants afterwards.
"""
from __future__ import annotations

import json
import uuid
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from itertools import count
from typing import Iterator

import pytest

from tests.interleaving.catalogue import Call
from tests.interleaving.invariants import Violation
from tests.interleaving.rounds import DEADLOCK, Arena, Outcome
from tests.interleaving.states import A, C, LEASE, Job, Run, State, new_id

pytestmark = pytest.mark.interleaving
KEYS = count(7_350_000)     # advisory keys of the forced pauses here (test_forced_pauses uses 7_340_000 on)


@pytest.fixture
def controller(arena: Arena) -> Iterator[Arena]:
    """The arena, its controller connection rolled back after the test whatever happened."""
    yield arena
    arena.controller.execute("ROLLBACK")


def held_job(now: datetime, mode: str = "Skip", instance: str = A, lapse: float = 2.0,
             tick_offset: float = -20.0) -> Job:
    """A job claimed by ``instance`` whose lease (job lock and run, one instant) lapsed ``lapse`` s ago."""
    tick = now + timedelta(seconds=tick_offset)
    token, lease = new_id(), now - timedelta(seconds=lapse)
    job = Job(new_id(), "held_run", mode, next_run_at=tick, token=token, lock_until=lease, locked_by=instance,
              lock_role="run")
    job.runs.append(Run(new_id(), "Running", tick, tick + timedelta(seconds=0.5), token, lease, instance))
    return job


def renew(state: State, *tokens: str) -> Call:
    return Call("renew", "extend_job_leases", (list(tokens), LEASE, A, state.now), renews=tokens)


def claim(state: State, instance: str = C) -> Call:
    return Call("claim", "claim_due_jobs", (instance, 10, LEASE, state.now, str(uuid.uuid4()), False))


def in_turn_behind_a_run_lock(arena: Arena, run_id: str, calls: list[Call]) -> tuple[list[Outcome], list[str]]:
    """Force an inversion: the controller holds ``run_id``'s row while each call starts in turn
    and settles (done, or parked on a lock); then the row is let go and all are finished.
    Returns the outcomes and where each call had settled."""
    arena.controller.execute("BEGIN")
    arena.controller.execute("SELECT 1 FROM mjsched.scheduled_job_run WHERE id = %s FOR UPDATE", (run_id,))
    started, where = [], []
    for worker, call in zip(arena.workers, calls):
        started.append(arena.start(worker, call))
        where.append(arena.settle(started[-1]))
    arena.controller.execute("ROLLBACK")
    return arena.finish(started), where


def violations_of(arena: Arena, state: State, calls: list[Call], outcomes: list[Outcome]) -> list[Violation]:
    found, _checks = arena.check(state, calls, outcomes)
    return found


def describe(found: list[Violation], outcomes: list[Outcome]) -> str:
    errors = [f"{o.sqlstate} {o.error}" for o in outcomes if o.sqlstate or o.timed_out]
    return "; ".join([f"{v.inv}: {v.detail}" for v in found] + errors)


TAKERS = {
    "sweep": lambda s, job: Call("sweep", "sweep_expired_leases", (s.now,)),
    "claim": lambda s, job: claim(s),
    "acquire": lambda s, job: Call("acquire", "acquire_job_lock", (job.id, new_id(), C, LEASE, False, s.now)),
}


def _renewal_racing(arena: Arena, taker: str) -> None:
    """The engine whose lease lapsed renews while another call takes the lapsed lock over.

    The controller holds the run's row lock, so the renewal stops where it first needs the
    run; the taker then runs to its end (or until it blocks), and the controller lets go.
    Afterwards the run must not be Running under a job lock that is not its own (I2), and a
    token reported renewed must hold everything renewed (I5). Then, as an engine would, the
    next claims of the job run: a Skip job must never get a second Running run (I1).
    """
    now = datetime.now(timezone.utc)
    job = held_job(now)
    state = State(now, [job])
    arena.install(state)
    run = job.runs[0]
    calls = [renew(state, run.token), TAKERS[taker](state, job)]
    outcomes, (where_first, where_second) = in_turn_behind_a_run_lock(arena, run.id, calls)
    found = violations_of(arena, state, calls, outcomes)
    steps = f"renewal {where_first}, {taker} {where_second}"

    # What an engine does next: claim the due tick; a tick already served is advanced past.
    later = State(now + timedelta(seconds=1), [job])
    for _ in range(2):
        batch = arena.workers[2].call(claim(later).sql("postgres"), claim(later).params)
        for row in batch.rows:
            if row["job_id"] is not None and row["run_id"] is None:
                arena.workers[2].call("SELECT * FROM mjsched.advance_job(%s, %s, %s, true)",
                                      (row["job_id"], row["lock_token"], later.now - timedelta(seconds=0.5)))
    after, _ = arena.check(later, [], [])
    assert not found and not after, (f"{taker}: {steps}; after the race: {describe(found, outcomes)}"
                                     f"; after the next claims: {describe(after, [])}")


def test_renewal_racing_sweep_never_leaves_a_running_run_unlocked(controller: Arena) -> None:
    _renewal_racing(controller, "sweep")


@pytest.mark.parametrize("taker", ["claim", "acquire"])
def test_renewal_racing_a_takeover_never_leaves_a_running_run_unlocked(controller: Arena, taker: str) -> None:
    _renewal_racing(controller, taker)


def test_claim_racing_renewal_never_deadlocks(controller: Arena) -> None:
    """A claim taking over a lapsed job while its first holder renews it and another job.

    The controller holds the row lock of the second job's run, so a renewal that updates
    runs before jobs (a5c28c1) has a new, uncommitted version of the first run when it
    stops; the claim then locks the first job and its tick insert meets that run version
    (the same tick) and waits for the renewal; when the controller lets go, the renewal
    goes on to the first job's row, which the claim holds: deadlock detected (I7).
    """
    arena = controller
    now = datetime.now(timezone.utc)
    lapsed, live = held_job(now), held_job(now, lapse=-20)
    lapsed.runs[0].token = lapsed.token = "00000000-0000-4000-8000-" + new_id()[-12:]   # sorts first
    live.runs[0].token = live.token = "ffffffff-0000-4000-8000-" + new_id()[-12:]       # and is read last
    state = State(now, [lapsed, live])
    arena.install(state)                            # rows in that order too (a scan in physical order)
    calls = [renew(state, lapsed.token, live.token), claim(state)]
    outcomes, (where_first, where_second) = in_turn_behind_a_run_lock(arena, live.runs[0].id, calls)
    found = violations_of(arena, state, calls, outcomes)
    deadlocks = sum(o.sqlstate == DEADLOCK for o in outcomes)
    assert deadlocks == 0 and not found, (f"renewal {where_first}, claim {where_second}: {deadlocks} deadlock(s); "
                                          f"{describe(found, outcomes)}")


def test_a_replayed_begin_job_run_never_starts_a_second_run(arena: Arena) -> None:
    """A manual run's begin_job_run whose reply was lost, sent again by a release-2 engine
    (which retries every call): the second call must not start a second Running run of
    the Skip job (I1). The first call has committed when the replay arrives."""
    now = datetime.now(timezone.utc)
    job = Job(new_id(), "manual_lock", "Skip", next_run_at=now + timedelta(seconds=30), token=new_id(),
              lock_until=now + timedelta(seconds=20), locked_by=A, lock_role="manual")
    state = State(now, [job])
    arena.install(state)
    call = Call("begin", "begin_job_run", (job.id, job.token, A, None, now))
    outcomes = [arena.workers[0].call(call.sql("postgres"), call.params) for _ in range(2)]
    found = violations_of(arena, state, [call, call], outcomes)
    runs = arena.rows("SELECT count(*) AS n FROM mjsched.scheduled_job_run WHERE lock_token = %s", (job.token,))
    assert not found, f"{runs[0]['n']} runs after a replayed begin_job_run: {describe(found, outcomes)}"


def test_a_replayed_completion_is_counted_once(arena: Arena) -> None:
    """complete_job_runs raced by its own replay: the run is finished once and counted once (I6)."""
    now = datetime.now(timezone.utc)
    job = held_job(now, lapse=-20)   # a live lease
    state = State(now, [job])
    arena.install(state)
    run = job.runs[0]
    items = json.dumps([{"run_id": run.id, "token": run.token, "status": "Completed", "error_message": None,
                         "details": None, "next_run_at": (now + timedelta(seconds=30)).isoformat(),
                         "guard": True, "expected_next_run_at": job.next_run_at.isoformat()}])
    call = Call("complete", "complete_job_runs", (items, now), moves=(run.token,))
    pendings = [arena.start(w, call) for w in arena.workers[:2]]
    outcomes = arena.finish(pendings)
    found = violations_of(arena, state, [call, call], outcomes)
    acked = [r["completed"] for o in outcomes for r in o.rows]
    assert not found and acked == [1, 1], f"acknowledged {acked}: {describe(found, outcomes)}"


@contextmanager
def claimable_pausing_for(arena: Arena, lease_until: datetime) -> Iterator[str]:
    """mjsched.claimable, for this block, parks a session that asked for the pause point it
    yields while it evaluates the job whose lease ends at ``lease_until``: a claim's candidate
    statement is then held between its snapshot and its row lock, a window no statement
    boundary offers. The installed definition is put back afterwards."""
    signature = "mjsched.claimable(varchar, timestamptz, timestamptz, uuid, timestamptz, timestamptz)"
    original = arena.rows(f"SELECT pg_get_functiondef('{signature}'::regprocedure) AS d")[0]["d"]
    arena.admin.execute("""
        CREATE OR REPLACE FUNCTION mjsched.claimable(
            p_status varchar, p_start_at timestamptz, p_end_at timestamptz,
            p_lock_token uuid, p_lease_until timestamptz, p_now timestamptz)
        RETURNS boolean LANGUAGE plpgsql VOLATILE AS $fn$
        BEGIN
            IF p_lease_until = %s THEN
                PERFORM mjsched.test_pause('claimable:candidate_read');
            END IF;
            RETURN p_status = 'Active' AND (p_start_at IS NULL OR p_start_at <= p_now)
               AND (p_end_at IS NULL OR p_end_at > p_now)
               AND (p_lock_token IS NULL OR p_lease_until < p_now);
        END;
        $fn$""", (lease_until,))
    try:
        yield "claimable:candidate_read"
    finally:
        arena.admin.execute(original)


def test_a_claim_never_starts_a_queue_tick_while_a_tick_it_did_not_see_waits_queued(arena: Arena) -> None:
    """Issue 32, suspect 3 (confirmed on 009e285). A Queue job's lease lapsed while its run
    still runs; its engine keeps a tick that came due (enqueue_job_run) as another engine's
    claim reads its candidates. The claim's snapshot predates the Queued tick, and the job row
    is free again when the claim locks it (enqueue only locked it, a lock leaves no new row
    version to re-check), so claim_ticks took the job over and started its next_run_at tick
    while an older tick waited Queued: Queue ticks out of order (I8). claim_ticks now re-checks
    "no Queued tick" under the row lock, and the queue is served first (claim_queued)."""
    now = datetime.now(timezone.utc)
    lease = now - timedelta(seconds=2, microseconds=4321)               # lapsed, and unique
    token, started = new_id(), now - timedelta(seconds=19.5)
    job = Job(new_id(), "held_queue", "Queue", next_run_at=now - timedelta(seconds=2), token=token,
              lock_until=lease, locked_by=A, lock_role="run", max_queued_runs=3)
    job.runs.append(Run(new_id(), "Running", now - timedelta(seconds=20), started, token, lease, A,
                        queued_at=now - timedelta(seconds=25)))          # a run taken from the queue
    state = State(now, [job])
    tick = now - timedelta(seconds=3)                                    # came due while that run ran
    enqueue = Call("enqueue", "enqueue_job_run", (job.id, tick, now - timedelta(seconds=1)))
    with claimable_pausing_for(arena, lease) as point:
        result = arena.pause_round(state, claim(state), point, enqueue, next(KEYS))
    assert result.note == "other done", result.note                      # parked mid-statement; enqueued
    assert result.outcomes[1].rows == [{"enqueued": 1}], describe([], result.outcomes)
    assert not result.violations, describe(result.violations, result.outcomes)
    # the next claim serves the queue first: the Queued tick, then (after it) the job's next tick
    later = State(now + timedelta(seconds=1), [job])
    batch = arena.workers[2].call(claim(later).sql("postgres"), claim(later).params)
    taken = [(r["scheduled_for"], r["from_queue"]) for r in batch.rows if r["job_id"] is not None]
    assert taken == [(tick, True)], taken
