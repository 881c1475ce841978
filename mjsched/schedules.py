"""The three schedule kinds behind one interface: ``cron``, ``every`` (an interval) and
``run_at`` (one run), so the engine, the previews and the CLI never ask which kind they hold.

* **cron** — ``CronSchedule`` (mjsched/cron.py): wall-clock ticks in the job's zone, with
  the DST rules documented there.
* **every** — ``IntervalSchedule``: ticks ``anchor + k * interval`` (k >= 0) in absolute
  time. The anchor is the job's ``start_at``, else its ``created_at``. The zone only
  changes how ticks are shown: DST never moves them (an hourly interval stays 3600 s
  apart across a change; its local wall time shifts by the offset instead).
* **run_at** — ``OneOffSchedule``: one tick at an aware instant, none after it.

A cron or interval job may have a ``jitter``: ``JitteredSchedule`` moves every tick of it by
the same offset in [0, jitter] seconds, hashed from the job's name (``jitter_offset``), so
the offset is stable per job (across ticks, processes and restarts) and a renamed job moves.
The offset is added in absolute time to the instants the wrapped schedule gives (after its
DST rules), and missed runs are counted on the moved ticks.

Every schedule answers ``next_after`` (None when it has no tick after the instant: only a
one-off ends), ``iter_after``, ``ticks_between`` (missed-run counting) and ``min_interval``
(the high-frequency warning); every instant out is an aware UTC datetime.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field as dc_field
from datetime import datetime, timedelta, timezone
from itertools import islice
from typing import Iterator, Union
from zoneinfo import ZoneInfo

from .cron import MAX_PREVIEW_COUNT, CronSchedule, hash_value, resolve_timezone
from .errors import ConfigurationError

__all__ = ["IntervalSchedule", "OneOffSchedule", "JitteredSchedule", "Schedule", "build", "next_run_times",
           "parse_duration", "format_duration", "schedule_text", "jitter_offset", "parse_jitter", "MAX_INTERVAL_SECONDS",
           "LATEST_RUN_AT", "MAX_JITTER_SECONDS"]

UTC = timezone.utc
# An interval lies in [1 s, 366 days]: the same bound in both dialects' schemas (007_schedule_kinds.sql).
MAX_INTERVAL_SECONDS = 366 * 86400
# run_at lies in [1900-01-01, 9999-12-30] UTC: one day below the latest instant a job row may hold, so
# the "served" marker (scheduling.ENDED) is always later than any run_at.
EARLIEST_RUN_AT = datetime(1900, 1, 1, tzinfo=UTC)
LATEST_RUN_AT = datetime(9999, 12, 30, tzinfo=UTC)
# A jitter lies in [1 s, 1 day]: the same bound in both dialects' schemas (012_jitter.sql).
MAX_JITTER_SECONDS = 86400
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION_RE = re.compile(r"^(?:(\d+)\s*([smhdw])\s*)+$")
_PART_RE = re.compile(r"(\d+)\s*([smhdw])")


def parse_duration(value: object, field: str = "every") -> int:
    """Whole seconds of an interval: a ``timedelta``, an int of seconds, or a string such as
    ``"90s"``, ``"15m"``, ``"2h"``, ``"1d"``, ``"1h30m"`` (units s, m, h, d, w). Raises
    ConfigurationError naming ``field`` and the value for anything else, for zero or negative
    intervals, fractions of a second and intervals over 366 days."""
    if isinstance(value, timedelta):
        if value % timedelta(seconds=1):
            raise ConfigurationError(field, value, "must be a whole number of seconds")
        seconds = int(value.total_seconds())
    elif isinstance(value, int) and not isinstance(value, bool):
        seconds = value
    elif isinstance(value, str):
        text = value.strip().lower()
        if not _DURATION_RE.match(text):
            raise ConfigurationError(field, value, "is not a duration: use a number and a unit (s, m, h, d, w), "
                                                   "e.g. '90s', '15m', '2h', '1d', '1h30m'")
        seconds = sum(int(n) * _UNITS[u] for n, u in _PART_RE.findall(text))
    else:
        raise ConfigurationError(field, value, "must be a datetime.timedelta, an int of seconds, or a string "
                                               "such as '90s', '15m', '2h', '1d'")
    if seconds <= 0:
        raise ConfigurationError(field, value, "must be a positive interval (at least 1 second)")
    if seconds > MAX_INTERVAL_SECONDS:
        raise ConfigurationError(field, value, f"must be at most 366 days ({MAX_INTERVAL_SECONDS} s)")
    return seconds


def parse_jitter(value: object, field: str = "jitter") -> int | None:
    """Whole seconds of a jitter bound (as ``parse_duration``: a timedelta, an int of seconds or
    a string such as ``"90s"``), at most one day; None or 0 is no jitter (None)."""
    if value is None or (isinstance(value, (int, timedelta)) and not isinstance(value, bool) and not value):
        return None
    seconds = parse_duration(value, field)
    if seconds > MAX_JITTER_SECONDS:
        raise ConfigurationError(field, value, f"must be at most one day ({MAX_JITTER_SECONDS} s)")
    return seconds


def format_duration(seconds: int) -> str:
    """The shortest spelling parse_duration reads back: 90 -> '1m30s', 3600 -> '1h'."""
    parts, rest = [], int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            parts.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(parts) or "0s"


def _aware_utc(value: object, field: str) -> datetime:
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise ConfigurationError(field, value, "must be a timezone-aware datetime")
    return value.astimezone(UTC)


@dataclass(frozen=True)
class IntervalSchedule:
    """Ticks ``anchor + k * seconds`` for k >= 0, in absolute time (module doc)."""

    seconds: int
    anchor: datetime
    timezone: str = "UTC"
    zone: ZoneInfo = dc_field(repr=False, compare=False, default=ZoneInfo("UTC"))
    kind = "every"

    @classmethod
    def of(cls, seconds: int, anchor: datetime, timezone: str = "UTC") -> "IntervalSchedule":
        return cls(parse_duration(seconds), _aware_utc(anchor, "anchor"), timezone, resolve_timezone(timezone))

    @property
    def text(self) -> str:
        return f"every {self.seconds}s"

    def next_after(self, after: datetime) -> datetime:
        """The first tick strictly after ``after`` (integer microseconds: no float drift)."""
        elapsed = (_aware_utc(after, "after") - self.anchor) // timedelta(microseconds=1)
        k = max(0, elapsed // (self.seconds * 1_000_000) + 1)
        try:
            return self.anchor + timedelta(seconds=k * self.seconds)
        except OverflowError:
            raise ConfigurationError("after", after, f"no tick of every {self.seconds}s after it "
                                                     "before year 9999") from None

    def iter_after(self, after: datetime) -> Iterator[datetime]:
        current = after
        while True:
            try:
                current = self.next_after(current)
            except ConfigurationError:
                return
            yield current

    def ticks_between(self, start_exclusive: datetime, end_inclusive: datetime, limit: int) -> list[datetime]:
        """Ticks in (start, end], at most ``limit``, by arithmetic (a backlog of millions costs nothing)."""
        end = _aware_utc(end_inclusive, "end_inclusive")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ConfigurationError("limit", limit, "must be an int >= 0")
        first = self.next_after(start_exclusive)
        if limit == 0 or first > end:
            return []
        n = (end - first) // timedelta(seconds=self.seconds) + 1
        return [first + timedelta(seconds=i * self.seconds) for i in range(min(n, limit))]

    def min_interval(self, after: datetime | None = None, samples: int = 6) -> timedelta:
        return timedelta(seconds=self.seconds)


@dataclass(frozen=True)
class OneOffSchedule:
    """One tick at ``run_at``; no tick after it (``next_after`` answers None)."""

    run_at: datetime
    timezone: str = "UTC"
    zone: ZoneInfo = dc_field(repr=False, compare=False, default=ZoneInfo("UTC"))
    kind = "run_at"

    @classmethod
    def of(cls, run_at: datetime, timezone: str = "UTC") -> "OneOffSchedule":
        return cls(_aware_utc(run_at, "run_at"), timezone, resolve_timezone(timezone))

    @property
    def text(self) -> str:
        return f"at {self.run_at.isoformat()}"

    def next_after(self, after: datetime) -> datetime | None:
        return self.run_at if _aware_utc(after, "after") < self.run_at else None

    def iter_after(self, after: datetime) -> Iterator[datetime]:
        if _aware_utc(after, "after") < self.run_at:
            yield self.run_at

    def ticks_between(self, start_exclusive: datetime, end_inclusive: datetime, limit: int) -> list[datetime]:
        end = _aware_utc(end_inclusive, "end_inclusive")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ConfigurationError("limit", limit, "must be an int >= 0")
        inside = _aware_utc(start_exclusive, "start_exclusive") < self.run_at <= end
        return [self.run_at] if inside and limit else []

    def min_interval(self, after: datetime | None = None, samples: int = 6) -> timedelta:
        return timedelta.max


def jitter_offset(name: str, jitter_seconds: int) -> timedelta:
    """The offset of every tick of job ``name`` with a jitter bound of ``jitter_seconds``: whole
    seconds in [0, jitter_seconds], from a stable hash of the name (cron.hash_value)."""
    return timedelta(seconds=hash_value(name, "jitter", int(jitter_seconds) + 1))


@dataclass(frozen=True)
class JitteredSchedule:
    """A cron or interval schedule whose ticks all come ``offset`` later (module doc)."""

    inner: Union[CronSchedule, IntervalSchedule]
    offset: timedelta

    @property
    def kind(self) -> str:
        return getattr(self.inner, "kind", "cron")

    @property
    def timezone(self) -> str:
        return self.inner.timezone

    @property
    def zone(self) -> ZoneInfo:
        return self.inner.zone

    def next_after(self, after: datetime) -> datetime:
        return self.inner.next_after(_aware_utc(after, "after") - self.offset) + self.offset

    def iter_after(self, after: datetime) -> Iterator[datetime]:
        for tick in self.inner.iter_after(_aware_utc(after, "after") - self.offset):
            try:
                yield tick + self.offset
            except OverflowError:   # past what datetime holds: no tick after it
                return

    def ticks_between(self, start_exclusive: datetime, end_inclusive: datetime, limit: int) -> list[datetime]:
        start = _aware_utc(start_exclusive, "start_exclusive") - self.offset
        end = _aware_utc(end_inclusive, "end_inclusive") - self.offset
        return [t + self.offset for t in self.inner.ticks_between(start, end, limit)]

    def min_interval(self, after: datetime | None = None, samples: int = 6) -> timedelta:
        return self.inner.min_interval(after, samples)


Schedule = Union[CronSchedule, IntervalSchedule, OneOffSchedule, JitteredSchedule]


def build(cron: str | None, interval_seconds: int | None, run_at: datetime | None, timezone: str = "UTC",
          anchor: datetime | None = None, *, name: str | None = None,
          jitter_seconds: int | None = None) -> Schedule:
    """The schedule of a job's stored values; exactly one kind must be given (ConfigurationError
    otherwise, naming the kinds). ``anchor`` (start_at, else created_at) is an interval's origin;
    ``name`` is the job's, which a cron's ``H`` and the jitter's offset are hashed from."""
    given = [k for k, v in (("cron", cron), ("every", interval_seconds), ("run_at", run_at)) if v is not None]
    if len(given) != 1:
        raise ConfigurationError("schedule", ", ".join(given) or None,
                                 "a job has exactly one of cron, every or run_at")
    inner: Union[CronSchedule, IntervalSchedule]
    if cron is not None:
        inner = CronSchedule.parse(cron, timezone, seed=name)
    elif interval_seconds is not None:
        if anchor is None:
            raise ConfigurationError("anchor", None, "an interval needs an anchor (start_at or created_at)")
        inner = IntervalSchedule.of(interval_seconds, anchor, timezone)
    else:
        assert run_at is not None
        if jitter_seconds:
            raise ConfigurationError("jitter", jitter_seconds, "has no meaning for a run_at job (its one run is "
                                                               "at run_at)")
        return OneOffSchedule.of(run_at, timezone)
    if not jitter_seconds:
        return inner
    if name is None:
        raise ConfigurationError("jitter", jitter_seconds, "the offset is hashed from the job's name, and there "
                                                           "is no name here: give the job's name (name=...)")
    return JitteredSchedule(inner, jitter_offset(name, jitter_seconds))


def schedule_text(cron: str | None, interval_seconds: int | None, run_at: datetime | None) -> str:
    """One text per schedule, for keys and logs: the cron expression, ``every <n>s`` or
    ``at <ISO instant>``. The SQL of the high-frequency warning builds the same text
    (coalesce(cron_expression, 'every ' || interval_seconds || 's'))."""
    if cron is not None:
        return cron
    if interval_seconds is not None:
        return f"every {int(interval_seconds)}s"
    return f"at {run_at.astimezone(UTC).isoformat()}" if run_at is not None else ""


def next_run_times(cron: str | None = None, timezone: str = "UTC", after: datetime | None = None,
                   count: int = 5, *, every: timedelta | str | int | None = None, run_at: datetime | None = None,
                   start_at: datetime | None = None, name: str | None = None,
                   jitter: timedelta | str | int | None = None) -> list[datetime]:
    """Preview a schedule exactly as the engine fires it, shown in ``timezone``.

    Exactly one of ``cron``, ``every`` and ``run_at``. An interval is anchored at
    ``start_at`` when given, else at ``after`` (as a job created at ``after``); a one-off
    shows its one instant when it lies after ``after``. ``after`` defaults to now. ``name``
    is the job's name, which a cron's ``H`` and the ``jitter`` offset are hashed from."""
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_PREVIEW_COUNT:
        raise ConfigurationError("count", count, f"must be an int in 1-{MAX_PREVIEW_COUNT}")
    start = datetime.now(UTC) if after is None else _aware_utc(after, "after")
    seconds = parse_duration(every) if every is not None else None
    if run_at is not None:
        run_at = _aware_utc(run_at, "run_at")
    if start_at is not None:
        start_at = _aware_utc(start_at, "start_at")
    jitter_seconds = parse_jitter(jitter)
    schedule = build(cron, seconds, run_at, timezone, anchor=start_at or start, name=name,
                     jitter_seconds=jitter_seconds)
    if start_at is not None and start_at > start:
        start = start_at - timedelta(microseconds=1)   # a tick exactly at start_at fires
    return [t.astimezone(schedule.zone) for t in islice(schedule.iter_after(start), count)]
