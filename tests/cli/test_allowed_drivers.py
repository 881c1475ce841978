"""allowed_drivers from the config file, the environment and `mjsched run --allowed-drivers`:
typed errors naming the value, and a host that refuses `shell` records a Failed run instead
of running the command (`mjsched execute` obeys it too)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mjsched import ConfigurationError
from mjsched.cli.config import load
from tests.cli.conftest import Cli, clean_env


def test_config_file_env_and_flag(tmp_path: Path) -> None:
    (tmp_path / "mjsched.toml").write_text('[scheduled_jobs]\nallowed_drivers = ["python", "http"]\n')
    s = load({}, env={}, cwd=tmp_path)
    assert s["allowed_drivers"] == ["http", "python"] and s.engine_options().allowed_drivers == frozenset({"http", "python"})
    assert load({}, env={"MJSCHED_ALLOWED_DRIVERS": "sql, shell"}, cwd=tmp_path)["allowed_drivers"] == ["shell", "sql"]
    flags = {"allowed_drivers": ("python", "--allowed-drivers")}
    assert load(flags, env={"MJSCHED_ALLOWED_DRIVERS": "sql"}, cwd=tmp_path)["allowed_drivers"] == ["python"]
    assert load({}, env={}, cwd=tmp_path / "none")["allowed_drivers"] is None      # default: every driver


@pytest.mark.parametrize("value, needle", [
    ('["python", "shel"]', "'shel'"),            # a typo names the value
    ('"python,nope"', "'nope'"),
    ('[]', "at least one driver"),
    ('[1]', "driver name"),
    ('5', "list of driver names"),
])
def test_bad_values_are_typed_errors_naming_the_key_and_value(tmp_path: Path, value: str, needle: str) -> None:
    (tmp_path / "mjsched.toml").write_text(f"[scheduled_jobs]\nallowed_drivers = {value}\n")
    with pytest.raises(ConfigurationError) as info:
        load({}, env={}, cwd=tmp_path)
    assert "scheduled_jobs.allowed_drivers" in str(info.value) and needle in str(info.value)


def test_run_flag_with_an_unknown_driver_is_exit_2(cli: Cli) -> None:
    result = cli("run", "--dsn", "postgresql://nobody@127.0.0.1:1/none", "--allowed-drivers", "python",
                 "--allowed-drivers", "shel")
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "--allowed-drivers" in result.stderr and "'shel'" in result.stderr and "Traceback" not in result.stderr


def test_execute_on_a_host_that_refuses_shell_records_a_failed_run(cli: Cli, pg_dsn: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    cli("jobs", "add", "--dsn", pg_dsn, "--name", "sh", "--driver", "shell", "--cron", "0 3 * * *",
        "--config", json.dumps({"command": ["touch", str(marker)]}), expect=0)
    env = clean_env(MJSCHED_ALLOWED_DRIVERS="python,http")
    run = json.loads(cli("execute", "sh", "--json", "--dsn", pg_dsn, env=env, expect=1).stdout)
    assert run["status"] == "Failed"
    assert run["error_message"] == "driver 'shell' is not allowed on this engine (allowed_drivers=http,python)"
    assert not marker.exists()
    cli("execute", "sh", "--dsn", pg_dsn, expect=0)                 # a host that allows it runs it
    assert marker.exists()
