"""bench/purge.py cannot rot: a small run ends with its table (numbers printed, never asserted).

It is not in ``bench/run.sh`` (its full size loads 5 million runs: minutes on its own); its
figures are in bench/RESULTS.md, "purge".
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.bench, pytest.mark.timeout(150)]


def test_small_purge_bench_runs_and_prints_its_table(pg_server: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "bench.purge", "--dsn", pg_server, "--rows", "20000", "--jobs", "20",
                           "--seconds", "3"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=140)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "### purge: 20,000 old runs deleted while 2 engine(s) claim 20 per-second jobs" in proc.stdout
    assert "0 old runs left after the purge" in proc.stdout
