"""The harness checks itself: each invariant query finds a state built to break it, and
forced pauses catch a renewal that locks runs before jobs (installed in this module's
own database only). A harness that cannot fail proves nothing.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from tests.interleaving.catalogue import Call
from tests.interleaving.invariants import Outcome
from tests.interleaving.rounds import DEADLOCK, Arena
from tests.interleaving.states import A, LEASE, Job, Run, State, new_id

pytestmark = pytest.mark.interleaving

# extend_job_leases as a5c28c1 ordered it (runs, then jobs), as two statements with a
# boundary between them, so a forced pause can stop it where the inversion bites.
INVERTED_RENEWAL = """
CREATE OR REPLACE FUNCTION mjsched.extend_job_leases(
    p_tokens uuid[], p_lease_seconds double precision,
    p_instance varchar DEFAULT NULL, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (lock_token uuid)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE v_now timestamptz := coalesce(p_now, now()); v_renewed uuid[];
BEGIN
    WITH runs AS (
        UPDATE mjsched.scheduled_job_run r SET lease_expires_at = v_now + make_interval(secs => p_lease_seconds)
         WHERE r.lock_token = ANY (p_tokens) AND r.status = 'Running' RETURNING r.lock_token)
    SELECT coalesce(array_agg(runs.lock_token), '{}') INTO v_renewed FROM runs;
    PERFORM mjsched.test_pause('extend_job_leases:runs_renewed');
    UPDATE mjsched.scheduled_job j SET expected_completion_at = v_now + make_interval(secs => p_lease_seconds)
     WHERE j.lock_token = ANY (v_renewed);
    RETURN QUERY SELECT unnest(v_renewed);
END;
$$;
"""


def _held(now: datetime, mode: str = "Skip", lapse: float = 2.0) -> Job:
    tick = now - timedelta(seconds=20)
    token, lease = new_id(), now - timedelta(seconds=lapse)
    job = Job(new_id(), "held_run", mode, next_run_at=tick, token=token, lock_until=lease, locked_by=A,
              lock_role="run")
    job.runs.append(Run(new_id(), "Running", tick, tick + timedelta(seconds=0.5), token, lease, A))
    return job


def _broken_states(now: datetime) -> dict[str, State]:
    two = _held(now)
    two.runs.append(Run(new_id(), "Running", None, now - timedelta(seconds=5), two.token, two.lock_until, A))
    unlocked = _held(now)
    unlocked.token = unlocked.lock_until = unlocked.locked_by = None
    full = _held(now, "Queue")
    full.max_queued_runs = 1
    old_tick = _held(now, "Queue")
    for job, ticks in ((full, (-15, -10)), (old_tick, (-25,))):
        for t in ticks:
            at = now + timedelta(seconds=t)
            job.runs.append(Run(new_id(), "Queued", at, queued_at=now - timedelta(seconds=1)))
    counted = _held(now)
    counted.runs.append(Run(new_id(), "Abandoned", now - timedelta(seconds=90), now - timedelta(seconds=89),
                            new_id(), None, A, None, now - timedelta(seconds=60)))
    # retries (009): a second attempt after a Completed first one; two attempts of a tick pending
    after_success = _held(now)
    done = after_success.runs[0]
    done.status, done.token, done.lease, done.completed_at = "Completed", new_id(), None, now - timedelta(seconds=3)
    after_success.token = after_success.lock_until = after_success.locked_by = None
    after_success.runs.append(Run(new_id(), "Queued", done.scheduled_for, queued_at=now, attempt=2, retry_at=now))
    both = _held(now)
    both.runs.append(Run(new_id(), "Queued", both.runs[0].scheduled_for, queued_at=now, attempt=2, retry_at=now))
    # a tick run started while an older tick waited Queued (I8); a tick run behind a later one (I9)
    queued_first = _held(now, "Queue")
    queued_first.runs.append(Run(new_id(), "Queued", now - timedelta(seconds=22),
                                 queued_at=now - timedelta(seconds=21)))
    rewound = _held(now)
    rewound.runs[0].started_at = now - timedelta(seconds=1)
    rewound.runs.append(Run(new_id(), "Completed", now - timedelta(seconds=10), now - timedelta(seconds=9.5),
                            new_id(), None, A, None, now - timedelta(seconds=9)))
    return {"I1": State(now, [two]), "I2": State(now, [unlocked]), "I4": State(now, [full]),
            "I8": State(now, [queued_first]), "I9": State(now, [rewound]),
            "I4 (an old tick)": State(now, [old_tick]), "I6": State(now, [counted]),
            "I3 (a retry after a success)": State(now, [after_success]),
            "I3 (two attempts pending)": State(now, [both])}


@pytest.mark.parametrize("inv", ["I1", "I2", "I4", "I4 (an old tick)", "I6", "I3 (a retry after a success)",
                                 "I3 (two attempts pending)", "I8", "I9"])
def test_each_invariant_finds_a_state_that_breaks_it(arena: Arena, inv: str) -> None:
    state = _broken_states(datetime.now(timezone.utc))[inv]
    if inv.startswith("I3") and not arena.retries:
        pytest.skip("a schema without retries (009): every run is attempt 1")
    arena.install(state)
    if inv == "I6":   # statistics written from the history, then one finished run more
        arena.rows("UPDATE mjsched.scheduled_job_run SET status = 'Completed' WHERE status = 'Abandoned' "
                   "RETURNING id")
    found, _ = arena.check(state, [], [])
    assert {v.inv for v in found} == {inv.split()[0]}, found   # (two attempts pending breaks I3 twice)


def test_a_renewal_that_extended_nothing_is_a_violation(arena: Arena) -> None:
    """I5: the call reports a token whose run and job lock kept their lapsed lease."""
    now = datetime.now(timezone.utc)
    job = _held(now)
    state = State(now, [job])
    arena.install(state)
    call = Call("renew", "extend_job_leases", ([job.token], LEASE, A, now), renews=(job.token,))
    found, _ = arena.check(state, [call], [Outcome([{"lock_token": job.token}])])
    assert sorted(v.detail.split(" but ")[1].split(" ends ")[0] for v in found) == ["its job lock", "its run lease"]


def test_forced_pauses_catch_a_renewal_that_locks_runs_before_jobs(arena: Arena) -> None:
    """The inverted renewal parked between its run and job updates while an operator's
    unlock runs: the round must report a violation (I2/I5) or a deadlock (I7), never pass.
    (The partner was the sweep until issue 12 item 4: a sweep now leaves alone a job whose
    lapsed run another session holds, so it no longer meets the inversion; force_unlock_job
    still locks the job, then waits for its run.)"""
    if not arena.has("test_pause"):
        pytest.skip("no mjsched.test_pause hook in this schema: forced pauses need it")
    arena.rows(INVERTED_RENEWAL + " SELECT 1 AS installed")
    now = datetime.now(timezone.utc)
    job = _held(now)
    state = State(now, [job])
    renew = Call("renew", "extend_job_leases", ([job.token], LEASE, A, now), renews=(job.token,))
    unlock = Call("unlock", "force_unlock_job", (job.id, "self-check: operator unlock", now),
                  moves=tuple(t for t in [job.token] + [r.token for r in job.runs] if t))
    result = arena.pause_round(state, renew, "extend_job_leases:runs_renewed", unlock, 7_339_999)
    caught = [v.inv for v in result.violations] + [o.sqlstate for o in result.outcomes if o.sqlstate == DEADLOCK]
    print(f"\ninverted renewal parked, unlock {result.note}: caught {caught}")
    assert result.note != "not reached" and caught, (result.note, result.violations, result.outcomes)


def test_the_tag_limit_invariant_finds_a_tag_past_its_limit(arena: Arena) -> None:
    """I10: two Running tick runs of jobs carrying a tag whose limit is 1."""
    if not arena.tags:
        pytest.skip("a schema without tags (010): no tag limits")
    now = datetime.now(timezone.utc)
    state = State(now, [_held(now), _held(now, "Queue"), _held(now)])   # jobs 0 and 2 carry the tag
    arena.install(state)
    found, _ = arena.check(state, [], [])
    assert found == []                                   # installed at (or one below) the limit
    arena.rows("UPDATE mjsched.tag_limit SET max_running = 1 RETURNING tag")
    found, _ = arena.check(state, [], [])
    assert {v.inv for v in found} == {"I10"}, found
