"""The README's mounts, run: Flask (DispatcherMiddleware under /scheduler) and Django (a URL
route), each in a fresh interpreter so that the example files are run as written, with a
real test client of each framework.

Mounted without ``authorize=``, the dashboard answers local requests only (a loopback peer
addressed by a loopback name, not through a proxy); with it, the application's login decides.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import mjsched

from .conftest import shell_job

ROOT = Path(__file__).resolve().parents[2]


def run_example(dsn: str, code: str) -> str:
    env = {**os.environ, "MJSCHED_DSN": dsn, "FLASK_SECRET_KEY": "test-only-flask-key",
           "EXAMPLE_PASSWORD": "correct horse"}
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                            timeout=90, cwd=ROOT, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_flask_mount_lets_the_apps_login_decide(engine: mjsched.SchedulingEngine, pg_dsn: str) -> None:
    pytest.importorskip("flask")
    job_id = shell_job(engine, "mounted-in-flask")
    out = run_example(pg_dsn, f"""
        from tests.web.examples.flask_app import app
        import re
        assert app.test_client().get("/scheduler/jobs").status_code == 403   # not signed in: refused, even locally
        c = app.test_client()
        c.environ_base["REMOTE_ADDR"] = "203.0.113.9"                          # from another machine
        assert c.get("/").get_data(as_text=True) == "the legacy app"
        refused = c.get("/scheduler/jobs")
        assert refused.status_code == 403 and "mounted-in-flask" not in refused.get_data(as_text=True)
        assert c.post("/login", data={{"user": "ops", "password": "wrong"}}).status_code == 403
        assert c.get("/scheduler/jobs").status_code == 403
        c.post("/login", data={{"user": "guest", "password": "correct horse"}})  # a user the app does not let in
        assert c.get("/scheduler/jobs").status_code == 403
        c.post("/login", data={{"user": "ops", "password": "correct horse"}})    # an operator
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


def test_flask_mount_without_authorize_answers_local_requests_only(engine: mjsched.SchedulingEngine,
                                                                   pg_dsn: str) -> None:
    pytest.importorskip("flask")
    shell_job(engine, "local-only")
    out = run_example(pg_dsn, """
        import os
        from flask import Flask
        from werkzeug.middleware.dispatcher import DispatcherMiddleware
        from mjsched.web import create_app
        app = Flask(__name__)
        app.wsgi_app = DispatcherMiddleware(app.wsgi_app, {"/scheduler": create_app(os.environ["MJSCHED_DSN"])})
        c = app.test_client()
        def status(host="localhost", **environ):
            return c.get("/scheduler/jobs", headers={"Host": host}, environ_base=environ).status_code
        assert status(REMOTE_ADDR="127.0.0.1") == 200                              # from this machine
        assert status(REMOTE_ADDR="::1", host="[::1]:5000") == 200
        assert status(REMOTE_ADDR="203.0.113.9", host="app.example.com") == 403    # the issue's curl
        assert status(REMOTE_ADDR="10.1.2.3") == 403
        assert status(REMOTE_ADDR="127.0.0.1", host="app.example.com") == 403      # DNS rebinding, or a proxy
        assert status(REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.9") == 403   # a local proxy
        assert status(REMOTE_ADDR="") == 403                                        # a unix socket
        page = c.get("/scheduler/jobs", headers={"Host": "app.example.com"}, environ_base={"REMOTE_ADDR": "203.0.113.9"})
        assert "authorize=" in page.get_data(as_text=True) and "local-only" not in page.get_data(as_text=True)
        print("local only ok")
    """)
    assert "local only ok" in out


def test_django_mount_lets_djangos_users_decide(engine: mjsched.SchedulingEngine, pg_dsn: str) -> None:
    pytest.importorskip("django")
    job_id = shell_job(engine, "mounted-in-django")
    out = run_example(pg_dsn, f"""
        from tests.web.examples import django_app
        from django.contrib.auth.models import User
        from django.core.management import call_command
        from django.test import Client
        import re
        call_command("migrate", verbosity=0)
        staff = User.objects.create_user("ops", password="x", is_staff=True)
        plain = User.objects.create_user("guest", password="x")
        anonymous = Client(HTTP_HOST="localhost")
        assert anonymous.get("/scheduler/jobs").status_code == 403       # even from this machine
        guest = Client()
        guest.force_login(plain)
        assert guest.get("/scheduler/jobs").status_code == 403
        c = Client(REMOTE_ADDR="203.0.113.9", HTTP_HOST="app.example.com")
        c.force_login(staff)
        jobs = c.get("/scheduler/jobs")
        html = jobs.content.decode()
        assert jobs.status_code == 200 and "mounted-in-django" in html, (jobs.status_code, html[:500])
        assert 'href="/scheduler/jobs/{job_id}"' in html and "ops" in html
        assert c.get("/scheduler/").status_code == 302
        page = c.get("/scheduler/jobs/{job_id}").content.decode()
        token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
        assert c.post("/scheduler/jobs/{job_id}/pause", {{}}).status_code == 403
        assert guest.post("/scheduler/jobs/{job_id}/pause", {{"csrf_token": token}}).status_code == 403
        done = c.post("/scheduler/jobs/{job_id}/pause", {{"csrf_token": token}})
        assert done.status_code == 303 and done["Location"] == "/scheduler/jobs/{job_id}", done
        flash = c.get("/scheduler/jobs/{job_id}").content.decode()
        assert "mounted-in-django paused." in flash
        print("django ok")
    """)
    assert "django ok" in out
    assert engine.get_job(job_id).status.value == "Paused"


def test_django_mount_without_authorize_answers_local_requests_only(engine: mjsched.SchedulingEngine,
                                                                    pg_dsn: str) -> None:
    pytest.importorskip("django")
    shell_job(engine, "local-only")
    out = run_example(pg_dsn, """
        import os
        import django
        from django.conf import settings
        from django.urls import path
        settings.configure(DEBUG=False, ROOT_URLCONF=__name__, ALLOWED_HOSTS=["*"], SECRET_KEY="test-only")
        django.setup()
        from django.test import Client
        from mjsched.web import create_app
        from mjsched.web.mounts import django_view
        view = django_view(create_app(os.environ["MJSCHED_DSN"]))
        urlpatterns = [path("scheduler/", view), path("scheduler/<path:rest>", view)]
        assert Client(HTTP_HOST="localhost").get("/scheduler/jobs").status_code == 200
        assert Client(REMOTE_ADDR="203.0.113.9", HTTP_HOST="app.example.com").get("/scheduler/jobs").status_code == 403
        assert Client().get("/scheduler/jobs").status_code == 403       # Host: testserver is not this machine
        print("local only ok")
    """)
    assert "local only ok" in out


def test_authorize_must_be_callable(engine: mjsched.SchedulingEngine) -> None:
    from mjsched.web import create_app

    with pytest.raises(mjsched.ConfigurationError, match="authorize"):
        create_app(engine, authorize="staff")


def test_an_authorize_that_raises_refuses(engine: mjsched.SchedulingEngine) -> None:
    from mjsched.web import create_app
    from werkzeug.test import Client

    from .conftest import local_peer

    def broken(request: object) -> bool:
        raise RuntimeError("the user store is down")

    app = create_app(engine, authorize=broken)
    try:
        assert Client(local_peer(app)).get("/jobs").status_code == 403
    finally:
        app.close()
