"""`mjsched execute JOB --param key=value` and `mjsched runs cancel ID` (issue 14 items 5 and 6)."""
from __future__ import annotations

import json
import uuid

from mjsched.engine.refs import short_run_id
from tests.cli.conftest import Cli
from tests.cli.test_cli import add_job, assert_one_line_error
from tests.support.pg import wait_for

DAY = json.dumps({"command": ["sh", "-c", "echo day=$DAY n=$N"], "env": {"DAY": "none", "N": "0"}})


def test_execute_with_params_merges_them_for_that_run_and_shows_them(cli: Cli, pg_dsn: str) -> None:
    add_job(cli, pg_dsn, "backfill", "0 3 * * *", DAY)
    run = cli.json("execute", "backfill", "--dsn", pg_dsn, "--param", 'env={"DAY": "2026-11-30"}',
                   "--param", "timeout=30")
    assert run["status"] == "Completed" and "day=2026-11-30 n=0" in json.dumps(run["details"])
    assert run["parameters"] == {"env": {"DAY": "2026-11-30"}, "timeout": 30}    # JSON when it parses
    text = cli("execute", "backfill", "--dsn", pg_dsn, "--param", 'env={"api_token": "s3cret"}', expect=0).stdout
    assert 'parameters: {"env": {"api_token": "***"}}' in text and "s3cret" not in text
    table = cli("runs", "--dsn", pg_dsn, "--job", "backfill", expect=0).stdout
    assert "PARAMETERS" in table and "2026-11-30" in table and "s3cret" not in table
    listed = cli.json("runs", "--dsn", pg_dsn, "--job", "backfill")
    assert [r["parameters"] for r in listed][-1] == {"env": {"DAY": "2026-11-30"}, "timeout": 30}
    assert cli.json("jobs", "show", "backfill", "--dsn", pg_dsn)["configuration"] == json.loads(DAY)


def test_execute_refuses_bad_params_before_any_run(cli: Cli, pg_dsn: str) -> None:
    add_job(cli, pg_dsn, "backfill", "0 3 * * *", DAY)
    assert_one_line_error(cli("execute", "backfill", "--dsn", pg_dsn, "--param", "no-equals-sign"), "--param")
    assert_one_line_error(cli("execute", "backfill", "--dsn", pg_dsn, "--param", "timeout=-5"),
                          "configuration.timeout", "merged")
    assert cli.json("runs", "--dsn", pg_dsn, "--job", "backfill") == []


def test_a_misspelt_param_is_refused_before_anything_runs_and_errors_speak_cli(cli: Cli, pg_dsn: str) -> None:
    """Issue 35 item 8: `--param comand=...` exited 0 having run the job's own command."""
    add_job(cli, pg_dsn, "backfill", "0 3 * * *", DAY)
    assert_one_line_error(cli("execute", "backfill", "--dsn", pg_dsn, "--param", 'comand=["false"]'),
                          "--param comand=", "not a configuration key of the shell driver", "did you mean 'command'?")
    assert cli.json("runs", "--dsn", pg_dsn, "--job", "backfill") == []
    cli("jobs", "pause", "backfill", "--dsn", pg_dsn, expect=0)
    paused = cli("execute", "backfill", "--dsn", pg_dsn)
    assert_one_line_error(paused, "status is Paused", "add --force to run it anyway", code=1)
    assert "force=True" not in paused.stderr
    assert cli.json("execute", "backfill", "--force", "--dsn", pg_dsn)["status"] == "Completed"


def test_runs_cancel_stops_a_run_executing_in_another_process(cli: Cli, pg_dsn: str) -> None:
    add_job(cli, pg_dsn, "sleepy", "0 3 * * *", json.dumps({"command": ["sleep", "60"]}))
    executing = cli.spawn("execute", "sleepy", "--dsn", pg_dsn)
    try:
        run = wait_for(lambda: next(iter(cli.json("runs", "--dsn", pg_dsn, "--status", "Running")), None),
                       timeout=30, message="the run to start")
        # the executing CLI's engine has the default 600 s lease (a renewal every 150 s): the
        # cancel is read between renewals too, every 5 s
        ended = cli.json("runs", "cancel", run["id"], "--wait", "--timeout", "20", "--dsn", pg_dsn)
        assert ended["status"] == "Cancelled" and "requested by" in ended["error_message"]
        executing.communicate(timeout=30)
        assert executing.returncode == 1          # execute itself exits 1: its run did not complete
    finally:
        if executing.poll() is None:
            executing.kill()
    assert_one_line_error(cli("runs", "cancel", run["id"], "--dsn", pg_dsn), "Cancelled", "can be cancelled")
    assert_one_line_error(cli("runs", "cancel", str(uuid.uuid4()), "--dsn", pg_dsn), "no such run")
    listed = cli("runs", "--dsn", pg_dsn, expect=0).stdout       # `runs` alone still lists (no ACTION)
    assert short_run_id(run["id"]) in listed and "Cancelled: requested by" in listed
