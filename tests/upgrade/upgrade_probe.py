"""The ``python`` driver's target in the rolling-upgrade test: records each execution.

Copied into a temporary directory that is on the PYTHONPATH of both engine processes
(the previous release's and this checkout's), so it must import nothing of mjsched
beyond what the driver hands it. One row per execution lets the test check ticks
(duplicates, gaps) and overlaps independently of mjsched's own bookkeeping.
"""
from __future__ import annotations

import os
import threading
import time
from datetime import datetime, timezone
from typing import Any

import psycopg2
import psycopg2.pool

_pools: dict[str, psycopg2.pool.ThreadedConnectionPool] = {}
_pools_lock = threading.Lock()


def _pool(dsn: str) -> psycopg2.pool.ThreadedConnectionPool:
    """One small pool per process: a connect per execution would cost more than the job."""
    with _pools_lock:
        if dsn not in _pools:
            _pools[dsn] = psycopg2.pool.ThreadedConnectionPool(1, 48, dsn)
        return _pools[dsn]


def record(dsn: str, hold: float, context: Any) -> dict[str, Any]:
    """Hold for ``hold`` seconds, then write (job, tick, pid, start, end) to upgrade_exec."""
    started = datetime.now(timezone.utc)
    time.sleep(hold)
    ended = datetime.now(timezone.utc)
    pool = _pool(dsn)
    conn = pool.getconn()
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("""INSERT INTO public.upgrade_exec
                               (job_id, job_name, run_id, tick, pid, started_at, ended_at)
                           VALUES (%s::uuid, %s, %s::uuid, %s, %s, %s, %s)""",
                        (context.job.id, context.job.name, context.run.id, context.run.scheduled_for,
                         os.getpid(), started, ended))
    finally:
        pool.putconn(conn)
    return {"pid": os.getpid()}
