"""import_beat_schedule and `mjsched jobs import-celery`: beat entries become celery jobs, by name."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from typing import Any

import pytest

pytest.importorskip("celery")

from celery.schedules import solar  # noqa: E402

from mjsched.contrib.celery import import_beat_schedule  # noqa: E402
from mjsched.errors import ConfigurationError  # noqa: E402

from .conftest import ROOT  # noqa: E402

pytestmark = pytest.mark.celery
APP = "tests.celery.beat_app:app"


@pytest.fixture
def beat_app() -> Any:
    from tests.celery import beat_app as module

    saved = dict(module.app.conf.beat_schedule)
    yield module.app
    module.app.conf.beat_schedule = saved


def by_name(engine: Any) -> dict[str, Any]:
    return {job.name: job for job in engine.list_jobs()}


def test_entries_become_jobs_and_a_second_import_changes_nothing(make_engine: Any, beat_app: Any) -> None:
    engine = make_engine()
    first = import_beat_schedule(APP, engine)
    assert first.created == ["every-10s", "every-5-minutes", "weekday-mornings"]
    assert list(first.refused) == ["every-7s"]
    assert "does not divide a minute, an hour or a day evenly" in first.refused["every-7s"]
    jobs = by_name(engine)
    assert "every-7s" not in jobs
    assert (jobs["every-10s"].cron_expression, jobs["every-10s"].timezone) == ("*/10 * * * * *", "Europe/Berlin")
    assert jobs["every-5-minutes"].cron_expression == "*/5 * * * *"
    mornings = jobs["weekday-mornings"]
    assert (mornings.cron_expression, mornings.timezone, mornings.driver) == ("30 7 * * mon-fri", "Europe/Berlin",
                                                                              "celery")
    assert mornings.configuration == {"app": APP, "task": "t.tick", "args": [], "kwargs": {"job": "mornings"},
                                      "mode": "send", "queue": "reports", "priority": 5}
    assert jobs["every-10s"].configuration["args"] == [1, 2]

    again = import_beat_schedule(APP, engine)
    assert (again.created, again.updated) == ([], [])
    assert again.unchanged == ["every-10s", "every-5-minutes", "weekday-mornings"]
    assert {j.id for j in engine.list_jobs()} == {j.id for j in jobs.values()}


def test_a_changed_entry_is_updated_in_place_and_keeps_its_status(make_engine: Any, beat_app: Any) -> None:
    engine = make_engine()
    import_beat_schedule(APP, engine, status="Paused")
    before = by_name(engine)
    assert {j.status.value for j in before.values()} == {"Paused"}
    engine.resume_job(before["every-5-minutes"].id)
    schedule = dict(beat_app.conf.beat_schedule)
    schedule["every-10s"] = {**schedule["every-10s"], "args": (5, 6), "schedule": timedelta(seconds=15)}
    beat_app.conf.beat_schedule = schedule
    result = import_beat_schedule(APP, engine, status="Paused")
    assert result.updated == ["every-10s"] and result.created == []
    after = by_name(engine)
    assert after["every-10s"].id == before["every-10s"].id
    assert after["every-10s"].cron_expression == "*/15 * * * * *"
    assert after["every-10s"].configuration["args"] == [5, 6]
    assert after["every-5-minutes"].status.value == "Active"      # an operator's resume is not undone


def test_refusals_name_the_entry_and_why(make_engine: Any, beat_app: Any) -> None:
    engine = make_engine()
    sunrise = solar.__new__(solar)       # a real solar() needs the ephem package; the type is what matters
    sunrise.event = "sunrise"
    from celery.schedules import crontab

    beat_app.conf.beat_schedule = {
        "sunrise": {"task": "t.add", "schedule": sunrise},
        "ninety-minutes": {"task": "t.add", "schedule": timedelta(minutes=90)},
        "expiring": {"task": "t.add", "schedule": 60.0, "options": {"expires": 30}},
        "dom-and-dow": {"task": "t.add", "schedule": crontab(minute=0, hour=0, day_of_month=1, day_of_week=1)},
    }
    result = import_beat_schedule(APP, engine, dry_run=True)
    assert result.created == []
    assert "solar schedule 'sunrise'" in result.refused["sunrise"]
    assert "1:30:00 does not divide" in result.refused["ninety-minutes"]
    assert "option 'expires' has no equivalent" in result.refused["expiring"]
    assert "restricts both day_of_month and day_of_week" in result.refused["dom-and-dow"]
    assert engine.list_jobs() == []


def test_bad_arguments_are_typed_errors(make_engine: Any, beat_app: Any) -> None:
    engine = make_engine()
    with pytest.raises(ConfigurationError) as no_path:
        import_beat_schedule(beat_app, engine)
    assert no_path.value.field == "app_path"
    with pytest.raises(ConfigurationError, match="cannot import module 'no_such_pkg'"):
        import_beat_schedule("no_such_pkg:app", engine)
    with pytest.raises(ConfigurationError) as bad_mode:
        import_beat_schedule(APP, engine, mode="later")
    assert bad_mode.value.field == "mode"
    assert engine.list_jobs() == []


def test_the_cli_verb_reports_created_updated_unchanged_refused(pg_dsn: str, make_engine: Any) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "mjsched", "--dsn", pg_dsn, *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60)

    dry = cli("jobs", "import-celery", APP, "--dry-run", "--json")
    assert dry.returncode == 1, dry.stderr        # an entry was refused
    assert json.loads(dry.stdout)["created"] == ["every-10s", "every-5-minutes", "weekday-mornings"]
    assert make_engine().list_jobs() == []
    first = cli("jobs", "import-celery", APP, "--status", "Paused")
    assert first.returncode == 1 and "3 created: every-10s, every-5-minutes, weekday-mornings" in first.stdout
    assert "refused every-7s: interval 0:00:07" in first.stdout
    second = cli("jobs", "import-celery", APP, "--json")
    assert json.loads(second.stdout)["unchanged"] == ["every-10s", "every-5-minutes", "weekday-mornings"]
    assert {j.status.value for j in make_engine().list_jobs()} == {"Paused"}
