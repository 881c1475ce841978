"""``plan_claim`` as a table, without a database: what becomes of one claimed row.

One row per case: concurrency mode x the claim (a due tick on time or late, a run-less claim of
a tick already served, a queued run: a Queue tick kept, a retry, a manual run) x the attempt x
a refused definition x the missed-run policy; each row's whole expected plan, written out.
The job is hourly (``0 * * * *``, UTC); its claimed tick T is 10:00, its row's next_run_at 11:00.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

import pytest

from mjsched.models import Claim, ConcurrencyMode, Job, JobStatus, MissedRunPolicy
from mjsched.scheduling import (ClaimAction, ClaimPlan, UnusableSchedule, keeps_ticks_queued, plan_claim,
                                schedule_moves_at_end)

UTC = timezone.utc
RUN, SKIP, ADVANCE = ClaimAction.RUN, ClaimAction.SKIP, ClaimAction.ADVANCE
SKIP_MODE, QUEUE, CONCURRENT = ConcurrencyMode.SKIP, ConcurrencyMode.QUEUE, ConcurrencyMode.CONCURRENT


def at(hh_mm_ss: str) -> datetime:
    return datetime.fromisoformat(f"2026-05-05T{hh_mm_ss}+00:00").astimezone(UTC)


T = at("10:00:00")            # the claimed tick
ON_TIME = at("10:00:05")      # a claim 5 s after its tick: nothing missed
RETRY_AT = at("10:30:00")     # a retry's (or a manual run's) claim, between ticks
LATE = at("13:30:00")         # 11:00, 12:00 and 13:00 passed too: 3 missed
ROW_NEXT = at("11:00:00")     # the job row's next_run_at, as a queued run's claim sees it
REFUSED = "not run: DriverNotFound: no driver 'gone'; fix the job's driver or configuration"
SKIP_NOTE = ("missed-run policy Skip: 3 tick(s) passed while no engine ran this job since "
             "2026-05-05T10:00:00+00:00; skipped to the next future tick")
OVER_BOUND_NOTE = ("missed-run policy RunAll: more than 2 missed ticks since 2026-05-05T10:00:00+00:00; "
                   "running once now instead (raise max_catch_up_runs to replay more)")


def job(mode: ConcurrencyMode, policy: str = "RunOnce", cron: str = "0 * * * *") -> Job:
    created = at("00:00:00") - timedelta(days=120)
    return Job(id="00000000-0000-0000-0000-000000000001", job_type_id="00000000-0000-0000-0000-000000000002",
               driver="python", name="j", description=None, cron_expression=cron, timezone="UTC", start_at=None,
               end_at=None, status=JobStatus.ACTIVE, configuration={}, owner=None, concurrency_mode=mode,
               missed_run_policy=MissedRunPolicy(policy), run_immediately_if_never_run=False,
               max_runtime_seconds=None, isolation=None, max_queued_runs=5, notify_on_success=False,
               notify_on_failure=True, notify_to=None, next_run_at=ROW_NEXT, last_run_at=None, run_count=0,
               success_count=0, failure_count=0, last_duration_ms=None, total_duration_ms=0, lock_token=None,
               locked_at=None, locked_by_instance=None, expected_completion_at=None, created_at=created,
               updated_at=created)


def tick(now: datetime) -> Claim:
    """A due tick's claim."""
    return Claim(job_id="j", run_id="run", lock_token="token", scheduled_for=T, db_now=now)


def served(now: datetime) -> Claim:
    """A run-less claim: the tick, or a later one, has a run already."""
    return Claim(job_id="j", run_id=None, lock_token="token", scheduled_for=T, db_now=now)


def queued(now: datetime) -> Claim:
    """A queued run's claim of tick T (a Queue tick kept while the job ran, or a retry of T)."""
    return Claim(job_id="j", run_id="run", lock_token="token", scheduled_for=T, db_now=now, from_queue=True)


def manual(now: datetime) -> Claim:
    """A queued manual run's claim (execute_job while the job ran): no tick."""
    return Claim(job_id="j", run_id="run", lock_token="token", scheduled_for=None, db_now=now, from_queue=True)


class Row(NamedTuple):
    case: str
    job: Job
    claim: Claim
    attempt: int
    refused: str | None
    max_catch_up: int
    expected: ClaimPlan


def row(case: str, mode: ConcurrencyMode, claim: Claim, expected: ClaimPlan, *, policy: str = "RunOnce",
        attempt: int = 1, refused: str | None = None, max_catch_up: int = 5) -> Any:
    return pytest.param(Row(case, job(mode, policy), claim, attempt, refused, max_catch_up, expected), id=case)


def run(seen: datetime | None, queued_after: datetime | None, **fields: Any) -> ClaimPlan:
    return ClaimPlan(RUN, seen_next_run_at=seen, queued_after=queued_after, **fields)


TABLE = [
    # -- a due tick, claimed on time: it runs; Concurrent moves the schedule on and lets the job lock go
    row("skip-mode tick", SKIP_MODE, tick(ON_TIME), run(T, ON_TIME)),
    row("queue-mode tick", QUEUE, tick(ON_TIME), run(T, ON_TIME)),
    row("concurrent tick", CONCURRENT, tick(ON_TIME),
        run(T, ON_TIME, release_job=True, next_run_at=at("11:00:00"))),
    # a tick's claim is always a first attempt, whatever attempt it is handed
    row("skip-mode tick ignores an attempt", SKIP_MODE, tick(ON_TIME), run(T, ON_TIME), attempt=3),
    row("concurrent tick ignores an attempt", CONCURRENT, tick(ON_TIME),
        run(T, ON_TIME, release_job=True, next_run_at=at("11:00:00")), attempt=3),
    # -- a queued run, first attempt (a Queue tick kept while the job ran): it runs, guarded by the row
    row("skip-mode queued first attempt", SKIP_MODE, queued(RETRY_AT), run(ROW_NEXT, RETRY_AT)),
    row("queue-mode queued first attempt", QUEUE, queued(RETRY_AT), run(ROW_NEXT, RETRY_AT)),
    row("concurrent queued first attempt", CONCURRENT, queued(RETRY_AT), run(ROW_NEXT, RETRY_AT)),
    # -- a retry (attempt 2): it runs as attempt 2; a Concurrent retry lets the job lock go, schedule kept
    row("skip-mode retry", SKIP_MODE, queued(RETRY_AT), run(ROW_NEXT, RETRY_AT, attempt=2), attempt=2),
    row("queue-mode retry", QUEUE, queued(RETRY_AT), run(ROW_NEXT, RETRY_AT, attempt=2), attempt=2),
    row("concurrent retry", CONCURRENT, queued(RETRY_AT),
        run(ROW_NEXT, RETRY_AT, attempt=2, release_job=True, next_run_at=ROW_NEXT), attempt=2),
    # -- a queued manual run: no tick, so no tick is queued after it
    row("skip-mode manual", SKIP_MODE, manual(RETRY_AT), run(ROW_NEXT, None)),
    row("queue-mode manual", QUEUE, manual(RETRY_AT), run(ROW_NEXT, None)),
    row("concurrent manual", CONCURRENT, manual(RETRY_AT), run(ROW_NEXT, None)),
    row("concurrent manual retry", CONCURRENT, manual(RETRY_AT),
        run(ROW_NEXT, None, attempt=2, release_job=True, next_run_at=ROW_NEXT), attempt=2),
    # -- a queued run is never judged by the missed-run policy, however late
    row("queued run late, policy Skip", QUEUE, queued(LATE), run(ROW_NEXT, LATE), policy="Skip"),
    row("retry late, policy RunAll", SKIP_MODE, queued(LATE), run(ROW_NEXT, LATE, attempt=2),
        policy="RunAll", attempt=2),
    # -- a run-less claim: the tick was served; the schedule moves past it, nothing runs
    row("served tick on time", SKIP_MODE, served(ON_TIME),
        ClaimPlan(ADVANCE, seen_next_run_at=T, next_run_at=at("11:00:00"))),
    row("served tick late", QUEUE, served(LATE), ClaimPlan(ADVANCE, seen_next_run_at=T, next_run_at=at("14:00:00"))),
    row("served tick, concurrent", CONCURRENT, served(ON_TIME),
        ClaimPlan(ADVANCE, seen_next_run_at=T, next_run_at=at("11:00:00"))),
    row("served tick, RunAll late: no catch-up", SKIP_MODE, served(LATE),
        ClaimPlan(ADVANCE, seen_next_run_at=T, next_run_at=at("14:00:00")), policy="RunAll"),
    # -- a refused definition: recorded Skipped; a tick moves the schedule on, a queued run leaves it
    row("refused tick", SKIP_MODE, tick(ON_TIME),
        ClaimPlan(SKIP, seen_next_run_at=T, next_run_at=at("11:00:00"), error=REFUSED), refused=REFUSED),
    row("refused concurrent tick", CONCURRENT, tick(ON_TIME),
        ClaimPlan(SKIP, seen_next_run_at=T, next_run_at=at("11:00:00"), error=REFUSED), refused=REFUSED),
    row("refused late tick, policy Skip: the refusal wins", SKIP_MODE, tick(LATE),
        ClaimPlan(SKIP, seen_next_run_at=T, next_run_at=at("14:00:00"), error=REFUSED), policy="Skip",
        refused=REFUSED),
    row("refused queued run", QUEUE, queued(RETRY_AT), ClaimPlan(SKIP, seen_next_run_at=ROW_NEXT, error=REFUSED),
        refused=REFUSED),
    row("refused retry", CONCURRENT, queued(RETRY_AT), ClaimPlan(SKIP, seen_next_run_at=ROW_NEXT, error=REFUSED),
        attempt=2, refused=REFUSED),
    row("refused manual run", SKIP_MODE, manual(RETRY_AT), ClaimPlan(SKIP, seen_next_run_at=ROW_NEXT, error=REFUSED),
        refused=REFUSED),
    # -- a late tick (3 missed), by missed-run policy
    row("late tick, policy Skip", SKIP_MODE, tick(LATE),
        ClaimPlan(SKIP, seen_next_run_at=T, next_run_at=at("14:00:00"), error=SKIP_NOTE, details={"missed": 3},
                  note=SKIP_NOTE), policy="Skip"),
    row("late concurrent tick, policy Skip", CONCURRENT, tick(LATE),
        ClaimPlan(SKIP, seen_next_run_at=T, next_run_at=at("14:00:00"), error=SKIP_NOTE, details={"missed": 3},
                  note=SKIP_NOTE), policy="Skip"),
    row("late tick, policy RunOnce", QUEUE, tick(LATE), run(T, LATE)),
    row("late concurrent tick, policy RunOnce", CONCURRENT, tick(LATE),
        run(T, LATE, release_job=True, next_run_at=at("14:00:00"))),
    row("late tick, policy RunAll", SKIP_MODE, tick(LATE), run(T, LATE, catch_up=True), policy="RunAll"),
    row("late concurrent tick, policy RunAll: the next tick is the one after T", CONCURRENT, tick(LATE),
        run(T, LATE, catch_up=True, release_job=True, next_run_at=at("11:00:00")), policy="RunAll"),
    row("late tick, policy RunAll past the bound: once, with a note", QUEUE, tick(LATE),
        run(T, LATE, note=OVER_BOUND_NOTE), policy="RunAll", max_catch_up=2),
    row("late concurrent tick, policy RunAll past the bound", CONCURRENT, tick(LATE),
        run(T, LATE, note=OVER_BOUND_NOTE, release_job=True, next_run_at=at("14:00:00")),
        policy="RunAll", max_catch_up=2),
    row("on-time tick, policy Skip: nothing missed", SKIP_MODE, tick(ON_TIME), run(T, ON_TIME), policy="Skip"),
]


@pytest.mark.parametrize("case", TABLE)
def test_plan_claim(case: Row) -> None:
    assert plan_claim(case.job, case.claim, case.claim.db_now, max_catch_up=case.max_catch_up,
                      refused=case.refused, attempt=case.attempt) == case.expected


# A schedule no engine can compute (written by plain SQL): a plan that needs it raises
# UnusableSchedule (the dispatcher sets the row aside); a queued run's plan needs none.
UNUSABLE = [
    pytest.param(tick(ON_TIME), SKIP_MODE, None, id="tick"),
    pytest.param(served(ON_TIME), QUEUE, None, id="served tick"),
    pytest.param(tick(ON_TIME), CONCURRENT, None, id="concurrent tick"),
    pytest.param(tick(ON_TIME), SKIP_MODE, REFUSED, id="refused tick"),
]


@pytest.mark.parametrize(("claim", "mode", "refused"), UNUSABLE)
def test_a_plan_that_needs_an_unusable_schedule_raises(claim: Claim, mode: ConcurrencyMode,
                                                       refused: str | None) -> None:
    with pytest.raises(UnusableSchedule):
        plan_claim(job(mode, cron="61 * * * *"), claim, claim.db_now, max_catch_up=5, refused=refused)


def test_a_queued_run_needs_no_schedule() -> None:
    assert plan_claim(job(CONCURRENT, cron="61 * * * *"), queued(RETRY_AT), RETRY_AT, max_catch_up=5,
                      attempt=2) == run(ROW_NEXT, RETRY_AT, attempt=2, release_job=True, next_run_at=ROW_NEXT)


# The rules a run follows after its claim (Run._next_run_at, the dispatcher's Queue ticks):
# mode, manual, catch_up, attempt -> (its end moves the schedule, it keeps ticks queued meanwhile)
RUN_RULES = [
    (SKIP_MODE, False, False, 1, True, False),
    (QUEUE, False, False, 1, True, True),
    (CONCURRENT, False, False, 1, False, False),
    (QUEUE, False, True, 1, True, False),      # a RunAll catch-up run: its backlog is served tick by tick
    (SKIP_MODE, True, False, 1, False, False),  # a manual run served no tick
    (QUEUE, True, False, 1, False, False),
    (CONCURRENT, True, False, 1, False, False),
    (SKIP_MODE, False, False, 2, False, False),  # a retry: its tick's first attempt moved the schedule
    (QUEUE, False, False, 2, False, False),      # and ticks due meanwhile stay due
    (CONCURRENT, False, False, 3, False, False),
]


@pytest.mark.parametrize(("mode", "manual_run", "catch_up", "attempt", "moves", "keeps"), RUN_RULES)
def test_what_a_run_does_to_its_jobs_schedule(mode: ConcurrencyMode, manual_run: bool, catch_up: bool, attempt: int,
                                              moves: bool, keeps: bool) -> None:
    assert schedule_moves_at_end(mode, manual=manual_run, attempt=attempt) is moves
    assert keeps_ticks_queued(mode, manual=manual_run, catch_up=catch_up, attempt=attempt) is keeps
