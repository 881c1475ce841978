"""The four pages on a real database: what an operator reads on each."""
from __future__ import annotations

import re

import mjsched
from mjsched.web import create_app
from tests.support.pg import Sql

from .conftest import Browserless, shell_job


def test_jobs_page_lists_schedule_in_words_last_outcome_and_success_rate(engine: mjsched.SchedulingEngine,
                                                                         client: Browserless) -> None:
    good = shell_job(engine, "nightly-report", cron="30 2 * * *", timezone="Europe/Berlin")
    bad = shell_job(engine, "flaky-export", ["sh", "-c", "echo boom >&2; exit 3"], cron="0 9 * * 1-5")
    for _ in range(3):
        engine.execute_job(good)
    engine.execute_job(bad)
    engine.execute_job(good)
    html = client.html("/jobs")
    row = re.search(r'<tr data-job="%s">(.*?)</tr>' % good, html, re.S).group(1)
    assert "nightly-report" in row and "every day at 02:30 (Europe/Berlin)" in row
    assert "s-completed" in row and "100%" in row and "of last 4" in row and "<svg" in row
    row = re.search(r'<tr data-job="%s">(.*?)</tr>' % bad, html, re.S).group(1)
    assert "on weekdays at 09:00" in row and "s-failed" in row and "0%" in row
    assert "command exited with status 3" in row


def test_jobs_page_filters_searches_and_pages(engine: mjsched.SchedulingEngine, client: Browserless) -> None:
    for i in range(55):
        shell_job(engine, f"job-{i:02d}")
    paused = shell_job(engine, "odd_one%", status="Paused")
    first = client.html("/jobs")
    assert first.count("<tr data-job=") == 50 and "56 job(s)" in first and 'rel="next"' in first
    second = client.html("/jobs?page=2")
    assert second.count("<tr data-job=") == 6 and "page 2 of 2" in second and "job-54" in second
    only_paused = client.html("/jobs?status=Paused")
    assert only_paused.count("<tr data-job=") == 1 and paused in only_paused
    # search is a literal substring: '%' and '_' are not wildcards
    assert client.html("/jobs?q=d_one%25").count("<tr data-job=") == 1
    assert client.html("/jobs?q=job-1").count("<tr data-job=") == 10
    assert client.html("/jobs?q=%25").count("<tr data-job=") == 1


def test_job_page_shows_next_runs_history_chart_and_redacted_configuration(engine: mjsched.SchedulingEngine,
                                                                           client: Browserless) -> None:
    job_id = engine.create_job("with-secrets", "shell", "0 6 * * *", configuration={
        "command": ["sh", "-c", "exit 1"], "env": {"API_TOKEN": "tok-PLANTED-1", "HOME": "/srv"}})
    engine.execute_job(job_id)
    engine.execute_job(job_id)
    html = client.html(f"/jobs/{job_id}")
    assert html.count("<li>") >= 10 and "06:00:00" in html            # next 10 runs
    assert "tok-PLANTED-1" not in html and "API_TOKEN" in html and "/srv" in html
    assert html.count('<tr data-run=') == 2 and "<rect" in html      # history and chart
    assert client.html(f"/jobs/{job_id}?status=Completed").count("<tr data-run=") == 0
    assert client.html(f"/jobs/{job_id}?status=Failed").count("<tr data-run=") == 2


def test_runs_page_shows_running_runs_with_lease_left_and_recent_problems(engine: mjsched.SchedulingEngine,
                                                                          client: Browserless, sql: Sql) -> None:
    job_id = shell_job(engine, "long-one")
    failing = shell_job(engine, "failing-one", ["sh", "-c", "echo 'disk full' >&2; exit 1"])
    engine.execute_job(failing)
    sql.run("""INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, status, started_at, executed_by_instance,
                                                      lock_token, lease_expires_at)
               VALUES (%s, 'Running', now() - interval '90 seconds', 'engine-x', gen_random_uuid(),
                       now() + interval '5 minutes')""", (job_id,))
    sql.run("""INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, status, started_at, completed_at,
                                                      error_message)
               VALUES (%s, 'Abandoned', now() - interval '1 hour', now() - interval '50 minutes',
                       'lease expired'),
                      (%s, 'Timeout', now() - interval '2 hours', now() - interval '1 hour', 'ran past 60 s')""",
            (job_id, job_id))
    html = client.html("/runs")
    running = re.search(r'<table class="grid" id="running">(.*?)</table>', html, re.S).group(1)
    assert "long-one" in running and "engine-x" in running
    assert re.search(r"<td>1 min 3\d s</td>", running), running      # elapsed
    assert re.search(r"<td class=\"\">(4 min 5\d s|5 min 0 s)</td>", running), running  # lease left
    problems = re.search(r'<div id="problems">(.*?)</div>', html, re.S).group(1)
    assert "disk full" in problems and "lease expired" in problems and "ran past 60 s" in problems
    listing = client.html("/runs?status=Timeout")
    assert listing.count("<tr data-run=") == 1 and "ran past 60 s" in listing


def test_engines_page_tells_live_from_stale(engine: mjsched.SchedulingEngine, sql: Sql) -> None:
    sql.run("""INSERT INTO mjsched.engine_instance (instance, host, pid, version, last_seen_at, heartbeat_seconds)
               VALUES ('fresh-1', 'host-a', 11, '1.0', now(), NULL),
                      ('silent-1', 'host-b', 22, '1.0', now() - interval '10 minutes', NULL),
                      ('polls-2s', 'host-b', 23, '1.0', now() - interval '4 seconds', 2),
                      ('missed-3', 'host-b', 24, '1.0', now() - interval '7 seconds', 2)""")
    sql.run("""INSERT INTO mjsched.engine_instance (instance, host, pid, version, stopped_at)
               VALUES ('gone-1', 'host-c', 33, '1.0', now() - interval '1 hour')""")
    app = create_app(engine, stale_after=120)
    try:
        html = Browserless(app).html("/engines")
    finally:
        app.close()
    states = dict(re.findall(r'<tr data-engine="([^"]+)">.*?<span class="badge e-\w+">(\w+)</span>', html, re.S))
    # without a recorded poll bound (an older engine) stale_after decides; with one, 3 missed polls
    assert states == {"fresh-1": "live", "silent-1": "stale", "gone-1": "stopped", "polls-2s": "live",
                      "missed-3": "stale"}


def test_errors_are_pages_never_tracebacks(client: Browserless) -> None:
    for url, status in [("/jobs/not-a-uuid", 404), ("/jobs/00000000-0000-0000-0000-000000000000", 404),
                        ("/nowhere", 404), ("/jobs?page=x", 400), ("/jobs?status=Bogus", 400),
                        ("/runs?status=<b>", 400), ("/static/../app.py", 404)]:
        html = client.html(url, status=status)
        assert "Traceback" not in html and "<b>" not in html and 'class="error-message"' in html, url


def test_an_unreachable_database_is_an_error_page_without_the_password() -> None:
    app = create_app("postgresql://postgres:PW-never-shown@127.0.0.1:9/nothing?connect_timeout=1")
    try:
        response = Browserless(app).get("/jobs")
        html = response.get_data(as_text=True)
    finally:
        app.close()
    assert response.status_code == 503 and "PW-never-shown" not in html and "Traceback" not in html
    assert "did not answer" in html


def test_a_shared_engine_lends_the_dashboard_two_connections_at_most(engine: mjsched.SchedulingEngine) -> None:
    """Eight pages at once through an engine the application shares: its pool never gives the
    dashboard more than two connections, so polls, heartbeats and completions keep theirs."""
    import threading
    import time

    for i in range(30):
        shell_job(engine, f"load-{i}")
    app = create_app(engine)
    seen: list[int] = []
    backend = engine.backend
    original = backend.run_statement
    inside = 0
    lock = threading.Lock()

    def counting(*args: object, **kwargs: object) -> object:
        nonlocal inside
        with lock:
            inside += 1
            seen.append(inside)
        try:
            time.sleep(0.05)        # widen each read so that unbounded requests would overlap
            return original(*args, **kwargs)
        finally:
            with lock:
                inside -= 1

    backend.run_statement = counting  # type: ignore[method-assign]
    try:
        results: list[int] = []
        threads = [threading.Thread(target=lambda: results.append(Browserless(app).get("/jobs").status_code))
                   for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    finally:
        backend.run_statement = original  # type: ignore[method-assign]
        app.close()
    assert results == [200] * 8 and max(seen) <= 2, (results, max(seen))


def test_job_page_explains_why_the_job_does_not_run(engine: mjsched.SchedulingEngine, client: Browserless,
                                                    pg_dsn: str) -> None:
    """The why-panel: the verdict and every reason with its code, for the next tick or a given one."""
    job_id = shell_job(engine, "paused-one", cron="0 3 * * *", status="Paused")
    html = client.html(f"/jobs/{job_id}")
    panel = re.search(r'<section id="why-panel".*?</section>', html, re.S).group(0)
    assert 'id="why-verdict" data-code="paused"' in panel
    codes = re.findall(r'<li data-code="(\w+)" class="(\w+)">', panel)
    assert codes == [("paused", "blocking"), ("no_engine", "blocking")]
    assert "The job is Paused" in panel and "No engine is alive" in panel
    assert "mjsched jobs why paused-one" in panel

    sql = Sql(pg_dsn)
    try:
        run_id = sql.one("""INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, scheduled_for, status, success,
                                started_at, completed_at, executed_by_instance)
                            VALUES (%s, '2030-01-05 03:00+00', 'Completed', true, '2030-01-05 03:00:01+00',
                                    '2030-01-05 03:00:04+00', 'box-1') RETURNING id""", (job_id,))
    finally:
        sql.close()
    html = client.html(f"/jobs/{job_id}?why_at=2030-01-05T09:15")
    panel = re.search(r'<section id="why-panel".*?</section>', html, re.S).group(0)
    assert 'data-code="ran"' in panel and str(run_id) in panel and "box-1" in panel
    assert "did the tick at 2030-01-05T09:15 not run" in panel and "--at 2030-01-05T09:15" in panel
    bad = client.html(f"/jobs/{job_id}?why_at=yesterday")
    assert 'id="why-error"' in bad and "not an ISO 8601" in bad and 'id="next-runs"' in bad   # the rest of the page stays


def test_open_alerts_show_as_a_badge_on_the_jobs_list_and_a_section_of_the_job_page(
        engine: mjsched.SchedulingEngine, client: Browserless, sql: Sql) -> None:
    late = shell_job(engine, "nightly-backup", alert_late_start="10m", alert_failing_streak=3,
                     pause_after_failing_streak=True)
    quiet = shell_job(engine, "quiet-job")
    sql.run("UPDATE mjsched.scheduled_job SET next_run_at = now() - interval '1 hour' WHERE id = %s", (late,))
    assert [a.kind for a in engine.parts.alerts.run_pass()] == ["late_start"]
    html = client.html("/jobs")
    row = re.search(r'<tr data-job="%s">(.*?)</tr>' % late, html, re.S).group(1)
    assert "job-alert" in row and "alert: late_start" in row
    row = re.search(r'<tr data-job="%s">(.*?)</tr>' % quiet, html, re.S).group(1)
    assert "job-alert" not in row
    page = client.html(f"/jobs/{late}")
    section = re.search(r'<section id="alerts">(.*?)</section>', page, re.S).group(1)
    assert "open-alert" in section and "no run started within 10m" in section
    assert "3 failures in a row, then the job is paused" in section and "Late start" in section
    section = re.search(r'<section id="alerts">(.*?)</section>', client.html(f"/jobs/{quiet}"), re.S).group(1)
    assert "No open alert." in section
