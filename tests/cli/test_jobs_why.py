"""`mjsched jobs why JOB [--at TIME]`: the reasons as text and as JSON, from a real database."""
from __future__ import annotations

from tests.cli.conftest import Cli
from tests.cli.test_cli import ECHO, add_job, assert_one_line_error
from tests.support.pg import Sql


def test_why_a_paused_job_with_no_engine_does_not_run(cli: Cli, pg_dsn: str) -> None:
    add_job(cli, pg_dsn, "nightly", "0 3 * * *", ECHO)
    cli("jobs", "pause", "nightly", "--dsn", pg_dsn, expect=0)
    out = cli("jobs", "why", "nightly", "--dsn", pg_dsn, expect=0).stdout
    assert "verdict: paused: The job is Paused" in out
    lines = out.splitlines()
    assert any(line.strip().startswith("BLOCKS") and "paused" in line for line in lines), out
    assert any("no_engine" in line and "No engine is alive" in line for line in lines), out
    assert "engines: none registered" in out

    data = cli.json("jobs", "why", "nightly", "--dsn", pg_dsn)
    assert data["job"]["name"] == "nightly" and data["verdict"] == "paused"
    assert [r["code"] for r in data["reasons"]] == ["paused", "no_engine"]
    assert all(r["blocking"] and r["sentence"] for r in data["reasons"])


def test_why_at_a_tick_that_ran_names_its_run(cli: Cli, pg_dsn: str) -> None:
    job = add_job(cli, pg_dsn, "hourly", "0 * * * *", ECHO)
    sql = Sql(pg_dsn)
    try:
        run_id = sql.one("""INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, scheduled_for, status, success,
                                started_at, completed_at, executed_by_instance)
                            VALUES (%s, '2030-01-05 03:00+00', 'Failed', false, '2030-01-05 03:00:01+00',
                                    '2030-01-05 03:00:02+00', 'box-1') RETURNING id""", (job["id"],))
    finally:
        sql.close()
    # no offset: read in the job's timezone (UTC); 03:40 -> the tick at 03:00
    data = cli.json("jobs", "why", "hourly", "--at", "2030-01-05T03:40:00", "--dsn", pg_dsn)
    assert data["tick"].startswith("2030-01-05T03:00:00") and data["verdict"] == "ran"
    assert str(run_id) in data["summary"] and "box-1" in data["summary"] and "Failed" in data["summary"]
    assert data["reasons"][0]["facts"]["run"]["engine"] == "box-1"
    text = cli("jobs", "why", "hourly", "--at", "2030-01-05T03:40:00Z", "--dsn", pg_dsn, expect=0).stdout
    assert "tick 2030-01-05 03:00:00 UTC (the last tick at or before 2030-01-05 03:40:00 UTC)" in text


def test_why_refuses_a_bad_time_and_an_unknown_job(cli: Cli, pg_dsn: str) -> None:
    add_job(cli, pg_dsn, "nightly", "0 3 * * *", ECHO)
    assert_one_line_error(cli("jobs", "why", "nightly", "--at", "yesterday", "--dsn", pg_dsn), "--at", "ISO 8601")
    result = cli("jobs", "why", "no-such-job", "--dsn", pg_dsn)
    assert result.returncode != 0 and "no-such-job" in result.stderr and "Traceback" not in result.stderr
