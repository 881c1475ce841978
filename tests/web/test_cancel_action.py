"""The dashboard's Cancel button (issue 14 item 6): on Running and Queued runs only, behind the
same gates as every action (read-only, same origin, CSRF), audited; the run ends Cancelled."""
from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

import mjsched
from mjsched.web import create_app
from tests.support import drivers  # noqa: F401  (registers the test-* drivers)
from tests.support.drivers import gate, started
from tests.support.pg import Sql, wait_for

from .conftest import Browserless

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]


def _running(engine: mjsched.SchedulingEngine, name: str) -> tuple[str, mjsched.JobRun, list[Any]]:
    job_id = engine.create_job(name, "test-block", "0 0 1 1 *", configuration={"gate": name})
    done: list[Any] = []
    threading.Thread(target=lambda: done.append(engine.execute_job(job_id)), daemon=True).start()
    assert started(name).wait(10)
    run = wait_for(lambda: next(iter(engine.list_runs(job_id, status="Running")), None), timeout=10,
                   message="the run")
    return job_id, run, done


def test_cancel_button_ends_a_running_run_cancelled(engine: mjsched.SchedulingEngine, client: Browserless,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mjsched.web")
    job_id, run, done = _running(engine, "web-cancel")
    page = client.html(f"/jobs/{job_id}")
    assert f'action="/runs/{run.id}/cancel"' in page and 'data-action="cancel"' in page
    html = client.follow(client.post(f"/runs/{run.id}/cancel"))
    assert 'class="flash ok"' in html and "Cancel of run" in html
    wait_for(lambda: done, timeout=10, message="execute_job to return")
    assert done[0].status is mjsched.RunStatus.CANCELLED
    assert "requested by dashboard user" in done[0].error_message
    page = client.html(f"/jobs/{job_id}")
    assert f'action="/runs/{run.id}/cancel"' not in page           # no button on a finished run
    assert any("action=cancel outcome=ok" in r.getMessage() for r in caplog.records if r.name.startswith("mjsched.web."))
    refused = client.follow(client.post(f"/runs/{run.id}/cancel"))  # finished now: refused, said so
    assert 'class="flash error"' in refused and "only a Queued or Running run can be cancelled" in refused


def test_cancel_needs_the_csrf_token_same_origin_and_a_writable_dashboard(
        engine: mjsched.SchedulingEngine, client: Browserless, sql: Sql) -> None:
    job_id, run, done = _running(engine, "web-guarded")
    try:
        assert client.post(f"/runs/{run.id}/cancel", csrf=False).status_code == 403
        token = client.csrf("")
        evil = client.post(f"/runs/{run.id}/cancel", {"csrf_token": token}, headers={"Origin": "https://evil.example"})
        assert evil.status_code == 403
        read_only = Browserless(create_app(engine, read_only=True))
        assert 'data-action="cancel"' not in read_only.html(f"/jobs/{job_id}")
        assert read_only.post(f"/runs/{run.id}/cancel").status_code == 403
        assert client.post("/runs/not-a-run/cancel").status_code == 404
        assert sql.rows("SELECT cancel_requested_at FROM mjsched.scheduled_job_run WHERE id = %s",
                        (run.id,))[0]["cancel_requested_at"] is None
    finally:
        gate("web-guarded").set()
        wait_for(lambda: done, timeout=10, message="execute_job to return")
