"""Real Celery workers against the real Redis and RabbitMQ of this machine.

The session's queue and counter prefix are set in the environment before anything imports
``tests.celery.worker_app`` (the engines in this process import it through the job's
``app`` path, the workers in theirs). Without Redis/RabbitMQ the tests skip, except under
CI=true, where .ci/run starts both and an absent broker is a failure.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

REDIS_URL = "redis://127.0.0.1:6379/15"
AMQP_URL = "amqp://guest:guest@127.0.0.1:5672//"
ROOT = Path(__file__).resolve().parents[2]

SESSION_TAG = f"mjsched-test-{uuid.uuid4().hex[:10]}"
os.environ.setdefault("MJSCHED_CELERY_QUEUE", SESSION_TAG)
os.environ.setdefault("MJSCHED_CELERY_TAG", SESSION_TAG)
os.environ.setdefault("MJSCHED_CELERY_BROKER", REDIS_URL)

pytestmark = pytest.mark.celery


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def require(port: int, what: str) -> None:
    if _answers(port):
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} does not answer on 127.0.0.1:{port} (.ci/run should have started it)")
    pytest.skip(f"{what} does not answer on 127.0.0.1:{port}")


@pytest.fixture(scope="session")
def redis_up() -> None:
    pytest.importorskip("celery")
    require(6379, "Redis")


@pytest.fixture(scope="session")
def rabbitmq_up() -> None:
    pytest.importorskip("celery")
    require(5672, "RabbitMQ")


def worker_env(**overrides: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(overrides)
    return env


class Worker:
    """One ``celery worker`` process (its own process group, killed at teardown)."""

    def __init__(self, name: str, env: dict[str, str], logdir: Path, concurrency: int = 2,
                 pool: str = "prefork", app: str = "tests.celery.worker_app", life: int = 1) -> None:
        """``life``: the how-many-th start of this worker name (a restart keeps the name, not the log)."""
        self.name = f"{name}@{socket.gethostname()}"
        self.env = env
        self.log = logdir / (f"{name}.log" if life == 1 else f"{name}.{life}.log")
        cmd = [sys.executable, "-m", "celery", "-A", app, "worker",
               "-Q", env["MJSCHED_CELERY_QUEUE"], "-c", str(concurrency), f"--pool={pool}", "-n", self.name,
               "--without-gossip", "--without-mingle", "--loglevel=INFO", f"--logfile={self.log}"]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"worker {self.name} exited with {self.proc.returncode}: {self.tail()}")
            if self.log.exists() and " ready." in self.log.read_text(errors="replace"):
                return
            time.sleep(0.2)
        raise AssertionError(f"worker {self.name} not ready within {timeout:g}s: {self.tail()}")

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else "<no log>"

    def kill9(self) -> None:
        """SIGKILL the main process only: its pool children are orphaned, as on a real crash."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        """SIGKILL the whole process group (main process and pool children), as a host crash does."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    workers: list[Worker] = []

    def start(name: str, env: dict[str, str] | None = None, **kwargs: Any) -> Worker:
        worker = Worker(name, env or worker_env(), tmp_path, **kwargs)
        workers.append(worker)
        worker.wait_ready()
        return worker

    yield start
    for worker in workers:
        worker.stop()


@pytest.fixture(scope="session")
def session_worker(redis_up: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    """One prefork worker (-c 2) on the session's queue, Redis broker, shared by the driver tests."""
    worker = Worker("session", worker_env(), tmp_path_factory.mktemp("celery-workers"))
    try:
        worker.wait_ready()
        yield worker
    finally:
        worker.stop()


@pytest.fixture(scope="session")
def counters(redis_up: None) -> Any:
    import redis

    return redis.Redis.from_url("redis://127.0.0.1:6379/13", socket_connect_timeout=5, socket_timeout=5)
