"""Pure table tests of mjsched.scheduling: the missed-run policy, the next tick, the first tick.

Every instant is written out literally in UTC; none is computed by the code under
test. Zones: 2026 transitions are Sunday 29 March (spring-forward) and Sunday
25 October (fall-back) in Europe/Berlin; 8 March and 1 November in America/New_York.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from mjsched.cron import CronSchedule
from mjsched.errors import ConfigurationError
from mjsched.models import ConcurrencyMode, Job, JobStatus, MissedRunPolicy
from mjsched.scheduling import (HIGH_FREQUENCY_THRESHOLD, TickPlan, first_due, initial_next_run,
                                is_high_frequency, missed_ticks, next_run_after, plan_tick, schedule_of)

UTC = timezone.utc


def utc(text: str) -> datetime:
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    assert value.utcoffset() == timedelta(0), text
    return value.astimezone(UTC)


def job(cron: str = "0 * * * *", tz: str = "UTC", *, policy: str = "RunOnce", mode: str = "Skip",
        **fields: Any) -> Job:
    created = utc("2026-01-01T00:00:00Z")
    values: dict[str, Any] = dict(
        id="00000000-0000-0000-0000-000000000001", job_type_id="00000000-0000-0000-0000-000000000002",
        driver="python", name="j", description=None, cron_expression=cron, timezone=tz, start_at=None,
        end_at=None, status=JobStatus.ACTIVE, configuration={}, owner=None,
        concurrency_mode=ConcurrencyMode(mode), missed_run_policy=MissedRunPolicy(policy),
        run_immediately_if_never_run=False, max_runtime_seconds=None, isolation=None, max_queued_runs=5,
        notify_on_success=False, notify_on_failure=True, notify_to=None, next_run_at=None,
        last_run_at=None, run_count=0, success_count=0, failure_count=0, last_duration_ms=None,
        total_duration_ms=0, lock_token=None, locked_at=None, locked_by_instance=None,
        expected_completion_at=None, created_at=created, updated_at=created)
    values.update(fields)
    return Job(**values)


# --------------------------------------------------------------------------
# What counts as missed (inclusive boundary, cron-relative, DST-aware)
# --------------------------------------------------------------------------

MISSED = [
    # cron, tz, scheduled_for (claimed tick), db_now, ticks in (scheduled_for, db_now]
    ("0 * * * *", "UTC", "2026-05-05T10:00:00Z", "2026-05-05T10:00:00Z", []),
    ("0 * * * *", "UTC", "2026-05-05T10:00:00Z", "2026-05-05T10:59:59.999999Z", []),
    # inclusive: the next tick has come exactly at claim time -> missed
    ("0 * * * *", "UTC", "2026-05-05T10:00:00Z", "2026-05-05T11:00:00Z", ["2026-05-05T11:00:00Z"]),
    ("0 * * * *", "UTC", "2026-05-05T10:00:00Z", "2026-05-05T13:30:00Z",
     ["2026-05-05T11:00:00Z", "2026-05-05T12:00:00Z", "2026-05-05T13:00:00Z"]),
    ("*/10 * * * * *", "UTC", "2026-05-05T12:00:00Z", "2026-05-05T12:00:35Z",
     ["2026-05-05T12:00:10Z", "2026-05-05T12:00:20Z", "2026-05-05T12:00:30Z"]),
    # Berlin spring-forward: 02:30 does not exist on 29 March, it fires at 03:00 CEST = 01:00Z
    ("30 2 * * *", "Europe/Berlin", "2026-03-28T01:30:00Z", "2026-03-29T00:59:59Z", []),
    ("30 2 * * *", "Europe/Berlin", "2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", ["2026-03-29T01:00:00Z"]),
    ("30 2 * * *", "Europe/Berlin", "2026-03-28T01:30:00Z", "2026-03-30T00:30:00Z",
     ["2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"]),
    # Berlin fall-back: a fixed-time job fires once (02:30 CEST = 00:30Z), not again at 02:30 CET
    ("30 2 * * *", "Europe/Berlin", "2026-10-24T00:30:00Z", "2026-10-25T01:45:00Z", ["2026-10-25T00:30:00Z"]),
    # ...an interval job fires in both offsets: 02:00/02:30 CEST then 02:00/02:30 CET
    ("*/30 2 * * *", "Europe/Berlin", "2026-10-25T00:00:00Z", "2026-10-25T01:45:00Z",
     ["2026-10-25T00:30:00Z", "2026-10-25T01:00:00Z", "2026-10-25T01:30:00Z"]),
    # New York fall-back, hourly: 01:00 EDT (05:00Z) and 01:00 EST (06:00Z) both fire
    ("0 * * * *", "America/New_York", "2026-11-01T04:00:00Z", "2026-11-01T07:00:00Z",
     ["2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z"]),
]


@pytest.mark.parametrize("cron,tz,scheduled,now,expected", MISSED)
def test_missed_ticks_are_the_ticks_in_scheduled_for_to_claim_time(cron: str, tz: str, scheduled: str, now: str,
                                                                    expected: list[str]) -> None:
    assert missed_ticks(job(cron, tz), utc(scheduled), utc(now), limit=100) == [utc(t) for t in expected]


@pytest.mark.parametrize("cron,tz,scheduled,now,expected", MISSED)
@pytest.mark.parametrize("policy", ["Skip", "RunOnce", "RunAll"])
def test_plan_counts_missed_ticks_for_every_policy(policy: str, cron: str, tz: str, scheduled: str, now: str,
                                                   expected: list[str]) -> None:
    plan = plan_tick(job(cron, tz, policy=policy), utc(scheduled), utc(now), max_catch_up=100)
    assert plan.missed == len(expected)
    if not expected:  # on time: every policy simply runs it, advancing from completion
        assert plan == TickPlan(run=True, catch_up=False, missed=0)


# --------------------------------------------------------------------------
# plan_tick: the policy table
# --------------------------------------------------------------------------

PLANS = [
    # policy, concurrency mode, max_catch_up, claim time (tick 10:00Z, hourly), run, catch_up, missed, note?
    ("Skip", "Skip", 100, "2026-05-05T10:00:01Z", True, False, 0, False),
    ("Skip", "Skip", 100, "2026-05-05T11:00:00Z", False, False, 1, True),
    ("Skip", "Skip", 100, "2026-05-05T15:30:00Z", False, False, 5, True),
    ("RunOnce", "Skip", 100, "2026-05-05T15:30:00Z", True, False, 5, False),
    ("RunAll", "Skip", 100, "2026-05-05T15:30:00Z", True, True, 5, False),
    # the bound: exactly max_catch_up missed ticks are still replayed...
    ("RunAll", "Skip", 5, "2026-05-05T15:30:00Z", True, True, 5, False),
    # ...one more and the tick is served as RunOnce, with a warning
    ("RunAll", "Skip", 4, "2026-05-05T15:30:00Z", True, False, 5, True),
    ("RunAll", "Skip", 1, "2026-05-05T15:30:00Z", True, False, 2, True),
    # every concurrency mode follows the missed-run policy
    ("Skip", "Queue", 100, "2026-05-05T15:30:00Z", False, False, 5, True),
    ("Skip", "Concurrent", 100, "2026-05-05T15:30:00Z", False, False, 5, True),
    ("RunOnce", "Concurrent", 100, "2026-05-05T15:30:00Z", True, False, 5, False),
    ("RunAll", "Queue", 100, "2026-05-05T15:30:00Z", True, True, 5, False),
    ("RunAll", "Concurrent", 100, "2026-05-05T15:30:00Z", True, True, 5, False),
]


@pytest.mark.parametrize("policy,mode,bound,now,run,catch_up,missed,noted", PLANS)
def test_plan_tick_policy_table(policy: str, mode: str, bound: int, now: str, run: bool, catch_up: bool,
                                missed: int, noted: bool) -> None:
    plan = plan_tick(job("0 * * * *", policy=policy, mode=mode), utc("2026-05-05T10:00:00Z"), utc(now), bound)
    assert (plan.run, plan.catch_up, plan.missed, plan.note is not None) == (run, catch_up, missed, noted)


def test_skip_note_names_the_count_and_the_tick() -> None:
    plan = plan_tick(job(policy="Skip"), utc("2026-05-05T10:00:00Z"), utc("2026-05-05T13:00:00Z"), 100)
    assert plan.note is not None and "3 tick(s)" in plan.note and "2026-05-05T10:00:00+00:00" in plan.note


def test_counting_stops_one_past_the_bound() -> None:
    # A second-by-second job down for a day: 86 400 ticks, counted only to bound + 1.
    plan = plan_tick(job("* * * * * *", policy="Skip"), utc("2026-05-05T00:00:00Z"),
                     utc("2026-05-06T00:00:00Z"), max_catch_up=100)
    assert plan.missed == 101 and plan.note is not None and "more than 100" in plan.note
    plan = plan_tick(job("* * * * * *", policy="RunAll"), utc("2026-05-05T00:00:00Z"),
                     utc("2026-05-06T00:00:00Z"), max_catch_up=100)
    assert (plan.run, plan.catch_up, plan.missed) == (True, False, 101)
    assert plan.note is not None and "more than 100" in plan.note


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, None])
def test_plan_tick_rejects_a_bad_bound(bad: Any) -> None:
    with pytest.raises(ConfigurationError) as err:
        plan_tick(job(), utc("2026-05-05T10:00:00Z"), utc("2026-05-05T10:00:00Z"), bad)
    assert err.value.field == "max_catch_up"


@pytest.mark.parametrize("field", ["scheduled_for", "db_now"])
def test_plan_tick_rejects_naive_instants(field: str) -> None:
    args = {"scheduled_for": utc("2026-05-05T10:00:00Z"), "db_now": utc("2026-05-05T11:00:00Z")}
    args[field] = args[field].replace(tzinfo=None)
    with pytest.raises(ConfigurationError) as err:
        plan_tick(job(), args["scheduled_for"], args["db_now"], 100)
    assert err.value.field == field


# --------------------------------------------------------------------------
# next_run_after
# --------------------------------------------------------------------------

NEXT = [
    # cron, tz, scheduled_for (None: manual run), now (completion/claim), catch_up, expected next
    ("0 * * * *", "UTC", "2026-05-05T10:00:00Z", "2026-05-05T10:20:00Z", False, "2026-05-05T11:00:00Z"),
    # completing exactly on a tick: strictly after it
    ("0 * * * *", "UTC", "2026-05-05T10:00:00Z", "2026-05-05T11:00:00Z", False, "2026-05-05T12:00:00Z"),
    # a run that spans ticks: the ticks that came while it ran are dropped (RunOnce/Skip mode)
    ("0 * * * *", "UTC", "2026-05-05T10:00:00Z", "2026-05-05T12:30:00Z", False, "2026-05-05T13:00:00Z"),
    # a clock estimate lagging behind the tick never serves the same tick twice
    ("0 * * * *", "UTC", "2026-05-05T10:00:00Z", "2026-05-05T09:59:59Z", False, "2026-05-05T11:00:00Z"),
    # RunAll catch-up: the tick right after the one served, even though it is past
    ("0 * * * *", "UTC", "2026-05-05T10:00:00Z", "2026-05-05T15:30:00Z", True, "2026-05-05T11:00:00Z"),
    # manual runs count from now
    ("0 * * * *", "UTC", None, "2026-05-05T10:20:00Z", False, "2026-05-05T11:00:00Z"),
    ("0 * * * *", "UTC", None, "2026-05-05T10:20:00Z", True, "2026-05-05T11:00:00Z"),
    ("*/15 * * * * *", "UTC", "2026-05-05T10:00:00Z", "2026-05-05T10:00:07.5Z", False, "2026-05-05T10:00:15Z"),
    # Berlin spring-forward: the non-existent 02:30 runs at 03:00 CEST
    ("30 2 * * *", "Europe/Berlin", "2026-03-28T01:30:00Z", "2026-03-28T01:31:00Z", False, "2026-03-29T01:00:00Z"),
    ("30 2 * * *", "Europe/Berlin", "2026-03-29T01:00:00Z", "2026-03-29T01:00:05Z", False, "2026-03-30T00:30:00Z"),
    # Berlin fall-back, fixed time: after the first 02:30 (CEST), the next is tomorrow 02:30 CET
    ("30 2 * * *", "Europe/Berlin", "2026-10-25T00:30:00Z", "2026-10-25T00:30:02Z", False, "2026-10-26T01:30:00Z"),
    # ...interval job: the repeated 02:00 (CET) still comes, also as a catch-up step
    ("0 * * * *", "Europe/Berlin", "2026-10-25T00:00:00Z", "2026-10-25T00:00:02Z", False, "2026-10-25T01:00:00Z"),
    ("0 * * * *", "Europe/Berlin", "2026-10-25T00:00:00Z", "2026-10-25T05:00:00Z", True, "2026-10-25T01:00:00Z"),
    # Kathmandu (+05:45): 09:00 local is 03:15Z
    ("0 9 * * *", "Asia/Kathmandu", "2026-05-05T03:15:00Z", "2026-05-05T03:16:00Z", False, "2026-05-06T03:15:00Z"),
]


@pytest.mark.parametrize("cron,tz,scheduled,now,catch_up,expected", NEXT)
def test_next_run_after(cron: str, tz: str, scheduled: str | None, now: str, catch_up: bool, expected: str) -> None:
    got = next_run_after(job(cron, tz), utc(scheduled) if scheduled else None, utc(now), catch_up)
    assert got == utc(expected)


def test_next_run_after_rejects_naive_now() -> None:
    with pytest.raises(ConfigurationError) as err:
        next_run_after(job(), utc("2026-05-05T10:00:00Z"), datetime(2026, 5, 5, 10, 20), False)
    assert err.value.field == "now"


# --------------------------------------------------------------------------
# The policies end to end, as the engine applies them: plan at claim, next at completion
# --------------------------------------------------------------------------

def simulate(j: Job, next_run_at: str, claims: list[str], max_catch_up: int = 100,
             run_seconds: float = 2.0) -> tuple[list[tuple[str, str]], str]:
    """Claim at each given instant when due; return (status, scheduled_for) rows and the final next_run_at."""
    rows: list[tuple[str, str]] = []
    nxt = utc(next_run_at)
    for claim in claims:
        now = utc(claim)
        if nxt > now:
            continue
        plan = plan_tick(j, nxt, now, max_catch_up)
        if not plan.run:
            rows.append(("Skipped", nxt.isoformat()))
            nxt = next_run_after(j, nxt, now, catch_up=False)
            continue
        rows.append(("Completed", nxt.isoformat()))
        nxt = next_run_after(j, nxt, now + timedelta(seconds=run_seconds), plan.catch_up)
    return rows, nxt.isoformat()


# Engine down from 10:00 to 15:30 (hourly job, next_run_at 10:00); polls at 15:30:00, :10, :20, ...
POLLS = [f"2026-05-05T15:{30 + i // 6:02d}:{(i % 6) * 10:02d}Z" for i in range(30)]


def test_simulated_downtime_skip() -> None:
    rows, nxt = simulate(job(policy="Skip"), "2026-05-05T10:00:00Z", POLLS)
    assert rows == [("Skipped", "2026-05-05T10:00:00+00:00")]
    assert nxt == "2026-05-05T16:00:00+00:00"


def test_simulated_downtime_run_once() -> None:
    rows, nxt = simulate(job(policy="RunOnce"), "2026-05-05T10:00:00Z", POLLS)
    assert rows == [("Completed", "2026-05-05T10:00:00+00:00")]
    assert nxt == "2026-05-05T16:00:00+00:00"


def test_simulated_downtime_run_all_drains_oldest_first_one_per_poll() -> None:
    rows, nxt = simulate(job(policy="RunAll"), "2026-05-05T10:00:00Z", POLLS)
    assert rows == [("Completed", f"2026-05-05T{h}:00:00+00:00") for h in (10, 11, 12, 13, 14, 15)]
    assert nxt == "2026-05-05T16:00:00+00:00"


def test_simulated_downtime_run_all_over_the_bound_runs_once() -> None:
    rows, nxt = simulate(job(policy="RunAll"), "2026-05-05T10:00:00Z", POLLS, max_catch_up=4)
    assert rows == [("Completed", "2026-05-05T10:00:00+00:00")]
    assert nxt == "2026-05-05T16:00:00+00:00"


def test_simulated_run_all_across_berlin_fall_back_replays_both_offsets() -> None:
    # Hourly (interval) Berlin job, engine down over the repeated hour 02:00-03:00.
    polls = [f"2026-10-25T02:30:{s:02d}Z" for s in range(0, 60, 5)]
    rows, nxt = simulate(job("0 * * * *", "Europe/Berlin", policy="RunAll"), "2026-10-24T23:00:00Z", polls)
    assert [r[1] for r in rows] == ["2026-10-24T23:00:00+00:00",   # 01:00 CEST
                                    "2026-10-25T00:00:00+00:00",   # 02:00 CEST
                                    "2026-10-25T01:00:00+00:00",   # 02:00 CET (repeated hour)
                                    "2026-10-25T02:00:00+00:00"]   # 03:00 CET
    assert nxt == "2026-10-25T03:00:00+00:00"


# --------------------------------------------------------------------------
# first_due / initial_next_run: run_immediately_if_never_run and start_at
# --------------------------------------------------------------------------

HOURLY = CronSchedule.parse("0 * * * *")
NOW = "2026-05-05T10:20:30.123456Z"

FIRST = [
    # run_immediately, never_ran, start_at, expected
    (False, True, None, "2026-05-05T11:00:00Z"),            # flag off: cron tick
    (True, True, None, NOW),                                 # flag on, never ran: exactly now
    (True, False, None, "2026-05-05T11:00:00Z"),            # flag on, has run: cron tick
    (False, False, None, "2026-05-05T11:00:00Z"),
    # start_at: a tick exactly at start_at fires; otherwise the first tick after it
    (False, True, "2026-05-05T14:00:00Z", "2026-05-05T14:00:00Z"),
    (False, True, "2026-05-05T14:00:00.000001Z", "2026-05-05T15:00:00Z"),
    (False, True, "2026-05-05T09:00:00Z", "2026-05-05T11:00:00Z"),     # start in the past: no effect
    (True, True, "2026-05-05T14:10:00Z", "2026-05-05T14:10:00Z"),     # immediate: the window opening
    (True, True, "2026-05-05T09:00:00Z", NOW),
    (True, False, "2026-05-05T14:10:00Z", "2026-05-05T15:00:00Z"),
]


@pytest.mark.parametrize("immediately,never_ran,start_at,expected", FIRST)
def test_first_due(immediately: bool, never_ran: bool, start_at: str | None, expected: str) -> None:
    got = first_due(HOURLY, utc(NOW), start_at=utc(start_at) if start_at else None,
                    run_immediately=immediately, never_ran=never_ran)
    assert got == utc(expected)


def test_first_due_in_a_dst_gap_is_the_first_valid_instant() -> None:
    schedule = CronSchedule.parse("30 2 * * *", "Europe/Berlin")
    got = first_due(schedule, utc("2026-03-28T12:00:00Z"), start_at=None, run_immediately=False, never_ran=True)
    assert got == utc("2026-03-29T01:00:00Z")


@pytest.mark.parametrize("field", ["now", "start_at"])
def test_first_due_rejects_naive_instants(field: str) -> None:
    args: dict[str, Any] = {"now": utc(NOW), "start_at": utc("2026-05-05T14:00:00Z")}
    args[field] = args[field].replace(tzinfo=None)
    with pytest.raises(ConfigurationError) as err:
        first_due(HOURLY, args["now"], start_at=args["start_at"], run_immediately=True, never_ran=True)
    assert err.value.field == field


INITIAL = [
    # run_immediately_if_never_run, last_run_at, run_count, expected
    (False, None, 0, "2026-05-05T11:00:00Z"),
    (True, None, 0, NOW),
    (True, "2026-05-04T11:00:00Z", 1, "2026-05-05T11:00:00Z"),
    (True, None, 1, "2026-05-05T11:00:00Z"),   # a recorded run (e.g. abandoned) counts as having run
]


@pytest.mark.parametrize("immediately,last_run_at,run_count,expected", INITIAL)
def test_initial_next_run(immediately: bool, last_run_at: str | None, run_count: int, expected: str) -> None:
    j = job(run_immediately_if_never_run=immediately, last_run_at=utc(last_run_at) if last_run_at else None,
            run_count=run_count)
    assert initial_next_run(j, utc(NOW)) == utc(expected)


# --------------------------------------------------------------------------
# High-frequency detection
# --------------------------------------------------------------------------

FREQUENCY = [
    ("* * * * * *", timedelta(seconds=1)),
    ("*/4 * * * *", timedelta(minutes=4)),
    ("0,2 9 * * *", timedelta(minutes=2)),      # the smallest gap counts, even if rare
    ("*/5 * * * *", None),                      # exactly five minutes is not "more often"
    ("0 * * * *", None),
    ("@daily", None),
]


@pytest.mark.parametrize("cron,gap", FREQUENCY)
def test_is_high_frequency(cron: str, gap: timedelta | None) -> None:
    assert is_high_frequency(job(cron), utc("2026-05-05T10:20:00Z")) == gap


def test_threshold_is_five_minutes() -> None:
    assert HIGH_FREQUENCY_THRESHOLD == timedelta(minutes=5)


def test_schedule_of_uses_the_jobs_zone() -> None:
    assert schedule_of(job("0 9 * * *", "Asia/Kathmandu")).next_after(utc("2026-05-05T00:00:00Z")) == \
        utc("2026-05-05T03:15:00Z")
