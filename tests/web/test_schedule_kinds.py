"""Interval and one-off jobs on the dashboard (issue 35 item 9): the job page showed `Cron None`
and the edit form's Cron field was empty and required, so changing an interval job's max runtime
meant turning it into a cron job. The page shows the schedule as what it is, and the form edits
the field of the job's own kind."""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest

import mjsched

from .conftest import Browserless

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]

COMMAND = {"command": ["true"]}


def interval_job(engine: mjsched.SchedulingEngine, every: str = "90s") -> str:
    return engine.create_job("poll-inbox", "shell", every=every, configuration=COMMAND, high_frequency_ok=True)


def form_of(page: str) -> str:
    return page.split('id="edit-form"', 1)[1].split("</form>", 1)[0]


def test_an_interval_job_shows_its_interval_and_its_form_edits_it(engine: mjsched.SchedulingEngine,
                                                                   client: Browserless) -> None:
    job_id = interval_job(engine)
    page = client.html(f"/jobs/{job_id}")
    assert "None" not in page.split("<h2>Schedule</h2>", 1)[1].split("</dl>", 1)[0]
    assert '<dd id="schedule-kind">interval</dd>' in page and 'id="schedule-every">1m30s</dd>' in page
    form = form_of(page)
    assert 'name="cron"' not in form and re.search(r'name="every" id="edit-every" value="1m30s" required', form)
    # the max runtime alone: the job stays an interval job
    saved = client.follow(client.post(f"/jobs/{job_id}/edit", {"every": "1m30s", "timezone": "UTC",
                                                               "status": "Active", "max_runtime": "45"}))
    assert "poll-inbox saved: max_runtime=45.0." in saved
    job = engine.get_job(job_id)
    assert (job.schedule_kind, job.interval_seconds, job.cron_expression, job.max_runtime_seconds) == \
        ("every", 90, None, 45)
    saved = client.follow(client.post(f"/jobs/{job_id}/edit", {"every": "2m", "timezone": "UTC", "status": "Active",
                                                               "max_runtime": "45"}))
    assert "saved: every=&#39;2m&#39;" in saved and engine.get_job(job_id).interval_seconds == 120
    refused = client.post(f"/jobs/{job_id}/edit", {"every": "soon", "timezone": "UTC", "status": "Active",
                                                   "max_runtime": "45"})
    assert refused.status_code == 400 and "every=&#39;soon&#39;: is not a duration" in refused.get_data(as_text=True)
    assert engine.get_job(job_id).interval_seconds == 120


def test_the_preview_of_an_interval_is_anchored_as_the_job(engine: mjsched.SchedulingEngine,
                                                            client: Browserless) -> None:
    start = datetime(2026, 1, 1, 3, 0, 7, tzinfo=timezone.utc)
    job_id = engine.create_job("grid", "shell", every="6h", start_at=start, configuration=COMMAND)
    body = client.get(f"/jobs/{job_id}/preview?every=12h&timezone=UTC").get_json()
    assert body["ok"] and body["words"] == "every 12h", body
    times = [datetime.fromisoformat(t) for t in body["times"]]
    assert len(times) == 5 and all(t.minute == 0 and t.second == 7 for t in times)
    assert all(b - a == timedelta(hours=12) for a, b in zip(times, times[1:]))
    bad = client.get(f"/jobs/{job_id}/preview?every=0s&timezone=UTC").get_json()
    assert not bad["ok"] and "every='0s'" in bad["error"]


def test_a_one_off_job_shows_its_instant_and_its_form_edits_it(engine: mjsched.SchedulingEngine,
                                                                client: Browserless) -> None:
    when = datetime(2030, 12, 24, 17, 0, tzinfo=timezone.utc)
    job_id = engine.create_job("xmas-mail", "shell", run_at=when, timezone="Europe/Berlin", configuration=COMMAND)
    page = client.html(f"/jobs/{job_id}")
    assert '<dd id="schedule-kind">one-off</dd>' in page and 'id="schedule-run-at">2030-12-24T18:00:00+01:00</dd>' in page
    assert 'name="cron"' not in form_of(page)
    client.follow(client.post(f"/jobs/{job_id}/edit", {"run_at": "2030-12-24T18:00:00+01:00",
                                                       "timezone": "Europe/Berlin", "status": "Active",
                                                       "max_runtime": "60"}))
    job = engine.get_job(job_id)
    assert (job.schedule_kind, job.run_at, job.max_runtime_seconds) == ("run_at", when, 60)
    client.follow(client.post(f"/jobs/{job_id}/edit", {"run_at": "2030-12-24T19:30", "timezone": "Europe/Berlin",
                                                       "status": "Active", "max_runtime": "60"}))
    assert engine.get_job(job_id).run_at == datetime(2030, 12, 24, 18, 30, tzinfo=timezone.utc)   # in its zone


def test_the_jobs_list_names_the_kind(engine: mjsched.SchedulingEngine, client: Browserless) -> None:
    interval_job(engine)
    page = client.html("/jobs")
    assert 'title="interval (UTC)">every 1m30s</span>' in page and "None" not in page
