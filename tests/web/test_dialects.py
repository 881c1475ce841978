"""Every page and the run-now action on each dialect a server is given for (the ``db`` fixture:
PostgreSQL here; SQL Server where MJSCHED_TEST_MSSQL_DSN or Docker provides one, skipped
otherwise), so the T-SQL twins of the page queries run where they can."""
from __future__ import annotations

import re
from typing import Any, Callable

import mjsched
from mjsched.web import create_app
from tests.support.db import Db
from tests.support.pg import wait_for

from .conftest import Browserless, shell_job


def test_every_page_and_run_now_on_each_dialect(db: Db, make_engine: Callable[..., Any]) -> None:
    engine: mjsched.SchedulingEngine = make_engine(max_poll_interval=0.5)
    ok = shell_job(engine, "dialect-ok", cron="30 2 * * *")
    bad = shell_job(engine, "dialect_bad[1]%", ["sh", "-c", "echo nope >&2; exit 4"], cron="0 9 * * 1-5")
    engine.execute_job(ok)
    engine.execute_job(bad)
    db.run(f"""INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, status, started_at, executed_by_instance,
                                                     lock_token, lease_expires_at)
               VALUES (?, 'Running', {db.ago(90)}, 'engine-z', ?, {db.ago(-300)})""",
           [ok, "0b7f0d4e-52c4-4b44-9a0b-9d6f1e8a2c11"])
    db.run(f"""INSERT INTO mjsched.engine_instance (instance, host, pid, version, started_at, last_seen_at)
               VALUES ('engine-z', 'host-z', 7, '0.1.0', {db.ago(600)}, {db.ago(900)})""")
    app = create_app(engine, stale_after=60)
    try:
        web = Browserless(app)
        jobs = web.html("/jobs")
        assert "every day at 02:30" in jobs and "on weekdays at 09:00" in jobs and "2 job(s)" in jobs
        assert re.search(r'data-job="%s">.*?s-failed.*?0%%' % bad, jobs, re.S)
        assert web.html("/jobs?q=_bad[1]%25").count("<tr data-job=") == 1      # wildcards taken literally
        assert web.html("/jobs?q=bad%5B2").count("<tr data-job=") == 0
        detail = web.html(f"/jobs/{bad}?status=Failed")
        assert detail.count("<tr data-run=") == 1 and "exited with status 4" in detail
        runs = web.html("/runs")
        assert "engine-z" in runs and re.search(r"<td>1 min 3\d s</td>", runs) and "exited with status 4" in runs
        assert web.html("/runs?status=Failed").count("<tr data-run=") == 1
        engines = web.html("/engines")
        assert re.search(r'data-engine="engine-z">.*?e-stale.*?<td>1</td>', engines, re.S)
        db.run("DELETE FROM mjsched.scheduled_job_run WHERE executed_by_instance = 'engine-z'")
        html = web.follow(web.post(f"/jobs/{ok}/run"))
        assert "Run of dialect-ok requested" in html
    finally:
        app.close()
    engine.start_polling()
    wait_for(lambda: len(engine.list_runs(ok, status="Completed")) == 2, timeout=20,
             message="the requested run to complete")
