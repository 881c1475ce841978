"""Retries on the command line: `jobs add --retry`, `jobs edit --retry/--clear-retry`, and the
attempt of each run in `runs` (issue 14 item 2)."""
from __future__ import annotations

import psycopg2

from tests.cli.conftest import Cli
from tests.cli.test_cli import add_job, assert_one_line_error


def test_add_and_edit_a_retry_policy(cli: Cli, pg_dsn: str) -> None:
    job = add_job(cli, pg_dsn, "nightly", "0 3 * * *")
    assert job["retry_max_attempts"] is None and job["notify_final_attempt_only"] is True
    policy = add_job(cli, pg_dsn, "flaky", "0 3 * * *", '{"command": ["false"]}', "--retry", "4,30,3,600,0.2",
                     "--notify-every-attempt")
    assert [policy[k] for k in ("retry_max_attempts", "retry_initial_delay", "retry_factor", "retry_max_delay",
                                "retry_jitter", "notify_final_attempt_only")] == [4, 30, 3, 600, 0.2, False]
    edited = cli.json("jobs", "edit", "nightly", "--dsn", pg_dsn, "--retry", "2")
    assert (edited["retry_max_attempts"], edited["retry_initial_delay"], edited["retry_max_delay"]) == (2, 30, 3600)
    cleared = cli.json("jobs", "edit", "nightly", "--dsn", pg_dsn, "--clear-retry")
    assert cleared["retry_max_attempts"] is None and cleared["retry_jitter"] is None


def test_a_bad_retry_spec_is_one_line_naming_it(cli: Cli, pg_dsn: str) -> None:
    assert_one_line_error(cli("jobs", "add", "--dsn", pg_dsn, "--name", "x", "--driver", "shell", "--cron",
                              "0 3 * * *", "--config", '{"command": ["true"]}', "--retry", "three"), "--retry", "three")
    assert_one_line_error(cli("jobs", "add", "--dsn", pg_dsn, "--name", "x", "--driver", "shell", "--cron",
                              "0 3 * * *", "--config", '{"command": ["true"]}', "--retry", "0"), "retry.max_attempts")
    add_job(cli, pg_dsn, "nightly")
    assert_one_line_error(cli("jobs", "edit", "nightly", "--dsn", pg_dsn, "--retry", "3,10,0.5"), "retry.factor")
    assert_one_line_error(cli("jobs", "edit", "nightly", "--dsn", pg_dsn, "--retry", "3", "--clear-retry"),
                          "contradict")


def test_runs_lists_the_attempt_of_each_run(cli: Cli, pg_dsn: str) -> None:
    job = add_job(cli, pg_dsn, "nightly")
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, scheduled_for, attempt, status, "
                    "queued_at, retry_at) VALUES (%s, now(), 2, 'Queued', now(), now() + interval '1 hour')",
                    (job["id"],))
    conn.close()
    out = cli("runs", "--dsn", pg_dsn, expect=0).stdout
    assert "ATTEMPT" in out.splitlines()[0] and "2 (due " in out
    assert [r["attempt"] for r in cli.json("runs", "--dsn", pg_dsn)] == [2]
