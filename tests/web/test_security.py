"""What the issue asks of the dashboard's security, each shown against a real database."""
from __future__ import annotations

import base64
import subprocess
import sys

import pytest

import mjsched
from mjsched.errors import ConfigurationError
from mjsched.web import BasicAuth, TokenAuth, auth_from_env, create_app, make_dashboard_server
from tests.support.pg import Sql

from .conftest import Browserless, shell_job

XSS = "<script>alert(1)</script>"


def test_a_job_named_like_a_script_renders_inert(engine: mjsched.SchedulingEngine, client: Browserless) -> None:
    job_id = engine.create_job(XSS, "shell", "*/5 * * * *", description=XSS,
                               configuration={"command": ["sh", "-c", f"echo '{XSS}' >&2; exit 1"], "note": XSS})
    engine.execute_job(job_id)
    pages = [client.html("/jobs"), client.html(f"/jobs/{job_id}"), client.html("/runs"),
             client.html("/runs?status=Failed"), client.follow(client.post(f"/jobs/{job_id}/pause"))]
    for html in pages:
        assert XSS not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script" not in pages[1].replace('<script src="/static/dashboard.js" defer></script>', "")


def test_a_post_without_the_csrf_token_is_refused(engine: mjsched.SchedulingEngine, client: Browserless) -> None:
    job_id = shell_job(engine, "guarded")
    for action in ("pause", "run", "unlock", "edit"):
        response = client.post(f"/jobs/{job_id}/{action}", csrf=False)
        assert response.status_code == 403, action
    assert client.post(f"/jobs/{job_id}/pause", {"csrf_token": "forged-" + "x" * 40}).status_code == 403
    # a cross-site form cannot read the cookie: the right value in the form is required
    other = Browserless(client.app)
    assert other.post(f"/jobs/{job_id}/pause", {"csrf_token": client.csrf()}).status_code == 403
    assert engine.get_job(job_id).status.value == "Active"
    assert client.post(f"/jobs/{job_id}/pause").status_code == 303
    cookie = client.client.get_cookie("mjsched_csrf")
    assert cookie.http_only and cookie.same_site == "Strict"


def test_a_read_only_app_hides_and_refuses_actions(engine: mjsched.SchedulingEngine) -> None:
    job_id = shell_job(engine, "look-dont-touch")
    app = create_app(engine, read_only=True)
    try:
        web = Browserless(app)
        html = web.html(f"/jobs/{job_id}")
        assert "data-action=" not in html and 'id="edit-form"' not in html and "read-only" in html
        for action in ("pause", "run", "edit", "unlock"):
            assert web.post(f"/jobs/{job_id}/{action}").status_code == 403
    finally:
        app.close()
    assert engine.get_job(job_id).status.value == "Active"


def test_a_non_loopback_bind_without_auth_refuses_to_start(engine: mjsched.SchedulingEngine) -> None:
    app = create_app(engine)
    try:
        for host in ("0.0.0.0", "::", "192.0.2.10", "example.org"):
            with pytest.raises(ConfigurationError, match="beyond loopback only with auth"):
                make_dashboard_server(app, host, 0)
        server = make_dashboard_server(app, "127.0.0.1", 0)    # loopback: fine without auth
        server.server_close()
    finally:
        app.close()
    guarded = create_app(engine, auth=TokenAuth("t0ken-long-enough"))
    try:
        server = make_dashboard_server(guarded, "0.0.0.0", 0)
        server.server_close()
    finally:
        guarded.close()


def test_token_and_basic_auth(engine: mjsched.SchedulingEngine) -> None:
    def basic(user: str, password: str) -> dict[str, str]:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}

    token_app = create_app(engine, auth="token:s3cret-token-123")
    basic_app = create_app(engine, auth=BasicAuth("ops", "correct horse"))
    try:
        web = Browserless(token_app).client
        response = web.get("/jobs")
        assert response.status_code == 401 and "Basic" in response.headers["WWW-Authenticate"]
        assert web.get("/jobs", headers={"Authorization": "Bearer wrong-token-123"}).status_code == 401
        assert web.get("/jobs", headers={"Authorization": "Bearer s3cret-token-123"}).status_code == 200
        assert web.get("/jobs", headers=basic("anyone", "s3cret-token-123")).status_code == 200
        web = Browserless(basic_app).client
        assert web.get("/jobs").status_code == 401
        assert web.get("/jobs", headers=basic("ops", "wrong horse")).status_code == 401
        assert web.get("/static/dashboard.css").status_code == 401
        ok = web.get("/jobs", headers=basic("ops", "correct horse"))
        assert ok.status_code == 200 and "signed in as ops" in ok.get_data(as_text=True)
    finally:
        token_app.close()
        basic_app.close()
    with pytest.raises(ConfigurationError):
        create_app(engine, auth="basic:ops:short")
    with pytest.raises(ConfigurationError):
        create_app(engine, auth="password")
    assert auth_from_env({}) is None
    assert auth_from_env({"MJSCHED_DASHBOARD_TOKEN": "from-env-token-1"}) == TokenAuth("from-env-token-1")
    with pytest.raises(ConfigurationError, match="set both"):
        auth_from_env({"MJSCHED_DASHBOARD_USER": "ops"})
    assert "correct" not in repr(BasicAuth("ops", "correct horse"))


def test_no_page_shows_a_password(pg_dsn: str, sql: Sql) -> None:
    """The dashboard's own DSN password (trust auth accepts any), a job's DSN and keys named like
    secrets, and an error message written before redaction existed: grep every page."""
    planted = ["DashPW-0001", "JobPW-0002", "tok-0003", "Key-0004", "OldPW-0005", "Detail-0006"]
    user, _, host = pg_dsn.partition("://")[2].partition("@")
    dsn = f"postgresql://{user.split(':')[0]}:{planted[0]}@{host}"
    engine = mjsched.SchedulingEngine(dsn, max_poll_interval=0.5)
    try:
        job_id = engine.create_job("talks-to-db", "sql", "0 3 * * *", configuration={
            "dsn": f"postgresql://etl:{planted[1]}@db.internal/warehouse", "statement": "SELECT 1",
            "parameters": {"auth_token": planted[2], "api_key": planted[3]}})
        sql.run("""INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, status, started_at, completed_at,
                          error_message, details)
                   VALUES (%s, 'Failed', now(), now(), %s, %s)""",
                (job_id, f"could not connect to postgresql://etl:{planted[4]}@db.internal/warehouse",
                 f'{{"password": "{planted[5]}"}}'))
        app = create_app(dsn)
        try:
            web = Browserless(app)
            pages = [web.html(u) for u in ("/jobs", f"/jobs/{job_id}", f"/jobs/{job_id}?status=Failed", "/runs",
                                           "/runs?status=Failed", "/engines")]
            pages.append(web.get(f"/jobs/{job_id}/preview?cron=x&timezone=UTC").get_data(as_text=True))
        finally:
            app.close()
    finally:
        engine.close()
    text = "\n".join(pages)
    assert "talks-to-db" in text and "db.internal" in text
    for secret in planted:
        assert secret not in text, secret


def test_the_core_does_not_import_the_toolkit() -> None:
    code = ("import sys, mjsched, mjsched.cli, mjsched.engine, mjsched.demo; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('werkzeug', 'jinja2', 'mjsched.web') "
            "or m.startswith('mjsched.web')); print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_post_from_another_origin_is_refused_even_with_the_token(engine: mjsched.SchedulingEngine,
                                                                   client: Browserless) -> None:
    job_id = shell_job(engine, "origin-checked")
    token = client.csrf()
    refused = client.post(f"/jobs/{job_id}/pause", {"csrf_token": token}, headers={"Origin": "https://evil.example"})
    assert refused.status_code == 403 and engine.get_job(job_id).status.value == "Active"
    same = client.post(f"/jobs/{job_id}/pause", {"csrf_token": token}, headers={"Origin": "http://localhost"})
    assert same.status_code == 303 and engine.get_job(job_id).status.value == "Paused"


def test_the_loopback_server_answers_loopback_host_names_only(engine: mjsched.SchedulingEngine) -> None:
    """A page whose DNS name was rebound to 127.0.0.1 gets nothing from a dashboard without auth."""
    import http.client

    from mjsched.web import DashboardThread

    app = create_app(engine)
    server = DashboardThread(app, "127.0.0.1", 0).start()
    try:
        port = server.server.server_address[1]

        def status(host: str) -> int:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/jobs", headers={"Host": host})
            code = conn.getresponse().status
            conn.close()
            return code

        assert status(f"127.0.0.1:{port}") == 200 and status(f"localhost:{port}") == 200
        assert status(f"rebound.evil.example:{port}") == 421 and status("evil.example") == 421
    finally:
        server.stop()
        app.close()


def test_the_sign_in_page_carries_the_security_headers(engine: mjsched.SchedulingEngine) -> None:
    app = create_app(engine, auth="token:s3cret-token-123")
    try:
        response = Browserless(app).get("/jobs")
    finally:
        app.close()
    assert response.status_code == 401 and response.headers["X-Frame-Options"] == "DENY"
    assert "frame-ancestors 'none'" in response.headers["Content-Security-Policy"]
