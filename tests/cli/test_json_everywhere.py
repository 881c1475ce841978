"""--json on every command that prints data (an object or a list), JSON lines from the
long-running commands' logs, and a clear refusal where a command has no JSON form (demo)."""
from __future__ import annotations

import json
import signal
import threading

from tests.cli.conftest import Cli, stop
from tests.cli.test_cli import ECHO, add_job, assert_one_line_error


def test_every_data_command_prints_json(cli: Cli, pg_dsn: str) -> None:
    add_job(cli, pg_dsn, "j1", "0 3 * * *", ECHO)
    commands = [["init-db"], ["jobs", "list"], ["jobs", "show", "j1"], ["jobs", "preview", "j1"],
                ["jobs", "edit", "j1", "--description", "d"], ["jobs", "pause", "j1"], ["jobs", "resume", "j1"],
                ["execute", "j1"], ["runs"], ["status"], ["config"], ["jobs", "unlock", "j1"], ["jobs", "why", "j1"],
                ["jobs", "delete", "j1"]]
    for command in commands:
        out = cli(*command, "--dsn", pg_dsn, "--json", expect=0).stdout
        assert isinstance(json.loads(out), (dict, list)), (command, out)


def test_run_with_json_logs_json_lines(cli: Cli, pg_dsn: str) -> None:
    add_job(cli, pg_dsn, "every-second", "* * * * * *", ECHO)
    proc = cli.spawn("run", "--dsn", pg_dsn, "--json", "--max-poll-interval", "0.5")
    deadline = threading.Timer(30, proc.kill)      # bounded: a missing line ends the read, not the suite
    deadline.start()
    try:
        assert proc.stderr is not None
        records = []
        for line in proc.stderr:
            records.append(json.loads(line))         # every line is one JSON object
            if any(r.get("action") == "run_finished" for r in records):
                break
    finally:
        deadline.cancel()
        code, _out, err = stop(proc, signal.SIGTERM)
    assert code == 0, err
    finished = next(r for r in records if r.get("action") == "run_finished")
    assert {"ts", "level", "logger", "message"} <= set(finished) and finished["status"] == "Completed"
    for line in err.splitlines():
        json.loads(line)


def test_demo_has_no_json_and_says_so(cli: Cli) -> None:
    assert_one_line_error(cli("demo", "--json"), "runs --json")
