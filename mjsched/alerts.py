"""Deadline alerts (sql/<dialect>/014_alerts.sql): a job's rules, the alerts the database
opens and resolves, and the notification an on-call engineer reads.

The rules are create_job/update_job keywords (ALERT_FIELDS): durations as ``every=`` takes
them (an int of seconds, a timedelta, or '90s', '15m', '26h', '1d'), a count of failures, and
whether a failing streak pauses the job. The database decides; this module only checks the
rules before anything is written, and words what was decided.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Mapping

from .drivers.base import Notification
from .errors import ConfigurationError
from .schedules import format_duration, parse_duration

KINDS = ("late_start", "silent", "too_long", "failing_streak")
MAX_STREAK = 1000
# keyword -> column of job_alert_rule
ALERT_FIELDS: dict[str, str] = {
    "alert_late_start": "late_start_seconds",
    "alert_silent_after": "silent_after_seconds",
    "alert_too_long": "too_long_seconds",
    "alert_failing_streak": "failing_streak",
    "pause_after_failing_streak": "pause_after_failing_streak",
}
NO_RULES: dict[str, Any] = {column: None for column in ALERT_FIELDS.values()}


def _value(field: str, value: Any) -> Any:
    """One rule's stored value; ConfigurationError naming the field and the value."""
    if field == "pause_after_failing_streak":
        if value is None:
            return None
        if not isinstance(value, bool):
            raise ConfigurationError(field, value, "must be True or False")
        return value
    if value is None:
        return None
    if field == "alert_failing_streak":
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_STREAK:
            raise ConfigurationError(field, value, f"must be a whole number of failures in [1, {MAX_STREAK}]")
        return value
    return parse_duration(value, field)


def pop_rules(fields: dict[str, Any]) -> dict[str, Any] | None:
    """Take the alert keywords out of ``fields`` (create_job/update_job keywords), checked:
    {column: value} of those given, or None when none was given."""
    given = {k: fields.pop(k) for k in list(fields) if k in ALERT_FIELDS}
    if not given:
        return None
    return {ALERT_FIELDS[k]: _value(k, v) for k, v in given.items()}


def merged(current: Mapping[str, Any] | None, changes: Mapping[str, Any]) -> dict[str, Any]:
    """The whole rule set after ``changes`` (an update gives only some rules), checked as a set."""
    rules = {**NO_RULES, **{k: current.get(k) for k in NO_RULES if current}, **changes}
    if rules["pause_after_failing_streak"] and rules["failing_streak"] is None:
        raise ConfigurationError("pause_after_failing_streak", True, "needs alert_failing_streak (the N failures "
                                 "after which the job is paused)")
    if not rules["pause_after_failing_streak"]:
        rules["pause_after_failing_streak"] = None
    return rules


def as_keywords(rules: Mapping[str, Any] | None) -> dict[str, Any]:
    """The stored rules as create_job keywords (None for a rule off)."""
    by_column = {c: k for k, c in ALERT_FIELDS.items()}
    out = {k: None for k in ALERT_FIELDS}
    for column, value in (rules or {}).items():
        if column in by_column:
            out[by_column[column]] = value if column != "pause_after_failing_streak" else bool(value) or None
    return out


@dataclass(frozen=True)
class Alert:
    """One opened or resolved alert, as evaluate_alerts answers it (or an open one, as read)."""

    id: int
    event: str               # 'opened' | 'resolved' | 'open' (read from the table)
    job_id: str
    job_name: str
    kind: str
    since: datetime          # the tick, the last success, the run's start, the streak's first failure
    threshold: int           # seconds, or failures for failing_streak
    run_id: str | None
    opened_at: datetime
    resolved_at: datetime | None
    paused: bool

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "Alert":
        run = row.get("run_id")
        return cls(id=int(row.get("alert_id", row.get("id"))), event=str(row.get("event") or "open"),
                   job_id=str(row["job_id"]).lower(), job_name=str(row["job_name"]), kind=str(row["kind"]),
                   since=row["since"], threshold=int(row["threshold"]), run_id=str(run).lower() if run else None,
                   opened_at=row["opened_at"], resolved_at=row.get("resolved_at"), paused=bool(row.get("paused")))

    @property
    def rule(self) -> str:
        """The rule in words: 'late_start 5m', 'failing_streak 3'."""
        amount = str(self.threshold) if self.kind == "failing_streak" else format_duration(self.threshold)
        return f"{self.kind} {amount}"

    def describe(self) -> str:
        """What is wrong, in one line."""
        at = self.since.isoformat()
        limit = format_duration(self.threshold)
        return {
            "late_start": f"no run started within {limit} after its tick {at}",
            "silent": f"no Completed run since {at} (rule: {limit})",
            "too_long": f"run {self.run_id} running since {at}, longer than {limit}",
            "failing_streak": f"{self.threshold} failed runs in a row since {at} (last: run {self.run_id})",
        }.get(self.kind, self.kind)


# What to look at first, by kind: for the on-call engineer woken by the alert.
WHAT_TO_DO = {
    "late_start": "Run `mjsched status` (are engines alive, at their cap?) and `mjsched jobs show JOB`; "
                  "a job whose driver no live engine allows, or an engine that died holding it, starts late.",
    "silent": "Look at the job's recent runs (`mjsched runs --job JOB`): failing, skipped, or not running at all?",
    "too_long": "Look at the run (`mjsched runs --job JOB --status Running`); cancel it (`mjsched runs cancel RUN`) "
                "if it hangs; its max_runtime kills it otherwise.",
    "failing_streak": "Read the failed runs' errors (`mjsched runs --job JOB --status Failed`); fix the cause, "
                      "then resume the job if this alert paused it (`mjsched jobs resume JOB`).",
}


def notification(alert: Alert) -> Notification:
    """The notification of an opened or resolved alert (rendered by every Notifier)."""
    if alert.event == "resolved":
        subject = f"[mjsched] RESOLVED {alert.kind} alert: job {alert.job_name!r}"
        body = (f"Job {alert.job_name!r} ({alert.job_id}): the {alert.kind} alert opened at "
                f"{alert.opened_at.isoformat()} is resolved at "
                f"{alert.resolved_at.isoformat() if alert.resolved_at else '?'}.\nIt was: {alert.describe()}.")
        priority = "Normal"
    else:
        subject = f"[mjsched] ALERT {alert.kind}: job {alert.job_name!r}"
        body = (f"Job {alert.job_name!r} ({alert.job_id}): {alert.describe()}.\n"
                f"Since: {alert.since.isoformat()}\n"
                + ("The job was PAUSED by this alert (pause_after_failing_streak).\n" if alert.paused else "")
                + f"What to do: {WHAT_TO_DO.get(alert.kind, '')}")
        priority = "High"
    metadata = {"kind": "alert", "alert_id": alert.id, "alert_kind": alert.kind, "event": alert.event,
                "job_id": alert.job_id, "job_name": alert.job_name, "since": alert.since.isoformat(),
                "threshold": alert.threshold, "run_id": alert.run_id, "paused": alert.paused}
    return Notification(subject=subject, body=body, priority=priority, metadata=metadata)
