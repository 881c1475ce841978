"""Run parameters and cancellation (issue 14 items 5 and 6) against the real PostgreSQL.

Parameters: merged over the job's configuration for one manual run, stored on its row,
refused (typed, by field) before anything is written. Cancellation: from any process, of a
run held by another engine process, of a cooperative thread job, of a process-isolated job
that ignores it (killed after the grace), of a Queued run (never runs), and the races: a
cancel while the run completes (exactly one outcome), and two cancels at once.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg2
import pytest

import mjsched
from mjsched.backends.postgres import PostgresBackend
from tests.support import drivers  # noqa: F401  (registers the test-* drivers)
from tests.support.drivers import gate, started
from tests.integration.test_least_privilege import admin_role, engine_role, logins  # noqa: F401  (fixtures)
from tests.support.pg import wait_for
from tests.support.procs import process_alive

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]

YEARLY = "0 0 1 1 *"
TARGETS = "tests.integration.run_request_targets"
ROOT = Path(__file__).resolve().parents[2]


def _status(engine: mjsched.SchedulingEngine, run_id: str) -> str:
    run = engine.backend.get_run(run_id)
    return run.status.value if run else "?"


def _pid(marker: Path, timeout: float = 20.0) -> int:
    wait_for(lambda: marker.exists(), timeout=timeout, message=f"{marker.name} (the run to start)")
    return int(marker.read_text())


def _queue(db: Any, job_id: str) -> None:
    """A Queued run of a tick a minute ago, as enqueue_job_run leaves one."""
    db.run(f"INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, scheduled_for, status, queued_at) "
           f"VALUES (?, {db.ago(60)}, 'Queued', {db.now})", (job_id,))


def _running_run(engine: mjsched.SchedulingEngine, job_id: str, timeout: float = 20.0) -> mjsched.JobRun:
    return wait_for(lambda: next(iter(engine.list_runs(job_id, status="Running")), None), timeout=timeout,
                    message="a Running run")


# -- parameters ---------------------------------------------------------------------------------------

def test_parameters_are_merged_for_one_run_stored_and_listed(make_engine: Any) -> None:
    engine = make_engine()
    configuration = {"callable": f"{TARGETS}:echo", "kwargs": {"day": None, "region": "eu"}}
    job_id = engine.create_job(name="report", driver="python", cron=YEARLY, configuration=configuration)
    run = engine.execute_job(job_id, parameters={"kwargs": {"day": "2026-11-30"}})
    assert run.status is mjsched.RunStatus.COMPLETED, run.error_message
    # the driver saw the merged configuration (objects merge, "region" is kept) and the parameters
    assert run.details["kwargs"] == {"day": "2026-11-30", "region": "eu"}
    assert run.details["run_parameters"] == {"kwargs": {"day": "2026-11-30"}}
    assert run.parameters == {"kwargs": {"day": "2026-11-30"}}
    # for that run only: the shared configuration is unchanged, the next run sees it as it was
    assert engine.get_job(job_id).configuration == configuration
    plain = engine.execute_job(job_id)
    assert plain.parameters is None and plain.details["kwargs"] == {"day": None, "region": "eu"}
    listed = {r.id: r.parameters for r in engine.list_runs(job_id)}
    assert listed == {run.id: {"kwargs": {"day": "2026-11-30"}}, plain.id: None}


@pytest.mark.parametrize("parameters, field", [
    (["not", "a", "dict"], "parameters"),
    ({"command": 5}, "configuration.command"),     # the shell driver's own check, on the merged result
    ({"timeout": -1}, "configuration.timeout"),
    ({"x": float("nan")}, "parameters.x"),
    ({"x": {1, 2}}, "parameters.x"),
    ({"": 1}, "parameters"),
])
def test_bad_parameters_are_refused_before_anything_is_written(make_engine: Any, parameters: Any,
                                                               field: str) -> None:
    engine = make_engine()
    job_id = engine.create_job(name="sh", driver="shell", cron=YEARLY, configuration={"command": ["true"]})
    with pytest.raises(mjsched.ConfigurationError) as caught:
        engine.execute_job(job_id, parameters=parameters)
    assert caught.value.field == field, caught.value
    assert engine.list_runs(job_id) == []
    job = engine.get_job(job_id)
    assert job.lock_token is None and job.locked_by_instance is None and job.run_count == 0


@pytest.mark.parametrize("driver, configuration, misspelt, nearest", [
    ("shell", {"command": ["true"]}, "comand", "command"),
    ("shell", {"command": ["true"]}, "enviroment", None),
    ("python", {"callable": f"{TARGETS}:echo"}, "kwarg", "kwargs"),
    ("http", {"url": "http://127.0.0.1:9/"}, "header", "headers"),
    ("sql", {"dsn": "postgresql://x@127.0.0.1/x", "statement": "SELECT 1"}, "statment", "statement"),
])
def test_a_parameter_key_the_driver_does_not_read_is_refused_naming_the_nearest(
        make_engine: Any, driver: str, configuration: dict[str, Any], misspelt: str, nearest: str | None) -> None:
    """Issue 35 item 8: a misspelt key was merged, ignored, and the job's own configuration ran."""
    engine = make_engine()
    job_id = engine.create_job(name="backfill", driver=driver, cron=YEARLY, configuration=configuration)
    with pytest.raises(mjsched.UnknownParameter) as caught:
        engine.execute_job(job_id, parameters={misspelt: ["false"]})
    assert (caught.value.field, caught.value.key, caught.value.nearest) == (f"parameters.{misspelt}", misspelt, nearest)
    assert f"not a configuration key of the {driver} driver" in str(caught.value)
    assert (f"did you mean {nearest!r}?" in str(caught.value)) is (nearest is not None)
    assert engine.list_runs(job_id) == [] and engine.get_job(job_id).lock_token is None


def test_a_driver_that_declares_no_keys_takes_any_parameter(make_engine: Any) -> None:
    engine = make_engine()
    job_id = engine.create_job(name="custom", driver="test-ok", cron=YEARLY)
    assert engine.execute_job(job_id, parameters={"anything": 1}).status is mjsched.RunStatus.COMPLETED


def test_the_procedure_refuses_parameters_that_are_not_an_object(pg_dsn: str, make_engine: Any) -> None:
    engine = make_engine()
    job_id = engine.create_job(name="sh", driver="shell", cron=YEARLY, configuration={"command": ["true"]})
    conn = psycopg2.connect(pg_dsn)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            with pytest.raises(psycopg2.Error) as caught:
                cur.execute("SELECT * FROM mjsched.start_manual_run(%s::uuid, %s::uuid, 'x', 60, false, false, "
                            "NULL, '[1, 2]'::jsonb)", (job_id, str(uuid.uuid4())))
            assert caught.value.pgcode == "22023" and "parameters=" in str(caught.value)
            # the previous release's call (seven arguments) still resolves, unambiguously
            cur.execute("SELECT outcome FROM mjsched.start_manual_run(%s::uuid, %s::uuid, 'x', 60, false, false, "
                        "NULL)", (job_id, str(uuid.uuid4())))
            assert cur.fetchone()[0] == "started"
            cur.execute("SELECT count(*) FROM mjsched.scheduled_job_run WHERE parameters IS NOT NULL")
            assert cur.fetchone()[0] == 0
    finally:
        conn.close()


def test_secrets_in_parameters_are_masked_where_shown(make_engine: Any, capsys: Any) -> None:
    from mjsched.cli.runs_commands import run_row

    engine = make_engine()
    job_id = engine.create_job(name="py", driver="python", cron=YEARLY,
                               configuration={"callable": f"{TARGETS}:echo"})
    run = engine.execute_job(job_id, parameters={"kwargs": {"api_token": "s3cret", "day": "2026-11-30"}})
    shown = run_row(run)
    assert shown["parameters"] == {"kwargs": {"api_token": "***", "day": "2026-11-30"}}
    assert run.parameters["kwargs"]["api_token"] == "s3cret"    # stored as given: the driver needs it


# -- the procedures' contract (both dialects; the SQL Server half skips without a server) ----------------

def test_procedures_store_parameters_and_record_cancel_requests(db: Any) -> None:
    backend = db.backend()
    try:
        job_id = db.insert_job(backend.ensure_job_type("test-ok"), "contract", YEARLY)
        start = backend.start_manual_run(job_id, str(uuid.uuid4()), "e1", 60, parameters={"day": "2026-11-30"})
        assert start.outcome == "started"
        run_id, token = str(start.run_id), str(start.lock_token)
        assert backend.get_run(run_id).parameters == {"day": "2026-11-30"}
        assert backend.cancel_requests([token]) == [] and backend.cancel_requests([]) == []
        first = backend.cancel_run(run_id, "alice")
        assert (first.outcome, first.status, first.requested_by) == ("requested", "Running", "alice")
        again = backend.cancel_run(run_id, "bob")
        assert (again.outcome, again.requested_by, again.requested_at) == \
            ("already_requested", "alice", first.requested_at)
        [request] = backend.cancel_requests([token, str(uuid.uuid4())])
        assert (request.run_id, request.token, request.requested_by) == (run_id, token, "alice")
        assert backend.complete_job_run(run_id, token, "Cancelled", "Cancelled: requested by alice", None, None)
        assert backend.cancel_requests([token]) == []
        ended = backend.cancel_run(run_id, "carol")
        assert (ended.outcome, ended.status, ended.requested_by) == ("not_cancellable", "Cancelled", "alice")
        assert backend.cancel_run(str(uuid.uuid4()), "dave").outcome == "not_found"
        with pytest.raises(mjsched.ConfigurationError, match="requested_by"):
            backend.cancel_run(run_id, "x" * 256)
        with pytest.raises(mjsched.ConfigurationError, match="requested_by"):
            backend.cancel_run(run_id, "")
    finally:
        backend.close()


# -- cancellation: typed errors -------------------------------------------------------------------------

def test_cancelling_an_unknown_or_finished_run_is_a_typed_error(make_engine: Any) -> None:
    engine = make_engine()
    with pytest.raises(mjsched.RunNotFound) as unknown:
        engine.cancel_run(str(uuid.uuid4()))
    assert "no such run" in str(unknown.value)
    with pytest.raises(mjsched.RunNotFound):
        engine.cancel_run("not-a-uuid")
    job_id = engine.create_job(name="ok", driver="test-ok", cron=YEARLY)
    done = engine.execute_job(job_id)
    with pytest.raises(mjsched.RunNotCancellable) as finished:
        engine.cancel_run(done.id)
    assert finished.value.status == "Completed" and done.id in str(finished.value)
    assert engine.backend.get_run(done.id).cancel_requested_at is None
    with pytest.raises(mjsched.ConfigurationError) as who:
        engine.cancel_run(done.id, requested_by="x" * 256)
    assert who.value.field == "requested_by"


def test_a_queued_run_that_is_cancelled_never_runs(make_engine: Any, db: Any) -> None:
    engine = make_engine()
    job_id = engine.create_job(name="queued", driver="test-ok", cron=YEARLY, concurrency_mode="Queue")
    _queue(db, job_id)
    queued = engine.list_runs(job_id, status="Queued")[0]
    engine.cancel_run(queued.id, requested_by="alice@ops")
    run = engine.backend.get_run(queued.id)
    assert run.status is mjsched.RunStatus.CANCELLED and run.started_at is None
    assert run.cancel_requested_by == "alice@ops" and "before it ran" in run.error_message
    assert engine.dispatch_due_jobs().dispatched == 0          # nothing left to claim
    job = engine.get_job(job_id)
    assert (job.run_count, job.failure_count, job.last_run_at) == (1, 1, None)   # counted, never ran
    with pytest.raises(mjsched.RunNotCancellable):
        engine.cancel_run(queued.id)


# -- cancellation: delivery -----------------------------------------------------------------------------

def test_cancel_of_a_run_held_by_another_engine_process(pg_dsn: str, make_engine: Any, tmp_path: Path) -> None:
    """The run executes in an engine of another process (lease 10 s: a renewal every 2.5 s);
    this process asks; the run ends Cancelled within one heartbeat interval (plus a poll)."""
    ours = make_engine()
    marker = tmp_path / "started"
    job_id = ours.create_job(name="remote", driver="python", cron=YEARLY, run_immediately_if_never_run=True,
                             configuration={"callable": f"{TARGETS}:wait_for_cancel",
                                            "kwargs": {"marker": str(marker)}})
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "integration" / "engine_process.py"), pg_dsn,
                             "60", "remote-engine"], cwd=str(ROOT),
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])})
    try:
        _pid(marker)
        run = _running_run(ours, job_id)
        assert run.executed_by_instance == "remote-engine"
        asked = time.monotonic()
        ours.cancel_run(run.id, requested_by="bob@laptop")
        wait_for(lambda: _status(ours, run.id) == "Cancelled", timeout=10.0 / 4 + 3.0,
                 message="the other engine to end the run Cancelled")
        took = time.monotonic() - asked
        final = ours.backend.get_run(run.id)
        assert "requested by bob@laptop" in final.error_message and final.success is False
        assert final.cancel_requested_by == "bob@laptop"
        job = ours.get_job(job_id)
        assert job.lock_token is None and job.failure_count == 1
        print(f"cancel seen by the other engine process and recorded in {took:.2f}s (heartbeat 2.5 s)")
    finally:
        proc.terminate()
        proc.wait(20)


def test_cooperative_thread_job_ends_cancelled_at_the_next_renewal(make_engine: Any) -> None:
    runner = make_engine(heartbeat_interval=0.5, instance_name="runner")
    asker = make_engine(instance_name="asker")
    job_id = runner.create_job(name="coop", driver="test-block", cron=YEARLY, configuration={"gate": "coop"})
    done: list[mjsched.JobRun] = []
    thread = threading.Thread(target=lambda: done.append(runner.execute_job(job_id)))
    thread.start()
    assert started("coop").wait(10)
    run = _running_run(asker, job_id)
    asked = time.monotonic()
    asker.cancel_run(run.id)               # another engine object: the runner learns it from the database
    thread.join(10)
    assert done and done[0].status is mjsched.RunStatus.CANCELLED, done
    assert time.monotonic() - asked < 0.5 + 2.0
    assert "requested by" in done[0].error_message and "(engine asker)" in done[0].error_message
    assert "cancelled" in done[0].error_message     # what the driver said follows


def test_the_notification_of_a_cancelled_run_says_cancelled_not_failed(make_engine: Any) -> None:
    """Issue 35 item 10: a Cancelled run was notified as "[mjsched] <job> failed"."""
    notifier = drivers.RecordingNotifier()
    runner = make_engine(heartbeat_interval=0.5, notifier=notifier)
    job_id = runner.create_job(name="told", driver="test-block", cron=YEARLY, configuration={"gate": "told"})
    thread = threading.Thread(target=runner.execute_job, args=(job_id,))
    thread.start()
    assert started("told").wait(10)
    runner.cancel_run(_running_run(runner, job_id).id)
    thread.join(10)
    assert notifier.event.wait(10)
    ((_, run, notification),) = notifier.sent
    assert run.status is mjsched.RunStatus.CANCELLED
    assert notification.subject == "[mjsched] told was cancelled"
    assert notification.body.startswith(f"Job 'told' ({job_id}) was cancelled.")
    assert "failed" not in notification.subject + notification.body.splitlines()[0]


def test_process_isolated_job_that_ignores_cancel_is_killed_after_the_grace(make_engine: Any,
                                                                           tmp_path: Path) -> None:
    engine = make_engine(heartbeat_interval=0.5, cancel_grace=1.0)
    marker = tmp_path / "child"
    job_id = engine.create_job(name="stubborn", driver="python", cron=YEARLY, isolation="process",
                               configuration={"callable": f"{TARGETS}:ignore_cancel",
                                              "kwargs": {"marker": str(marker)}})
    done: list[mjsched.JobRun] = []
    thread = threading.Thread(target=lambda: done.append(engine.execute_job(job_id)))
    thread.start()
    child = _pid(marker)
    run = _running_run(engine, job_id)
    asked = time.monotonic()
    engine.cancel_run(run.id)
    thread.join(20)
    assert done and done[0].status is mjsched.RunStatus.CANCELLED
    took = time.monotonic() - asked
    assert 1.0 <= took < 1.0 + 5.0, took            # not before the grace, and soon after it
    assert "killed after ignoring SIGTERM" in done[0].error_message
    wait_for(lambda: not process_alive(child), timeout=5, message="the child to be gone")


def test_thread_job_that_ignores_cancel_is_recorded_cancelled_and_its_thread_left(make_engine: Any) -> None:
    engine = make_engine(heartbeat_interval=0.5, cancel_grace=0.5)
    job_id = engine.create_job(name="hung", driver="test-block", cron=YEARLY, run_immediately_if_never_run=True,
                               configuration={"gate": "hung", "ignore_cancel": True})
    engine.start_polling()
    try:
        assert started("hung").wait(10)
        run = _running_run(engine, job_id)
        engine.cancel_run(run.id)
        wait_for(lambda: _status(engine, run.id) == "Cancelled", timeout=5, message="Cancelled after the grace")
        final = engine.backend.get_run(run.id)
        assert "did not stop within the grace period" in final.error_message
        assert engine.inflight == 0 and engine.get_job(job_id).lock_token is None
    finally:
        gate("hung").set()
        engine.stop_polling(wait=True, max_wait=5)


# -- cancellation: races ----------------------------------------------------------------------------------

def test_cancel_while_the_run_completes_has_exactly_one_outcome(make_engine: Any) -> None:
    """The driver returns at the moment the cancel arrives, 15 times: each run ends either
    Completed (the cancel came too late: RunNotCancellable, or a request the run outran)
    or Cancelled, never both, never a crash; the lock is always released."""
    engine = make_engine(heartbeat_interval=0.5)
    outcomes: dict[str, int] = {}
    for i in range(15):
        name = f"race-{i}"
        job_id = engine.create_job(name=name, driver="test-block", cron=YEARLY, configuration={"gate": name})
        with ThreadPoolExecutor(3) as pool:
            execution = pool.submit(engine.execute_job, job_id)
            assert started(name).wait(10)
            run = _running_run(engine, job_id)
            barrier = threading.Barrier(2)

            def release() -> None:
                barrier.wait(5)
                # offsets from 0 to 12 ms spread the two over the cancel's round trip, so both
                # orders happen (a spread of the race, not a synchronisation)
                time.sleep((i % 5) * 0.003)
                gate(name).set()

            def cancel() -> str:
                barrier.wait(5)
                if i % 5 == 4:
                    time.sleep(0.05)   # and now and then well after the driver returned
                try:
                    engine.cancel_run(run.id)
                    return "asked"
                except mjsched.RunNotCancellable:
                    return "too late"
            pool.submit(release)
            said = pool.submit(cancel).result(10)
            final = execution.result(20)
        assert final.status in (mjsched.RunStatus.COMPLETED, mjsched.RunStatus.CANCELLED), final
        if said == "too late":
            assert final.status is mjsched.RunStatus.COMPLETED
        rows = engine.list_runs(job_id)
        assert [r.status for r in rows] == [final.status]
        job = engine.get_job(job_id)
        assert job.lock_token is None and job.run_count == 1
        assert (job.success_count, job.failure_count) == ((1, 0) if final.status.value == "Completed" else (0, 1))
        key = f"{said}/{final.status.value}"
        outcomes[key] = outcomes.get(key, 0) + 1
    print("cancel vs completion:", outcomes)


def test_two_cancels_at_once_record_one_request(pg_dsn: str, make_engine: Any) -> None:
    """Eight real connections call cancel_run on one Running run at once: one records the
    request, the seven others are answered already_requested with the first requester."""
    engine = make_engine(heartbeat_interval=0.5)
    job_id = engine.create_job(name="twice", driver="test-block", cron=YEARLY, configuration={"gate": "twice"})
    with ThreadPoolExecutor(1) as pool:
        execution = pool.submit(engine.execute_job, job_id)
        assert started("twice").wait(10)
        run = _running_run(engine, job_id)
        backends = [PostgresBackend(pg_dsn, pool_size=1) for _ in range(8)]
        try:
            barrier = threading.Barrier(len(backends))

            def ask(n: int) -> Any:
                barrier.wait(5)
                return backends[n].cancel_run(run.id, f"operator-{n}")
            with ThreadPoolExecutor(len(backends)) as askers:
                answers = list(askers.map(ask, range(len(backends))))
        finally:
            for b in backends:
                b.close()
        final = execution.result(20)
    kinds = sorted(a.outcome for a in answers)
    assert kinds == ["already_requested"] * 7 + ["requested"], kinds
    first = next(a for a in answers if a.outcome == "requested")
    assert {a.requested_by for a in answers} == {first.requested_by}
    assert final.status is mjsched.RunStatus.CANCELLED and f"requested by {first.requested_by}" in final.error_message
    assert engine.get_job(job_id).failure_count == 1


def test_cancel_and_claim_of_a_queued_run_never_both_win(make_engine: Any, db: Any) -> None:
    """A Queued run: cancel_run and an engine's claim race, 10 times; the run either never
    runs (Cancelled) or runs to its end while the cancel is refused or recorded."""
    engine = make_engine()
    for i in range(10):
        job_id = engine.create_job(name=f"q-{i}", driver="test-ok", cron=YEARLY, concurrency_mode="Queue")
        _queue(db, job_id)
        queued = engine.list_runs(job_id, status="Queued")[0]
        barrier = threading.Barrier(2)

        def cancel() -> str:
            barrier.wait(5)
            try:
                engine.cancel_run(queued.id)
                return "asked"
            except mjsched.RunNotCancellable as exc:
                return exc.status

        def claim() -> None:
            barrier.wait(5)
            engine.dispatch_due_jobs()
        with ThreadPoolExecutor(2) as pool:
            said = pool.submit(cancel)
            pool.submit(claim).result(10)
            said.result(10)
        wait_for(lambda: engine.backend.get_run(queued.id).finished, timeout=10, message="the run to end")
        final = engine.backend.get_run(queued.id)
        assert final.status in (mjsched.RunStatus.CANCELLED, mjsched.RunStatus.COMPLETED), final
        if final.status is mjsched.RunStatus.CANCELLED:
            assert final.started_at is None or final.cancel_requested_at is not None
        assert len(engine.list_runs(job_id)) == 1


# -- who may cancel ------------------------------------------------------------------------------------

def test_the_admin_role_cancels_and_the_engine_role_acts_on_it(engine_role: str, admin_role: str,
                                                               make_engine: Any) -> None:
    """cancel_run is an admin routine (like force_unlock_job); the engine role reads the requests
    of its runs (cancel_requests) and may not make one."""
    runner = make_engine(dsn=engine_role, heartbeat_interval=0.5)
    admin = make_engine(dsn=admin_role)
    job_id = admin.create_job(name="by-role", driver="test-block", cron=YEARLY, configuration={"gate": "by-role"})
    with ThreadPoolExecutor(1) as pool:
        execution = pool.submit(runner.execute_job, job_id)
        assert started("by-role").wait(10)
        run = _running_run(admin, job_id)
        with pytest.raises(mjsched.DatabaseError, match="permission denied for function cancel_run"):
            runner.cancel_run(run.id)
        admin.cancel_run(run.id, requested_by="ops")
        final = execution.result(20)
    assert final.status is mjsched.RunStatus.CANCELLED and "requested by ops" in final.error_message
