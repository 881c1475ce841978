"""`jobs edit` (change a job in place), `jobs delete` (the API's name for remove), `runs --follow`."""
from __future__ import annotations

import json
import queue
import signal
import threading
from typing import Any

from tests.cli.conftest import Cli
from tests.cli.test_cli import ECHO, add_job, assert_one_line_error


def test_edit_changes_the_schedule_and_keeps_id_and_history(cli: Cli, pg_dsn: str) -> None:
    job = add_job(cli, pg_dsn, "nightly", "0 3 * * *")
    cli("execute", "nightly", "--dsn", pg_dsn, expect=0)
    edited = cli.json("jobs", "edit", "nightly", "--dsn", pg_dsn, "--cron", "30 4 * * *",
                      "--timezone", "Europe/Berlin", "--max-runtime", "60")
    assert edited["id"] == job["id"]
    assert (edited["cron_expression"], edited["timezone"], edited["max_runtime_seconds"]) == \
        ("30 4 * * *", "Europe/Berlin", 60)
    assert edited["next_run_at"] != job["next_run_at"]
    assert len(cli.json("runs", "--dsn", pg_dsn, "--job", "nightly")) == 1   # history kept
    cleared = cli.json("jobs", "edit", "nightly", "--dsn", pg_dsn, "--clear-max-runtime", "--status", "Paused")
    assert cleared["max_runtime_seconds"] is None and cleared["status"] == "Paused"


def test_edit_refuses_bad_input_before_writing(cli: Cli, pg_dsn: str) -> None:
    add_job(cli, pg_dsn, "nightly", "0 3 * * *")
    assert_one_line_error(cli("jobs", "edit", "nightly", "--dsn", pg_dsn, "--cron", "61 * * * *"), "61 * * * *")
    assert_one_line_error(cli("jobs", "edit", "nightly", "--dsn", pg_dsn, "--timezone", "Mars/Olympus"),
                          "Mars/Olympus")
    assert_one_line_error(cli("jobs", "edit", "nightly", "--dsn", pg_dsn), "nothing to change")
    assert_one_line_error(cli("jobs", "edit", "nightly", "--dsn", pg_dsn, "--max-runtime", "5",
                              "--clear-max-runtime"), "contradict")
    assert cli.json("jobs", "show", "nightly", "--dsn", pg_dsn)["cron_expression"] == "0 3 * * *"


def test_delete_is_remove(cli: Cli, pg_dsn: str) -> None:
    add_job(cli, pg_dsn, "gone")
    assert cli.json("jobs", "delete", "gone", "--dsn", pg_dsn)["name"] == "gone"
    assert cli.json("jobs", "list", "--dsn", pg_dsn, "--all") == []


def test_runs_follow_prints_runs_as_they_happen_and_exits_0_on_interrupt(cli: Cli, pg_dsn: str) -> None:
    add_job(cli, pg_dsn, "tailed", "0 3 * * *", ECHO)
    tail = cli.spawn("runs", "--follow", "--json", "--interval", "0.1", "--dsn", pg_dsn)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in tail.stdout], daemon=True).start()  # type: ignore[union-attr]

    def next_run(timeout: float = 30.0) -> dict[str, Any]:
        return json.loads(lines.get(timeout=timeout))

    try:
        for _ in range(2):
            cli("execute", "tailed", "--dsn", pg_dsn, expect=0)
            seen = next_run()
            while seen["status"] != "Completed":   # a Running line may come first
                seen = next_run()
            assert seen["details"] is not None
        tail.send_signal(signal.SIGINT)
        assert tail.wait(timeout=15) == 0
    finally:
        if tail.poll() is None:
            tail.kill()
            tail.wait(timeout=10)
