"""The schedule kinds as pure functions (mjsched/schedules.py, mjsched/scheduling.py): durations,
an interval's grid, a one-off's single tick, the missed-run plan of each, the warning's gap."""
from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from mjsched import scheduling
from mjsched.errors import ConfigurationError
from mjsched.models import ConcurrencyMode, Job, JobStatus, MissedRunPolicy
from mjsched.schedules import (IntervalSchedule, OneOffSchedule, build, format_duration, next_run_times,
                               parse_duration, schedule_text)

UTC = timezone.utc
T0 = datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)


@pytest.mark.parametrize("value, seconds", [
    ("90s", 90), ("15m", 900), ("2h", 7200), ("1d", 86400), ("1w", 604800), ("1h30m", 5400), (" 2H ", 7200),
    ("1m 30s", 90), (timedelta(minutes=90), 5400), (45, 45), ("366d", 31622400),
])
def test_durations(value: Any, seconds: int) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["0s", "-5s", "", "90", "s", "1.5s", "1y", "soon", 0, -1, 1.5, True, None,
                                   timedelta(0), timedelta(seconds=-1), timedelta(milliseconds=1500), "367d"])
def test_bad_durations_name_the_field(value: Any) -> None:
    with pytest.raises(ConfigurationError) as err:
        parse_duration(value, "every")
    assert err.value.field == "every" and err.value.value == value


def test_format_duration_reads_back() -> None:
    for seconds in (1, 59, 60, 90, 3600, 5400, 86400, 90061):
        assert parse_duration(format_duration(seconds)) == seconds
    assert format_duration(90) == "1m30s" and format_duration(7200) == "2h"


def test_an_interval_is_anchor_plus_k_intervals_with_no_float_drift() -> None:
    s = IntervalSchedule.of(7, T0)
    assert s.next_after(T0 - timedelta(days=3)) == T0            # k >= 0: nothing before the anchor
    assert s.next_after(T0) == T0 + timedelta(seconds=7)
    far = T0 + timedelta(days=3650, microseconds=5)
    tick = s.next_after(far)
    assert (tick - T0) % timedelta(seconds=7) == timedelta(0) and timedelta(0) < tick - far <= timedelta(seconds=7)
    # a backlog is counted by arithmetic, bounded by the limit
    assert s.ticks_between(T0, T0 + timedelta(seconds=35), limit=100) == [T0 + timedelta(seconds=7 * k)
                                                                         for k in range(1, 6)]
    assert len(s.ticks_between(T0, T0 + timedelta(days=3650), limit=101)) == 101
    assert s.ticks_between(T0, T0 + timedelta(seconds=6), limit=5) == []
    assert s.min_interval() == timedelta(seconds=7)


def test_an_interval_ignores_dst() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    times = next_run_times(every="1h", timezone="Europe/Berlin", start_at=datetime(2027, 3, 28, 0, tzinfo=berlin),
                           after=datetime(2027, 3, 27, tzinfo=UTC), count=5)
    utc = [t.astimezone(UTC) for t in times]   # (a difference in one zone object is wall-clock time)
    assert {b - a for a, b in zip(utc, utc[1:])} == {timedelta(hours=1)}
    assert [t.hour for t in times] == [0, 1, 3, 4, 5]


def test_a_one_off_has_one_tick() -> None:
    s = OneOffSchedule.of(T0)
    assert s.next_after(T0 - timedelta(seconds=1)) == T0 and s.next_after(T0) is None
    assert list(s.iter_after(T0 - timedelta(days=1))) == [T0] and list(s.iter_after(T0)) == []
    assert s.ticks_between(T0 - timedelta(seconds=1), T0, limit=3) == [T0]
    assert s.min_interval() == timedelta.max
    with pytest.raises(ConfigurationError) as err:
        OneOffSchedule.of(datetime(2030, 1, 1))
    assert err.value.field == "run_at"


def test_build_wants_exactly_one_kind() -> None:
    assert isinstance(build(None, 60, None, anchor=T0), IntervalSchedule)
    for args in ((None, None, None), ("* * * * *", 60, None), (None, 60, T0)):
        with pytest.raises(ConfigurationError) as err:
            build(*args, anchor=T0)
        assert err.value.field == "schedule"
    assert schedule_text(None, 90, None) == "every 90s" and schedule_text("@daily", None, None) == "@daily"


def job(**fields: Any) -> Job:
    base = dict(id="j", job_type_id="t", driver="d", name="n", description=None, cron_expression=None,
                timezone="UTC", start_at=None, end_at=None, status=JobStatus.ACTIVE, configuration={}, owner=None,
                concurrency_mode=ConcurrencyMode.SKIP, missed_run_policy=MissedRunPolicy.RUN_ONCE,
                run_immediately_if_never_run=False, max_runtime_seconds=None, isolation=None, max_queued_runs=5,
                notify_on_success=False, notify_on_failure=True, notify_to=None, next_run_at=None, last_run_at=None,
                run_count=0, success_count=0, failure_count=0, last_duration_ms=None, total_duration_ms=0,
                lock_token=None, locked_at=None, locked_by_instance=None, expected_completion_at=None,
                created_at=T0, updated_at=T0)
    base.update(fields)
    return Job(**base)


def test_the_missed_run_plan_of_an_interval() -> None:
    j = job(interval_seconds=60, missed_run_policy=MissedRunPolicy.SKIP)
    tick = T0 + timedelta(minutes=1)
    assert scheduling.plan_tick(j, tick, tick + timedelta(seconds=59), 100).missed == 0
    plan = scheduling.plan_tick(j, tick, tick + timedelta(minutes=3), 100)
    assert (plan.run, plan.missed) == (False, 3)
    assert scheduling.next_run_after(j, tick, tick + timedelta(minutes=3, seconds=1), catch_up=False) \
        == tick + timedelta(minutes=4)
    all_ = dataclasses.replace(j, missed_run_policy=MissedRunPolicy.RUN_ALL)
    assert scheduling.plan_tick(all_, tick, tick + timedelta(minutes=3), 100).catch_up
    assert scheduling.next_run_after(all_, tick, tick + timedelta(minutes=3), catch_up=True) \
        == tick + timedelta(minutes=1)


def test_the_missed_run_plan_of_a_one_off() -> None:
    j = job(run_at=T0, missed_run_policy=MissedRunPolicy.SKIP)
    assert scheduling.plan_tick(j, T0, T0 + timedelta(seconds=59), 100).run       # under the grace: runs
    late = scheduling.plan_tick(j, T0, T0 + scheduling.ONE_OFF_MISFIRE_GRACE, 100)
    assert (late.run, late.missed) == (False, 1)
    once = dataclasses.replace(j, missed_run_policy=MissedRunPolicy.RUN_ONCE)
    assert scheduling.plan_tick(once, T0, T0 + timedelta(days=1), 100).run
    # once served, there is no next run: ENDED, which the trigger turns into Expired
    assert scheduling.next_run_after(j, T0, T0 + timedelta(seconds=1), catch_up=False) == scheduling.ENDED
    assert scheduling.ENDED > datetime(9999, 12, 30, tzinfo=UTC)
    # first due: run_at, even when past (the policy decides at the claim)
    assert scheduling.initial_next_run(j, T0 + timedelta(days=2)) == T0


def test_an_interval_without_start_at_is_anchored_at_created_at() -> None:
    j = job(interval_seconds=90)
    now = T0 + timedelta(seconds=100)
    assert scheduling.initial_next_run(j, now) == T0 + timedelta(seconds=180)
    started = job(interval_seconds=90, start_at=T0 + timedelta(hours=1))
    assert scheduling.initial_next_run(started, now) == T0 + timedelta(hours=1)


def test_the_high_frequency_gap_of_each_kind() -> None:
    assert scheduling.is_high_frequency(job(interval_seconds=30), T0) == timedelta(seconds=30)
    assert scheduling.is_high_frequency(job(interval_seconds=300), T0) is None
    assert scheduling.is_high_frequency(job(run_at=T0 + timedelta(days=1)), T0) is None
    assert scheduling.schedule_gap("every 59s", "UTC", T0) == timedelta(seconds=59)
    assert scheduling.schedule_gap("at 2030-01-01T00:00:00+00:00", "UTC", T0) is None
    assert scheduling.schedule_gap("* * * * *", "UTC", T0) == timedelta(minutes=1)
