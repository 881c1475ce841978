"""`mjsched jobs apply FILE.toml`: the declared jobs of a file, by name (engine.sync_jobs).

--dry-run prints each change (field: old -> new) and writes nothing; --remove-missing says
what becomes of jobs the file does not declare; --json everywhere; a bad file is one line,
exit 2, before any connection.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.conftest import Cli
from tests.cli.test_cli import UNREACHABLE, assert_one_line_error

FILE_V1 = """
[jobs.report]
driver = "shell"
cron = "0 2 * * *"
timezone = "Europe/Berlin"
configuration = { command = ["echo", "report"] }
description = "nightly report"

[jobs.cleanup]
driver = "shell"
cron = "0 3 * * *"
configuration = { command = ["echo", "cleanup"] }
start_at = 2030-01-01T00:00:00      # no offset: read in the job's timezone (UTC here)
"""

FILE_V2 = """
[jobs.report]
driver = "shell"
cron = "30 2 * * *"
timezone = "Europe/Berlin"
configuration = { command = ["echo", "report"] }
description = "nightly report"
"""


def write(tmp_path: Path, text: str, name: str = "jobs.toml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def jobs(cli: Cli, dsn: str) -> dict[str, dict]:
    return {j["name"]: j for j in cli.json("jobs", "list", "--all", "--dsn", dsn)}


def test_apply_creates_then_changes_only_what_the_file_changed(cli: Cli, pg_dsn: str, tmp_path: Path) -> None:
    v1 = write(tmp_path, FILE_V1)
    plan = cli.json("jobs", "apply", v1, "--dry-run", "--dsn", pg_dsn)
    assert (plan["dry_run"], plan["created"], plan["updated"], plan["removed"]) == \
        (True, ["report", "cleanup"], [], [])
    assert jobs(cli, pg_dsn) == {}                                      # the dry run wrote nothing
    done = cli.json("jobs", "apply", v1, "--dsn", pg_dsn)
    assert (done["dry_run"], done["created"]) == (False, ["report", "cleanup"])
    before = jobs(cli, pg_dsn)
    assert before["cleanup"]["start_at"].startswith("2030-01-01T00:00:00")
    assert before["report"]["description"] == "nightly report"
    again = cli.json("jobs", "apply", v1, "--dsn", pg_dsn)
    assert (again["created"], again["updated"], again["unchanged"]) == ([], [], ["report", "cleanup"])
    assert jobs(cli, pg_dsn) == before                                  # nothing rewritten

    v2 = write(tmp_path, FILE_V2, "v2.toml")
    text = cli("jobs", "apply", v2, "--dry-run", "--remove-missing", "pause", "--dsn", pg_dsn, expect=0).stdout
    assert "updated   report  (cron: '0 2 * * *' -> '30 2 * * *')" in text
    assert "paused    cleanup  (status: 'Active' -> 'Paused')" in text
    assert "1 would be updated" in text and "1 would be paused" in text and "nothing was written" in text
    assert jobs(cli, pg_dsn) == before
    done = cli.json("jobs", "apply", v2, "--remove-missing", "pause", "--dsn", pg_dsn)
    assert (done["updated"], done["removed"]) == (["report"], ["cleanup"])
    assert done["changes"]["report"] == {"cron": {"old": "0 2 * * *", "new": "30 2 * * *"}}
    after = jobs(cli, pg_dsn)
    assert after["report"]["id"] == before["report"]["id"] and after["report"]["cron_expression"] == "30 2 * * *"
    assert after["cleanup"]["status"] == "Paused" and after["cleanup"]["id"] == before["cleanup"]["id"]
    done = cli.json("jobs", "apply", v2, "--remove-missing", "delete", "--dsn", pg_dsn)
    assert done["removed"] == ["cleanup"] and set(jobs(cli, pg_dsn)) == {"report"}


@pytest.mark.parametrize("text, needles", [
    ("[jobs.report\n", ["is not valid TOML"]),
    ('[jobs.report]\ndriver = "shell"\ncron = "0 25 * * *"\nconfiguration = { command = ["true"] }\n',
     ["'report'", "cron="]),
    ('[jobs.report]\nname = "other"\ndriver = "shell"\ncron = "0 2 * * *"\n', ["jobs.report.name"]),
    ('colour = "red"\n', ["colour=", "[jobs.NAME]"]),
    ('[jobs.report]\ndriver = "shell"\nconfiguration = { command = ["true"] }\n', ["'report'", "cron="]),
    ('[jobs.report]\ndriver = "shell"\ncron = "0 2 * * *"\nconfiguration = { command = ["true"] }\n'
     'start_at = "soon"\n', ["jobs.report.start_at"]),
])
def test_a_bad_file_is_one_line_before_any_connection(cli: Cli, tmp_path: Path, text: str,
                                                      needles: list[str]) -> None:
    path = write(tmp_path, text)
    assert_one_line_error(cli("jobs", "apply", path, "--dsn", UNREACHABLE), *needles)


def test_a_missing_file_and_a_bad_choice(cli: Cli, tmp_path: Path) -> None:
    assert_one_line_error(cli("jobs", "apply", str(tmp_path / "nope.toml"), "--dsn", UNREACHABLE),
                          "nope.toml", "cannot be read")
    path = write(tmp_path, FILE_V2)
    result = cli("jobs", "apply", path, "--remove-missing", "purge", "--dsn", UNREACHABLE)
    assert result.returncode == 2 and "invalid choice: 'purge'" in result.stderr


def test_help_lists_apply(cli: Cli) -> None:
    assert "apply" in cli("jobs", "--help", expect=0).stdout
    text = cli("jobs", "apply", "--help", expect=0).stdout
    assert "--dry-run" in text and "--remove-missing" in text


def test_apply_declares_h_and_jitter(cli: Cli, pg_dsn: str, tmp_path: Path) -> None:
    """A [jobs.NAME] table takes cron = "H 2 * * *" and jitter = "90s" (issue 37 item 3)."""
    text = FILE_V2.replace('cron = "30 2 * * *"', 'cron = "H 2 * * *"\njitter = "90s"')
    assert cli.json("jobs", "apply", write(tmp_path, text), "--dsn", pg_dsn)["created"] == ["report"]
    job = jobs(cli, pg_dsn)["report"]
    assert (job["cron_expression"], job["jitter_seconds"]) == ("H 2 * * *", 90)
    again = cli.json("jobs", "apply", write(tmp_path, text), "--dsn", pg_dsn)
    assert again["unchanged"] == ["report"]
    plan = cli.json("jobs", "apply", write(tmp_path, FILE_V2.replace('cron = "30 2 * * *"', 'cron = "H 2 * * *"')),
                    "--dry-run", "--dsn", pg_dsn)
    assert plan["updated"] == ["report"]                  # the jitter the file no longer gives goes


@pytest.mark.parametrize("text, where", [
    ('[jobs.report]\ndriver = "shell"\ncron = "0 2 * * *\n', "line 3, column 18"),
    ('[jobs.report]\ndriver = \n', "line 2, column 10"),
    ('[jobs.report]\ndriver = "shell"\nconfiguration = { command = ["true"]', "line 3, column 37"),   # at the end
])
def test_a_toml_error_names_the_file_line_and_column(cli: Cli, tmp_path: Path, text: str, where: str) -> None:
    """Issue 35 item 10: the line said 'FILE=...: is not valid TOML' or named no file at all."""
    path = write(tmp_path, text)
    result = cli("jobs", "apply", path, "--dsn", UNREACHABLE)
    assert_one_line_error(result, f"mjsched: error: {path} is not valid TOML: {where}: ")


def test_a_bad_job_names_the_file_that_declares_it(cli: Cli, tmp_path: Path) -> None:
    path = write(tmp_path, '[jobs.report]\ndriver = "shell"\ncron = "0 25 * * *"\n'
                           'configuration = { command = ["true"] }\n')
    assert_one_line_error(cli("jobs", "apply", path, "--dsn", UNREACHABLE),
                          f"mjsched: error: {path}: job 'report': cron='0 25 * * *'")
