"""The README's mounts, run: Flask (DispatcherMiddleware under /scheduler) and Django (a URL
route), each in a fresh interpreter so that the example files are run as written."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import mjsched

from .conftest import shell_job

ROOT = Path(__file__).resolve().parents[2]


def run_example(dsn: str, code: str) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                            timeout=90, cwd=ROOT, env={**__import__("os").environ, "MJSCHED_DSN": dsn})
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_flask_mount_under_scheduler(engine: mjsched.SchedulingEngine, pg_dsn: str) -> None:
    pytest.importorskip("flask")
    job_id = shell_job(engine, "mounted-in-flask")
    out = run_example(pg_dsn, f"""
        from tests.web.examples.flask_app import app
        import re
        c = app.test_client()
        assert c.get("/").get_data(as_text=True) == "the legacy app"
        jobs = c.get("/scheduler/jobs")
        html = jobs.get_data(as_text=True)
        assert jobs.status_code == 200 and "mounted-in-flask" in html, jobs.status_code
        assert 'href="/scheduler/jobs/{job_id}"' in html and 'href="/scheduler/static/dashboard.css"' in html
        assert c.get("/scheduler/static/dashboard.css").status_code == 200
        cookie = c.get_cookie("mjsched_csrf", path="/scheduler/")
        token = re.search(r'name="csrf_token" value="([^"]+)"', c.get("/scheduler/jobs/{job_id}").get_data(as_text=True)).group(1)
        assert c.post("/scheduler/jobs/{job_id}/pause").status_code == 403
        done = c.post("/scheduler/jobs/{job_id}/pause", data={{"csrf_token": token}})
        assert done.status_code == 303 and done.headers["Location"] == "/scheduler/jobs/{job_id}", done.headers
        print("flask ok", cookie.path)
    """)
    assert "flask ok /scheduler/" in out
    assert engine.get_job(job_id).status.value == "Paused"


def test_django_mount_on_a_url_route(engine: mjsched.SchedulingEngine, pg_dsn: str) -> None:
    pytest.importorskip("django")
    job_id = shell_job(engine, "mounted-in-django")
    out = run_example(pg_dsn, f"""
        from tests.web.examples import django_app
        from django.test import Client
        import re
        c = Client()
        jobs = c.get("/scheduler/jobs")
        html = jobs.content.decode()
        assert jobs.status_code == 200 and "mounted-in-django" in html, (jobs.status_code, html[:500])
        assert 'href="/scheduler/jobs/{job_id}"' in html
        assert c.get("/scheduler/").status_code == 302
        page = c.get("/scheduler/jobs/{job_id}").content.decode()
        token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
        assert c.post("/scheduler/jobs/{job_id}/pause", {{}}).status_code == 403
        done = c.post("/scheduler/jobs/{job_id}/pause", {{"csrf_token": token}})
        assert done.status_code == 303 and done["Location"] == "/scheduler/jobs/{job_id}", done
        flash = c.get("/scheduler/jobs/{job_id}").content.decode()
        assert "mounted-in-django paused." in flash
        print("django ok")
    """)
    assert "django ok" in out
    assert engine.get_job(job_id).status.value == "Paused"
