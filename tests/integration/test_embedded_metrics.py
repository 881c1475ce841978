"""Metrics for an engine embedded in an application: start_http_server and the WSGI app, and the
per-job last-success gauge that 'has not succeeded in 26 h' alerts are written on (issue 15)."""
from __future__ import annotations

import re
import socket
import urllib.request
from typing import Any, Callable
from wsgiref.util import setup_testing_defaults

import pytest

pytest.importorskip("prometheus_client")

import mjsched.metrics  # noqa: E402
from tests.support.pg import wait_for  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _gauge(text: str, job: str) -> float | None:
    match = re.search(rf'^mjsched_job_last_success_timestamp_seconds{{job="{re.escape(job)}"}} ([0-9.e+]+)$',
                      text, re.M)
    return float(match.group(1)) if match else None


def _wsgi_get(app: Any, path: str) -> str:
    environ: dict[str, Any] = {"PATH_INFO": path}
    setup_testing_defaults(environ)
    status: list[str] = []
    body = b"".join(app(environ, lambda s, _h, *_: status.append(s)))
    assert status and status[0].startswith("200"), status
    return body.decode()


def test_start_http_server_serves_the_per_job_last_success(make_engine: Callable[..., Any], sql: Any) -> None:
    engine = make_engine()
    ok = engine.create_job(name="nightly-report", driver="shell", cron="0 2 * * *", configuration={"command": ["true"]})
    bad = engine.create_job(name="always-fails", driver="shell", cron="0 2 * * *", configuration={"command": ["false"]})
    engine.execute_job(ok)
    engine.execute_job(bad)
    finished = sql.one("SELECT extract(epoch FROM completed_at) FROM mjsched.scheduled_job_run "
                       "WHERE status = 'Completed'")
    assert engine.get_job(ok).last_success_at is not None and engine.get_job(bad).last_success_at is None
    port = _free_port()
    metrics = mjsched.metrics.start_http_server(engine, port)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            text = response.read().decode()
    finally:
        metrics.close()
    assert _gauge(text, "nightly-report") == pytest.approx(float(finished), abs=0.01)
    assert _gauge(text, "always-fails") is None            # never succeeded: no series, so absent() alerts
    assert "mjsched_runs_in_flight" in text


def test_the_wsgi_app_and_the_gauge_follow_successes_of_any_engine(make_engine: Callable[..., Any],
                                                                   sql: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(mjsched.metrics, "JOB_METRICS_TTL", 0.0)
    exporter_engine, other = make_engine(), make_engine()
    job = other.create_job(name="hourly", driver="shell", cron="0 * * * *", configuration={"command": ["true"]})
    app = mjsched.metrics.make_wsgi_app(exporter_engine)
    assert _gauge(_wsgi_get(app, "/metrics"), "hourly") is None
    other.execute_job(job)                                   # succeeded on another engine
    seen = wait_for(lambda: _gauge(_wsgi_get(app, "/metrics"), "hourly"), message="the success in the gauge")
    assert seen == pytest.approx(other.get_job(job).last_success_at.timestamp(), abs=0.01)


def test_upgrade_fills_last_success_from_the_history(make_engine: Callable[..., Any], sql: Any) -> None:
    engine = make_engine()
    job = engine.create_job(name="old", driver="shell", cron="0 2 * * *", configuration={"command": ["true"]})
    engine.execute_job(job)
    sql.run("ALTER TABLE mjsched.scheduled_job DROP COLUMN last_success_at")   # as an older release left it
    sql.run("UPDATE mjsched.schema_version SET checksum = 'older' WHERE name = '001_schema'")
    engine.install()
    assert engine.get_job(job).last_success_at == \
        sql.one("SELECT completed_at FROM mjsched.scheduled_job_run WHERE status = 'Completed'")
