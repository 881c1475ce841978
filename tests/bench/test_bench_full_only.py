"""The idle, burst, history and schema-cost benchmarks cannot rot: each runs end to end in its quick form.

Only that each ran and printed its table is asserted (and the burst's exactly-once check,
which is its exit code); the numbers are printed, never asserted.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.bench, pytest.mark.timeout(150)]


@pytest.mark.parametrize("bench, args, title", [
    ("idle", ["--seconds", "5", "--engines", "2", "--jobs", "2000"], "### idle: engines with nothing due"),
    ("burst", ["--jobs", "2000"], "### burst: jobs due at the same second"),
    ("history", ["--sizes", "0,10000", "--jobs", "1000"], "### history: old run rows against the hot paths"),
    ("schema_costs", [], "### schema_costs: the procedures script, 1 client, 1s, 1 alternating round(s)"),
])
def test_bench_runs_quick_and_prints_its_table(pg_server: str, bench: str, args: list[str], title: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-m", f"bench.{bench}", "--quick", "--dsn", pg_server, *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert title in proc.stdout
