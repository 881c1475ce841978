"""Every ``mjsched`` command and its error paths, as a user runs them: a subprocess on a real database."""
from __future__ import annotations

import json
import signal
import socket
import time
import uuid
from pathlib import Path

import pytest

from tests.cli.conftest import Cli, clean_env, stop, wait_until

pytestmark = pytest.mark.postgres

UNREACHABLE = "postgresql://postgres@127.0.0.1:1/x"
ECHO = json.dumps({"command": ["echo", "hello"]})


def assert_one_line_error(result, *needles: str, code: int = 2) -> None:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("mjsched: error: ") or ": error: " in lines[0], lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]


def add_job(cli: Cli, dsn: str, name: str = "hello", cron: str = "0 3 * * *", config: str = ECHO,
            *extra: str) -> dict:
    return cli.json("jobs", "add", "--dsn", dsn, "--name", name, "--driver", "shell", "--cron", cron,
                    "--config", config, *extra)


# -- help and usage -------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", [[], ["init-db"], ["run"], ["jobs"], ["jobs", "add"], ["jobs", "list"],
                                     ["jobs", "show"], ["jobs", "pause"], ["jobs", "resume"], ["jobs", "remove"],
                                     ["jobs", "preview"], ["execute"], ["runs"], ["status"], ["demo"], ["config"]])
def test_help_everywhere(cli: Cli, command: list[str]) -> None:
    result = cli(*command, "--help", expect=0)
    assert result.stdout.startswith("usage: mjsched")
    assert "--json" in result.stdout


def test_no_command_is_a_usage_error(cli: Cli) -> None:
    result = cli()
    assert result.returncode == 2
    assert "usage: mjsched" in result.stderr


def test_argparse_errors_are_one_line_exit_2(cli: Cli) -> None:
    result = cli("jobs", "add", "--name", "x")
    assert_one_line_error(result, "--driver")
    assert_one_line_error(cli("jobs", "add", "--name", "x", "--driver", "shell"), "--cron", "--every", "--run-at")
    assert_one_line_error(cli("bogus"), "invalid choice")
    assert_one_line_error(cli("runs", "--limit", "many"), "--limit")


def test_version(cli: Cli) -> None:
    assert cli("--version", expect=0).stdout.startswith("mjsched ")


# -- init-db --------------------------------------------------------------------------------------------
def test_init_db_installs_then_is_idempotent(cli: Cli, empty_pg_dsn: str) -> None:
    first = cli.json("--dsn", empty_pg_dsn, "init-db")
    assert "002_procedures" in first["applied"]
    again = cli("init-db", "--dsn", empty_pg_dsn, expect=0)
    assert "up to date" in again.stdout


def test_commands_before_init_db_say_so(cli: Cli, empty_pg_dsn: str) -> None:
    assert_one_line_error(cli("jobs", "list", "--dsn", empty_pg_dsn), "mjsched init-db")


# -- jobs ------------------------------------------------------------------------------------------------
def test_jobs_add_list_show_pause_resume_remove(cli: Cli, pg_dsn: str) -> None:
    job = add_job(cli, pg_dsn, "nightly", "0 2 * * *", ECHO, "--timezone", "Europe/Berlin",
                  "--concurrency-mode", "queue", "--max-runtime", "60", "--notify-on-success")
    assert job["name"] == "nightly" and job["timezone"] == "Europe/Berlin"
    assert job["concurrency_mode"] == "Queue" and job["max_runtime_seconds"] == 60
    assert job["notify_on_success"] is True and job["status"] == "Active" and job["next_run_at"]

    listed = cli.json("jobs", "list", "--dsn", pg_dsn)
    assert [j["id"] for j in listed] == [job["id"]]
    table = cli("jobs", "list", "--dsn", pg_dsn, expect=0).stdout
    assert "nightly" in table and "0 2 * * * (Europe/Berlin)" in table

    shown = cli.json("jobs", "show", job["id"], "--dsn", pg_dsn)
    assert shown["configuration"] == {"command": ["echo", "hello"]}
    assert "cron_expression" in cli("jobs", "show", "nightly", "--dsn", pg_dsn, expect=0).stdout
    assert cli.json("jobs", "show", job["id"][:8], "--dsn", pg_dsn)["id"] == job["id"]   # id prefix

    assert cli.json("jobs", "pause", "nightly", "--dsn", pg_dsn)["status"] == "Paused"
    assert cli.json("jobs", "list", "--status", "Paused", "--dsn", pg_dsn)[0]["id"] == job["id"]
    resumed = cli.json("jobs", "resume", job["id"], "--dsn", pg_dsn)
    assert resumed["status"] == "Active" and resumed["next_run_at"]

    removed = cli.json("jobs", "remove", job["id"], "--dsn", pg_dsn)
    assert removed["removed"] == job["id"]
    assert cli.json("jobs", "list", "--dsn", pg_dsn) == []
    assert "no jobs" in cli("jobs", "list", "--dsn", pg_dsn, expect=0).stdout


def test_disabled_jobs_hidden_unless_asked(cli: Cli, pg_dsn: str) -> None:
    add_job(cli, pg_dsn, "on")
    off = add_job(cli, pg_dsn, "off", "0 3 * * *", ECHO, "--status", "Disabled")
    assert [j["name"] for j in cli.json("jobs", "list", "--dsn", pg_dsn)] == ["on"]
    assert {j["name"] for j in cli.json("jobs", "list", "--all", "--dsn", pg_dsn)} == {"on", "off"}
    assert [j["id"] for j in cli.json("jobs", "list", "--status", "Disabled", "--dsn", pg_dsn)] == [off["id"]]


def test_jobs_add_window_and_config_file(cli: Cli, pg_dsn: str, tmp_path: Path) -> None:
    conf = tmp_path / "job.json"
    conf.write_text(ECHO)
    job = add_job(cli, pg_dsn, "windowed", "0 9 * * *", f"@{conf}", "--timezone", "Europe/Berlin",
                  "--start-at", "2040-01-01T00:00:00", "--end-at", "2040-02-01T00:00:00+00:00")
    assert job["start_at"].startswith("2039-12-31T23:00:00")      # no offset: read in the job's zone
    assert job["next_run_at"].startswith("2040-01-01T08:00:00")
    assert job["configuration"] == {"command": ["echo", "hello"]}


@pytest.mark.parametrize("args, needles", [
    (["--cron", "61 * * * *"], ["cron="]),
    (["--cron", "not a cron"], ["cron="]),
    (["--timezone", "Mars/Olympus"], ["timezone=", "Mars/Olympus"]),
    (["--driver", "nope"], ["driver=", "nope"]),
    (["--config", "{not json"], ["--config", "not valid JSON"]),
    (["--config", "[1, 2]"], ["--config", "JSON object"]),
    (["--config", "{}"], ["command"]),
    (["--concurrency-mode", "Sometimes"], ["concurrency_mode=", "Sometimes"]),
    (["--status", "Sleeping"], ["status="]),
    (["--max-runtime", "-5"], ["max_runtime="]),
    (["--start-at", "tomorrow"], ["--start-at", "ISO 8601"]),
    (["--start-at", "2040-02-01T00:00:00+00:00", "--end-at", "2040-01-01T00:00:00+00:00"], ["end_at="]),
])
def test_jobs_add_rejects_bad_input_before_writing(cli: Cli, pg_dsn: str, args: list[str],
                                                   needles: list[str]) -> None:
    base = {"--name": "bad", "--driver": "shell", "--cron": "0 3 * * *", "--config": ECHO}
    for i in range(0, len(args), 2):
        base[args[i]] = args[i + 1]
    flat = [x for kv in base.items() for x in kv]
    assert_one_line_error(cli("jobs", "add", "--dsn", pg_dsn, *flat), *needles)
    assert cli.json("jobs", "list", "--all", "--dsn", pg_dsn) == []
    # Input errors are caught before any connection: even an unreachable database gives the same answer.
    assert_one_line_error(cli("jobs", "add", "--dsn", UNREACHABLE, *flat), *needles)


@pytest.mark.parametrize("command", [["jobs", "show"], ["jobs", "pause"], ["jobs", "resume"], ["jobs", "remove"],
                                     ["jobs", "preview"], ["execute"]])
def test_unknown_job_is_exit_2(cli: Cli, pg_dsn: str, command: list[str]) -> None:
    missing = str(uuid.uuid4())
    assert_one_line_error(cli(*command, missing, "--dsn", pg_dsn), missing, "no such job")
    assert_one_line_error(cli(*command, "no-such-name", "--dsn", pg_dsn), "no-such-name", "no such job")


def test_runs_unknown_job_and_bad_status(cli: Cli, pg_dsn: str) -> None:
    assert_one_line_error(cli("runs", "--job", "ghost", "--dsn", pg_dsn), "ghost")
    assert_one_line_error(cli("runs", "--status", "Sleeping", "--dsn", pg_dsn), "status=")
    assert_one_line_error(cli("runs", "--limit", "0", "--dsn", pg_dsn), "limit=")


def test_a_taken_name_is_refused(cli: Cli, pg_dsn: str) -> None:
    """Job names are unique (005_job_names): a second `jobs add` of a name is exit 2, naming it
    and the job that has it, and the first job is the one `jobs show NAME` shows."""
    first = add_job(cli, pg_dsn, "twin")
    result = cli("jobs", "add", "--dsn", pg_dsn, "--name", "twin", "--driver", "shell", "--cron", "0 4 * * *",
                 "--config", ECHO)
    assert_one_line_error(result, "name='twin'", "already has this name", first["id"])
    assert [j["id"] for j in cli.json("jobs", "list", "--all", "--dsn", pg_dsn)] == [first["id"]]
    assert cli.json("jobs", "show", "twin", "--dsn", pg_dsn)["id"] == first["id"]


# -- database errors ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", [["init-db"], ["jobs", "list"], ["runs"], ["status"], ["execute", "x"],
                                     ["run"]])
def test_unreachable_dsn_is_one_line_exit_2(cli: Cli, command: list[str]) -> None:
    started = time.monotonic()
    result = cli(*command, "--dsn", UNREACHABLE, timeout=90)
    if command == ["run"]:
        # a daemon logs its retries; the error itself is still the one last line
        assert result.returncode == 2 and "Traceback" not in result.stderr
        last = result.stderr.strip().splitlines()[-1]
        assert last.startswith("mjsched: error: ") and "127.0.0.1:1" in last
    else:
        assert_one_line_error(result, "127.0.0.1:1")
        assert time.monotonic() - started < 30


def test_passwords_are_never_printed(cli: Cli) -> None:
    result = cli("jobs", "list", "--dsn", "postgresql://app:s3cr3t-pw@127.0.0.1:1/x")
    assert_one_line_error(result)
    assert "s3cr3t-pw" not in result.stderr + result.stdout
    result = cli("status", "--dsn", "ftp://app:s3cr3t-pw@host/x")
    assert_one_line_error(result, "--dsn")
    assert "s3cr3t-pw" not in result.stderr + result.stdout


def test_dsn_from_environment(cli: Cli, pg_dsn: str) -> None:
    add_job(cli, pg_dsn, "from-env")
    env = clean_env(MJSCHED_DSN=pg_dsn)
    assert [j["name"] for j in cli.json("jobs", "list", env=env)] == ["from-env"]
    # a flag wins over the environment
    assert_one_line_error(cli("jobs", "list", "--dsn", UNREACHABLE, env=env), "127.0.0.1:1")


# -- preview -----------------------------------------------------------------------------------------------
def test_preview_cron_shows_zone_and_utc_across_dst(cli: Cli) -> None:
    # 2030-03-31: Europe/Berlin springs forward at 02:00; a 02:30 job runs at the first valid instant, 03:00.
    args = ["jobs", "preview", "--cron", "30 2 * * *", "--timezone", "Europe/Berlin",
            "--after", "2030-03-30T12:00:00+00:00", "-n", "2"]
    out = cli(*args, expect=0).stdout
    assert "Europe/Berlin" in out and "UTC" in out
    assert "2030-03-31 03:00:00 CEST (+0200)" in out and "2030-03-31 01:00:00 UTC" in out
    assert "2030-04-01 02:30:00 CEST (+0200)" in out and "2030-04-01 00:30:00 UTC" in out
    data = cli.json(*args)
    assert data["timezone"] == "Europe/Berlin"
    assert data["times"][0] == {"local": "2030-03-31T03:00:00+02:00", "utc": "2030-03-31T01:00:00+00:00"}


def test_preview_job_uses_its_zone_and_window(cli: Cli, pg_dsn: str) -> None:
    job = add_job(cli, pg_dsn, "tokyo", "0 9 * * *", ECHO, "--timezone", "Asia/Tokyo",
                  "--start-at", "2040-01-01T00:00:00+09:00", "--end-at", "2040-01-03T00:00:00+09:00")
    data = cli.json("jobs", "preview", "tokyo", "-n", "5", "--dsn", pg_dsn)
    assert data["job"] == job["id"] and data["timezone"] == "Asia/Tokyo"
    assert [t["utc"] for t in data["times"]] == ["2040-01-01T00:00:00+00:00", "2040-01-02T00:00:00+00:00"]
    out = cli("jobs", "preview", job["id"], "--dsn", pg_dsn, expect=0).stdout
    assert "2040-01-01 09:00:00 JST (+0900)" in out and "2040-01-01 00:00:00 UTC" in out


def test_preview_errors(cli: Cli) -> None:
    assert_one_line_error(cli("jobs", "preview"), "--cron")
    assert_one_line_error(cli("jobs", "preview", "--cron", "* * *"), "cron=")
    assert_one_line_error(cli("jobs", "preview", "--cron", "* * * * *", "-n", "0"), "count=")
    assert_one_line_error(cli("jobs", "preview", "--cron", "* * * * *", "--timezone", "Nowhere/City"), "timezone=")


# -- execute and runs ------------------------------------------------------------------------------------------
def test_execute_success_and_failure(cli: Cli, pg_dsn: str) -> None:
    add_job(cli, pg_dsn, "ok-job", "0 3 * * *", json.dumps({"command": ["echo", "out-of-the-job"]}))
    add_job(cli, pg_dsn, "bad-job", "0 3 * * *", json.dumps({"command": "echo broken >&2; exit 3"}))
    ok = cli("execute", "ok-job", "--dsn", pg_dsn, expect=0)
    assert "Completed" in ok.stdout and "out-of-the-job" in ok.stdout
    bad = cli("execute", "bad-job", "--dsn", pg_dsn, expect=1)
    assert "Failed" in bad.stdout and "broken" in bad.stdout
    assert "Traceback" not in bad.stderr
    run = json.loads(cli("execute", "bad-job", "--json", "--dsn", pg_dsn, expect=1).stdout)
    assert run["status"] == "Failed" and run["scheduled_for"] is None

    runs = cli.json("runs", "--dsn", pg_dsn)
    assert [r["status"] for r in runs] == ["Failed", "Failed", "Completed"]
    assert len(cli.json("runs", "--job", "ok-job", "--dsn", pg_dsn)) == 1
    assert len(cli.json("runs", "--status", "Failed", "--dsn", pg_dsn)) == 2
    assert len(cli.json("runs", "--limit", "1", "--dsn", pg_dsn)) == 1
    table = cli("runs", "--dsn", pg_dsn, expect=0).stdout
    assert "bad-job" in table and "manual" in table and "exit" in table.lower()


def test_runs_empty(cli: Cli, pg_dsn: str) -> None:
    assert cli.json("runs", "--dsn", pg_dsn) == []
    assert "no runs" in cli("runs", "--dsn", pg_dsn, expect=0).stdout


# -- run and status ---------------------------------------------------------------------------------------------
def test_run_polls_until_sigterm_then_exits_0(cli: Cli, pg_dsn: str, processes: list) -> None:
    add_job(cli, pg_dsn, "every-second", "* * * * * *", json.dumps({"command": ["true"]}))
    proc = cli.spawn("run", "--dsn", pg_dsn, "--lease", "30", "--instance-name", "cli-test-engine")
    processes.append(proc)
    wait_until(lambda: len(cli.json("runs", "--status", "Completed", "--dsn", pg_dsn)) >= 2, timeout=30,
               message="two completed runs")
    status = cli.json("status", "--dsn", pg_dsn)
    engines = {e["instance"]: e for e in status["engines"]}
    assert engines["cli-test-engine"]["pid"] == proc.pid
    assert status["counts"]["active_jobs"] == 1
    table = cli("status", "--dsn", pg_dsn, expect=0).stdout
    assert "cli-test-engine" in table and "LAST SEEN" in table and "due now" in table

    code, _out, err = stop(proc, signal.SIGTERM)
    assert code == 0, err
    assert "received SIGTERM" in err and "polling stopped" in err
    assert "Traceback" not in err
    assert cli.json("status", "--dsn", pg_dsn)["engines"] == []     # it unregistered
    assert cli.json("runs", "--status", "Running", "--dsn", pg_dsn) == []


def test_run_sigint_and_bounded_drain(cli: Cli, pg_dsn: str, processes: list) -> None:
    add_job(cli, pg_dsn, "sleeper", "* * * * * *", json.dumps({"command": ["sleep", "60"]}))
    proc = cli.spawn("run", "--dsn", pg_dsn, "--shutdown-timeout", "1", "--lease", "30")
    processes.append(proc)
    wait_until(lambda: cli.json("runs", "--status", "Running", "--dsn", pg_dsn), timeout=30,
               message="a running run")
    started = time.monotonic()
    code, _out, err = stop(proc, signal.SIGINT, timeout=30)
    assert code == 0, err
    assert time.monotonic() - started < 15
    assert "received SIGINT" in err


def test_run_disabled_by_configuration(cli: Cli, pg_dsn: str) -> None:
    result = cli("run", "--dsn", pg_dsn, env=clean_env(MJSCHED_ENABLED="false"), timeout=30, expect=0)
    assert "disabled" in result.stderr and "MJSCHED_ENABLED" in result.stderr


def test_run_rejects_bad_settings(cli: Cli, pg_dsn: str) -> None:
    assert_one_line_error(cli("run", "--dsn", pg_dsn, "--max-concurrent-jobs", "0"), "--max-concurrent-jobs")
    assert_one_line_error(cli("run", "--dsn", pg_dsn, "--lease", "-1"), "--lease")
    assert_one_line_error(cli("run", "--dsn", pg_dsn, env=clean_env(MJSCHED_MAX_POLL_INTERVAL="soon")),
                          "MJSCHED_MAX_POLL_INTERVAL")


def test_status_on_an_idle_database(cli: Cli, pg_dsn: str) -> None:
    status = cli.json("status", "--dsn", pg_dsn)
    assert status["engines"] == []
    for key in ("due", "running", "queued", "failing", "abandoned_24h"):
        assert status["counts"][key] == 0
    assert "none running" in cli("status", "--dsn", pg_dsn, expect=0).stdout


def test_status_counts_failing_jobs(cli: Cli, pg_dsn: str) -> None:
    add_job(cli, pg_dsn, "bad-job", "0 3 * * *", json.dumps({"command": ["false"]}))
    cli("execute", "bad-job", "--dsn", pg_dsn, expect=1)
    assert cli.json("status", "--dsn", pg_dsn)["counts"]["failing"] == 1


# -- configuration ---------------------------------------------------------------------------------------------
def test_config_file_and_precedence(cli: Cli, pg_dsn: str, tmp_path: Path) -> None:
    (tmp_path / "mjsched.toml").write_text(
        f'[scheduled_jobs]\ndsn = "{pg_dsn}"\nmax_concurrent_jobs = 3\nlease_timeout = 120\n'
        'max_poll_interval = 4\n')
    cfg = {r["key"]: r for r in cli.json("config", env=clean_env(MJSCHED_MAX_CONCURRENT_JOBS="7"))["settings"]}
    assert cfg["max_concurrent_jobs"]["value"] == 7 and cfg["max_concurrent_jobs"]["source"] == \
        "MJSCHED_MAX_CONCURRENT_JOBS"
    assert cfg["lease_timeout"]["value"] == 120 and "mjsched.toml" in cfg["lease_timeout"]["source"]
    assert cfg["shutdown_timeout"]["source"] == "default"
    assert cfg["dsn"]["value"] == pg_dsn and "mjsched.toml" in cfg["dsn"]["source"]
    # ./mjsched.toml supplies the DSN: no --dsn needed
    assert cli.json("jobs", "list") == []


def test_bad_config_file_names_the_key(cli: Cli, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[scheduled_jobs]\nmax_concurent_jobs = 3\n")
    assert_one_line_error(cli("--config", str(bad), "config"), "max_concurent_jobs", "max_concurrent_jobs")
    bad.write_text("[scheduled_jobs]\nmax_concurrent_jobs = 'many'\n")
    assert_one_line_error(cli("--config", str(bad), "config"), "scheduled_jobs.max_concurrent_jobs", "bad.toml")
    bad.write_text("[scheduled_jobs\n")
    assert_one_line_error(cli("--config", str(bad), "config"), "not valid TOML")
    assert_one_line_error(cli("--config", str(tmp_path / "missing.toml"), "config"), "no such file")


def test_config_hides_secrets(cli: Cli, tmp_path: Path) -> None:
    conf = tmp_path / "c.toml"
    conf.write_text('[scheduled_jobs]\ndsn = "postgresql://app:hunter22@db/app"\n'
                    '[scheduled_jobs.smtp]\nhost = "smtp"\nsender = "a@b.c"\npassword = "hunter33"\nusername = "u"\n')
    out = cli("--config", str(conf), "config", expect=0).stdout
    assert "hunter22" not in out and "hunter33" not in out and "***" in out


# -- demo ---------------------------------------------------------------------------------------------------
def test_demo_for_a_duration(cli: Cli, pg_dsn: str) -> None:
    result = cli("demo", "--duration", "6", "--dsn", pg_dsn, timeout=90, expect=0)
    assert "demo finished after" in result.stdout and "Traceback" not in result.stderr
    assert "demo-shell" in result.stdout and "Completed" in result.stdout
    jobs = {j["name"]: j for j in cli.json("jobs", "list", "--dsn", pg_dsn)}
    assert {"demo-shell", "demo-python", "demo-failing"} <= set(jobs)
    assert all(j["status"] == "Paused" for j in jobs.values())          # they do not fire after the demo
    assert cli.json("runs", "--job", "demo-shell", "--status", "Completed", "--dsn", pg_dsn)
    # a second demo reuses its jobs by name
    cli("demo", "--duration", "1", "--dsn", pg_dsn, timeout=90, expect=0)
    assert len(cli.json("jobs", "list", "--dsn", pg_dsn)) == 3


def test_demo_until_sigint(cli: Cli, pg_dsn: str, processes: list) -> None:
    proc = cli.spawn("demo", "--dsn", pg_dsn)
    processes.append(proc)
    wait_until(lambda: cli.json("runs", "--dsn", pg_dsn), timeout=30, message="a demo run")
    code, out, err = stop(proc, signal.SIGINT)
    assert code == 0, err
    assert "demo finished after" in out and "Traceback" not in err


def test_demo_rejects_a_bad_duration(cli: Cli, pg_dsn: str) -> None:
    assert_one_line_error(cli("demo", "--duration", "0", "--dsn", pg_dsn), "--duration")


def test_a_server_that_is_not_there_is_one_line_saying_cannot_connect(cli: Cli) -> None:
    """Issue 35 item 10: the line began with an internal routine ("column_privileges failed on ...")."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    for args in (("jobs", "list"), ("status",)):
        result = cli(*args, "--dsn", dsn, expect=2)
        assert result.stderr == f"mjsched: error: cannot connect to 127.0.0.1:{port}: Connection refused\n", args
