"""``mjsched dashboard`` and ``mjsched run --dashboard-port``, run as an operator would."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from typing import IO

import pytest

ENV = {k: v for k, v in os.environ.items() if not k.startswith("MJSCHED_DASHBOARD_")}


def read_until(stream: IO[str], pattern: str, timeout: float = 30.0) -> re.Match[str]:
    """The first line of ``stream`` matching ``pattern`` (bounded: fails after ``timeout``)."""
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        seen.append(line)
        match = re.search(pattern, line)
        if match:
            return match
    raise AssertionError(f"no line matching {pattern!r} within {timeout}s; got: {''.join(seen)[-2000:]}")


def get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, response.read().decode()


def stop(proc: subprocess.Popen[str]) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_a_public_bind_without_auth_refuses_to_start(pg_dsn: str) -> None:
    result = subprocess.run([sys.executable, "-m", "mjsched", "--dsn", pg_dsn, "dashboard", "--bind", "0.0.0.0:0"],
                            capture_output=True, text=True, timeout=60, env=ENV)
    assert result.returncode == 2, result
    assert "beyond loopback only with auth" in result.stderr and "MJSCHED_DASHBOARD_TOKEN" in result.stderr
    result = subprocess.run([sys.executable, "-m", "mjsched", "--dsn", pg_dsn, "dashboard", "--bind", "nonsense"],
                            capture_output=True, text=True, timeout=60, env=ENV)
    assert result.returncode == 2 and "HOST:PORT" in result.stderr, result


def test_dashboard_serves_until_sigterm(pg_dsn: str) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "mjsched", "--dsn", pg_dsn, "dashboard", "--bind", "127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        assert proc.stdout is not None
        url = read_until(proc.stdout, r"(http://127\.0\.0\.1:\d+)/").group(1)
        status, html = get(url + "/jobs")
        assert status == 200 and "Jobs" in html
    finally:
        code = stop(proc)
    assert code == 0, proc.stderr.read() if proc.stderr else ""


def test_run_serves_its_dashboard(pg_dsn: str) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "mjsched", "--dsn", pg_dsn, "run", "--instance-name", "with-dash",
                             "--dashboard-port", "0", "--shutdown-timeout", "5"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        assert proc.stderr is not None
        url = read_until(proc.stderr, r"dashboard listening on (http://127\.0\.0\.1:\d+)").group(1)
        read_until(proc.stderr, r"running on")
        status, html = get(url + "/engines")
        assert status == 200 and 'data-engine="with-dash"' in html and "e-live" in html
    finally:
        code = stop(proc)
    assert code == 0


def test_run_refuses_a_public_dashboard_without_auth(pg_dsn: str) -> None:
    result = subprocess.run([sys.executable, "-m", "mjsched", "--dsn", pg_dsn, "run", "--dashboard-port", "0",
                             "--dashboard-host", "0.0.0.0"], capture_output=True, text=True, timeout=60, env=ENV)
    assert result.returncode == 2 and "beyond loopback only with auth" in result.stderr, result


if __name__ == "__main__":     # pragma: no cover
    sys.exit(pytest.main([__file__]))
