"""`mjsched status` tells live, stale and dead engines apart within a few polls, not a lease,
and flags Running runs whose engine is not live (issue 15, Status)."""
from __future__ import annotations

import re
import socket
import subprocess
import sys
from datetime import timedelta
from typing import Any, Callable

from mjsched.liveness import DEAD, LIVE, STALE, STOPPED, engine_state, stale_after
from tests.cli.conftest import Cli
from tests.support.pg import wait_for


def _gone_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=30)
    return proc.pid


def test_every_poll_is_a_heartbeat(make_engine: Callable[..., Any], sql: Any) -> None:
    engine = make_engine(max_poll_interval=0.5, lease_timeout=600.0, max_concurrent_jobs=7)
    engine.start_polling()
    row = wait_for(lambda: sql.rows("SELECT * FROM mjsched.engine_instance"), message="the engine to register")[0]
    assert (row["heartbeat_seconds"], row["max_concurrent_jobs"]) == (0.5, 7)
    first = row["last_seen_at"]
    # idle, no run to renew, lease 600 s: only the polls can move it
    wait_for(lambda: sql.one("SELECT last_seen_at FROM mjsched.engine_instance") >= first + timedelta(seconds=1),
             timeout=10, message="a later poll to refresh last_seen_at")


def test_status_tells_live_stale_dead_and_flags_orphaned_runs(cli: Cli, pg_dsn: str, sql: Any,
                                                              make_engine: Callable[..., Any]) -> None:
    live = make_engine(instance_name="live-engine", max_poll_interval=0.5, max_concurrent_jobs=3)
    live.start_polling()
    wait_for(lambda: sql.one("SELECT count(*) FROM mjsched.engine_instance"), message="the engine to register")
    here = socket.gethostname()
    sql.run("""INSERT INTO mjsched.engine_instance (instance, host, pid, version, last_seen_at, heartbeat_seconds)
               VALUES ('quiet-engine', 'elsewhere', 4242, '1', now() - interval '20 seconds', 2),
                      ('dead-engine', %s, %s, '1', now(), 2)""", (here, _gone_pid()))
    job = cli.json("jobs", "add", "--dsn", pg_dsn, "--name", "held", "--driver", "shell", "--cron", "0 3 * * *",
                   "--config", '{"command": ["true"]}')
    sql.run("""INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, status, started_at, executed_by_instance,
                                                      lock_token, lease_expires_at)
               VALUES (%s, 'Running', now(), 'quiet-engine', gen_random_uuid(), now() + interval '10 minutes')""",
            (job["id"],))
    status = cli.json("status", "--dsn", pg_dsn)
    states = {e["instance"]: e["state"] for e in status["engines"]}
    assert states == {"live-engine": "live", "quiet-engine": "stale", "dead-engine": "dead"}
    assert [e["max_concurrent_jobs"] for e in status["engines"] if e["instance"] == "live-engine"] == [3]
    assert status["counts"]["orphaned_running"] == 1
    assert status["orphaned_running_by_instance"] == {"quiet-engine": 1}
    text = cli("status", "--dsn", pg_dsn, expect=0).stdout
    assert "1 live of 3 registered" in text and "orphaned: 1 Running run(s)" in text and "quiet-engine (1)" in text


def test_the_liveness_rule() -> None:
    row = {"host": "elsewhere", "pid": 1, "stopped_at": None, "heartbeat_seconds": 2.0}
    assert stale_after(2.0, 600) == 6.0 and stale_after(0.5, 600) == 5.0 and stale_after(None, 600) == 600
    assert engine_state({**row, "silent_for": timedelta(seconds=5.9)}, lease_seconds=600) == LIVE
    assert engine_state({**row, "silent_for": timedelta(seconds=6.1)}, lease_seconds=600) == STALE
    assert engine_state({**row, "heartbeat_seconds": None, "silent_for": 599}, lease_seconds=600) == LIVE
    assert engine_state({**row, "stopped_at": "x", "silent_for": 0}, lease_seconds=600) == STOPPED
    here = {**row, "host": "this-host", "pid": _gone_pid(), "silent_for": 0}
    assert engine_state(here, lease_seconds=600, host="this-host") == DEAD
    assert engine_state({**here, "pid": 1}, lease_seconds=600, host="this-host") == LIVE   # pid 1 exists


def test_status_lists_open_alerts_and_jobs_add_edit_set_the_rules(cli: Cli, pg_dsn: str, sql: Any,
                                                                  make_engine: Callable[..., Any]) -> None:
    job = cli.json("jobs", "add", "--dsn", pg_dsn, "--name", "nightly-backup", "--driver", "shell", "--cron",
                   "0 2 * * *", "--config", '{"command": ["true"]}', "--alert-silent-after", "26h",
                   "--alert-failing-streak", "3", "--pause-after-failing-streak")
    bad = cli("jobs", "add", "--dsn", pg_dsn, "--name", "x", "--driver", "shell", "--cron", "0 2 * * *",
              "--config", '{"command": ["true"]}', "--alert-too-long", "soon")
    assert bad.returncode != 0 and "alert_too_long='soon'" in bad.stderr
    cli("jobs", "edit", job["id"], "--dsn", pg_dsn, "--alert-failing-streak", "off", "--no-pause-after-failing-streak",
        "--alert-late-start", "5m", expect=0)
    engine = make_engine(alert_interval=None)
    assert engine.job_alerts(job["id"]) == {"alert_late_start": 300, "alert_silent_after": 26 * 3600,
                                            "alert_too_long": None, "alert_failing_streak": None,
                                            "pause_after_failing_streak": None}
    sql.run("UPDATE mjsched.scheduled_job SET created_at = now() - interval '2 days' WHERE id = %s", (job["id"],))
    assert [a.kind for a in engine.parts.alerts.run_pass()] == ["silent"]
    status = cli.json("status", "--dsn", pg_dsn)
    assert status["counts"]["alerts_open"] == 1
    assert [(a["job_name"], a["kind"]) for a in status["open_alerts"]] == [("nightly-backup", "silent")]
    text = cli("status", "--dsn", pg_dsn, expect=0).stdout
    assert "open alerts: 1" in text and "silent 1d2h" in text and "no Completed run since" in text
    shown = cli("jobs", "show", job["id"], "--dsn", pg_dsn, expect=0).stdout
    assert re.search(r"alert_late_start +300", shown) and re.search(r"open_alerts +silent 1d2h", shown)
