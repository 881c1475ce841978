"""A job whose schedule plain SQL made unusable never runs: ``mjsched status`` (text and --json)
and the dashboard's jobs page list it, with the reason, whether a claim set it aside or the
reschedule sweep passed it over. The list is recomputed from the rows, so it holds in both
dialects and survives restarts."""
from __future__ import annotations

from typing import Any

import pytest

from tests.cli.conftest import Cli

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]


def _jobs(engine: Any, sql: Any) -> dict[str, str]:
    ids = {name: engine.create_job(name=name, driver="shell", cron="*/5 * * * *",
                                   configuration={"command": ["true"]})
           for name in ("healthy", "claimed-bad", "swept-bad", "paused-bad")}
    # claimed: due now, so a poll claims it and sets it aside (next_run_at cleared, run Skipped)
    sql.run("UPDATE mjsched.scheduled_job SET cron_expression = 'not a cron', next_run_at = now() WHERE id = %s",
            (ids["claimed-bad"],))
    # swept: no next run, so the reschedule sweep finds it and passes it over
    sql.run("UPDATE mjsched.scheduled_job SET cron_expression = 'every tuesday', next_run_at = NULL WHERE id = %s",
            (ids["swept-bad"],))
    # not Active: no engine would run it anyway, so it is not "set aside"
    sql.run("UPDATE mjsched.scheduled_job SET cron_expression = 'never ever', next_run_at = NULL, "
            "status = 'Paused' WHERE id = %s", (ids["paused-bad"],))
    engine.dispatch_due_jobs()
    engine.close()
    return ids


def test_set_aside_jobs_are_recomputed_from_the_rows(make_engine: Any, sql: Any) -> None:
    from mjsched.set_aside import set_aside_jobs

    engine = make_engine()
    ids = _jobs(make_engine(), sql)
    found = {j.name: j for j in set_aside_jobs(engine.backend)}
    assert set(found) == {"claimed-bad", "swept-bad"}
    assert found["claimed-bad"].id == ids["claimed-bad"] and "not a cron" in found["claimed-bad"].reason
    assert "every tuesday" in found["swept-bad"].reason and found["swept-bad"].schedule == "every tuesday"


def test_status_lists_set_aside_jobs_with_the_reason(cli: Cli, pg_dsn: str, make_engine: Any, sql: Any) -> None:
    ids = _jobs(make_engine(), sql)
    status = cli.json("status", "--dsn", pg_dsn)
    listed = {j["name"]: j for j in status["set_aside_jobs"]}
    assert set(listed) == {"claimed-bad", "swept-bad"}
    assert listed["swept-bad"]["id"] == ids["swept-bad"] and "every tuesday" in listed["swept-bad"]["reason"]
    assert status["counts"]["set_aside"] == 2
    text = cli("status", "--dsn", pg_dsn, expect=0).stdout
    assert "set aside: 2 job(s)" in text
    for name, cron in (("claimed-bad", "not a cron"), ("swept-bad", "every tuesday")):
        [line] = [line for line in text.splitlines() if name in line]
        assert cron in line
    assert "healthy" not in text and "paused-bad" not in text


def test_dashboard_jobs_page_lists_set_aside_jobs(make_engine: Any, sql: Any) -> None:
    pytest.importorskip("werkzeug", reason="the 'web' extra is not installed")
    from mjsched.web import create_app
    from tests.web.conftest import Browserless

    engine = make_engine()
    ids = _jobs(make_engine(), sql)
    app = create_app(engine)
    try:
        html = Browserless(app).html("/jobs")
    finally:
        app.close()
    section = html[html.index('id="set-aside"'):]
    section = section[:section.index("</section>")]
    assert f'/jobs/{ids["claimed-bad"]}' in section and f'/jobs/{ids["swept-bad"]}' in section
    assert "not a cron" in section and "every tuesday" in section
    assert "healthy" not in section and "paused-bad" not in section
