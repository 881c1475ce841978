"""Run ids in the dashboard (issue 35 item 3): the history shows each run's short id under a
"Run" heading (it showed the first 8 hex digits, the same for every run within about 65 s, under
"Job"), and the cancel action takes the short id or any unique prefix, refusing an ambiguous
one with the candidates and an unknown one naming it."""
from __future__ import annotations

import re

import pytest

import mjsched
from mjsched.engine.refs import short_run_id
from tests.support.pg import Sql

from .conftest import Browserless, shell_job

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]


def burst(engine: mjsched.SchedulingEngine, count: int = 3) -> tuple[str, list[mjsched.JobRun]]:
    job_id = shell_job(engine, "burst", cron="0 3 * * *")
    runs = [engine.execute_job(job_id) for _ in range(count)]
    assert len({r.id[:8] for r in runs}) == 1, "the runs were meant to be made within the same 65 s"
    return job_id, runs


def queued_run(sql: Sql, job_id: str) -> str:
    return str(sql.one("INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, scheduled_for, status, queued_at) "
                       "VALUES (%s, now(), 'Queued', now()) RETURNING id", (job_id,)))


def headings(html: str, table: str) -> list[str]:
    return re.findall(r"<th>([^<]*)</th>", html.split(table, 1)[1].split("</thead>", 1)[0])


def test_the_history_shows_a_short_id_that_differs_under_run(engine: mjsched.SchedulingEngine,
                                                             client: Browserless) -> None:
    job_id, runs = burst(engine)
    page = client.html(f"/jobs/{job_id}")
    assert headings(page, '<table class="grid runs">')[:2] == ["Run", "Status"]    # the job's own page: no Job
    shown = re.findall(r'<td class="mono small run-id" title="([0-9a-f-]{36})">([0-9a-f]+)</td>', page)
    assert sorted(shown) == sorted((r.id, r.id[-12:]) for r in runs)
    listing = client.html("/runs?status=Completed")
    assert headings(listing, '<table class="grid runs">')[:3] == ["Run", "Job", "Status"]
    assert all(f">{r.id[-12:]}</td>" in listing for r in runs) and ">burst</a>" in listing


def test_cancel_takes_the_short_id_and_refuses_an_ambiguous_or_unknown_one(
        engine: mjsched.SchedulingEngine, client: Browserless, sql: Sql) -> None:
    job_id, runs = burst(engine)
    waiting = queued_run(sql, job_id)
    assert headings(client.html("/runs"), 'id="running"')[0] == "Run"
    ambiguous = client.post(f"/runs/{runs[0].id[:8]}/cancel")
    text = ambiguous.get_data(as_text=True)
    assert ambiguous.status_code == 409 and "ambiguous" in text and all(r.id in text for r in runs)
    unknown = client.post("/runs/0123456789ab/cancel")
    assert unknown.status_code == 404 and "run_id=&#39;0123456789ab&#39;: no such run" in unknown.get_data(as_text=True)
    assert sql.one("SELECT status FROM mjsched.scheduled_job_run WHERE id = %s", (waiting,)) == "Queued"
    html = client.follow(client.post(f"/runs/{short_run_id(waiting)}/cancel"))
    assert f"Run {short_run_id(waiting)} cancelled: it was queued and will not run." in html
    assert sql.one("SELECT status FROM mjsched.scheduled_job_run WHERE id = %s", (waiting,)) == "Cancelled"
