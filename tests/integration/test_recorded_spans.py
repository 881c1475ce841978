"""A run's recorded start never precedes the recorded end of the run it waited for.

A claim's transaction fixes its clock (now()) when it begins, but in READ COMMITTED each
statement inside the procedure sees what committed before that statement. A claim that
began, was held up (here: by a table lock on the engine registry), and then found the job freed by a
completion that began after it, recorded its run as started before the previous run ended:
the history of a Skip or Queue job showed two runs at once that never ran at once (seen in
test_engine_retries' three-engine race). The claim now starts such a run no earlier than
the job's last_run_at, which the completion wrote in the same transaction that freed it.
"""
from __future__ import annotations

import threading
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import psycopg2
import pytest

from mjsched.backends.base import Backend, Completion
from tests.support.db import Db
from tests.support.pg import Sql, wait_for

pytestmark = pytest.mark.postgres


def _job(backend: Backend, mode: str) -> str:
    return backend.insert_job({"job_type_id": backend.ensure_job_type("python"), "name": f"spans-{uuid.uuid4().hex[:8]}",
                               "cron_expression": "0 0 1 1 *", "status": "Active",
                               "configuration": {"callable": "os:getpid"}, "concurrency_mode": mode,
                               "max_queued_runs": 5 if mode == "Queue" else None,
                               "next_run_at": datetime.now(timezone.utc) - timedelta(seconds=30)})


def _held_up_claim(pg_db: Db, sql: Sql, instance: str, free_the_job: Callable[[], None]) -> list[Any]:
    """``instance``'s claim begins, waits on the engine registry (locked by a controller), the job is
    freed meanwhile (``free_the_job``), then the claim goes on; returns its batch's claims."""
    backend = pg_db.backend(pool_size=2)
    backend.register_engine(instance, "host", 1, "test")
    sql.run("UPDATE mjsched.engine_instance SET last_seen_at = now() - interval '1 hour' WHERE instance = %s",
            (instance,))
    controller = psycopg2.connect(pg_db.dsn)
    out: list[Any] = []
    try:
        # psycopg2 opens the transaction: the lock stays. A lock on the engine's row no longer
        # holds a claim up (its liveness write skips a held row: note_engine_seen); a table lock
        # still does, on a backend without a lock_timeout (an engine's would give up instead).
        with controller.cursor() as cur:
            cur.execute("LOCK TABLE mjsched.engine_instance IN SHARE MODE")
        claimer = threading.Thread(target=lambda: out.append(backend.claim_due_jobs(instance, 10, 60)))
        claimer.start()
        wait_for(lambda: sql.one("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                 "AND query LIKE '%%claim_due_jobs%%'") == 1,
                 timeout=10, message="the claim to wait on its engine row")
        free_the_job()
        controller.rollback()
        claimer.join(10)
        assert not claimer.is_alive()
    finally:
        controller.close()
        backend.close()
    return out[0].claims


@pytest.mark.parametrize("mode", ["Queue", "Skip"])
def test_a_held_up_claim_starts_its_run_after_the_run_it_waited_for(pg_db: Db, sql: Sql, mode: str) -> None:
    backend = pg_db.backend(pool_size=2)
    job = _job(backend, mode)
    first = backend.claim_due_jobs("spans-a", 10, 60).claims
    assert [c.job_id for c in first] == [job]
    if mode == "Queue":   # a tick kept while the first run runs: the held-up claim starts it
        tick = sql.one("SELECT started_at FROM mjsched.scheduled_job_run WHERE id = %s",
                       (first[0].run_id,)) + timedelta(milliseconds=1)
        wait_for(lambda: sql.one("SELECT clock_timestamp() > %s", (tick,)), timeout=5, message="the tick to come")
        assert backend.enqueue_job_run(job, tick)
        after_first = None    # the schedule stays due: a Queued run is claimed before the tick
    else:                 # the completion leaves the job due again: the held-up claim takes the tick
        after_first = datetime.now(timezone.utc) - timedelta(seconds=5)
    done = lambda: backend.complete_job_runs([Completion(first[0].run_id, first[0].lock_token,  # noqa: E731
                                                         "Completed", next_run_at=after_first)])
    claims = _held_up_claim(pg_db, sql, "spans-b", lambda: done())
    backend.close()
    assert [c.job_id for c in claims] == [job], claims
    runs = sql.rows("SELECT id::text, started_at, completed_at FROM mjsched.scheduled_job_run "
                    "WHERE scheduled_job_id = %s ORDER BY started_at", (job,))
    ended = next(r["completed_at"] for r in runs if r["id"] == first[0].run_id)
    second = next(r["started_at"] for r in runs if r["id"] == claims[0].run_id)
    assert second >= ended, f"{mode}: recorded start {second} precedes the previous run's end {ended}"
