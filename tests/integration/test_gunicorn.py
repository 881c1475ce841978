"""The deployment test of issue 35 item 5: a WSGI app with an engine under gunicorn, 2 workers.

- ``--preload`` with the engine started at import: the engine runs once, in the master; the
  workers' copies refuse with EngineForked (the request answers its message), no worker
  holds a socket of the master's database connections, and SIGTERM to the master ends the
  whole server within the configured drain (before: the workers queried and closed the
  master's connections, and shutdown took 19.5 s with a warning about a phantom run).
- the engine started in gunicorn's ``post_fork`` hook: one engine per worker, the jobs run,
  no tick twice, and the same bounded shutdown.

docs/guide/deployment.md shows both. Waits are on log lines and rows, each bounded.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.support.pg import wait_for
from tests.support.sockets import database_sockets

pytest.importorskip("gunicorn", reason="gunicorn is not installed (pip install -e '.[test]' installs it)")

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(120)]
ROOT = Path(__file__).resolve().parents[2]
DRAIN = 5                # gunicorn's graceful_timeout and the engine's stop_polling(max_wait=)
SHUTDOWN_MARGIN = 3.0    # interpreter exit, the engine's unregistering, the master's reaping


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Gunicorn:
    def __init__(self, dsn: str, start: str, preload: bool, log: Path) -> None:
        self.port = free_port()
        self.log = log
        env = {**os.environ, "MJSCHED_APP_DSN": dsn, "MJSCHED_APP_START": start,
               "MJSCHED_APP_BIND": f"127.0.0.1:{self.port}", "MJSCHED_APP_DRAIN": str(DRAIN),
               "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        args = [sys.executable, "-m", "gunicorn", "-c", str(ROOT / "tests/support/gunicorn_conf.py"),
                *(["--preload"] if preload else []), "tests.support.gunicorn_app:app"]
        self._out = log.open("w")
        self.proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=self._out, stderr=subprocess.STDOUT)

    def text(self) -> str:
        return self.log.read_text()

    def wait_log(self, needle: str, count: int = 1, timeout: float = 30.0) -> None:
        def seen() -> bool:
            assert self.proc.poll() is None, f"gunicorn exited {self.proc.returncode}:\n{self.text()[-3000:]}"
            return self.text().count(needle) >= count
        wait_for(seen, timeout=timeout, interval=0.05, message=f"{count} x {needle!r} in gunicorn's log")

    def get(self) -> tuple[int, dict[str, Any]]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/", timeout=10) as reply:
                return reply.status, json.loads(reply.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def answers_from_each_worker(self, workers: set[int], timeout: float = 20.0) -> dict[int, tuple[int, dict]]:
        """Requests until each worker answered one (the kernel spreads accepts among them)."""
        seen: dict[int, tuple[int, dict]] = {}

        def all_answered() -> bool:
            status, body = self.get()
            seen[body["pid"]] = (status, body)
            return workers <= set(seen)
        wait_for(all_answered, timeout=timeout, interval=0.01, message=f"an answer from each of {workers}")
        return seen

    def stop(self) -> float:
        """SIGTERM to the master; seconds until the whole server exited."""
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=DRAIN + 30)
        finally:
            self._out.close()
        took = time.monotonic() - started
        print(f"gunicorn shut down in {took:.2f}s (drain {DRAIN}s)")
        return took

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._out.close()


@pytest.fixture
def gunicorn(pg_dsn: str, sql: Any, tmp_path: Path) -> Iterator[Any]:
    sql.run("CREATE TABLE test_counter (name text PRIMARY KEY, n integer NOT NULL)")
    servers: list[Gunicorn] = []

    def start(start: str, preload: bool) -> Gunicorn:
        server = Gunicorn(pg_dsn, start, preload, tmp_path / f"gunicorn-{len(servers)}.log")
        servers.append(server)
        return server
    yield start
    for server in servers:
        server.kill()


def worker_pids(log: str) -> set[int]:
    return {int(line.rsplit("pid: ", 1)[1].split()[0]) for line in log.splitlines() if "Booting worker with pid" in line}


def completed(sql: Any) -> int:
    return int(sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE status = 'Completed'"))


def assert_each_tick_once(sql: Any) -> None:
    dup = sql.one("""SELECT count(*) FROM (SELECT scheduled_job_id, scheduled_for FROM mjsched.scheduled_job_run
                      WHERE scheduled_for IS NOT NULL GROUP BY 1, 2 HAVING count(*) > 1) d""")
    assert dup == 0
    assert sql.one("SELECT coalesce(sum(n), 0) FROM test_counter") == completed(sql), "two runs overlapped"


def test_preload_with_the_engine_started_at_import(gunicorn: Any, sql: Any, pg_dsn: str) -> None:
    server = gunicorn("import", preload=True)
    server.wait_log("Booting worker with pid", count=2)
    master = server.proc.pid
    workers = worker_pids(server.text())
    assert len(workers) == 2
    wait_for(lambda: completed(sql) >= 2, timeout=30, message="the master's engine running the job")

    answers = server.answers_from_each_worker(workers)
    for pid in workers:
        status, body = answers[pid]
        assert status == 503, body
        assert body["refused"].startswith("list_jobs(): ") and f"made in process {master}" in body["refused"]
        assert "post_fork" in body["refused"] and "docs/guide/deployment.md" in body["refused"]

    master_sockets = database_sockets(master, pg_dsn)
    assert master_sockets, "the master's engine holds database connections"
    for pid in workers:
        assert not database_sockets(pid, pg_dsn) & master_sockets, f"worker {pid} shares the master's database sockets"
    engines = sql.rows("SELECT pid FROM mjsched.engine_instance WHERE stopped_at IS NULL")
    assert [r["pid"] for r in engines] == [master]     # one engine, in the master
    ran = completed(sql)
    wait_for(lambda: completed(sql) >= ran + 2, timeout=20, message="the master's engine going on")

    took = server.stop()
    assert server.proc.returncode == 0, server.text()[-3000:]
    assert took < DRAIN + SHUTDOWN_MARGIN, f"shutdown took {took:.1f}s\n{server.text()[-3000:]}"
    log = server.text()
    assert "server closed the connection" not in log and "Traceback" not in log, log[-3000:]
    assert "still executing" not in log, log[-3000:]
    assert sql.one("SELECT count(*) FROM mjsched.engine_instance WHERE stopped_at IS NULL") == 0
    assert sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE status IN ('Running', 'Abandoned')") == 0
    assert_each_tick_once(sql)


def test_the_engine_started_in_post_fork(gunicorn: Any, sql: Any) -> None:
    server = gunicorn("post_fork", preload=False)
    server.wait_log("polling started", count=2)
    workers = worker_pids(server.text())
    assert len(workers) == 2
    wait_for(lambda: sql.one("SELECT count(DISTINCT pid) FROM mjsched.engine_instance WHERE stopped_at IS NULL") == 2,
             timeout=10, message="an engine in each worker")
    answers = server.answers_from_each_worker(workers)
    assert {pid: answers[pid] for pid in workers} == {pid: (200, {"pid": pid, "jobs": ["tick"]}) for pid in workers}
    wait_for(lambda: completed(sql) >= 6, timeout=30, message="six ticks run by the workers' engines")

    took = server.stop()
    assert server.proc.returncode == 0, server.text()[-3000:]
    assert took < DRAIN + SHUTDOWN_MARGIN, f"shutdown took {took:.1f}s\n{server.text()[-3000:]}"
    log = server.text()
    assert "Traceback" not in log and "still executing" not in log, log[-3000:]
    assert sql.one("SELECT count(*) FROM mjsched.engine_instance WHERE stopped_at IS NULL") == 0
    assert sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE status IN ('Running', 'Abandoned')") == 0
    assert_each_tick_once(sql)
