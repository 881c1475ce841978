"""Two engines in separate processes share 50 per-second jobs: no tick twice, no overlap."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import mjsched

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def test_two_engine_processes_run_each_tick_once(pg_dsn: str, sql: Any) -> None:
    sql.run("CREATE TABLE test_counter (name text PRIMARY KEY, n integer NOT NULL)")
    setup = mjsched.SchedulingEngine(pg_dsn)
    try:
        for i in range(50):
            setup.create_job(f"count-{i}", "python", "* * * * * *",
                             configuration={"callable": "tests.support.jobs:bump_counter",
                                            "kwargs": {"dsn": pg_dsn, "name": f"count-{i}"}})
    finally:
        setup.close()
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    procs = [subprocess.Popen([sys.executable, str(ROOT / "tests/integration/engine_process.py"), pg_dsn, "10",
                               f"engine-{i}"], env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err[-2000:]

    dup = sql.one("""SELECT count(*) FROM (SELECT scheduled_job_id, scheduled_for FROM mjsched.scheduled_job_run
                      WHERE scheduled_for IS NOT NULL GROUP BY 1, 2 HAVING count(*) > 1) d""")
    assert dup == 0
    completed = sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE status = 'Completed'")
    counted = sql.one("SELECT coalesce(sum(n), 0) FROM test_counter")
    assert counted == completed, "an unsynchronised counter lost increments: two runs of a job overlapped"
    assert completed >= 50 * 6, f"only {completed} runs in 10 s of 50 per-second jobs"
    by_engine = dict((r["executed_by_instance"], r["n"]) for r in sql.rows(
        "SELECT executed_by_instance, count(*) AS n FROM mjsched.scheduled_job_run GROUP BY 1"))
    assert set(by_engine) == {"engine-0", "engine-1"}, by_engine
    assert sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE status = 'Running'") == 0
