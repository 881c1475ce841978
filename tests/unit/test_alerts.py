"""The alert rules as the API takes them, and the notification an on-call engineer reads."""
from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone

import pytest

from mjsched import alerts
from mjsched.engine.alerting import stand_in_run
from mjsched.errors import ConfigurationError
from mjsched.notify import LoggingNotifier, WebhookNotifier

AT = datetime(2026, 12, 6, 2, 0, tzinfo=timezone.utc)


def alert(event: str = "opened", kind: str = "silent", **kw: object) -> alerts.Alert:
    row = {"alert_id": 7, "event": event, "job_id": "00000000-0000-4000-8000-00000000000A", "job_name": "backup",
           "kind": kind, "since": AT, "threshold": 26 * 3600, "run_id": None, "opened_at": AT + timedelta(hours=26),
           "resolved_at": AT + timedelta(hours=27) if event == "resolved" else None, "paused": False, **kw}
    return alerts.Alert.from_row(row)


def test_rules_are_read_like_every_and_checked_naming_the_field() -> None:
    fields = {"name": "x", "alert_silent_after": "26h", "alert_too_long": timedelta(minutes=5),
              "alert_failing_streak": 3, "pause_after_failing_streak": True, "alert_late_start": None}
    rules = alerts.pop_rules(fields)
    assert fields == {"name": "x"}
    assert rules == {"silent_after_seconds": 93600, "too_long_seconds": 300, "failing_streak": 3,
                     "pause_after_failing_streak": True, "late_start_seconds": None}
    assert alerts.pop_rules({"name": "x"}) is None
    for field, value in (("alert_silent_after", "26 hours"), ("alert_late_start", 0), ("alert_too_long", "400d"),
                         ("alert_failing_streak", 1001), ("alert_failing_streak", True),
                         ("pause_after_failing_streak", 1)):
        with pytest.raises(ConfigurationError, match=field):
            alerts.pop_rules({field: value})
    with pytest.raises(ConfigurationError, match="pause_after_failing_streak"):
        alerts.merged({"failing_streak": 3}, {"failing_streak": None, "pause_after_failing_streak": True})
    assert alerts.merged({"failing_streak": 3, "pause_after_failing_streak": True}, {"too_long_seconds": 60}) == \
        {"late_start_seconds": None, "silent_after_seconds": None, "too_long_seconds": 60, "failing_streak": 3,
         "pause_after_failing_streak": True}


def test_the_notification_says_what_since_when_and_what_to_do() -> None:
    note = alerts.notification(alert())
    assert note.subject == "[mjsched] ALERT silent: job 'backup'" and note.priority == "High"
    assert "no Completed run since 2026-12-06T02:00:00+00:00 (rule: 1d2h)" in note.body
    assert "What to do:" in note.body and note.metadata["kind"] == "alert" and note.metadata["event"] == "opened"
    paused = alerts.notification(alert(kind="failing_streak", threshold=3, run_id="r1", paused=True))
    assert "3 failed runs in a row" in paused.body and "PAUSED" in paused.body
    done = alerts.notification(alert("resolved"))
    assert done.subject.startswith("[mjsched] RESOLVED silent") and "is resolved at" in done.body


def test_every_notifier_renders_an_alert_through_its_stand_in_run(caplog: pytest.LogCaptureFixture) -> None:
    job = type("J", (), {"id": "j", "name": "backup", "notify_to": None, "configuration": None})()
    with caplog.at_level(logging.INFO, logger="mjsched.test"):
        LoggingNotifier(logging.getLogger("mjsched.test")).notify(job, stand_in_run(alert()), alerts.notification(alert()))
        LoggingNotifier(logging.getLogger("mjsched.test")).notify(job, stand_in_run(alert("resolved")),
                                                                  alerts.notification(alert("resolved")))
    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.INFO]
    payload = WebhookNotifier.payload(job, stand_in_run(alert()), alerts.notification(alert()))
    assert payload["run_id"] == "alert-7" and payload["status"] == "Failed"
    assert payload["metadata"]["alert_kind"] == "silent"
