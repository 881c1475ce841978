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


def test_tags_limit_and_list_show_limits_running_and_waiting(cli: Cli, pg_dsn: str) -> None:
    from tests.support.pg import Sql

    for name in ("r1", "r2"):
        add_job(cli, pg_dsn, name, "0 3 * * *", ECHO, *("--tag", "reports"))
    assert cli.json("tags", "limit", "reports", "0", "--dsn", pg_dsn) == {"tag": "reports", "max_running": 0}
    sql = Sql(pg_dsn)
    try:
        sql.run("UPDATE mjsched.scheduled_job SET next_run_at = now() - interval '1 minute'")
    finally:
        sql.close()
    (info,) = cli.json("tags", "list", "--dsn", pg_dsn)
    assert (info["tag"], info["jobs"], info["max_running"], info["running"], info["waiting"]) == \
        ("reports", 2, 0, 0, ["r1", "r2"])
    listed = cli("tags", "list", "--dsn", pg_dsn, expect=0).stdout
    assert "reports" in listed and "r1, r2" in listed
    jobs = cli.json("jobs", "list", "--dsn", pg_dsn)
    assert all(j["waiting_for_tag"] == "waiting for tag reports (0/0 running)" for j in jobs)
    assert "waiting for tag reports" in cli("jobs", "list", "--dsn", pg_dsn, expect=0).stdout
    assert cli.json("status", "--dsn", pg_dsn)["counts"]["waiting_for_tag"] == 2
    assert cli.json("tags", "limit", "reports", "none", "--dsn", pg_dsn)["max_running"] is None
    assert cli.json("tags", "list", "--dsn", pg_dsn)[0]["max_running"] is None
    assert_one_line_error(cli("tags", "limit", "reports", "lots", "--dsn", pg_dsn), "lots")
    assert_one_line_error(cli("tags", "limit", "Bad Tag", "1", "--dsn", pg_dsn), "Bad Tag")
