"""A python job written from a shell that cannot import it: form checked at creation, refused
by `execute` before any run is recorded, runnable with --app-dir."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.cli.conftest import Cli
from tests.cli.test_cli import assert_one_line_error

MODULE = "mjsched_cli_app_mod"
CONFIG = json.dumps({"callable": f"{MODULE}:work", "kwargs": {"n": 2}})


def _app(tmp_path: Path) -> Path:
    folder = tmp_path / "app"
    folder.mkdir()
    (folder / f"{MODULE}.py").write_text("def work(n):\n    return {'doubled': n * 2}\n")
    return folder


def _add(cli: Cli, dsn: str, *extra: str, expect: int | None = None) -> subprocess.CompletedProcess[str]:
    return cli("jobs", "add", "--dsn", dsn, "--name", "app-job", "--driver", "python", "--cron", "0 3 * * *",
               "--config", CONFIG, *extra, expect=expect)


def test_creation_checks_the_form_without_importing(cli: Cli, pg_dsn: str, tmp_path: Path) -> None:
    _app(tmp_path)
    _add(cli, pg_dsn, expect=0)
    bad = cli("jobs", "add", "--dsn", pg_dsn, "--name", "malformed", "--driver", "python", "--cron", "0 3 * * *",
              "--config", json.dumps({"callable": "not a callable"}))
    assert_one_line_error(bad, "configuration.callable", "pkg.module:function")


def test_check_import_is_opt_in(cli: Cli, pg_dsn: str, tmp_path: Path) -> None:
    app = _app(tmp_path)
    assert_one_line_error(_add(cli, pg_dsn, "--check-import"), f"cannot import module {MODULE!r}", "--app-dir")
    assert cli.json("jobs", "list", "--dsn", pg_dsn) == []
    _add(cli, pg_dsn, "--check-import", "--app-dir", str(app), expect=0)


def test_execute_refuses_before_recording_a_run_then_runs_with_app_dir(cli: Cli, pg_dsn: str,
                                                                       tmp_path: Path) -> None:
    app = _app(tmp_path)
    _add(cli, pg_dsn, expect=0)
    refused = cli("execute", "app-job", "--dsn", pg_dsn)
    assert_one_line_error(refused, f"cannot import module {MODULE!r}", "PYTHONPATH", "--app-dir")
    assert cli.json("runs", "--dsn", pg_dsn) == []                      # nothing recorded, nothing notified
    job = cli.json("jobs", "show", "app-job", "--dsn", pg_dsn)
    assert (job["run_count"], job["failure_count"], job["locked_by_instance"]) == (0, 0, None)
    run = cli.json("execute", "app-job", "--dsn", pg_dsn, "--app-dir", str(app))
    assert run["status"] == "Completed" and run["details"] == {"doubled": 4}
