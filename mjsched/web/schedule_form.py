"""The job page's schedule, shown and edited as what it is (docs/guide/schedules.md).

A job's schedule is one of three kinds: a cron (``cron``), an interval (``every``: "90s",
"1h30m") or a one-off (``run_at``: one instant). The edit form edits the field of the job's
own kind: a cron job its cron, an interval job its interval, a one-off job its instant (ISO
8601; without an offset, in the time zone the form gives). Changing the kind is
``mjsched jobs edit JOB --cron/--every/--run-at`` or ``update_job``: a form that silently
turned an interval job into a cron job is what this module replaces.
"""
from __future__ import annotations

from datetime import datetime, timezone as tz
from typing import Any

from ..cron import resolve_timezone
from ..errors import ConfigurationError
from ..schedules import format_duration, next_run_times, parse_duration

KINDS = {"cron": "cron", "every": "interval", "run_at": "one-off"}   # stored kind -> what the page calls it


def kind_of(cron: str | None, interval_seconds: int | None, run_at: datetime | None) -> str:
    """'cron', 'every' or 'run_at' (models.Job.schedule_kind, for a page's row as well)."""
    return "every" if interval_seconds is not None else "run_at" if run_at is not None else "cron"


def field_value(kind: str, cron: str | None, interval_seconds: int | None, run_at: datetime | None,
                zone: str) -> str:
    """The text the form shows for the job's schedule, which ``change`` reads back unchanged."""
    if kind == "every":
        return format_duration(int(interval_seconds or 0))
    if kind == "run_at" and run_at is not None:
        try:
            return run_at.astimezone(resolve_timezone(zone)).isoformat(timespec="seconds")
        except ConfigurationError:
            return run_at.astimezone(tz.utc).isoformat(timespec="seconds")
    return cron or ""


def instant(text: str, zone: str) -> datetime:
    """ISO 8601; a time without an offset is read in ``zone``."""
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ConfigurationError("run_at", text, "must be an ISO 8601 date/time, e.g. 2030-01-31T09:00:00+01:00 "
                                                 "(without an offset: in the job's time zone)") from None
    return value if value.tzinfo is not None else value.replace(tzinfo=resolve_timezone(zone))


def change(kind: str, text: str, job: Any, zone: str) -> dict[str, Any]:
    """The update_job field for the schedule the form gives (empty when it is the job's own);
    ConfigurationError naming the field for text that is no schedule of the kind."""
    if kind == "every":
        seconds = parse_duration(text, "every")
        return {} if seconds == job.interval_seconds else {"every": format_duration(seconds)}
    if kind == "run_at":
        when = instant(text, zone)
        return {} if when == job.run_at else {"run_at": when}
    if text != (job.cron_expression or "") and (text or job.cron_expression is not None):
        return {"cron": text}
    return {}


def preview(kind: str, text: str, zone: str, anchor: datetime | None, count: int = 5, *, name: str | None = None,
            jitter: int | None = None) -> tuple[str, list[datetime]]:
    """The words and next fire times of the schedule being typed (ConfigurationError: why not);
    a cron's H and the jitter are hashed from ``name``, the job's."""
    from ..cron import CronSchedule
    from .humanize import cron_in_words

    if kind == "every":
        seconds = parse_duration(text, "every")
        return f"every {format_duration(seconds)}", next_run_times(every=seconds, timezone=zone, count=count,
                                                                     start_at=anchor, name=name, jitter=jitter)
    if kind == "run_at":
        when = instant(text, zone)
        return (f"once at {when.astimezone(resolve_timezone(zone)).isoformat(sep=' ')}",
                next_run_times(run_at=when, timezone=zone, count=count))
    times = next_run_times(text, zone, count=count, name=name, jitter=jitter)
    resolved = CronSchedule.parse(text, zone, seed=name).resolved
    words = cron_in_words(resolved, zone)
    return (words if resolved == text else f"{words} ({resolved} for this job's name)"), times
