"""Tags on the dashboard (issue 37 item 1): the jobs list filters by tag and pauses or resumes a
whole tag (with a reason and a window), the job page shows its tags and pause record, and the
edit form changes the tags."""
from __future__ import annotations

import mjsched

from .conftest import Browserless


def tagged(engine: mjsched.SchedulingEngine, name: str, *tags: str) -> str:
    return engine.create_job(name, "shell", "0 2 * * *", configuration={"command": ["true"]}, tags=list(tags))


def test_the_jobs_list_filters_by_tag_and_pauses_the_tag(engine: mjsched.SchedulingEngine,
                                                         client: Browserless) -> None:
    billing = tagged(engine, "billing-run", "billing", "nightly")
    other = tagged(engine, "report-run", "reports")
    html = client.html("/jobs?tag=billing")
    assert "billing-run" in html and "report-run" not in html and 'id="tag-actions"' in html
    assert "#nightly" in html
    html = client.follow(client.post("/tags/billing/pause", {"reason": "ledger migration", "until": "2h"}))
    assert "1 job(s) tagged billing paused." in html
    job = engine.get_job(billing)
    assert job.status.value == "Paused" and job.pause_reason == "ledger migration" and job.paused_until is not None
    assert engine.get_job(other).status.value == "Active"
    page = client.html(f"/jobs/{billing}")
    assert 'id="pause-record"' in page and "ledger migration" in page and "resumes by itself" in page
    assert 'id="job-tags"' in page
    html = client.follow(client.post("/tags/billing/resume"))
    assert "1 job(s) tagged billing resumed." in html and engine.get_job(billing).status.value == "Active"


def test_a_bad_tag_is_refused_and_the_edit_form_sets_tags(engine: mjsched.SchedulingEngine,
                                                          client: Browserless) -> None:
    job_id = tagged(engine, "editable", "old")
    assert client.get("/jobs?tag=Not%20A%20Tag").status_code == 400
    assert client.post("/tags/Bad!/pause").status_code == 400
    refused = client.post(f"/jobs/{job_id}/edit", {"cron": "0 2 * * *", "timezone": "UTC", "status": "Active",
                                                   "max_runtime": "", "tags": "ok, Not OK"})
    assert refused.status_code == 400 and engine.get_job(job_id).tags == ("old",)
    client.follow(client.post(f"/jobs/{job_id}/edit", {"cron": "0 2 * * *", "timezone": "UTC", "status": "Active",
                                                       "max_runtime": "", "tags": "new, eu"}))
    assert engine.get_job(job_id).tags == ("eu", "new")
