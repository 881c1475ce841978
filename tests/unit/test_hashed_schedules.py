"""Spreading herds (issue 37 item 3): Jenkins' ``H`` in cron fields, resolved from a stable hash
of the job's name, and the per-job jitter. Pure: no database (the engines' side is
tests/integration/test_spreading.py)."""
from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from datetime import datetime, timedelta, timezone
from itertools import islice
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from mjsched import validation
from mjsched.cron import CronSchedule, hash_value, next_run_times, uses_hash
from mjsched.errors import ConfigurationError, InvalidCronExpression
from mjsched.schedules import JitteredSchedule, build, jitter_offset, parse_jitter
from mjsched.schedules import next_run_times as schedule_times
from mjsched.scheduling import missed_ticks, next_run_after, plan_tick, schedule_of
from tests.unit.test_scheduling import job

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")
ROOT = Path(__file__).resolve().parents[2]


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def resolved(expression: str, name: str = "nightly-report", tz: str = "UTC") -> str:
    return CronSchedule.parse(expression, tz, seed=name).resolved


# --------------------------------------------------------------------------
# The hash is pinned: a change to it moves every hashed job in every database
# --------------------------------------------------------------------------

# (name, [second 60, minute 60, hour 24, day-of-month 28, month 12, day-of-week 7, jitter 0..90])
PINNED = [
    ("nightly-report", [38, 6, 19, 20, 5, 0, 13]),
    ("billing-export", [31, 29, 12, 13, 10, 5, 7]),
    ("a", [10, 16, 16, 23, 6, 0, 27]),
    ("ünïcode-job", [5, 0, 4, 25, 2, 4, 66]),
]
SIZES = [("second", 60), ("minute", 60), ("hour", 24), ("day-of-month", 28), ("month", 12), ("day-of-week", 7),
         ("jitter", 91)]


@pytest.mark.parametrize("name, expected", PINNED)
def test_the_hash_gives_fixed_values_for_fixed_names(name: str, expected: list[int]) -> None:
    assert [hash_value(name, purpose, size) for purpose, size in SIZES] == expected


def test_h_resolves_to_pinned_expressions() -> None:
    assert resolved("H 2 * * *") == "6 2 * * *"
    assert resolved("H H * * *") == "6 19 * * *"
    assert resolved("H H H H H") == "6 19 21 6 0"          # day-of-month 1 + 20, month 1 + 5
    assert resolved("H H * * * *") == "38 6 * * * *"       # 6 fields: seconds first
    assert resolved("H/15 * * * *") == "6,21,36,51 * * * *"
    assert resolved("H(0-29)/10 * * * *") == "6,16,26 * * * *"
    assert resolved("H H(8-15)/2 * * 1-5") == "6 9,11,13,15 * * 1-5"
    assert resolved("H 2 * * *", "billing-export") == "29 2 * * *"
    assert resolved("0 2 * * *") == "0 2 * * *"            # nothing to resolve: the expression itself


def test_the_hash_is_the_same_in_another_process_with_another_hash_seed() -> None:
    """Not Python's salted hash(): a fresh interpreter with another PYTHONHASHSEED agrees."""
    code = ("from mjsched.cron import CronSchedule as C; "
            "print(C.parse('H H(8-15)/2 H * H', 'UTC', seed='nightly-report').resolved)")
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60,
                         check=True).stdout.strip()
    assert out == resolved("H H(8-15)/2 H * H")


# --------------------------------------------------------------------------
# Each field, ranges and steps
# --------------------------------------------------------------------------

@pytest.mark.parametrize("expression, index, low, high", [
    ("H * * * * *", 0, 0, 59),     # seconds
    ("H * * * *", 0, 0, 59),       # minute
    ("0 H * * *", 1, 0, 23),       # hour
    ("0 0 H * *", 2, 1, 28),       # day-of-month: 1-28, every month has it (as Jenkins)
    ("0 0 1 H *", 3, 1, 12),       # month
    ("0 0 * * H", 4, 0, 6),        # day-of-week: 0-6 (0 and 7 are both Sunday)
    ("H(10-20) * * * *", 0, 10, 20),
    ("0 H(9-17) * * *", 1, 9, 17),
    ("0 0 1 H(jan-mar) *", 3, 1, 3),   # names in a month range
    ("0 0 * * H(mon-fri)", 4, 1, 5),
])
def test_each_field_resolves_inside_its_range(expression: str, index: int, low: int, high: int) -> None:
    seen = set()
    for i in range(1000):
        value = int(resolved(expression, f"job-{i}").split()[index])
        assert low <= value <= high, (expression, value)
        seen.add(value)
    assert seen == set(range(low, high + 1))      # 1,000 names reach every value


@pytest.mark.parametrize("expression, step, low, high", [
    ("H/15 * * * *", 15, 0, 59), ("H(0-29)/10 * * * *", 10, 0, 29), ("0 H/6 * * *", 6, 0, 23),
    ("H/1 * * * *", 1, 0, 59),
])
def test_a_hashed_step_is_every_nth_value_from_an_offset_below_the_step(expression: str, step: int, low: int,
                                                                        high: int) -> None:
    field = 1 if expression.startswith("0 ") else 0
    for i in range(50):
        values = [int(v) for v in resolved(expression, f"job-{i}").split()[field].split(",")]
        assert low <= values[0] < low + step and values == list(range(values[0], high + 1, step))


def test_hashed_steps_are_intervals_and_hashed_values_are_fixed_times() -> None:
    """The fall-back rule tells the two apart: an H value fires once, an H step in both passes."""
    assert not CronSchedule.parse("H 2 * * *", seed="x").is_interval
    assert not CronSchedule.parse("H(0-29) 2 * * *", seed="x").is_interval
    assert CronSchedule.parse("H/15 2 * * *", seed="x").is_interval


def test_uses_hash_sees_only_h_items() -> None:
    assert uses_hash("H 2 * * *") and uses_hash("0,h(1-5) * * * *") and uses_hash("*/5 H/2 * * *")
    assert not uses_hash("0 2 * * thu") and not uses_hash("@hourly") and not uses_hash(None)


# --------------------------------------------------------------------------
# Bad input: typed, naming the field and the value
# --------------------------------------------------------------------------

@pytest.mark.parametrize("expression, needle", [
    ("H(30-10) * * * *", "minute field 'H(30-10)': range H(30-10) starts after it ends"),
    ("H(0-60) * * * *", "minute field 'H(0-60)': value 60 is out of range 0-59"),
    ("0 H(0-24) * * *", "hour field 'H(0-24)': value 24 is out of range 0-23"),
    ("H/61 * * * *", "minute field 'H/61': step 61 of 'h/61' is out of range 1-60"),
    ("H(0-29)/31 * * * *", "step 31 of 'h(0-29)/31' is out of range 1-30"),
    ("H/0 * * * *", "step 0"),
    ("Hx * * * *", "minute field 'Hx': 'hx' is not a hash"),
    ("H(1-2 * * * *", "is not a hash"),
    ("0 0 H(0-5) * *", "day-of-month field 'H(0-5)': value 0 is out of range 1-31"),
])
def test_bad_hashes_name_the_field_and_value(expression: str, needle: str) -> None:
    with pytest.raises(InvalidCronExpression) as info:
        CronSchedule.parse(expression, seed="x")
    assert info.value.field == "cron" and needle in str(info.value)


def test_h_without_a_name_is_a_clear_error() -> None:
    with pytest.raises(InvalidCronExpression, match="H stands for a value hashed from the job's name"):
        CronSchedule.parse("H 2 * * *")
    with pytest.raises(InvalidCronExpression, match="no name here"):
        next_run_times("H 2 * * *", "UTC")
    assert next_run_times("H 2 * * *", "UTC", after=utc("2026-01-01T00:00:00Z"), count=1, name="nightly-report") \
        == [datetime(2026, 1, 1, 2, 6, tzinfo=ZoneInfo("UTC"))]


def test_the_api_checks_h_against_the_job_name_it_will_have() -> None:
    fields = validation.job_fields({"name": "nightly-report", "driver": "shell", "cron": "H 2 * * *",
                                    "configuration": {"command": ["true"]}}, creating=True)
    assert fields["cron_expression"] == "H 2 * * *"        # stored as written: resolved per name
    with pytest.raises(InvalidCronExpression, match="hour field 'H\\(0-99\\)'"):
        validation.job_fields({"name": "n", "driver": "shell", "cron": "0 H(0-99) * * *",
                               "configuration": {"command": ["true"]}}, creating=True)


# --------------------------------------------------------------------------
# 1,000 nightly jobs spread over the hour
# --------------------------------------------------------------------------

def test_a_thousand_h_2_jobs_spread_over_the_hour() -> None:
    """1,000 jobs over 60 minutes: 16.7 a minute on average; a uniform hash puts about 30 in the
    fullest minute (binomial maximum). The bound stated in the docs: no minute holds more than
    3.5 % (35 jobs). Measured for these names: 27 (2.7 %), 8 in the emptiest minute."""
    minutes = Counter(int(resolved("H 2 * * *", f"nightly-{i:04d}").split()[0]) for i in range(1000))
    assert set(minutes) == set(range(60))
    assert max(minutes.values()) <= 35
    fires = {next_run_times("H 2 * * *", "Europe/Berlin", after=utc("2026-06-01T00:00:00Z"), count=1,
                            name=f"nightly-{i:04d}")[0] for i in range(1000)}
    assert len(fires) == 60 and all(t.hour == 2 for t in fires)


# --------------------------------------------------------------------------
# DST and missed runs apply to the resolved time
# --------------------------------------------------------------------------

def test_a_resolved_h_time_in_the_spring_forward_gap_fires_at_the_transition() -> None:
    """H 2 * * * for nightly-report is 02:06 in Berlin; on 28 March 2027 02:00-03:00 does not
    exist, so it fires once at the first instant after the gap (03:00 CEST = 01:00Z), then at
    02:06 CEST again."""
    times = next_run_times("H 2 * * *", "Europe/Berlin", after=utc("2027-03-26T12:00:00Z"), count=3,
                           name="nightly-report")
    assert [t.astimezone(UTC) for t in times] == [utc("2027-03-27T01:06:00Z"), utc("2027-03-28T01:00:00Z"),
                                                  utc("2027-03-29T00:06:00Z")]


def test_a_resolved_h_time_in_the_repeated_hour_fires_once() -> None:
    times = next_run_times("H 2 * * *", "Europe/Berlin", after=utc("2027-10-30T12:00:00Z"), count=2,
                           name="nightly-report")
    assert [t.astimezone(UTC) for t in times] == [utc("2027-10-31T00:06:00Z"), utc("2027-11-01T01:06:00Z")]
    # an H step is an interval: every match of the repeated hour, in both offsets
    steps = next_run_times("H/30 2 * * *", "Europe/Berlin", after=utc("2027-10-30T12:00:00Z"), count=4,
                           name="nightly-report")
    assert [t.astimezone(UTC) for t in steps] == [utc("2027-10-31T00:06:00Z"), utc("2027-10-31T00:36:00Z"),
                                                  utc("2027-10-31T01:06:00Z"), utc("2027-10-31T01:36:00Z")]


def test_missed_runs_are_counted_on_the_resolved_ticks() -> None:
    j = job("H * * * *", name="nightly-report")            # every hour at :06
    assert missed_ticks(j, utc("2026-05-05T10:06:00Z"), utc("2026-05-05T12:05:59Z"), 10) == \
        [utc("2026-05-05T11:06:00Z")]
    skipped = plan_tick(job("H * * * *", policy="Skip", name="nightly-report"),
                        utc("2026-05-05T10:06:00Z"), utc("2026-05-05T13:00:00Z"), 10)
    assert (skipped.run, skipped.missed) == (False, 2)
    assert next_run_after(j, utc("2026-05-05T10:06:00Z"), utc("2026-05-05T10:07:00Z"), False) == \
        utc("2026-05-05T11:06:00Z")


# --------------------------------------------------------------------------
# Jitter
# --------------------------------------------------------------------------

def test_the_jitter_offset_is_stable_within_its_bound_and_pinned() -> None:
    assert jitter_offset("nightly-report", 90) == timedelta(seconds=13)
    offsets = [jitter_offset(f"job-{i}", 90) for i in range(2000)]
    assert all(timedelta(0) <= o <= timedelta(seconds=90) for o in offsets)
    assert {o.total_seconds() for o in offsets} == {float(s) for s in range(91)}    # every second of the bound
    assert jitter_offset("nightly-report", 90) == jitter_offset("nightly-report", 90)


def test_every_tick_of_a_jittered_job_moves_by_the_same_offset() -> None:
    plain = schedule_of(job("0 * * * *", name="nightly-report"))
    jittered = schedule_of(job("0 * * * *", name="nightly-report", jitter_seconds=90))
    assert isinstance(jittered, JitteredSchedule) and jittered.offset == timedelta(seconds=13)
    start = utc("2026-05-05T09:30:00Z")
    assert list(islice(jittered.iter_after(start), 5)) == [t + timedelta(seconds=13)
                                                           for t in islice(plain.iter_after(start), 5)]
    # the tick of 10:00 comes at 10:00:13: asked at 10:00:05 it is still ahead
    assert jittered.next_after(utc("2026-05-05T10:00:05Z")) == utc("2026-05-05T10:00:13Z")
    assert jittered.ticks_between(utc("2026-05-05T10:00:13Z"), utc("2026-05-05T12:00:12Z"), 10) == \
        [utc("2026-05-05T11:00:13Z")]
    assert jittered.min_interval(start) == timedelta(hours=1)


def test_jitter_applies_after_the_dst_rules() -> None:
    """The gap's tick (03:00 CEST) moves by the job's offset, like every other tick."""
    times = schedule_times("H 2 * * *", "Europe/Berlin", after=utc("2027-03-27T12:00:00Z"), count=2,
                           name="nightly-report", jitter="90s")
    assert [t.astimezone(UTC) for t in times] == [utc("2027-03-28T01:00:13Z"), utc("2027-03-29T00:06:13Z")]


def test_jitter_on_an_interval_moves_its_grid() -> None:
    anchor = utc("2026-01-01T00:00:00Z")
    schedule = build(None, 3600, None, "UTC", anchor=anchor, name="nightly-report", jitter_seconds=90)
    assert schedule.next_after(anchor) == anchor + timedelta(seconds=13)


@pytest.mark.parametrize("value, expected", [
    (None, None), (0, None), (timedelta(0), None), (90, 90), ("90s", 90), ("5m", 300),
    (timedelta(seconds=90), 90), ("1d", 86400),
])
def test_jitter_values(value: Any, expected: int | None) -> None:
    assert parse_jitter(value) == expected


@pytest.mark.parametrize("value, needle", [
    ("2d", "at most one day"), (-5, "positive"), ("soon", "is not a duration"), (1.5, "must be a"),
    (timedelta(milliseconds=1500), "whole number of seconds"),
])
def test_bad_jitter_is_refused_naming_the_field(value: Any, needle: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        validation.job_fields({"name": "n", "driver": "shell", "cron": "* * * * *", "jitter": value,
                               "configuration": {"command": ["true"]}}, creating=True)
    assert info.value.field == "jitter" and needle in str(info.value)


def test_a_run_at_job_has_no_jitter() -> None:
    with pytest.raises(ConfigurationError, match="jitter=90: has no meaning for a run_at job"):
        validation.job_fields({"name": "n", "driver": "shell", "run_at": utc("2030-01-01T00:00:00Z"),
                               "jitter": 90, "configuration": {"command": ["true"]}}, creating=True)
    with pytest.raises(ConfigurationError, match="has no meaning for a run_at job"):
        validation.job_fields({"run_at": utc("2030-01-01T00:00:00Z")}, creating=False,
                              current={"name": "n", "driver": "shell", "jitter_seconds": 30,
                                       "cron_expression": "* * * * *", "timezone": "UTC"})
    fields = validation.job_fields({"run_at": utc("2030-01-01T00:00:00Z"), "jitter": None}, creating=False,
                                   current={"name": "n", "driver": "shell", "jitter_seconds": 30,
                                            "cron_expression": "* * * * *", "timezone": "UTC"})
    assert fields["jitter_seconds"] is None
