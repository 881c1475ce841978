"""Helpers for the CLI tests: run ``python -m mjsched`` in a subprocess, never hang."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from tests.support.pg import wait_for

REPO = Path(__file__).resolve().parents[2]


def clean_env(**extra: str) -> dict[str, str]:
    """The test process's environment without MJSCHED_* settings; mjsched importable from the checkout.

    MJSCHED_PG_BIN points nowhere, so a test that forgot its --dsn fails at once
    instead of starting an embedded server (the embedded tests override it).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("MJSCHED_")}
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["MJSCHED_PG_BIN"] = "/nonexistent/mjsched-test-no-embedded"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


class Cli:
    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd

    def __call__(self, *args: str, env: dict[str, str] | None = None, timeout: float = 60,
                 expect: int | None = None) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([sys.executable, "-m", "mjsched", *args], cwd=self.cwd, env=env or clean_env(),
                                capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if expect is not None:
            assert result.returncode == expect, (
                f"mjsched {' '.join(args)}: exit {result.returncode}, expected {expect}\n"
                f"stdout: {result.stdout}\nstderr: {result.stderr}")
        return result

    def json(self, *args: str, env: dict[str, str] | None = None, timeout: float = 60) -> Any:
        result = self(*args, "--json", env=env, timeout=timeout, expect=0)
        return json.loads(result.stdout)

    def spawn(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-m", "mjsched", *args], cwd=self.cwd, env=env or clean_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                stdin=subprocess.DEVNULL)


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    """Background processes a test starts; killed (with their group) at teardown if still alive."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            try:
                proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                pass


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM, timeout: float = 30) -> tuple[int, str, str]:
    """Signal ``proc`` and collect its exit code and output (bounded)."""
    proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate(timeout=10)
        raise AssertionError(f"process did not exit within {timeout}s of {signal.Signals(sig).name}\n{err}") from None
    return proc.returncode, out, err


def wait_until(predicate: Callable[[], Any], timeout: float = 20.0, interval: float = 0.1,
               message: str = "condition") -> Any:
    return wait_for(predicate, timeout=timeout, interval=interval, message=message)
