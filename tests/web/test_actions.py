"""Actions: run now, pause, resume, unlock, edit. Each redirects with a flash message and
leaves an audit line on the ``mjsched.web`` logger."""
from __future__ import annotations

import logging
import re
import uuid

import pytest

import mjsched
from tests.support.pg import Sql, wait_for

from .conftest import Browserless, shell_job


def audit_lines(caplog: pytest.LogCaptureFixture, action: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name.startswith("mjsched.web.") and getattr(r, "action", None) == f"web_{action}"]


def test_pause_and_resume_change_the_status_with_a_flash_and_an_audit_line(
        engine: mjsched.SchedulingEngine, client: Browserless, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mjsched.web")
    job_id = shell_job(engine, "pausable")
    html = client.follow(client.post(f"/jobs/{job_id}/pause"))
    assert engine.get_job(job_id).status.value == "Paused"
    assert 'class="flash ok"' in html and "pausable paused." in html
    assert re.search(r'<span id="job-status"><span class="badge s-paused">Paused</span>', html)
    assert 'data-action="resume"' in html and 'data-action="pause"' not in html
    html = client.follow(client.post(f"/jobs/{job_id}/resume"))
    assert engine.get_job(job_id).status.value == "Active" and "pausable resumed; next run" in html
    assert client.html(f"/jobs/{job_id}").count('class="flash') == 0     # a flash is shown once
    lines = audit_lines(caplog, "pause") + audit_lines(caplog, "resume")
    assert len(lines) == 2 and all("outcome=ok" in line and job_id in line for line in lines)


def test_run_now_makes_the_job_due_and_a_polling_engine_runs_it(engine: mjsched.SchedulingEngine,
                                                                client: Browserless) -> None:
    job_id = shell_job(engine, "on-demand", cron="0 0 1 1 *")      # next tick months away
    html = client.follow(client.post(f"/jobs/{job_id}/run"))
    assert "Run of on-demand requested" in html
    engine.start_polling()
    run = wait_for(lambda: next(iter(engine.list_runs(job_id, status="Completed")), None), timeout=15,
                   message="the requested run to complete")
    assert run.scheduled_for is not None
    job = engine.get_job(job_id)
    assert job.next_run_at is not None and job.next_run_at.month == 1 and job.next_run_at.day == 1
    assert "s-completed" in client.html(f"/jobs/{job_id}")


def test_run_now_is_refused_for_a_paused_or_running_job(engine: mjsched.SchedulingEngine, client: Browserless,
                                                        sql: Sql, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mjsched.web")
    paused = shell_job(engine, "resting", status="Paused")
    html = client.follow(client.post(f"/jobs/{paused}/run"))
    assert 'class="flash error"' in html and "resting is Paused: resume it to run it" in html
    busy = shell_job(engine, "busy")
    sql.run("""UPDATE mjsched.scheduled_job SET lock_token = gen_random_uuid(), locked_at = now(),
                      locked_by_instance = 'engine-y', expected_completion_at = now() + interval '1 minute'
                WHERE id = %s""", (busy,))
    before = engine.get_job(busy).next_run_at
    html = client.follow(client.post(f"/jobs/{busy}/run"))
    assert "busy is running now (held by engine-y)" in html and engine.get_job(busy).next_run_at == before
    assert [line for line in audit_lines(caplog, "run") if "outcome=refused" in line].__len__() == 2


def test_unlock_frees_a_held_job(engine: mjsched.SchedulingEngine, client: Browserless, sql: Sql) -> None:
    job_id = shell_job(engine, "stuck")
    token = str(uuid.uuid4())
    sql.run("""UPDATE mjsched.scheduled_job SET lock_token = %s, locked_at = now(), locked_by_instance = 'dead-1',
                      expected_completion_at = now() + interval '1 hour' WHERE id = %s""", (token, job_id))
    sql.run("""INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, status, started_at, executed_by_instance,
                      lock_token, lease_expires_at)
               VALUES (%s, 'Running', now(), 'dead-1', %s, now() + interval '1 hour')""", (job_id, token))
    assert 'data-action="unlock"' in client.html(f"/jobs/{job_id}")
    html = client.follow(client.post(f"/jobs/{job_id}/unlock"))
    assert "stuck unlocked" in html and engine.get_job(job_id).lock_token is None
    assert engine.list_runs(job_id)[0].status.value == "Abandoned"
    assert 'data-action="unlock"' not in html


def test_edit_validates_previews_and_saves(engine: mjsched.SchedulingEngine, client: Browserless) -> None:
    job_id = shell_job(engine, "editable", cron="0 2 * * *")
    preview = client.get(f"/jobs/{job_id}/preview?cron=30+4+*+*+1-5&timezone=Europe/Berlin").get_json()
    assert preview["ok"] and preview["words"] == "on weekdays at 04:30 (Europe/Berlin)"
    assert len(preview["times"]) == 5 and all("04:30:00+01:00" in t for t in preview["times"])
    bad = client.get(f"/jobs/{job_id}/preview?cron=61+*+*+*+*&timezone=UTC").get_json()
    assert not bad["ok"] and "61" in bad["error"]
    assert not client.get(f"/jobs/{job_id}/preview?cron=*+*+*+*+*&timezone=Mars/Base").get_json()["ok"]

    refused = client.post(f"/jobs/{job_id}/edit", {"cron": "99 * * * *", "timezone": "UTC", "status": "Active",
                                                   "max_runtime": ""})
    assert refused.status_code == 400
    body = refused.get_data(as_text=True)
    assert 'id="form-error"' in body and "99 * * * *" in body and engine.get_job(job_id).cron_expression == "0 2 * * *"
    assert client.post(f"/jobs/{job_id}/edit", {"cron": "0 2 * * *", "timezone": "UTC", "status": "Active",
                                                "max_runtime": "soon"}).status_code == 400

    html = client.follow(client.post(f"/jobs/{job_id}/edit", {
        "cron": "30 4 * * 1-5", "timezone": "Europe/Berlin", "status": "Active", "max_runtime": "90"}))
    job = engine.get_job(job_id)
    assert (job.cron_expression, job.timezone, job.max_runtime_seconds) == ("30 4 * * 1-5", "Europe/Berlin", 90.0)
    assert "editable saved" in html and "on weekdays at 04:30 (Europe/Berlin)" in html
    assert job.next_run_at is not None and job.next_run_at.astimezone(
        __import__("zoneinfo").ZoneInfo("Europe/Berlin")).strftime("%H:%M") == "04:30"


def test_the_job_page_shows_h_resolved_and_edits_the_jitter(engine: mjsched.SchedulingEngine,
                                                            client: Browserless) -> None:
    job_id = shell_job(engine, "nightly-report", cron="H 2 * * *")
    html = client.html(f"/jobs/{job_id}")
    assert 'id="schedule-resolved"' in html and "6 2 * * *" in html and 'id="edit-jitter"' in html
    preview = client.get(f"/jobs/{job_id}/preview?cron=H+2+*+*+*&timezone=UTC&jitter=90s").get_json()
    assert preview["ok"] and "6 2 * * *" in preview["words"]
    assert all(t.endswith("02:06:13+00:00") for t in preview["times"])     # the name's offset: 13 s
    assert not client.get(f"/jobs/{job_id}/preview?cron=H+2+*+*+*&timezone=UTC&jitter=2d").get_json()["ok"]
    form = {"cron": "H 2 * * *", "timezone": "UTC", "status": "Active", "max_runtime": ""}
    assert client.post(f"/jobs/{job_id}/edit", {**form, "jitter": "soon"}).status_code == 400
    html = client.follow(client.post(f"/jobs/{job_id}/edit", {**form, "jitter": "90"}))
    job = engine.get_job(job_id)
    assert job.jitter_seconds == 90 and job.next_run_at.strftime("%M:%S") == "06:13"
    assert 'id="schedule-jitter"' in html


def test_a_declared_job_says_edits_here_last_until_the_next_deploy(engine: mjsched.SchedulingEngine,
                                                                   client: Browserless) -> None:
    """Issue 35 item 10: dashboard edits to declared jobs were undone at the next deploy without a hint."""
    declared = engine.ensure_job("declared-report", "shell", "0 2 * * *", configuration={"command": ["true"]})
    synced = engine.sync_jobs([{"name": "synced-report", "driver": "shell", "cron": "0 3 * * *",
                                "configuration": {"command": ["true"]}}])
    plain = shell_job(engine, "made-by-hand")
    assert engine.declared_names == {"declared-report", "synced-report"} and synced.created == ["synced-report"]
    for job_id in (declared.id, engine.get_job("synced-report").id):
        page = client.html(f"/jobs/{job_id}")
        assert 'id="declared-note"' in page and "Declared in this application's code" in page
        assert "replacing edits made here" in page and 'id="declared-hint"' not in page
    page = client.html(f"/jobs/{plain}")              # not known to be declared: the general hint
    assert 'id="declared-note"' not in page and 'id="declared-hint"' in page
    assert "(mjsched jobs apply) is set back to its declaration at the next deploy" in page
    # and it is true: an edit here is replaced when the code declares the job again
    client.post(f"/jobs/{declared.id}/edit", {"cron": "0 4 * * *", "timezone": "UTC", "status": "Active",
                                              "max_runtime": ""})
    assert engine.get_job(declared.id).cron_expression == "0 4 * * *"
    engine.ensure_job("declared-report", "shell", "0 2 * * *", configuration={"command": ["true"]})
    assert engine.get_job(declared.id).cron_expression == "0 2 * * *"


def test_the_job_page_shows_the_priority(engine: mjsched.SchedulingEngine, client: Browserless) -> None:
    job_id = shell_job(engine, "urgent", cron="0 2 * * *")
    engine.update_job(job_id, priority=42)
    html = client.html(f"/jobs/{job_id}")
    assert 'id="job-priority"' in html and ">42</dd>" in html
