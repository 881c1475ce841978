"""Unit tests for mjsched.cron: parsing, validation and the DST policy.

Every expected instant below is written out literally in UTC (worked out by
hand from the zones' published transition rules), never computed by the code
under test.
"""
from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone

import pytest
from croniter import croniter
from hypothesis import given, settings, strategies as st

from mjsched.cron import CronSchedule, next_run_times, resolve_timezone
from mjsched.errors import ConfigurationError, InvalidCronExpression, UnknownTimezone

UTC = timezone.utc


def utc(text: str) -> datetime:
    """Parse a literal ISO instant such as '2026-03-29T01:00:00Z'."""
    value = datetime.fromisoformat(text)
    assert value.utcoffset() == timedelta(0), text
    return value.astimezone(UTC)


# --------------------------------------------------------------------------
# Parsing: macros, names, seconds-first, L / W / #
# --------------------------------------------------------------------------

VALID = [
    # expression, after (UTC), next three fire times (UTC), has_seconds, is_interval
    ("@yearly", "2026-05-05T00:10:00Z",
     ["2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z", "2029-01-01T00:00:00Z"], False, False),
    ("@annually", "2026-05-05T00:10:00Z",
     ["2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z", "2029-01-01T00:00:00Z"], False, False),
    ("@monthly", "2026-05-05T00:10:00Z",
     ["2026-06-01T00:00:00Z", "2026-07-01T00:00:00Z", "2026-08-01T00:00:00Z"], False, False),
    ("@weekly", "2026-05-05T00:10:00Z",
     ["2026-05-10T00:00:00Z", "2026-05-17T00:00:00Z", "2026-05-24T00:00:00Z"], False, False),
    ("@daily", "2026-05-05T00:10:00Z",
     ["2026-05-06T00:00:00Z", "2026-05-07T00:00:00Z", "2026-05-08T00:00:00Z"], False, False),
    ("@midnight", "2026-05-05T00:10:00Z",
     ["2026-05-06T00:00:00Z", "2026-05-07T00:00:00Z", "2026-05-08T00:00:00Z"], False, False),
    ("@DAILY", "2026-05-05T00:10:00Z",
     ["2026-05-06T00:00:00Z", "2026-05-07T00:00:00Z", "2026-05-08T00:00:00Z"], False, False),
    ("@hourly", "2026-05-05T00:10:00Z",
     ["2026-05-05T01:00:00Z", "2026-05-05T02:00:00Z", "2026-05-05T03:00:00Z"], False, True),
    ("0 9 * JAN,JUL MON-FRI", "2026-05-05T00:00:00Z",
     ["2026-07-01T09:00:00Z", "2026-07-02T09:00:00Z", "2026-07-03T09:00:00Z"], False, False),
    ("0 9 * jan,jul mon-fri", "2026-05-05T00:00:00Z",
     ["2026-07-01T09:00:00Z", "2026-07-02T09:00:00Z", "2026-07-03T09:00:00Z"], False, False),
    ("0 30 9 * * MON-FRI", "2026-05-08T10:00:00Z",
     ["2026-05-11T09:30:00Z", "2026-05-12T09:30:00Z", "2026-05-13T09:30:00Z"], True, False),
    ("*/15 * * * * *", "2026-05-05T00:00:00Z",
     ["2026-05-05T00:00:15Z", "2026-05-05T00:00:30Z", "2026-05-05T00:00:45Z"], True, True),
    ("5/15 * * * *", "2026-05-05T00:00:00Z",
     ["2026-05-05T00:05:00Z", "2026-05-05T00:20:00Z", "2026-05-05T00:35:00Z"], False, True),
    ("0 0 1 1-12/3 *", "2026-05-05T00:00:00Z",
     ["2026-07-01T00:00:00Z", "2026-10-01T00:00:00Z", "2027-01-01T00:00:00Z"], False, False),
    ("0 0 L * *", "2026-02-01T00:00:00Z",
     ["2026-02-28T00:00:00Z", "2026-03-31T00:00:00Z", "2026-04-30T00:00:00Z"], False, False),
    ("0 0 L 2 *", "2027-03-01T00:00:00Z",
     ["2028-02-29T00:00:00Z", "2029-02-28T00:00:00Z", "2030-02-28T00:00:00Z"], False, False),
    ("0 0 29 2 *", "2026-01-01T00:00:00Z",
     ["2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z", "2036-02-29T00:00:00Z"], False, False),
    ("0 0 15W * *", "2026-08-01T00:00:00Z",
     ["2026-08-14T00:00:00Z", "2026-09-15T00:00:00Z", "2026-10-15T00:00:00Z"], False, False),
    ("0 0 * * 5L", "2026-05-01T00:00:00Z",
     ["2026-05-29T00:00:00Z", "2026-06-26T00:00:00Z", "2026-07-31T00:00:00Z"], False, False),
    ("0 0 * * FRIL", "2026-05-01T00:00:00Z",
     ["2026-05-29T00:00:00Z", "2026-06-26T00:00:00Z", "2026-07-31T00:00:00Z"], False, False),
    ("0 0 * * FRI#2", "2026-05-01T00:00:00Z",
     ["2026-05-08T00:00:00Z", "2026-06-12T00:00:00Z", "2026-07-10T00:00:00Z"], False, False),
    ("0 0 * * 5#5", "2026-05-01T00:00:00Z",
     ["2026-05-29T00:00:00Z", "2026-07-31T00:00:00Z", "2026-10-30T00:00:00Z"], False, False),
    ("0 0 * * 7", "2026-05-05T00:00:00Z",
     ["2026-05-10T00:00:00Z", "2026-05-17T00:00:00Z", "2026-05-24T00:00:00Z"], False, False),
    ("0 0 * * 6-7", "2026-05-05T00:00:00Z",
     ["2026-05-09T00:00:00Z", "2026-05-10T00:00:00Z", "2026-05-16T00:00:00Z"], False, False),
    ("0 0 * * */2", "2026-05-05T00:00:00Z",
     ["2026-05-07T00:00:00Z", "2026-05-09T00:00:00Z", "2026-05-10T00:00:00Z"], False, False),
    ("0 0 ? * MON", "2026-05-05T00:00:00Z",
     ["2026-05-11T00:00:00Z", "2026-05-18T00:00:00Z", "2026-05-25T00:00:00Z"], False, False),
    ("  0\t12  * * *  ", "2026-05-05T00:00:00Z",
     ["2026-05-05T12:00:00Z", "2026-05-06T12:00:00Z", "2026-05-07T12:00:00Z"], False, False),
]


@pytest.mark.parametrize("expression, after, expected, has_seconds, is_interval", VALID)
def test_parse_valid(expression, after, expected, has_seconds, is_interval):
    schedule = CronSchedule.parse(expression)
    assert schedule.expression == expression
    assert schedule.timezone == "UTC"
    assert schedule.has_seconds is has_seconds
    assert schedule.is_interval is is_interval
    got = schedule.ticks_between(utc(after), utc("2099-01-01T00:00:00Z"), 3)
    assert got == [utc(t) for t in expected]
    assert all(t.tzinfo is UTC for t in got)


@pytest.mark.parametrize("expression, is_interval", [
    ("0 2 * * *", False),
    ("0 0,12 * * *", False),         # a list is not an interval (Cronos)
    ("30 9 * * MON-FRI", False),     # ranges in day fields do not count
    ("0 0 1-7 * *", False),
    ("*/5 * * * *", True),
    ("0 * * * *", True),
    ("0 1-3 * * *", True),
    ("15 */2 * * *", True),
    ("@daily", False),
    ("@hourly", True),
    ("0 30 9 * * *", False),
    ("5 30 9 * * *", False),
    ("*/10 30 9 * * *", True),
    ("0-30 30 9 * * *", True),
])
def test_is_interval(expression, is_interval):
    assert CronSchedule.parse(expression).is_interval is is_interval


# --------------------------------------------------------------------------
# Rejected expressions: type, field name and offending value in the message
# --------------------------------------------------------------------------

BAD_FIELDS = [
    # expression, field named in the message, offending value quoted in it
    ("61 * * * *", "minute", "61"),
    ("* 24 * * *", "hour", "24"),
    ("* * 0 * *", "day-of-month", "0"),
    ("* * 32 * *", "day-of-month", "32"),
    ("* * * 13 *", "month", "13"),
    ("* * * 0 *", "month", "0"),
    ("* * * * 8", "day-of-week", "8"),
    ("60 * * * * *", "second", "60"),        # seconds come first in 6 fields
    ("0 60 * * * *", "minute", "60"),
    ("0 0 24 * * *", "hour", "24"),
    ("* * * FOO *", "month", "FOO"),
    ("* * * * FUNDAY", "day-of-week", "FUNDAY"),
    ("*/0 * * * *", "minute", "*/0"),
    ("*/61 * * * *", "minute", "61"),
    ("5-1 * * * *", "minute", "5-1"),
    ("0 0 * * FRI-MON", "day-of-week", "FRI-MON"),
    ("-1 * * * *", "minute", "-1"),
    ("1.5 * * * *", "minute", "1.5"),
    ("0,,5 * * * *", "minute", "0,,5"),
    ("H * * * *", "minute", "H"),
    ("? * * * *", "minute", "?"),
    ("0 0 30 2 *", "day-of-month", "30"),           # never fires
    ("0 0 31 4,6,9,11 *", "day-of-month", "31"),    # never fires
    ("0 0 * * 1#6", "day-of-week", "1#6"),
    ("0 0 * * 1,2#3", "day-of-week", "1,2#3"),
    ("0 0 15W,20 * *", "day-of-month", "15W,20"),
    ("0 0 32W * *", "day-of-month", "32"),
    ("0 0 LW * *", "day-of-month", "LW"),
    ("0 0 * * MON-", "day-of-week", "MON-"),
    ("0 0 L * 1", "day-of-month", "L"),          # croniter would silently drop the L
    ("0 0 29 2 1#5", "day-of-week", "1#5"),      # croniter would AND, not OR, the days
]


@pytest.mark.parametrize("expression, field_name, value", BAD_FIELDS)
def test_bad_field_names_field_and_value(expression, field_name, value):
    with pytest.raises(InvalidCronExpression) as info:
        CronSchedule.parse(expression)
    error = info.value
    assert isinstance(error, ConfigurationError)
    assert error.field == "cron"
    assert error.value == expression
    assert f"{field_name} field" in error.reason
    assert value in error.reason
    assert field_name in str(error) and value in str(error)


@pytest.mark.parametrize("expression, fragment", [
    (None, "string"),
    (42, "string"),
    ("", "empty"),
    ("   ", "empty"),
    ("0 0 * * *\x00", "NUL"),
    ("0 " * 200, "255"),
    ("* * * *", "4 fields"),
    ("* * * * * * *", "7 fields"),            # no year field
    ("0 0\u00a0* * *", "4 fields"),            # only ASCII blanks separate fields
    ("@reboot", "@reboot"),
    ("@fortnightly", "@fortnightly"),
])
def test_bad_shape(expression, fragment):
    with pytest.raises(InvalidCronExpression) as info:
        CronSchedule.parse(expression)
    assert fragment in info.value.reason


def test_error_uses_callers_field_name():
    with pytest.raises(InvalidCronExpression) as info:
        CronSchedule.parse("61 * * * *", field="schedule")
    assert info.value.field == "schedule"
    assert str(info.value).startswith("schedule=")


# --------------------------------------------------------------------------
# Timezones
# --------------------------------------------------------------------------

@pytest.mark.parametrize("name", [
    "Mars/Olympus", "", None, 5, "Europe/Berlin\x00", "../etc/passwd", "/etc/localtime",
    "Europe", "localtime", "UTC ",
])
def test_resolve_timezone_rejects(name):
    with pytest.raises(UnknownTimezone) as info:
        resolve_timezone(name)
    assert info.value.field == "timezone"


@pytest.mark.parametrize("name", ["UTC", "Europe/Berlin", "Asia/Kathmandu", "Australia/Lord_Howe"])
def test_resolve_timezone_accepts(name):
    assert resolve_timezone(name).key == name


def test_resolve_timezone_field_name_and_parse():
    with pytest.raises(UnknownTimezone) as info:
        resolve_timezone("Nowhere/City", field="tz")
    assert info.value.field == "tz" and "Nowhere/City" in str(info.value)
    with pytest.raises(UnknownTimezone):
        CronSchedule.parse("* * * * *", "Nowhere/City")


# --------------------------------------------------------------------------
# DST: both transitions, two years, four zones; fixed, interval and seconds
# --------------------------------------------------------------------------

DST = [
    # id, cron, zone, after (UTC), expected fire instants (UTC)
    # Europe/Berlin: CET +01 / CEST +02; 2026-03-29, 2026-10-25, 2027-03-28, 2027-10-31.
    ("berlin-2026-spring-fixed", "30 2 * * *", "Europe/Berlin", "2026-03-28T00:00:00Z",
     ["2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"]),
    ("berlin-2026-fall-fixed", "30 2 * * *", "Europe/Berlin", "2026-10-24T00:00:00Z",
     ["2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]),
    ("berlin-2026-spring-interval", "*/30 * * * *", "Europe/Berlin", "2026-03-29T00:15:00Z",
     ["2026-03-29T00:30:00Z", "2026-03-29T01:00:00Z", "2026-03-29T01:30:00Z",
      "2026-03-29T02:00:00Z"]),
    ("berlin-2026-fall-interval", "*/30 * * * *", "Europe/Berlin", "2026-10-24T23:15:00Z",
     ["2026-10-24T23:30:00Z", "2026-10-25T00:00:00Z", "2026-10-25T00:30:00Z",
      "2026-10-25T01:00:00Z", "2026-10-25T01:30:00Z", "2026-10-25T02:00:00Z"]),
    ("berlin-2026-fall-interval-from-first-pass", "*/30 * * * *", "Europe/Berlin",
     "2026-10-25T00:15:00Z",
     ["2026-10-25T00:30:00Z", "2026-10-25T01:00:00Z", "2026-10-25T01:30:00Z",
      "2026-10-25T02:00:00Z"]),
    ("berlin-2026-fall-interval-from-second-pass", "*/30 * * * *", "Europe/Berlin",
     "2026-10-25T01:15:00Z", ["2026-10-25T01:30:00Z", "2026-10-25T02:00:00Z"]),
    ("berlin-2026-fall-fixed-from-second-pass", "30 2 * * *", "Europe/Berlin",
     "2026-10-25T01:00:00Z", ["2026-10-26T01:30:00Z"]),
    ("berlin-2027-spring-fixed-gap-start", "0 2 * * *", "Europe/Berlin", "2027-03-27T00:00:00Z",
     ["2027-03-27T01:00:00Z", "2027-03-28T01:00:00Z", "2027-03-29T00:00:00Z"]),
    ("berlin-2027-fall-fixed", "0 2 * * *", "Europe/Berlin", "2027-10-29T12:00:00Z",
     ["2027-10-30T00:00:00Z", "2027-10-31T00:00:00Z", "2027-11-01T01:00:00Z"]),
    ("berlin-2027-spring-hourly", "0 * * * *", "Europe/Berlin", "2027-03-28T00:30:00Z",
     ["2027-03-28T01:00:00Z", "2027-03-28T02:00:00Z", "2027-03-28T03:00:00Z"]),
    ("berlin-2027-fall-hourly-macro", "@hourly", "Europe/Berlin", "2027-10-30T23:30:00Z",
     ["2027-10-31T00:00:00Z", "2027-10-31T01:00:00Z", "2027-10-31T02:00:00Z"]),
    ("berlin-2027-spring-seconds-fixed", "15 30 2 * * *", "Europe/Berlin", "2027-03-27T00:00:00Z",
     ["2027-03-27T01:30:15Z", "2027-03-28T01:00:00Z", "2027-03-29T00:30:15Z"]),
    ("berlin-2027-fall-seconds-fixed", "15 30 2 * * *", "Europe/Berlin", "2027-10-30T12:00:00Z",
     ["2027-10-31T00:30:15Z", "2027-11-01T01:30:15Z"]),
    ("berlin-2026-fall-seconds-interval", "*/20 0 2 * * *", "Europe/Berlin",
     "2026-10-24T23:59:00Z",
     ["2026-10-25T00:00:00Z", "2026-10-25T00:00:20Z", "2026-10-25T00:00:40Z",
      "2026-10-25T01:00:00Z", "2026-10-25T01:00:20Z", "2026-10-25T01:00:40Z",
      "2026-10-26T01:00:00Z"]),
    ("berlin-2026-spring-seconds-interval", "*/20 0 2 * * *", "Europe/Berlin",
     "2026-03-29T00:00:00Z",
     ["2026-03-29T01:00:00Z", "2026-03-30T00:00:00Z", "2026-03-30T00:00:20Z"]),
    # America/New_York: EST -05 / EDT -04; 2026-03-08, 2026-11-01, 2027-03-14, 2027-11-07.
    ("ny-2026-spring-fixed", "30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z",
     ["2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"]),
    ("ny-2026-fall-fixed", "30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z",
     ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]),
    ("ny-2026-spring-hourly", "0 * * * *", "America/New_York", "2026-03-08T05:30:00Z",
     ["2026-03-08T06:00:00Z", "2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"]),
    ("ny-2026-fall-hourly", "0 * * * *", "America/New_York", "2026-11-01T04:30:00Z",
     ["2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z"]),
    ("ny-2026-fall-seconds-fixed", "30 0 1 * * *", "America/New_York", "2026-10-31T12:00:00Z",
     ["2026-11-01T05:00:30Z", "2026-11-02T06:00:30Z"]),
    ("ny-2027-spring-fixed", "0 2 * * *", "America/New_York", "2027-03-13T12:00:00Z",
     ["2027-03-14T07:00:00Z", "2027-03-15T06:00:00Z"]),
    ("ny-2027-fall-fixed", "0 1 * * *", "America/New_York", "2027-11-06T12:00:00Z",
     ["2027-11-07T05:00:00Z", "2027-11-08T06:00:00Z"]),
    ("ny-2027-spring-interval", "*/30 * * * *", "America/New_York", "2027-03-14T06:15:00Z",
     ["2027-03-14T06:30:00Z", "2027-03-14T07:00:00Z", "2027-03-14T07:30:00Z"]),
    ("ny-2027-fall-interval-one-hour", "*/30 1 * * *", "America/New_York",
     "2027-11-07T04:00:00Z",
     ["2027-11-07T05:00:00Z", "2027-11-07T05:30:00Z", "2027-11-07T06:00:00Z",
      "2027-11-07T06:30:00Z", "2027-11-08T06:00:00Z"]),
    ("ny-2027-spring-seconds-interval", "*/30 0 2 * * *", "America/New_York",
     "2027-03-14T00:00:00Z",
     ["2027-03-14T07:00:00Z", "2027-03-15T06:00:00Z", "2027-03-15T06:00:30Z"]),
    # Australia/Lord_Howe: +10:30 / +11 (30-minute shift); DST ends 2026-04-05 and
    # 2027-04-04 (02:00 -> 01:30), starts 2026-10-04 and 2027-10-03 (02:00 -> 02:30).
    ("lordhowe-2026-spring-fixed", "15 2 * * *", "Australia/Lord_Howe", "2026-10-02T12:00:00Z",
     ["2026-10-02T15:45:00Z", "2026-10-03T15:30:00Z", "2026-10-04T15:15:00Z"]),
    ("lordhowe-2026-fall-fixed", "45 1 * * *", "Australia/Lord_Howe", "2026-04-03T12:00:00Z",
     ["2026-04-03T14:45:00Z", "2026-04-04T14:45:00Z", "2026-04-05T15:15:00Z"]),
    ("lordhowe-2026-fall-interval", "*/15 * * * *", "Australia/Lord_Howe",
     "2026-04-04T14:00:00Z",
     ["2026-04-04T14:15:00Z", "2026-04-04T14:30:00Z", "2026-04-04T14:45:00Z",
      "2026-04-04T15:00:00Z", "2026-04-04T15:15:00Z", "2026-04-04T15:30:00Z"]),
    ("lordhowe-2026-spring-interval", "*/15 * * * *", "Australia/Lord_Howe",
     "2026-10-03T15:00:00Z",
     ["2026-10-03T15:15:00Z", "2026-10-03T15:30:00Z", "2026-10-03T15:45:00Z",
      "2026-10-03T16:00:00Z"]),
    ("lordhowe-2026-spring-seconds-fixed", "10 20 2 * * *", "Australia/Lord_Howe",
     "2026-10-03T12:00:00Z", ["2026-10-03T15:30:00Z", "2026-10-04T15:20:10Z"]),
    ("lordhowe-2027-spring-fixed", "15 2 * * *", "Australia/Lord_Howe", "2027-10-02T00:00:00Z",
     ["2027-10-02T15:30:00Z", "2027-10-03T15:15:00Z"]),
    ("lordhowe-2027-fall-fixed", "45 1 * * *", "Australia/Lord_Howe", "2027-04-03T00:00:00Z",
     ["2027-04-03T14:45:00Z", "2027-04-04T15:15:00Z"]),
    ("lordhowe-2027-spring-interval", "0,30 * * * *", "Australia/Lord_Howe",
     "2027-10-02T14:45:00Z",
     ["2027-10-02T15:00:00Z", "2027-10-02T15:30:00Z", "2027-10-02T16:00:00Z"]),
    ("lordhowe-2027-fall-interval", "0,30 * * * *", "Australia/Lord_Howe",
     "2027-04-03T13:45:00Z",
     ["2027-04-03T14:00:00Z", "2027-04-03T14:30:00Z", "2027-04-03T15:00:00Z",
      "2027-04-03T15:30:00Z"]),
    ("lordhowe-2027-fall-seconds-interval", "*/30 45 1 * * *", "Australia/Lord_Howe",
     "2027-04-03T14:00:00Z",
     ["2027-04-03T14:45:00Z", "2027-04-03T14:45:30Z", "2027-04-03T15:15:00Z",
      "2027-04-03T15:15:30Z"]),
    # Asia/Kathmandu: +05:45 all year; dates chosen on other zones' transition days.
    ("kathmandu-2026-march-fixed", "0 9 * * MON-FRI", "Asia/Kathmandu", "2026-03-27T00:00:00Z",
     ["2026-03-27T03:15:00Z", "2026-03-30T03:15:00Z", "2026-03-31T03:15:00Z"]),
    ("kathmandu-2026-october-fixed", "30 2 * * *", "Asia/Kathmandu", "2026-10-24T00:00:00Z",
     ["2026-10-24T20:45:00Z", "2026-10-25T20:45:00Z"]),
    ("kathmandu-2027-march-interval", "*/30 * * * *", "Asia/Kathmandu", "2027-03-28T00:00:00Z",
     ["2027-03-28T00:15:00Z", "2027-03-28T00:45:00Z", "2027-03-28T01:15:00Z"]),
    ("kathmandu-2027-october-seconds", "30 15 9 * * *", "Asia/Kathmandu", "2027-10-30T12:00:00Z",
     ["2027-10-31T03:30:30Z", "2027-11-01T03:30:30Z"]),
]


@pytest.mark.parametrize("cron, zone, after, expected", [case[1:] for case in DST],
                         ids=[case[0] for case in DST])
def test_next_run_times_dst(cron, zone, after, expected):
    got = next_run_times(cron, zone, after=utc(after), count=len(expected))
    assert [t.astimezone(UTC) for t in got] == [utc(t) for t in expected]
    assert all(getattr(t.tzinfo, "key", None) == zone for t in got)
    schedule = CronSchedule.parse(cron, zone)
    assert schedule.next_after(utc(after)) == utc(expected[0])


def test_next_run_times_shows_both_offsets_on_fall_back():
    got = next_run_times("*/30 * * * *", "Europe/Berlin", utc("2026-10-24T23:15:00Z"), 6)
    assert [t.isoformat() for t in got] == [
        "2026-10-25T01:30:00+02:00", "2026-10-25T02:00:00+02:00", "2026-10-25T02:30:00+02:00",
        "2026-10-25T02:00:00+01:00", "2026-10-25T02:30:00+01:00", "2026-10-25T03:00:00+01:00",
    ]


def test_next_run_times_spring_forward_display():
    got = next_run_times("30 2 * * *", "Europe/Berlin", utc("2026-03-28T12:00:00Z"), 1)
    assert got[0].isoformat() == "2026-03-29T03:00:00+02:00"


# --------------------------------------------------------------------------
# next_run_times / CronSchedule argument handling
# --------------------------------------------------------------------------

@pytest.mark.parametrize("count", [0, -1, 10001, True, 1.5, "5", None])
def test_next_run_times_bad_count(count):
    with pytest.raises(ConfigurationError) as info:
        next_run_times("* * * * *", count=count)
    assert info.value.field == "count"


@pytest.mark.parametrize("after", [datetime(2026, 1, 1), "2026-01-01T00:00:00Z", 0])
def test_naive_or_non_datetime_after_rejected(after):
    with pytest.raises(ConfigurationError) as info:
        next_run_times("* * * * *", after=after)
    assert info.value.field == "after"
    with pytest.raises(ConfigurationError) as info:
        CronSchedule.parse("* * * * *").next_after(after)
    assert info.value.field == "after"


def test_next_run_times_defaults_to_now():
    before = datetime.now(UTC)
    got = next_run_times("* * * * * *", "Asia/Kathmandu")
    assert len(got) == 5 and got[0] > before - timedelta(seconds=1)
    assert all(b - a == timedelta(seconds=1) for a, b in zip(got, got[1:]))


def test_next_run_times_accepts_non_utc_after_and_max_count():
    berlin_after = utc("2026-05-05T10:00:00Z").astimezone(resolve_timezone("Europe/Berlin"))
    got = next_run_times("0 * * * *", "UTC", after=berlin_after, count=10000)
    assert got[0] == utc("2026-05-05T11:00:00Z") and len(got) == 10000


def test_schedule_is_immutable():
    schedule = CronSchedule.parse("0 2 * * *", "Europe/Berlin")
    with pytest.raises(dataclasses.FrozenInstanceError):
        schedule.expression = "* * * * *"  # type: ignore[misc]
    assert schedule.zone.key == "Europe/Berlin" and schedule.timezone == "Europe/Berlin"


@pytest.mark.parametrize("cron, zone, after, expected", [
    ("*/5 * * * *", "UTC", "2026-05-05T00:00:00Z", timedelta(minutes=5)),
    ("* * * * * *", "UTC", "2026-05-05T00:00:00Z", timedelta(seconds=1)),
    ("0 30 9 * * MON-FRI", "UTC", "2026-05-08T10:00:00Z", timedelta(days=1)),
    ("@yearly", "UTC", "2026-05-05T00:00:00Z", timedelta(days=365)),
    # Fall-back repeats make an hourly job's smallest gap... still an hour.
    ("0 * * * *", "Europe/Berlin", "2026-10-24T23:30:00Z", timedelta(hours=1)),
    # Spring-forward collapse makes the 02:00/02:30 gap times land 30 min apart.
    ("*/30 * * * *", "Europe/Berlin", "2026-03-29T00:15:00Z", timedelta(minutes=30)),
])
def test_min_interval(cron, zone, after, expected):
    assert CronSchedule.parse(cron, zone).min_interval(utc(after)) == expected


def test_min_interval_rejects_one_sample():
    with pytest.raises(ConfigurationError) as info:
        CronSchedule.parse("* * * * *").min_interval(samples=1)
    assert info.value.field == "samples"


@pytest.mark.parametrize("cron, zone, start, end, limit, expected", [
    ("0 * * * *", "UTC", "2026-05-05T00:00:00Z", "2026-05-05T03:00:00Z", 10,
     ["2026-05-05T01:00:00Z", "2026-05-05T02:00:00Z", "2026-05-05T03:00:00Z"]),
    ("0 * * * *", "UTC", "2026-05-05T00:00:00Z", "2026-05-05T03:00:00Z", 2,
     ["2026-05-05T01:00:00Z", "2026-05-05T02:00:00Z"]),
    ("0 * * * *", "UTC", "2026-05-05T03:00:00Z", "2026-05-05T03:00:00Z", 10, []),
    ("0 * * * *", "UTC", "2026-05-05T04:00:00Z", "2026-05-05T03:00:00Z", 10, []),
    ("0 * * * *", "Europe/Berlin", "2026-10-24T23:00:00Z", "2026-10-25T02:00:00Z", 10,
     ["2026-10-25T00:00:00Z", "2026-10-25T01:00:00Z", "2026-10-25T02:00:00Z"]),
    ("30 2 * * *", "Europe/Berlin", "2026-03-28T00:00:00Z", "2026-03-31T00:00:00Z", 10,
     ["2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"]),
])
def test_ticks_between(cron, zone, start, end, limit, expected):
    got = CronSchedule.parse(cron, zone).ticks_between(utc(start), utc(end), limit)
    assert got == [utc(t) for t in expected]


def test_ticks_between_validates():
    schedule = CronSchedule.parse("* * * * *")
    with pytest.raises(ConfigurationError):
        schedule.ticks_between(utc("2026-05-05T00:00:00Z"), datetime(2026, 5, 6), 5)
    with pytest.raises(ConfigurationError):
        schedule.ticks_between(utc("2026-05-05T00:00:00Z"), utc("2026-05-06T00:00:00Z"), -1)


# --------------------------------------------------------------------------
# Property: strictly increasing, strictly after `after`, each one explained
# --------------------------------------------------------------------------

ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kathmandu",
         "Australia/Sydney", "Europe/Dublin", "America/Santiago", "Pacific/Chatham"]
# Transition instants (UTC) of the zones above, from their published rules.
TRANSITIONS = [
    "2026-03-29T01:00:00Z", "2026-10-25T01:00:00Z", "2027-03-28T01:00:00Z",  # EU
    "2027-10-31T01:00:00Z",
    "2026-03-08T07:00:00Z", "2026-11-01T06:00:00Z", "2027-03-14T07:00:00Z",  # US
    "2027-11-07T06:00:00Z",
    "2026-04-04T15:00:00Z", "2026-10-03T15:30:00Z", "2027-04-03T15:00:00Z",  # Lord Howe
    "2027-10-02T15:30:00Z",
    "2026-04-04T16:00:00Z", "2026-10-03T16:00:00Z",                          # Sydney
]
SECONDS = st.sampled_from([None, "0", "*/20", "15", "0,30"])
MINUTES = st.sampled_from(["*", "*/7", "0", "30", "15,45", "0-30/10", "59"])
HOURS = st.sampled_from(["*", "1", "2", "3", "1-3", "*/2", "0,12"])
DOMS = st.sampled_from(["*", "1", "15", "L", "1-7"])
MONTHS = st.sampled_from(["*", "3", "MAR,OCT", "*/2"])
DOWS = st.sampled_from(["*", "MON-FRI", "0", "SUN"])


@settings(max_examples=150, deadline=None)
@given(second=SECONDS, minute=MINUTES, hour=HOURS, dom=DOMS, month=MONTHS, dow=DOWS,
       zone=st.sampled_from(ZONES),
       after=st.one_of(
           st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2030, 12, 31),
                        timezones=st.just(UTC)),
           # Biased towards the hours around real transitions, where the bugs live.
           st.builds(lambda t, s: utc(t) + timedelta(seconds=s), st.sampled_from(TRANSITIONS),
                     st.integers(min_value=-30 * 3600, max_value=3 * 3600))))
def test_iter_after_is_strictly_increasing(second, minute, hour, dom, month, dow, zone, after):
    if dom == "L":
        dow = "*"  # 'L' with a restricted day-of-week is rejected on purpose
    fields = [minute, hour, dom, month, dow]
    expression = " ".join(([second] if second else []) + fields)
    schedule = CronSchedule.parse(expression, zone)
    results = []
    for instant in schedule.iter_after(after):
        results.append(instant)
        if len(results) == 25:
            break
    assert results, expression
    assert results[0] > after
    assert all(a < b for a, b in zip(results, results[1:]))
    assert all(t.tzinfo is UTC for t in results)
    walls = []
    for instant in results:
        local = instant.astimezone(schedule.zone)
        wall = local.replace(tzinfo=None)
        walls.append(wall)
        offset_before = (instant - timedelta(seconds=1)).astimezone(schedule.zone).utcoffset()
        matches = croniter.match(expression, wall, second_at_beginning=bool(second))
        # Either the wall time matches, or it is the instant a spring-forward gap ends.
        assert matches or offset_before != local.utcoffset(), (expression, zone, instant)
    if not schedule.is_interval:
        assert len(set(walls)) == len(walls), "a fixed-time job fired twice at one wall time"


def _oracle(expression: str, zone_name: str, start: datetime, end: datetime) -> list[datetime]:
    """Independent, brute-force statement of the policy, one UTC minute at a time."""
    zone = resolve_timezone(zone_name)
    interval = CronSchedule.parse(expression).is_interval
    fired: list[datetime] = []
    minute = start + timedelta(minutes=1)
    while minute <= end:
        local = minute.astimezone(zone)
        wall = local.replace(tzinfo=None)
        previous = (minute - timedelta(minutes=1)).astimezone(zone).replace(tzinfo=None)
        gap = []
        probe = previous + timedelta(minutes=1)
        while probe < wall:  # wall times skipped by a spring-forward jump
            gap.append(probe)
            probe += timedelta(minutes=1)
        if any(croniter.match(expression, w) for w in gap):
            fired.append(minute)
        elif croniter.match(expression, wall) and (interval or local.fold == 0):
            fired.append(minute)
        minute += timedelta(minutes=1)
    return fired


@pytest.mark.parametrize("zone, transition", [
    ("Europe/Berlin", "2026-03-29T01:00:00Z"), ("Europe/Berlin", "2026-10-25T01:00:00Z"),
    ("America/New_York", "2027-03-14T07:00:00Z"), ("America/New_York", "2027-11-07T06:00:00Z"),
    ("Australia/Lord_Howe", "2026-04-04T15:00:00Z"),
    ("Australia/Lord_Howe", "2027-10-02T15:30:00Z"),
])
@pytest.mark.parametrize("expression", [
    "*/7 * * * *", "30 * * * *", "15,45 1-3 * * *", "30 2 * * *", "45 1 * * *", "0 2 * * *",
    "59 1 * * *", "*/30 2 * * *",
])
def test_matches_brute_force_oracle(zone, transition, expression):
    start = utc(transition) - timedelta(hours=4)
    end = utc(transition) + timedelta(hours=4)
    got = CronSchedule.parse(expression, zone).ticks_between(start, end, 10000)
    assert got == _oracle(expression, zone, start, end)
