"""`mjsched runs prune` and the retention flags of `jobs add` / `jobs edit` (issue 14 item 3)."""
from __future__ import annotations

from tests.cli.conftest import Cli
from tests.cli.test_cli import add_job, assert_one_line_error
from tests.support.pg import Sql


def _history(dsn: str, job_id: str, count: int) -> None:
    sql = Sql(dsn)
    try:      # runs 1.5 h ... count + 0.5 h old, and one Running run
        sql.run("""INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, status, started_at, completed_at)
                   SELECT %s, 'Completed', now() - (g + 0.5) * interval '1 hour', now() - (g + 0.5) * interval '1 hour'
                     FROM generate_series(1, %s) g""", (job_id, count))
        sql.run("""INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, status, started_at, lock_token,
                                                          lease_expires_at)
                   VALUES (%s, 'Running', now() - interval '400 days', gen_random_uuid(), now() + interval '1 hour')""",
                (job_id,))
    finally:
        sql.close()


def _count(dsn: str) -> int:
    sql = Sql(dsn)
    try:
        return int(sql.one("SELECT count(*) FROM mjsched.scheduled_job_run"))
    finally:
        sql.close()


def test_prune_dry_run_then_prune_with_json(cli: Cli, pg_dsn: str) -> None:
    a = add_job(cli, pg_dsn, "a")
    b = add_job(cli, pg_dsn, "b")
    _history(pg_dsn, a["id"], 100)
    _history(pg_dsn, b["id"], 100)
    dry = cli.json("runs", "prune", "--dsn", pg_dsn, "--older-than", "2d", "--dry-run")
    assert dry == {"dry_run": True, "purged": 2 * 53, "older_than_seconds": 172800.0, "keep_last": None, "job": None}
    assert _count(pg_dsn) == 202
    text = cli("runs", "prune", "--dsn", pg_dsn, "--older-than", "48h", "--keep-last", "90", "--job", "a", expect=0)
    assert text.stdout.startswith("deleted 10 finished run(s) of job a: older than 48h and beyond each job's newest 90")
    done = cli.json("runs", "prune", "--dsn", pg_dsn, "--older-than", "1h", "--batch-size", "7")
    assert done["purged"] == 190 and _count(pg_dsn) == 2     # the two Running runs stay
    assert cli.json("runs", "prune", "--dsn", pg_dsn)["purged"] == 0      # no retention configured


def test_prune_and_retention_flags_refuse_bad_input(cli: Cli, pg_dsn: str) -> None:
    add_job(cli, pg_dsn, "a")
    assert_one_line_error(cli("runs", "prune", "--dsn", pg_dsn, "--older-than", "soon"), "--older-than", "soon")
    assert_one_line_error(cli("runs", "prune", "--dsn", pg_dsn, "--older-than", "0d"), "longer than zero")
    assert_one_line_error(cli("runs", "prune", "--dsn", pg_dsn, "--keep-last", "0"), "--keep-last")
    assert_one_line_error(cli("runs", "prune", "--dsn", pg_dsn, "--batch-size", "5000"), "batch_size")
    assert_one_line_error(cli("jobs", "add", "--dsn", pg_dsn, "--name", "x", "--driver", "shell", "--cron",
                              "* * * * *", "--config", '{"command": ["true"]}', "--keep-runs-days", "-1"),
                          "keep_runs_days")
    edited = cli.json("jobs", "edit", "a", "--dsn", pg_dsn, "--keep-runs-days", "7", "--keep-runs-count", "0")
    assert (edited["keep_runs_days"], edited["keep_runs_count"]) == (7, 0)
    cleared = cli.json("jobs", "edit", "a", "--dsn", pg_dsn, "--clear-keep-runs-days")
    assert (cleared["keep_runs_days"], cleared["keep_runs_count"]) == (None, 0)
    assert_one_line_error(cli("jobs", "edit", "a", "--dsn", pg_dsn, "--keep-runs-count", "3",
                              "--clear-keep-runs-count"), "contradict")
