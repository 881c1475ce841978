"""A Celery app with a beat_schedule, for the import tests (nothing here connects anywhere)."""
from __future__ import annotations

from datetime import timedelta

from celery import Celery
from celery.schedules import crontab

app = Celery("mjsched_beat_import", broker="redis://127.0.0.1:6379/15", backend="redis://127.0.0.1:6379/14")
app.conf.timezone = "Europe/Berlin"
app.conf.beat_schedule = {
    "every-10s": {"task": "t.add", "schedule": timedelta(seconds=10), "args": (1, 2)},
    "weekday-mornings": {"task": "t.tick", "schedule": crontab(minute=30, hour=7, day_of_week="mon-fri"),
                         "kwargs": {"job": "mornings"}, "options": {"queue": "reports", "priority": 5}},
    "every-5-minutes": {"task": "t.add", "schedule": 300.0, "args": [2, 2]},
    "every-7s": {"task": "t.add", "schedule": timedelta(seconds=7)},
}
