"""Tags from the command line (issue 37): `jobs add/edit --tag`, `jobs list --tag`,
`jobs pause --tag T [--reason R] [--until TIME]`, `jobs resume --tag T`, `jobs apply --tag T`."""
from __future__ import annotations

from pathlib import Path

from tests.cli.conftest import Cli
from tests.cli.test_cli import ECHO, add_job, assert_one_line_error


def test_tags_are_set_listed_and_paused_by_tag(cli: Cli, pg_dsn: str) -> None:
    add_job(cli, pg_dsn, "bill", "0 3 * * *", ECHO, *("--tag", "billing", "--tag", "nightly"))
    add_job(cli, pg_dsn, "report", "0 3 * * *", ECHO, *("--tag", "reports"))
    assert cli.json("jobs", "show", "bill", "--dsn", pg_dsn)["tags"] == ["billing", "nightly"]
    assert [j["name"] for j in cli.json("jobs", "list", "--dsn", pg_dsn, "--tag", "nightly")] == ["bill"]
    listed = cli("jobs", "list", "--dsn", pg_dsn, expect=0).stdout
    assert "TAGS" in listed and "billing,nightly" in listed
    out = cli("jobs", "pause", "--tag", "billing", "--reason", "ledger migration", "--until", "2h",
              "--dsn", pg_dsn, expect=0).stdout
    assert "paused 1 job(s) tagged 'billing' until" in out
    bill = cli.json("jobs", "show", "bill", "--dsn", pg_dsn)
    assert (bill["status"], bill["pause_reason"]) == ("Paused", "ledger migration")
    assert bill["paused_by_user"] and "@" in bill["paused_by_user"] and bill["paused_until"]
    assert cli.json("jobs", "show", "report", "--dsn", pg_dsn)["status"] == "Active"
    assert cli.json("jobs", "resume", "--tag", "billing", "--dsn", pg_dsn) == {"tag": "billing", "resumed": 1}
    edited = cli.json("jobs", "edit", "bill", "--dsn", pg_dsn, "--tag", "eu")
    assert (edited["status"], edited["tags"]) == ("Active", ["eu"])
    assert cli.json("jobs", "edit", "bill", "--dsn", pg_dsn, "--clear-tags")["tags"] == []


def test_bad_tags_and_mixed_targets_are_one_line_errors(cli: Cli, pg_dsn: str) -> None:
    assert_one_line_error(cli("jobs", "add", "--dsn", pg_dsn, "--name", "x", "--driver", "shell", "--cron",
                              "0 3 * * *", "--config", '{"command": ["true"]}', "--tag", "Bad Tag"), "Bad Tag")
    add_job(cli, pg_dsn, "bill", "0 3 * * *", ECHO, *("--tag", "billing"))
    assert_one_line_error(cli("jobs", "pause", "bill", "--tag", "billing", "--dsn", pg_dsn), "one of them")
    assert_one_line_error(cli("jobs", "pause", "bill", "--reason", "x", "--dsn", pg_dsn), "--reason goes with --tag")
    assert_one_line_error(cli("jobs", "pause", "--tag", "billing", "--until", "yesterday", "--dsn", pg_dsn),
                          "until")
    assert cli.json("jobs", "show", "bill", "--dsn", pg_dsn)["status"] == "Active"


def test_apply_scoped_to_a_tag_leaves_other_teams_alone(cli: Cli, pg_dsn: str, tmp_path: Path) -> None:
    add_job(cli, pg_dsn, "other-team", "0 3 * * *")
    add_job(cli, pg_dsn, "old-ours", "0 3 * * *", ECHO, *("--tag", "team-a"))
    path = tmp_path / "jobs.toml"
    path.write_text('[jobs.new-ours]\ndriver = "shell"\ncron = "0 1 * * *"\ntags = ["nightly"]\n'
                    'configuration = { command = ["true"] }\n', encoding="utf-8")
    cli("jobs", "apply", str(path), "--tag", "team-a", "--remove-missing", "delete", "--dsn", pg_dsn, expect=0)
    names = sorted(j["name"] for j in cli.json("jobs", "list", "--dsn", pg_dsn))
    assert names == ["new-ours", "other-team"]
    assert cli.json("jobs", "show", "new-ours", "--dsn", pg_dsn)["tags"] == ["nightly", "team-a"]
