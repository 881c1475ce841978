"""``mjsched run`` and signals, as an operator sends them: a subprocess on a real database.

A second SIGINT/SIGTERM exits within a second with code 1, whether a job is running or
the engine is idle (stopping slowly); after the drain budget the process exits whatever
its job threads do, a thread that ignores ``cancel_event`` included.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.cli.conftest import Cli, wait_until
from tests.support.stall_proxy import StallingProxy

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]

SECOND_SIGNAL_BOUND = 1.0


class Watched:
    """A spawned process whose stderr is read line by line, so a test can wait for a log line."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.out = ""

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()

    def wait_line(self, needle: str, timeout: float = 30.0) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: any(needle in line for line in self.lines) or
                                       self.proc.poll() is not None, timeout):
                raise AssertionError(f"no log line with {needle!r} within {timeout}s:\n{self.err}")
        assert any(needle in line for line in self.lines), f"exited before {needle!r}:\n{self.err}"

    def signal_and_wait(self, sig: int, timeout: float) -> tuple[int, float]:
        """Send ``sig``; (exit code, seconds from the signal to the exit). Fails past ``timeout``."""
        sent = time.monotonic()
        self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            raise AssertionError(f"still running {timeout}s after {signal.Signals(sig).name}:\n{self.err}") from None
        took = time.monotonic() - sent
        self._reader.join(timeout=5)
        assert self.proc.stdout is not None
        self.out = self.proc.stdout.read()
        return code, took

    @property
    def err(self) -> str:
        with self._cond:
            return "".join(self.lines)


def stubborn_job(cli: Cli, dsn: str, marker: Path, name: str = "stubborn") -> None:
    config = {"callable": "tests.cli.stubborn_jobs:ignore_cancel", "kwargs": {"marker": str(marker)}}
    cli.json("jobs", "add", "--dsn", dsn, "--name", name, "--driver", "python", "--cron", "* * * * * *",
             "--config", json.dumps(config))


def spawn_run(cli: Cli, dsn: str, processes: list, *extra: str) -> Watched:
    proc = cli.spawn("run", "--dsn", dsn, "--lease", "30", *extra)
    processes.append(proc)
    return Watched(proc)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_second_signal_with_a_running_job_exits_at_once_with_1(cli: Cli, pg_dsn: str, processes: list,
                                                                tmp_path: Path, sig: int) -> None:
    marker = tmp_path / "started"
    stubborn_job(cli, pg_dsn, marker)
    run = spawn_run(cli, pg_dsn, processes, "--shutdown-timeout", "60")
    wait_until(marker.exists, timeout=30, message="the stubborn job to start")
    run.proc.send_signal(sig)
    run.wait_line("received " + signal.Signals(sig).name)
    code, took = run.signal_and_wait(sig, timeout=30)
    assert code == 1, run.err
    assert took < SECOND_SIGNAL_BOUND, f"exited {took:.2f}s after the second signal\n{run.err}"
    assert "second signal" in run.err


def test_second_signal_while_an_idle_engine_stops_slowly_exits_with_1(cli: Cli, pg_dsn: str,
                                                                      processes: list) -> None:
    parts = urlsplit(pg_dsn)
    with StallingProxy(parts.hostname or "127.0.0.1", parts.port or 5432) as proxy:
        netloc = f"{parts.username}@127.0.0.1:{proxy.port}" if parts.username else f"127.0.0.1:{proxy.port}"
        dsn = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
        run = spawn_run(cli, dsn, processes, "--shutdown-timeout", "30")
        run.wait_line("polling started")
        proxy.stall()       # the stop now waits on the database: the process stays for seconds
        run.proc.send_signal(signal.SIGTERM)
        run.wait_line("received SIGTERM")
        code, took = run.signal_and_wait(signal.SIGTERM, timeout=30)
        proxy.resume()
    assert code == 1, f"exit {code} (143 is death by the default SIGTERM handler)\n{run.err}"
    assert took < SECOND_SIGNAL_BOUND, f"exited {took:.2f}s after the second signal\n{run.err}"


def test_after_the_drain_budget_a_thread_that_ignores_cancel_does_not_keep_the_process(
        cli: Cli, pg_dsn: str, processes: list, tmp_path: Path) -> None:
    marker = tmp_path / "started"
    stubborn_job(cli, pg_dsn, marker)
    budget = 2.0
    run = spawn_run(cli, pg_dsn, processes, "--shutdown-timeout", str(budget))
    wait_until(marker.exists, timeout=30, message="the stubborn job to start")
    # the budget, then CLOSE_GRACE_SECONDS (5 s) for cancelled runs to return, then a margin
    code, took = run.signal_and_wait(signal.SIGTERM, timeout=60)
    assert code == 0, run.err
    assert took < budget + 5.0 + 3.0, f"exited {took:.1f}s after SIGTERM with a {budget:g}s budget\n{run.err}"
    runs = cli.json("runs", "--dsn", pg_dsn, "--limit", "5")
    assert runs and runs[0]["status"] == "Cancelled", runs      # handed back, not left locked
    assert cli.json("runs", "--status", "Running", "--dsn", pg_dsn) == []


EMBEDDING_APP = """
import pathlib, sys, time
import mjsched

dsn, marker = sys.argv[1], pathlib.Path(sys.argv[2])
engine = mjsched.SchedulingEngine(dsn, lease_timeout=30, max_poll_interval=0.2)
engine.create_job(name="stubborn", driver="python", cron="* * * * * *",
                  configuration={"callable": "tests.cli.stubborn_jobs:ignore_cancel",
                                 "kwargs": {"marker": str(marker)}})
engine.start_polling()
deadline = time.monotonic() + 30
while not marker.exists() and time.monotonic() < deadline:
    time.sleep(0.05)
print("job started" if marker.exists() else "job never started", flush=True)
engine.close()
print("closed", flush=True)
"""


def test_an_app_that_closes_its_engine_exits_although_a_job_thread_ignores_cancel(pg_dsn: str,
                                                                                    tmp_path: Path) -> None:
    from tests.cli.conftest import clean_env

    proc = subprocess.Popen([sys.executable, "-c", EMBEDDING_APP, pg_dsn, str(tmp_path / "started")],
                            cwd=tmp_path, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "job started"
        assert proc.stdout.readline().strip() == "closed"       # close(): 5 s of grace, then handed back
        closed = time.monotonic()
        code = proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"the app was still running 20 s after close() returned\n{proc.communicate()[1]}") \
            from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    assert code == 0, proc.communicate()[1]
    assert time.monotonic() - closed < 2.0
