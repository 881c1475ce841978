"""Lock protocol v3: each defect of issue 11 "What breaks today", pinned by a test that
failed on a5c28c1 (the item number is in each docstring).

The interleaving harness (tests/interleaving/) proves the invariants over many
schedules; these are the concrete scenarios, end to end, on the real database.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from datetime import timedelta
from typing import Any, Callable

import pytest

import mjsched
from mjsched.engine import control as engine_module
from mjsched.backends.base import Backend
from tests.chaos.faults import FaultPlan
from tests.support import drivers
from tests.support.db import Db
from tests.support.pg import wait_for

NEVER = "0 0 1 1 *"


def due(engine: mjsched.SchedulingEngine, sql: Any, name: str, driver: str = "test-block", **fields: Any) -> str:
    job = engine.create_job(name, driver, fields.pop("cron", NEVER),
                            configuration=fields.pop("configuration", {"gate": name}), **fields)
    sql.run("UPDATE mjsched.scheduled_job SET next_run_at = now() - interval '1 second' WHERE id = %s", (job,))
    return job


def job_row(sql: Any, job: str) -> dict[str, Any]:
    return sql.rows("SELECT * FROM mjsched.scheduled_job WHERE id = %s", (job,))[0]


def run_rows(sql: Any, job: str) -> list[dict[str, Any]]:
    return sql.rows("SELECT * FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s "
                    "ORDER BY scheduled_for NULLS LAST, started_at", (job,))


def dead_pid() -> int:
    """The pid of a process that has just exited (so no process has it, for now)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(10)
    return child.pid


# -- item 3: the first heartbeat must not shorten a lease lengthened by max_runtime -----------------
def test_renewal_keeps_a_lease_lengthened_by_max_runtime(db: Db) -> None:
    """Item 3: lease 2 s, max_runtime 30 s: a renewal at 1.5 s kept claim + 30 s, and a sweep
    4 s in (an engine paused) abandons nothing. On a5c28c1 the renewal cut it to now + 2 s."""
    backend: Backend = db.backend()
    try:
        type_id = backend.ensure_job_type("python")
        job = backend.insert_job({"job_type_id": type_id, "name": "long", "cron_expression": NEVER,
                                  "status": "Active", "max_runtime_seconds": 30,
                                  "configuration": {"callable": "os:getpid"}})
        db.make_due(job)
        (claim,) = backend.claim_due_jobs("a", 1, 2).claims
        lease = db.job_value(job, "expected_completion_at")
        assert lease >= claim.db_now + timedelta(seconds=29)
        assert backend.extend_job_leases([claim.lock_token], 2, now=claim.db_now + timedelta(seconds=1.5)) == \
            {claim.lock_token}
        assert db.job_value(job, "expected_completion_at") == lease          # not shortened to +3.5 s
        run_lease = db.one("SELECT lease_expires_at FROM mjsched.scheduled_job_run WHERE id = ?", (claim.run_id,))
        assert run_lease == lease                                             # one lease truth
        swept = backend.sweep_expired_leases(now=claim.db_now + timedelta(seconds=4))
        assert (swept.swept, swept.locks_freed) == (0, 0)
        assert db.run_status(claim.run_id) == "Running"
    finally:
        backend.close()


# -- item 2: Queue mode keeps only the ticks it could queue ---------------------------------------------
@pytest.mark.postgres
def test_a_queue_job_never_replays_ticks_refused_while_its_queue_was_full(make_engine: Callable[..., Any],
                                                                         sql: Any) -> None:
    """Item 2: per-second job, max_queued_runs=2, a first run of ~4 s: of the ticks that came
    during it only the two queued ones ever run. On a5c28c1 a run started from the queue
    re-enqueued from its own old tick, and every refused tick ran later."""
    name = "queue-bound"
    engine = make_engine(max_concurrent_jobs=2, lease_timeout=30.0)
    job = engine.create_job(name, "test-block", "* * * * * *", configuration={"gate": name},
                            concurrency_mode="Queue", max_queued_runs=2)
    engine.start_polling()
    assert drivers.started(name).wait(5)
    first = wait_for(lambda: [r for r in run_rows(sql, job) if r["status"] == "Running"], message="the first run")[0]
    wait_for(lambda: sql.one("SELECT now() - %s::timestamptz > interval '4.2 seconds'", (first["started_at"],)),
             timeout=8, interval=0.05, message="four ticks to come during the first run")
    released = sql.one("SELECT now()")
    drivers.gate(name).set()
    wait_for(lambda: not sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s "
                                 "AND status = 'Queued'", (job,)), timeout=10, message="the queue to drain")
    engine.stop_polling(wait=True, max_wait=5)
    during = [r["scheduled_for"] for r in run_rows(sql, job)
              if r["scheduled_for"] is not None and first["scheduled_for"] < r["scheduled_for"] <= released]
    assert len(during) == 2, f"ticks that came during the first run and ran: {during}"
    assert during == sorted(during)[:2] and during[0] > first["started_at"] - timedelta(seconds=1)


# -- item 5: a lost reply of a manual start is replayed, never a stranded lock --------------------------
@pytest.mark.postgres
def test_a_lost_reply_of_a_manual_start_is_replayed(make_engine: Callable[..., Any], sql: Any) -> None:
    """Item 5: the start of execute_job commits and its reply is lost. The retry replays it: the
    run executes once and the job ends unlocked. On a5c28c1 the lost acquire_job_lock reply made
    execute_job raise LockNotAcquired and left the job locked by its own token for a lease."""
    plan = FaultPlan(force_after={"start_manual_run": 1, "acquire_job_lock": 1})
    engine = make_engine(connection_factory=plan.connection_factory())
    job = engine.create_job("manual-lost-reply", "test-ok", NEVER, status="Active")
    run = engine.execute_job(job)
    assert run.status is mjsched.RunStatus.COMPLETED
    assert sum(v for k, v in plan.snapshot().items() if k.startswith("after:")) == 1
    assert [r["status"] for r in run_rows(sql, job)] == ["Completed"]
    assert job_row(sql, job)["lock_token"] is None


def test_start_manual_run_replay_answers_the_run_the_lost_call_started(db: Db) -> None:
    """Item 5, at the procedure: a replay with the same request id answers the same run and
    token instead of being refused by its own lock; a new request is refused while it runs."""
    backend: Backend = db.backend()
    try:
        type_id = backend.ensure_job_type("python")
        job = backend.insert_job({"job_type_id": type_id, "name": "m", "cron_expression": NEVER,
                                  "status": "Active", "configuration": {"callable": "os:getpid"}})
        request = str(uuid.uuid4())
        first = backend.start_manual_run(job, request, "a", 60)
        assert first.outcome == "started" and first.run_id and first.lock_token
        again = backend.start_manual_run(job, request, "a", 60, replay=True)
        assert (again.outcome, again.run_id, again.lock_token) == ("started", first.run_id, first.lock_token)
        assert backend.start_manual_run(job, str(uuid.uuid4()), "b", 60).outcome == "locked"
        assert db.count_runs(job_id=job) == 1
    finally:
        backend.close()


# -- item 8: execute_job refuses a job that is not Active, unless forced ---------------------------------
@pytest.mark.postgres
@pytest.mark.parametrize("status", ["Paused", "Disabled", "Pending", "Expired"])
def test_execute_job_refuses_a_job_that_is_not_active_unless_forced(make_engine: Callable[..., Any], sql: Any,
                                                                    status: str) -> None:
    """Item 8: on a5c28c1 execute_job ran Paused, Disabled, Pending and Expired jobs."""
    engine = make_engine()
    job = engine.create_job(f"not-active-{status}", "test-ok", NEVER, status="Active")
    sql.run("UPDATE mjsched.scheduled_job SET status = %s WHERE id = %s", (status, job))
    with pytest.raises(mjsched.JobNotActive) as caught:
        engine.execute_job(job)
    assert caught.value.status == status and job in str(caught.value)
    assert run_rows(sql, job) == [] and job_row(sql, job)["lock_token"] is None   # nothing written
    assert engine.execute_job(job, force=True).status is mjsched.RunStatus.COMPLETED
    with pytest.raises(mjsched.ConfigurationError, match="force"):
        engine.execute_job(job, force="yes")   # type: ignore[arg-type]


# -- item 6: a clean restart leaves nothing held -----------------------------------------------------------
@pytest.mark.postgres
def test_a_run_that_returns_after_stop_polling_is_recorded_at_close(make_engine: Callable[..., Any],
                                                                     sql: Any) -> None:
    """Item 6: stop_polling(wait=True, max_wait) gives up on a long run; close() cancels it, the
    job honours cancel_event and returns: its outcome is written and the lock is free. On
    a5c28c1 the completion was dropped ("after the engine closed") and the lock held for a lease."""
    engine = make_engine(instance_name="flask-app")
    job = due(engine, sql, "restart-clean")
    engine.start_polling()
    assert drivers.started("restart-clean").wait(5)
    engine.stop_polling(wait=True, max_wait=0.2)
    engine.close()
    assert [r["status"] for r in run_rows(sql, job)] == ["Cancelled"]
    assert job_row(sql, job)["lock_token"] is None


@pytest.mark.postgres
def test_a_run_still_going_at_close_is_handed_back(make_engine: Callable[..., Any], sql: Any,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 6: a run that ignores cancellation is handed back at close (Cancelled, lock free);
    when its thread returns later its result is discarded."""
    monkeypatch.setattr(engine_module, "CLOSE_GRACE_SECONDS", 0.2)
    name = "restart-hung"
    engine = make_engine()
    job = due(engine, sql, name, configuration={"gate": name, "ignore_cancel": True})
    assert engine.dispatch_due_jobs().dispatched == 1
    assert drivers.started(name).wait(5)
    engine.close()
    (run,) = run_rows(sql, job)
    assert run["status"] == "Cancelled" and "handed back" in run["error_message"]
    assert job_row(sql, job)["lock_token"] is None
    drivers.gate(name).set()
    wait_for(lambda: engine.leaked == 0, message="the hung thread to return")
    assert [r["status"] for r in run_rows(sql, job)] == ["Cancelled"]


@pytest.mark.postgres
def test_an_engine_releases_at_start_up_what_a_dead_engine_of_its_host_held(make_engine: Callable[..., Any],
                                                                             sql: Any) -> None:
    """Item 6: a previous engine of this host died holding a lock and a Running run. The next
    engine to start releases them at once (fenced) instead of after the 600 s lease; an engine
    of this host whose process is alive keeps what it holds."""
    engine = make_engine(lease_timeout=600.0)
    host = socket.gethostname()
    dead, alive = dead_pid(), os.getppid()
    held = {}
    for instance, pid in (("crashed-app", dead), ("live-app", alive)):
        job = due(engine, sql, instance, "test-ok")
        engine.backend.register_engine(instance, host, pid, "0")
        (claim,) = [c for c in engine.backend.claim_due_jobs(instance, 1, 600).claims if c.job_id == job]
        held[instance] = (job, claim)
    engine.start_polling()
    crashed_job, crashed = held["crashed-app"]
    # released by start_polling() itself, not by a sweep 600 s later (the poller may then claim
    # the served tick once more, only to advance past it)
    first = run_rows(sql, crashed_job)[0]
    wait_for(lambda: job_row(sql, crashed_job)["lock_token"] is None, message="the lock to be free")
    assert str(first["id"]) == crashed.run_id and first["status"] == "Abandoned"
    assert "crashed-app" in first["error_message"] and "gone" in first["error_message"]
    assert job_row(sql, crashed_job)["failure_count"] == 1
    live_job, live = held["live-app"]
    assert str(job_row(sql, live_job)["lock_token"]) == live.lock_token     # untouched
    assert [r["status"] for r in run_rows(sql, live_job)] == ["Running"]


@pytest.mark.postgres
def test_a_restart_under_the_same_instance_name_releases_what_the_clean_stop_left(
        make_engine: Callable[..., Any], sql: Any) -> None:
    """Item 6: the previous process (same instance name, now stopped) left a lock; the restarted
    engine of that name releases it at start-up."""
    engine = make_engine(instance_name="web-1")
    job = due(engine, sql, "same-name", "test-ok")
    engine.backend.register_engine("web-1", socket.gethostname(), dead_pid(), "0")
    engine.backend.claim_due_jobs("web-1", 1, 600)
    engine.backend.unregister_engine("web-1")
    engine.start_polling()
    assert [r["status"] for r in run_rows(sql, job)] == ["Abandoned"]     # the tick it held was served
    # The poll loop may take the job for a moment (it advances past the served tick, under the
    # job's lock): stop it, so the lock seen free below stays free for execute_job.
    engine.stop_polling(wait=True, max_wait=10)
    wait_for(lambda: job_row(sql, job)["lock_token"] is None, message="the lock to be free")
    engine.execute_job(job)                                               # and the job is free to run


# -- mjsched jobs unlock: the operator's override ----------------------------------------------------------
@pytest.mark.postgres
def test_unlock_job_frees_the_lock_and_fences_its_holder(make_engine: Callable[..., Any], sql: Any) -> None:
    engine = make_engine()
    job = due(engine, sql, "stuck", "test-ok")
    (claim,) = engine.backend.claim_due_jobs("gone-elsewhere", 1, 600).claims
    assert engine.unlock_job(job) is True
    row = job_row(sql, job)
    assert row["lock_token"] is None and row["failure_count"] == 1
    assert [r["status"] for r in run_rows(sql, job)] == ["Abandoned"]
    assert engine.backend.complete_job_run(claim.run_id, claim.lock_token, "Completed", None, None, None) is False
    assert engine.unlock_job(job) is False                    # nothing held any more


# -- a row an operator holds delays only its own job's lease -----------------------------------------------
@pytest.mark.postgres
def test_a_job_row_held_by_another_session_delays_only_its_own_lease(make_engine: Callable[..., Any],
                                                                     sql: Any, pg_dsn: str) -> None:
    """An admin session holds one job row FOR UPDATE for longer than the lease (a psql session
    left open). The other runs' leases keep being renewed and none of them is lost or swept.
    On a5c28c1 (and before renew_leases) the one renewal statement waited on that row: every
    lease of the engine lapsed and its own sweep abandoned the other runs."""
    import psycopg2

    engine = make_engine(lease_timeout=2.0, max_concurrent_jobs=3)
    names = [f"held-{i}" for i in range(3)]
    jobs = [due(engine, sql, name) for name in names]
    engine.start_polling()
    for name in names:
        assert drivers.started(name).wait(5)
    admin = psycopg2.connect(pg_dsn)
    try:
        with admin.cursor() as cur:
            cur.execute("SELECT now()")
            held_from = cur.fetchone()[0]
            cur.execute("SELECT 1 FROM mjsched.scheduled_job WHERE id = %s FOR UPDATE", (jobs[0],))

        def renewed_past_the_lease() -> bool:
            rows = sql.rows("SELECT lease_expires_at FROM mjsched.scheduled_job_run WHERE scheduled_job_id IN "
                            "(%s, %s) AND status = 'Running'", (jobs[1], jobs[2]))
            return len(rows) == 2 and all(r["lease_expires_at"] > held_from + timedelta(seconds=3.5) for r in rows)
        # the others' leases moved past where they would have lapsed, while the row was held
        wait_for(renewed_past_the_lease, timeout=10, message="the other runs' leases to be renewed")
        assert [r["status"] for j in jobs for r in run_rows(sql, j)] == ["Running"] * 3
    finally:
        admin.rollback()
        admin.close()
    for name in names:
        drivers.gate(name).set()
    wait_for(lambda: all(run_rows(sql, j)[0]["status"] in ("Completed", "Abandoned") for j in jobs),
             message="the runs to end")
    assert [run_rows(sql, j)[0]["status"] for j in jobs[1:]] == ["Completed", "Completed"]
