"""The benchmark suite cannot rot: ``bash bench/run.sh --quick`` runs end to end.

Only that it ran (exit 0, which also means the throughput bench's exactly-once
check held) and printed its tables is asserted; the numbers are printed, never
asserted. The peers table needs APScheduler 3.x, SQLAlchemy and procrastinate
(the ``bench`` extra); without them that part is skipped with the reason.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[2]
BOUND_SECONDS = 90

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.bench, pytest.mark.timeout(BOUND_SECONDS + 30)]

TABLES = {
    "throughput": "### throughput: no-op executions",
    "ceiling": "### ceiling: pgbench on the same server",
    "scaling": "### scaling: poll cost and engine memory",
    "latency": "### latency: per-second crons",
    "records": "### records: construction per run",
}
PEERS_TABLE = "### peers: the same no-op jobs"


def _missing_peer_packages() -> list[str]:
    missing = []
    for module in ("apscheduler", "sqlalchemy", "procrastinate"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    return missing


@pytest.fixture(scope="module")
def quick_run(pg_server: str) -> Iterator[tuple[subprocess.CompletedProcess[str], float]]:
    env = dict(os.environ, PYTHON=sys.executable, MJSCHED_BENCH_DSN=pg_server)
    started = time.monotonic()
    try:
        proc = subprocess.run(["bash", str(ROOT / "bench" / "run.sh"), "--quick", "--dsn", pg_server],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=BOUND_SECONDS)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        pytest.fail(f"bench/run.sh --quick did not finish within {BOUND_SECONDS}s; output so far:\n{out[-4000:]}")
    yield proc, time.monotonic() - started


def test_quick_bench_runs_and_prints_its_tables(quick_run: tuple[subprocess.CompletedProcess[str], float]) -> None:
    proc, elapsed = quick_run
    print(proc.stdout)  # the numbers, for whoever reads the log (-s); never asserted
    assert proc.returncode == 0, f"bench/run.sh --quick exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    missing = [name for name, title in TABLES.items() if title not in proc.stdout]
    assert not missing, f"tables not printed: {missing}\n{proc.stdout[-4000:]}"
    assert "exactly once" in proc.stdout and elapsed < BOUND_SECONDS


def test_quick_bench_prints_the_peers_table(quick_run: tuple[subprocess.CompletedProcess[str], float]) -> None:
    missing = _missing_peer_packages()
    if missing:
        pytest.skip(f"peers not installed ({', '.join(missing)}): pip install -e '.[bench]'")
    proc, _ = quick_run
    assert PEERS_TABLE in proc.stdout, proc.stdout[-4000:]
    for peer in ("APScheduler", "procrastinate", "pgqueuer"):
        assert f"| {peer} " in proc.stdout, f"no {peer} row:\n{proc.stdout[-4000:]}"
