"""The Prometheus endpoint of `mjsched run --metrics-port` while an engine runs jobs."""
from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest

from tests.cli.conftest import REPO, Cli, clean_env, stop, wait_until

pytest.importorskip("prometheus_client")
pytestmark = pytest.mark.postgres


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return response.read().decode()
    except OSError:
        return ""


def value(text: str, name: str, labels: str = "") -> float:
    match = re.search(rf"^{re.escape(name)}{re.escape(labels)} ([0-9.e+-]+)$", text, re.M)
    return float(match.group(1)) if match else -1.0


def test_metrics_endpoint_while_running(cli: Cli, pg_dsn: str, processes: list) -> None:
    cli("jobs", "add", "--dsn", pg_dsn, "--name", "tick", "--driver", "shell", "--cron", "* * * * * *",
        "--config", json.dumps({"command": ["true"]}), expect=0)
    cli("jobs", "add", "--dsn", pg_dsn, "--name", "broken", "--driver", "shell", "--cron", "* * * * * *",
        "--config", json.dumps({"command": ["false"]}), expect=0)
    port = free_port()
    proc = cli.spawn("run", "--dsn", pg_dsn, "--metrics-port", str(port), "--lease", "30",
                     "--max-concurrent-jobs", "3", "--instance-name", "metrics-engine")
    processes.append(proc)
    text = wait_until(lambda: (lambda t: t if value(t, "mjsched_runs_total", '{status="Completed"}') >= 2
                               and value(t, "mjsched_runs_total", '{status="Failed"}') >= 1 else None)(scrape(port)),
                      timeout=40, message="completed and failed runs in the metrics")
    for name in ("mjsched_run_duration_seconds_count", "mjsched_runs_in_flight", "mjsched_max_concurrent_jobs",
                 "mjsched_lock_contention_total", "mjsched_swept_runs_total", "mjsched_polls_total",
                 "mjsched_skipped_at_capacity_total", "mjsched_dispatched_total", "mjsched_timeouts_total",
                 "mjsched_leases_lost_total", "mjsched_fenced_completions_total"):
        assert value(text, name) >= 0, f"{name} missing:\n{text}"
    assert value(text, "mjsched_max_concurrent_jobs") == 3
    assert value(text, "mjsched_run_duration_seconds_count") >= 3
    assert value(text, "mjsched_polls_total") >= 1
    assert 'mjsched_engine_info{instance="metrics-engine"' in text
    code, _out, err = stop(proc, signal.SIGTERM)
    assert code == 0, err


def test_metrics_count_lock_contention(cli: Cli, pg_dsn: str, processes: list) -> None:
    # A job held by a live lease of another holder is due but locked: each poll counts it as locked_out.
    cli("jobs", "add", "--dsn", pg_dsn, "--name", "held", "--driver", "shell", "--cron", "* * * * * *",
        "--config", json.dumps({"command": ["true"]}), expect=0)
    import psycopg2

    conn = psycopg2.connect(pg_dsn)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("UPDATE mjsched.scheduled_job SET lock_token = gen_random_uuid(), locked_at = now(), "
                    "locked_by_instance = 'elsewhere', expected_completion_at = now() + interval '1 hour', "
                    "next_run_at = now() - interval '1 second'")
    conn.close()
    port = free_port()
    proc = cli.spawn("run", "--dsn", pg_dsn, "--metrics-port", str(port), "--max-poll-interval", "0.2")
    processes.append(proc)
    wait_until(lambda: value(scrape(port), "mjsched_lock_contention_total") >= 1, timeout=30,
               message="lock contention counted")
    code, _out, err = stop(proc, signal.SIGTERM)
    assert code == 0, err


def test_metrics_without_prometheus_client_is_a_clear_error(pg_dsn: str, tmp_path) -> None:
    code = ("import sys; sys.modules['prometheus_client'] = None; from mjsched.cli import main; "
            f"sys.exit(main(['run', '--dsn', {pg_dsn!r}, '--metrics-port', '9']))")
    result = subprocess.run([sys.executable, "-c", code], env=clean_env(), cwd=tmp_path, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    # the command that works from this checkout (mjsched.extras), not 'mjsched[metrics]' from an index
    assert f"pip install -e '{REPO}[metrics]'" in result.stderr and "Traceback" not in result.stderr


def test_metrics_port_in_use(cli: Cli, pg_dsn: str) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = cli("run", "--dsn", pg_dsn, "--metrics-port", str(port), timeout=60)
    assert result.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr.strip().splitlines()[-1]
