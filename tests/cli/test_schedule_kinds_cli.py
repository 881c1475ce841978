"""The CLI of the interval and one-off schedules: `jobs add/edit --every/--run-at`, `jobs preview`
of the three kinds, and bad input (exit 2, one line naming the option or field, nothing written)."""
from __future__ import annotations

import json

import pytest

from tests.cli.conftest import Cli
from tests.cli.test_cli import assert_one_line_error

pytestmark = pytest.mark.postgres

ECHO = json.dumps({"command": ["echo", "hi"]})


def add(cli: Cli, dsn: str, name: str, *schedule: str) -> dict:
    return cli.json("jobs", "add", "--name", name, "--driver", "shell", "--config", ECHO, *schedule, "--dsn", dsn)


def test_jobs_add_every_and_run_at(cli: Cli, pg_dsn: str) -> None:
    every = add(cli, pg_dsn, "every-90s", "--every", "90s")
    assert (every["cron_expression"], every["interval_seconds"], every["run_at"]) == (None, 90, None)
    assert every["next_run_at"] is not None
    once = add(cli, pg_dsn, "xmas", "--run-at", "2030-12-24T18:00", "--timezone", "Europe/Berlin")
    assert once["run_at"] == "2030-12-24T17:00:00+00:00" and once["next_run_at"] == once["run_at"]
    offset = add(cli, pg_dsn, "xmas-offset", "--run-at", "2030-12-24T18:00:00+01:00")
    assert offset["run_at"] == "2030-12-24T17:00:00+00:00" and offset["timezone"] == "UTC"
    listing = cli("jobs", "list", "--dsn", pg_dsn, expect=0).stdout
    assert "every 1m30s (UTC)" in listing and "once at 2030-12-24T17:00:00+00:00 (Europe/Berlin)" in listing


def test_jobs_edit_switches_the_schedule_kind(cli: Cli, pg_dsn: str) -> None:
    add(cli, pg_dsn, "switch", "--cron", "0 3 * * *")
    job = cli.json("jobs", "edit", "switch", "--every", "2h", "--dsn", pg_dsn)
    assert (job["cron_expression"], job["interval_seconds"]) == (None, 7200)
    job = cli.json("jobs", "edit", "switch", "--run-at", "2031-01-01T00:00", "--dsn", pg_dsn)
    assert (job["interval_seconds"], job["run_at"]) == (None, "2031-01-01T00:00:00+00:00")
    job = cli.json("jobs", "edit", "switch", "--cron", "*/5 * * * *", "--dsn", pg_dsn)
    assert (job["cron_expression"], job["run_at"]) == ("*/5 * * * *", None)


def test_preview_of_the_three_kinds(cli: Cli, pg_dsn: str) -> None:
    # every 1h across the spring-forward of 28 March 2027 in Berlin: 3600 s apart, 01:00 then 03:00
    data = cli.json("jobs", "preview", "--every", "1h", "--timezone", "Europe/Berlin",
                    "--after", "2027-03-27T23:30:00+00:00", "-n", "4")
    assert [t["utc"] for t in data["times"]] == ["2027-03-28T00:30:00+00:00", "2027-03-28T01:30:00+00:00",
                                               "2027-03-28T02:30:00+00:00", "2027-03-28T03:30:00+00:00"]
    assert [t["local"][11:16] for t in data["times"]] == ["01:30", "03:30", "04:30", "05:30"]
    assert data["schedule"] == "every 1h" and data["cron"] is None
    data = cli.json("jobs", "preview", "--run-at", "2030-12-24T18:00", "--timezone", "Europe/Berlin",
                    "--after", "2030-01-01T00:00:00+00:00")
    assert data["times"] == [{"local": "2030-12-24T18:00:00+01:00", "utc": "2030-12-24T17:00:00+00:00"}]
    # a job: an interval from its start_at, a one-off, and the output in words
    add(cli, pg_dsn, "from-start", "--every", "15m", "--start-at", "2040-01-01T00:00:00+00:00")
    data = cli.json("jobs", "preview", "from-start", "-n", "3", "--dsn", pg_dsn)
    assert [t["utc"] for t in data["times"]] == ["2040-01-01T00:00:00+00:00", "2040-01-01T00:15:00+00:00",
                                               "2040-01-01T00:30:00+00:00"]
    add(cli, pg_dsn, "one-off", "--run-at", "2040-06-01T12:00:00+00:00")
    out = cli("jobs", "preview", "one-off", "--dsn", pg_dsn, expect=0).stdout
    assert "next 1 fire time(s)" in out and "2040-06-01 12:00:00 UTC" in out


@pytest.mark.parametrize("args, needle", [
    (["--every", "0s"], "every="),
    (["--every", "-5m"], "--every"),
    (["--every", "soon"], "every="),
    (["--every", "1h", "--cron", "* * * * *"], "not allowed with"),
    (["--run-at", "2030-01-01T00:00", "--every", "1h"], "not allowed with"),
    (["--run-at", "Christmas"], "--run-at"),
    ([], "one of the arguments --cron --every --run-at is required"),
])
def test_bad_schedules_exit_2_and_write_nothing(cli: Cli, pg_dsn: str, args: list[str], needle: str) -> None:
    result = cli("jobs", "add", "--name", "bad", "--driver", "shell", "--config", ECHO, *args, "--dsn", pg_dsn)
    assert_one_line_error(result, needle)
    assert cli.json("jobs", "list", "--all", "--dsn", pg_dsn) == []


def test_preview_errors_name_the_option(cli: Cli) -> None:
    assert_one_line_error(cli("jobs", "preview"), "--every")
    assert_one_line_error(cli("jobs", "preview", "--every", "0m"), "every=")
    assert_one_line_error(cli("jobs", "preview", "--every", "1m", "--run-at", "2030-01-01T00:00"), "not allowed")


def test_h_and_jitter_on_the_command_line(cli: Cli, pg_dsn: str) -> None:
    """jobs add/edit --jitter, and jobs preview showing the cron resolved for the job's name and
    the jitter's offset (issue 37 item 3)."""
    job = add(cli, pg_dsn, "nightly-report", "--cron", "H 2 * * *", "--timezone", "Europe/Berlin", "--jitter", "90s")
    assert (job["cron_expression"], job["jitter_seconds"]) == ("H 2 * * *", 90)
    data = cli.json("jobs", "preview", "nightly-report", "-n", "2", "--after", "2027-03-27T12:00:00+00:00",
                    "--dsn", pg_dsn)
    assert (data["resolved_cron"], data["jitter_seconds"], data["jitter_offset_seconds"]) == ("6 2 * * *", 90, 13)
    # 28 March 2027: 02:06 falls in the spring-forward gap, so 03:00 CEST, then the offset of 13 s
    assert [t["utc"] for t in data["times"]] == ["2027-03-28T01:00:13+00:00", "2027-03-29T00:06:13+00:00"]
    out = cli("jobs", "preview", "nightly-report", "--dsn", pg_dsn, expect=0).stdout
    assert "resolved for the name 'nightly-report': '6 2 * * *'" in out and "every tick 13s later" in out
    flags = cli.json("jobs", "preview", "--cron", "H/15 * * * *", "--name", "nightly-report",
                     "--after", "2030-01-01T00:00:00+00:00", "-n", "2")
    assert flags["resolved_cron"] == "6,21,36,51 * * * *" and flags["times"][0]["utc"] == "2030-01-01T00:06:00+00:00"
    assert cli.json("jobs", "edit", "nightly-report", "--clear-jitter", "--dsn", pg_dsn)["jitter_seconds"] is None


@pytest.mark.parametrize("args, needle", [
    (["--cron", "H(40-10) 2 * * *"], "minute field 'H(40-10)': range H(40-10) starts after it ends"),
    (["--cron", "0 0 H/40 * *"], "step 40 of 'h/40' is out of range 1-28"),
    (["--cron", "* * * * *", "--jitter", "2d"], "jitter='2d': must be at most one day"),
    (["--run-at", "2030-01-01T00:00", "--jitter", "1m"], "has no meaning for a run_at job"),
])
def test_bad_hashes_and_jitters_exit_2_and_write_nothing(cli: Cli, pg_dsn: str, args: list[str],
                                                         needle: str) -> None:
    result = cli("jobs", "add", "--name", "bad", "--driver", "shell", "--config", ECHO, *args, "--dsn", pg_dsn)
    assert_one_line_error(result, needle)
    assert cli.json("jobs", "list", "--all", "--dsn", pg_dsn) == []


def test_preview_of_h_without_a_name_says_so(cli: Cli) -> None:
    assert_one_line_error(cli("jobs", "preview", "--cron", "H 2 * * *"), "hashed from the job's name")
