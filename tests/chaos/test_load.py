"""Chaos (1): four engine processes, 100 per-second jobs, ~25 s, no fault injected.

The baseline for (4) and (5): the same invariants must hold when connections are
killed or statements fail at the commit boundary.
"""
from __future__ import annotations

import time
from typing import Any

import pytest

from tests.chaos.harness import check_invariants, create_counter_jobs, report, start_workers, stop_all

pytestmark = [pytest.mark.chaos, pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(150)]

ENGINES = 4
JOBS = 100
SECONDS = 25


def test_four_engines_hundred_per_second_jobs(pg_dsn: str, crud: Any, sql: Any, workdir: str) -> None:
    workers = start_workers(pg_dsn, workdir, ENGINES, cap=10, lease=10, heartbeat=1)
    try:
        jobs = create_counter_jobs(crud, workdir, JOBS)
        started = time.monotonic()
        while time.monotonic() - started < SECONDS:
            assert all(w.alive() for w in workers), [w.tail() for w in workers if not w.alive()]
            time.sleep(0.5)
    finally:
        stats = stop_all(workers)
    figures = check_invariants(sql, workdir, jobs)
    per_engine = {s["instance"]: s["engine"]["dispatched"] for s in stats}
    report("load", engines=ENGINES, jobs=JOBS, seconds=SECONDS, runs_per_s=round(figures.executions / SECONDS, 1),
           per_engine=per_engine, figures=figures.line())
    assert figures.by_status.get("Completed", 0) >= JOBS * SECONDS * 0.6, figures.line()
    assert all(n > 0 for n in per_engine.values()), per_engine
