"""The dashboard in a real headless Chromium (Selenium, /usr/bin/chromedriver) against a live
server on loopback and the real PostgreSQL. Screenshots of each page go to
tests/web/artifacts/ (ignored by git).

Without Chromium these tests skip, unless MJSCHED_REQUIRE_BROWSER=1 (CI sets it through
.ci/run, which installs the Debian packages chromium and chromium-driver): then a missing
browser fails the run instead of hiding it.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

import mjsched
from mjsched.web import DashboardThread, create_app
from tests.support.pg import Sql

from .conftest import shell_job

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
ARTIFACTS = Path(__file__).parent / "artifacts"
REQUIRE = os.environ.get("MJSCHED_REQUIRE_BROWSER") == "1"
WAIT = 15.0     # seconds any one browser condition may take


def _missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (the 'test' extra)"
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            return f"{path} not found (apt-get install chromium chromium-driver)"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    why = _missing()
    if why:
        if REQUIRE:
            pytest.fail(f"MJSCHED_REQUIRE_BROWSER=1 but {why}")
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="mjsched-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run", "--window-size=1280,900", f"--user-data-dir={profile}",
                 "--host-resolver-rules=MAP app.example 127.0.0.1"):   # a non-loopback name for this machine
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(WAIT)
    ARTIFACTS.mkdir(exist_ok=True)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def live(engine: mjsched.SchedulingEngine) -> Iterator[Callable[..., str]]:
    """Serve dashboards of the test database on 127.0.0.1 (a free port each); returns their URL."""
    servers: list[tuple[DashboardThread, Any]] = []

    def serve(**options: Any) -> str:
        app = create_app(engine, **options)
        server = DashboardThread(app, "127.0.0.1", 0).start()
        servers.append((server, app))
        return server.url

    yield serve
    for server, app in servers:
        server.stop()
        app.close()


def wait_until(driver: Any, condition: Callable[[Any], Any], what: str, timeout: float = WAIT) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(condition, message=f"waiting for {what}")


def text_of(driver: Any, css: str) -> str:
    """The visible text of the elements matching ``css``, read in one script call: the live
    pages replace their content while they refresh, so element handles can go stale between calls."""
    return str(driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0])).map(e => e.innerText.trim()).join(' ');", css))


def click_and_confirm(driver: Any, css: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC

    driver.find_element(By.CSS_SELECTOR, css).click()
    wait_until(driver, EC.alert_is_present(), "the confirmation")
    driver.switch_to.alert.accept()


def shot(driver: Any, name: str) -> None:
    """A screenshot of the whole page (the window grown to the page's height, then restored)."""
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    driver.set_window_size(1280, min(max(height, 600), 2400))
    try:
        driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))
    finally:
        driver.set_window_size(1280, 900)


def history(engine: mjsched.SchedulingEngine, sql: Sql) -> None:
    """A few more jobs with weeks of runs (written as rows), so the page looks as it does in use."""
    for name, cron, zone, fail_every, status in [
            ("invoice-export", "0 6 * * 1-5", "Europe/Berlin", 4, "Active"),
            ("cache-warmup", "*/15 * * * *", "UTC", 0, "Active"),
            ("hourly-sync", "5 * * * *", "America/New_York", 9, "Active"),
            ("weekly-cleanup", "0 3 * * 0", "UTC", 0, "Paused")]:
        job_id = shell_job(engine, name, cron=cron, timezone=zone, status=status)
        sql.run("""INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, scheduled_for, status, success,
                          error_message, started_at, completed_at, duration_ms, executed_by_instance)
                   SELECT %(job)s, t, s, s = 'Completed', CASE WHEN s = 'Failed' THEN 'HTTP 503 from billing' END,
                          t, t + d * interval '1 millisecond', d, 'worker-1'
                     FROM generate_series(1, 30) g,
                          LATERAL (SELECT now() - g * interval '1 hour' AS t,
                                          (800 + 600 * sin(g / 3.0) + 40 * g)::bigint AS d,
                                          CASE WHEN %(every)s > 0 AND g %% %(every)s = 1 THEN 'Failed'
                                               ELSE 'Completed' END AS s) x""",
                {"job": job_id, "every": fail_every})


def test_jobs_page_then_pause_a_job_and_see_its_status_change(browser: Any, live: Callable[..., str],
                                                              engine: mjsched.SchedulingEngine, sql: Sql) -> None:
    from selenium.webdriver.common.by import By

    job_id = shell_job(engine, "nightly-report", cron="30 2 * * *", timezone="Europe/Berlin",
                       alert_silent_after="26h")
    shell_job(engine, "every-five", cron="*/5 * * * *")
    engine.execute_job(job_id)
    history(engine, sql)
    url = live()
    browser.get(url + "/jobs")
    assert "every day at 02:30 (Europe/Berlin)" in text_of(browser, f'tr[data-job="{job_id}"]')
    assert "every 5 minutes" in text_of(browser, "#jobs")
    shot(browser, "jobs")
    browser.find_element(By.LINK_TEXT, "nightly-report").click()
    wait_until(browser, lambda d: "nightly-report" in d.title, "the job page")
    click_and_confirm(browser, 'button[data-action="pause"]')
    wait_until(browser, lambda d: "nightly-report paused." in text_of(d, ".flash"), "the flash message")
    assert text_of(browser, "#job-status") == "Paused"
    assert engine.get_job(job_id).status.value == "Paused"
    # the why-panel now says why it will not run (issue 36)
    assert text_of(browser, "#why-verdict").startswith("paused")
    assert "The job is Paused" in text_of(browser, "#why-reasons")
    shot(browser, "job-why")
    # the audit trail has the pause made here, and the job's alert rule is listed (issue 36)
    changes = text_of(browser, "#changes")
    assert "status" in changes and "Paused" in changes and "dashboard" in changes
    assert "26h" in text_of(browser, "#alerts") or "26 h" in text_of(browser, "#alerts")
    browser.get(url + "/jobs?status=Paused")
    assert "nightly-report" in text_of(browser, "#jobs") and "every-five" not in text_of(browser, "#jobs")


def test_edit_the_cron_see_the_preview_then_the_saved_schedule(browser: Any, live: Callable[..., str],
                                                               engine: mjsched.SchedulingEngine) -> None:
    from selenium.webdriver.common.by import By

    job_id = shell_job(engine, "editable", cron="0 2 * * *")
    browser.get(live() + f"/jobs/{job_id}")
    cron = browser.find_element(By.ID, "edit-cron")
    cron.clear()
    cron.send_keys("61 * * * *")
    wait_until(browser, lambda d: "61" in text_of(d, "#preview.bad"), "the preview to refuse minute 61")
    cron.clear()
    cron.send_keys("30 4 * * 1-5")
    wait_until(browser, lambda d: "on weekdays at 04:30" in text_of(d, "#preview"), "the preview")
    times = browser.execute_script("return Array.from(document.querySelectorAll('#preview li')).map(e => e.innerText);")
    assert len(times) == 5 and all("04:30:00" in t for t in times), times
    shot(browser, "job-edit-preview")
    click_and_confirm(browser, "#edit-save")
    wait_until(browser, lambda d: "editable saved" in text_of(d, ".flash"), "the saved flash")
    assert text_of(browser, "#schedule-cron") == "30 4 * * 1-5"
    assert text_of(browser, "#schedule-words") == "on weekdays at 04:30"
    assert "04:30:00" in text_of(browser, "#next-runs li")
    assert engine.get_job(job_id).cron_expression == "30 4 * * 1-5"


def test_trigger_a_run_and_see_it_appear_and_complete(browser: Any, live: Callable[..., str],
                                                      engine: mjsched.SchedulingEngine) -> None:
    job_id = shell_job(engine, "on-demand", ["sh", "-c", "sleep 1; echo done"], cron="0 0 1 1 *")
    engine.start_polling()
    url = live()
    browser.get(url + f"/jobs/{job_id}")
    click_and_confirm(browser, 'button[data-action="run"]')
    wait_until(browser, lambda d: "Run of on-demand requested" in text_of(d, ".flash"), "the flash message")

    def shows(status: str) -> Callable[[Any], bool]:
        def check(d: Any) -> bool:
            d.refresh()
            return status in text_of(d, "tr[data-run]")
        return check

    wait_until(browser, shows("Running"), "the run to appear Running", timeout=20)
    shot(browser, "job-running")
    wait_until(browser, shows("Completed"), "the run to complete", timeout=20)
    shot(browser, "job")
    assert engine.list_runs(job_id)[0].status.value == "Completed"


def test_a_failing_jobs_error_is_on_the_runs_page(browser: Any, live: Callable[..., str],
                                                  engine: mjsched.SchedulingEngine) -> None:
    job_id = shell_job(engine, "broken-export", ["sh", "-c", "echo 'relation \"orders\" does not exist' >&2; exit 2"])
    engine.execute_job(job_id)
    browser.get(live() + "/runs")
    problems = text_of(browser, "#problems")
    assert "broken-export" in problems and "Failed" in problems and "status 2" in problems
    shot(browser, "runs")
    browser.get(browser.current_url + "?status=Failed")
    assert "broken-export" in text_of(browser, "#listing")


def test_a_killed_engine_goes_stale_or_dead(browser: Any, live: Callable[..., str], pg_dsn: str,
                                           sql: Sql) -> None:
    """Two engines killed with SIGKILL: one that registered under another host name goes stale
    after three missed polls (the dashboard cannot see its pid), one of this host shows dead."""
    def spawn(name: str, host: str | None) -> subprocess.Popen[str]:
        fake_host = f"socket.gethostname = lambda: {host!r}" if host else ""
        code = textwrap.dedent(f"""
            import socket, sys, time, mjsched
            {fake_host}
            engine = mjsched.SchedulingEngine({pg_dsn!r}, lease_timeout=4.0, max_poll_interval=1.0,
                                              instance_name={name!r})
            engine.start_polling()
            print("polling", flush=True)
            time.sleep(120)
        """)
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "polling"
        return proc

    procs: list[subprocess.Popen[str]] = []
    try:
        procs = [spawn("far-engine", "another-host"), spawn("near-engine", None)]
        browser.get(live(stale_after=60.0) + "/engines")   # each polls at least every 1 s
        state = lambda d, name: text_of(d, f'tr[data-engine="{name}"] .engine-state')  # noqa: E731
        assert state(browser, "far-engine") == "live" and state(browser, "near-engine") == "live"
        shot(browser, "engines")
        for proc in procs:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        killed_at = time.monotonic()
        # the page refreshes itself every 5 s: no reload here
        wait_until(browser, lambda d: state(d, "near-engine") == "dead", "this host's engine to show dead",
                   timeout=20)
        wait_until(browser, lambda d: state(d, "far-engine") == "stale", "the other host's engine to go stale",
                   timeout=20)
        assert time.monotonic() - killed_at >= 3.0     # stale only once silent for 3 polls (5 s at least)
        shot(browser, "engines-stale")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


@pytest.fixture
def flask_mounts(engine: mjsched.SchedulingEngine, pg_dsn: str, monkeypatch: pytest.MonkeyPatch) \
        -> Iterator[Callable[[str], str]]:
    """The Flask example (authorize= through its session) and a mount without authorize=,
    each served on loopback; returns the URL of each by name."""
    pytest.importorskip("flask")
    import importlib

    from flask import Flask
    from werkzeug.middleware.dispatcher import DispatcherMiddleware
    from werkzeug.serving import make_server

    monkeypatch.setenv("MJSCHED_DSN", pg_dsn)
    monkeypatch.setenv("FLASK_SECRET_KEY", "test-only-flask-key")
    monkeypatch.setenv("EXAMPLE_PASSWORD", "correct horse")
    import tests.web.examples.flask_app as example
    example = importlib.reload(example)
    bare = Flask("bare")
    mounts = {"/scheduler": create_app(engine)}
    bare.wsgi_app = DispatcherMiddleware(bare.wsgi_app, mounts)  # type: ignore[method-assign]
    servers = {name: make_server("127.0.0.1", 0, wsgi, threaded=True)
               for name, wsgi in (("authorize", example.app), ("bare", bare))}
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers.values()]
    for thread in threads:
        thread.start()
    yield lambda name: f"http://127.0.0.1:{servers[name].server_address[1]}"
    for server in servers.values():
        server.shutdown()
        server.server_close()
    for wsgi in (example.app, bare):
        wsgi.wsgi_app.mounts["/scheduler"].close()  # type: ignore[attr-defined]


def test_a_mounted_dashboard_lets_in_whom_the_application_says(browser: Any, engine: mjsched.SchedulingEngine,
                                                                 flask_mounts: Callable[[str], str]) -> None:
    from selenium.webdriver.common.by import By

    shell_job(engine, "mounted-job")
    app_url = flask_mounts("authorize")
    browser.get(app_url + "/scheduler/jobs")
    assert "does not let you use this dashboard" in browser.page_source and "mounted-job" not in browser.page_source
    browser.get(app_url + "/login")
    browser.find_element(By.NAME, "user").send_keys("ops")
    browser.find_element(By.NAME, "password").send_keys("correct horse")
    browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_until(browser, lambda d: "mounted-job" in d.page_source, "the jobs page after signing in")
    shot(browser, "mounted-signed-in")

    bare_url = flask_mounts("bare")
    browser.get(bare_url.replace("127.0.0.1", "app.example") + "/scheduler/jobs")
    assert "Local requests only" in browser.page_source and "mounted-job" not in browser.page_source
    browser.get(bare_url + "/scheduler/jobs")
    wait_until(browser, lambda d: "mounted-job" in d.page_source, "the jobs page from this machine")


def test_the_history_shows_run_ids_that_differ_and_cancel_by_one(browser: Any, live: Callable[..., str],
                                                                  engine: mjsched.SchedulingEngine, sql: Sql) -> None:
    """Issue 35 item 3: runs made within a minute showed the same id (its time part) under "Job"."""
    from mjsched.engine.refs import short_run_id

    job_id = shell_job(engine, "burst", cron="0 3 * * *")
    runs = [engine.execute_job(job_id) for _ in range(3)]
    waiting = str(sql.one("INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, scheduled_for, status, queued_at) "
                          "VALUES (%s, now(), 'Queued', now()) RETURNING id", (job_id,)))
    browser.get(live() + f"/jobs/{job_id}")
    assert browser.execute_script("return document.querySelector('table.runs thead th').textContent") == "Run"
    shown = browser.execute_script(
        "return Array.from(document.querySelectorAll('table.runs td.run-id')).map(e => e.innerText.trim());")
    assert sorted(shown) == sorted([r.id[-12:] for r in runs] + [waiting[-12:]])
    click_and_confirm(browser, f'tr[data-run="{waiting}"] button[data-action="cancel"]')
    wait_until(browser, lambda d: f"Run {short_run_id(waiting)} cancelled" in text_of(d, ".flash"), "the flash")
    assert "Cancelled" in text_of(browser, f'tr[data-run="{waiting}"]')


def test_edit_an_interval_jobs_interval_and_max_runtime(browser: Any, live: Callable[..., str],
                                                        engine: mjsched.SchedulingEngine) -> None:
    """Issue 35 item 9: an interval job's page showed `Cron None` and its form required a cron."""
    from selenium.webdriver.common.by import By

    job_id = engine.create_job("poll-inbox", "shell", every="90s", configuration={"command": ["true"]},
                               high_frequency_ok=True)
    browser.get(live() + f"/jobs/{job_id}")
    assert text_of(browser, "#schedule-kind") == "interval" and text_of(browser, "#schedule-every") == "1m30s"
    assert not browser.find_elements(By.ID, "edit-cron") and not browser.find_elements(By.ID, "schedule-cron")
    every = browser.find_element(By.ID, "edit-every")
    every.clear()
    every.send_keys("2m")
    wait_until(browser, lambda d: "every 2m" in text_of(d, "#preview.good"), "the preview of the interval")
    runtime = browser.find_element(By.ID, "edit-max-runtime")
    runtime.clear()
    runtime.send_keys("45")
    shot(browser, "job-edit-interval")
    click_and_confirm(browser, "#edit-save")
    wait_until(browser, lambda d: "poll-inbox saved" in text_of(d, ".flash"), "the saved flash")
    assert text_of(browser, "#schedule-every") == "2m" and text_of(browser, "#schedule-words") == "every 2m"
    job = engine.get_job(job_id)
    assert (job.schedule_kind, job.interval_seconds, job.cron_expression, job.max_runtime_seconds) == \
        ("every", 120, None, 45)
