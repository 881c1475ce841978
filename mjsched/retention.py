"""Run-history retention: the values its settings may take, and durations such as ``30d``.

The rules themselves live in SQL (``sql/<dialect>/006_retention.sql``): a job keeps its
finished runs for ``keep_runs_days`` days and/or its newest ``keep_runs_count`` ones; a run no
rule that is on keeps is deleted. Per job, ``None`` defers to the engine's setting and ``0``
turns the rule off for that job. Running and Queued runs are never deleted. This module only
checks values, so a bad one is refused naming the field before anything is written.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .errors import ConfigurationError

MAX_KEEP_DAYS = 36_500                 # 100 years (the CHECK constraint's bound)
MAX_KEEP_COUNT = 1_000_000_000
MAX_KEEP_SECONDS = MAX_KEEP_DAYS * 86_400
MAX_BATCH = 4_000                      # purge_runs' cap: under SQL Server's lock-escalation threshold
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$", re.I)


def keep_days(field: str, value: Any) -> int | None:
    """None (the engine's setting), or whole days in [0, 36500]; 0 turns the age rule off."""
    return _whole(field, value, MAX_KEEP_DAYS, "days (0: keep regardless of age)")


def keep_count(field: str, value: Any) -> int | None:
    """None (the engine's setting), or a count in [0, 1e9]; 0 turns the count rule off."""
    return _whole(field, value, MAX_KEEP_COUNT, "runs (0: no count kept)")


def _whole(field: str, value: Any, maximum: int, unit: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(field, value, f"must be a whole number of {unit}, or None")
    if not 0 <= value <= maximum:
        raise ConfigurationError(field, value, f"must be between 0 and {maximum} {unit.split(' ')[0]}")
    return value


def duration(field: str, value: Any) -> float:
    """Seconds from a timedelta, a number of seconds, or text such as ``30d``, ``12h``, ``90m``,
    ``45s``, ``2w`` (a bare number in text is days: ``--older-than 30``). Must be > 0."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        match = _DURATION.match(value)
        if not match:
            raise ConfigurationError(field, value, "must be a duration such as 30d, 12h, 90m, 45s or 2w")
        seconds = float(match.group(1)) * _UNITS[(match.group(2) or "d").lower()]
    else:
        raise ConfigurationError(field, value, "must be a duration (timedelta, seconds, or text like 30d)")
    if not seconds > 0 or seconds != seconds:
        raise ConfigurationError(field, value, "must be longer than zero")
    if seconds > MAX_KEEP_SECONDS:
        raise ConfigurationError(field, value, f"must be at most {MAX_KEEP_DAYS} days")
    return seconds


@dataclass(frozen=True)
class PurgeBatch:
    """What one ``purge_runs`` call did: rows deleted (or counted, dry-run), where the next
    call goes on (``next_job_id`` None: the pass is done), and whether another purger held
    the lock (then nothing was done)."""

    purged: int = 0
    next_job_id: str | None = None
    next_completed_at: Any = None
    next_run_id: str | None = None
    busy: bool = False

    @property
    def done(self) -> bool:
        return not self.busy and self.next_job_id is None

    @classmethod
    def from_row(cls, row: Any) -> "PurgeBatch":
        return cls(int(row["purged"] or 0), str(row["next_job_id"]).lower() if row["next_job_id"] else None,
                   row["next_completed_at"], str(row["next_run_id"]).lower() if row["next_run_id"] else None,
                   bool(row["busy"]))
