"""Process isolation (mjsched/isolation.py) against a real engine and database.

The driver runs in a child process: results, exceptions and odd details come back
intact, heartbeats and log records cross the process boundary, and a run that is
cancelled (timeout, shutdown) or whose engine dies leaves no process behind: the
child, and any grandchild even in a session of its own, are gone by pid.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

import mjsched
from mjsched import isolation
from mjsched.drivers.base import ExecutionContext
from mjsched.execution import run_driver
from tests.chaos import isolated_drivers  # noqa: F401  (registers the iso-* drivers)
from tests.support.pg import wait_for
from tests.support.procs import process_alive
from tests.support.startup import past_start

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]

YEARLY = "0 0 1 1 *"


def _read_pid(directory: Any, name: str, timeout: float = 10.0) -> int:
    path = os.path.join(str(directory), name)
    wait_for(lambda: os.path.exists(path) and open(path).read().strip(), timeout=timeout, message=name)
    return int(open(path).read())


@pytest.fixture
def engine(make_engine: Any) -> Any:
    return make_engine(lease_timeout=10.0, heartbeat_interval=0.5)


def _job(engine: Any, driver: str, **fields: Any) -> str:
    configuration = fields.pop("configuration", {})
    return engine.create_job(name=f"job-{driver}", driver=driver, cron=YEARLY, isolation="process",
                             configuration=configuration, **fields)


def test_result_comes_back_intact_from_another_process(engine: Any) -> None:
    payload = {"ünï": ["cödé", 1, 2.5, None, True, {"deep": "\u2603" * 100}], "quote": "'; --"}
    run = engine.execute_job(_job(engine, "iso-echo", configuration={"payload": payload}))
    assert run.status is mjsched.RunStatus.COMPLETED and run.success is True
    assert run.details["payload"] == payload
    assert run.details["run_id"] == run.id and run.details["job_name"] == "job-iso-echo"
    assert run.details["pid"] != os.getpid() and not process_alive(run.details["pid"])


def test_python_driver_in_process_isolation(engine: Any, tmp_path: Any) -> None:
    job_id = engine.create_job(name="py-iso", driver="python", cron=YEARLY, isolation="process",
                               configuration={"callable": "os:getpid"})
    run = engine.execute_job(job_id)
    assert run.status is mjsched.RunStatus.COMPLETED and run.details["result"] != os.getpid()


def test_exception_comes_back_as_failed_result_with_type_message_and_traceback(engine: Any) -> None:
    run = engine.execute_job(_job(engine, "iso-raise"))
    assert run.status is mjsched.RunStatus.FAILED and run.success is False
    assert run.error_message == "LookupError: the widget ünïcode was not found"
    assert run.details["exception_type"] == "LookupError"
    assert "deep_inside" in run.details["traceback_tail"] and "isolated_drivers.py" in run.details["traceback_tail"]


@pytest.mark.parametrize("driver,expected", [
    ("iso-exit", "exited with code 7 before it reported a result"),
    ("iso-signal", "was killed by SIGKILL before it reported a result"),
])
def test_child_that_dies_without_a_result_is_a_failed_run(engine: Any, driver: str, expected: str) -> None:
    run = engine.execute_job(_job(engine, driver))
    assert run.status is mjsched.RunStatus.FAILED
    assert expected in run.error_message
    assert not process_alive(run.details["child_pid"])


def test_unserialisable_details_are_normalised_in_the_child(engine: Any) -> None:
    run = engine.execute_job(_job(engine, "iso-odd-details"))
    assert run.status is mjsched.RunStatus.COMPLETED
    assert run.details == {"a_set": "{1}", "nested": {"list": [1, 2.5, None, "x"]}, "text": "ü\u2603"}


def test_heartbeat_in_the_child_asks_the_parent(engine: Any) -> None:
    run = engine.execute_job(_job(engine, "iso-heartbeat"))
    assert run.details == {"heartbeat": True, "cancelled": False}


def test_child_log_records_reach_the_parent_loggers(engine: Any, caplog: Any) -> None:
    caplog.set_level(logging.INFO)
    engine.execute_job(_job(engine, "iso-log"))
    hello = [r for r in caplog.records if r.getMessage() == "hello from the child process"]
    assert hello and hello[0].name == "mjsched.job.iso-log" and hello[0].levelno == logging.WARNING
    assert hello[0].action == "child_hello" and hello[0].child_pid != os.getpid()
    assert any(r.name == "some.library" and r.getMessage() == "library says 42" for r in caplog.records)


def test_timeout_kills_a_child_that_ignores_cancellation(engine: Any, tmp_path: Any) -> None:
    def attempt(max_runtime: float) -> tuple[tuple[Any, float, str], bool]:
        directory = tmp_path / f"{max_runtime:g}"
        directory.mkdir()
        job_id = engine.create_job(name=f"job-iso-hang-{max_runtime:g}", driver="iso-hang", cron=YEARLY,
                                   isolation="process", max_runtime=max_runtime,
                                   configuration={"dir": str(directory)})
        started = time.monotonic()
        run = engine.execute_job(job_id)
        return (run, time.monotonic() - started, str(directory)), (directory / "child.pid").exists()

    (run, took, directory), max_runtime = past_start(attempt)
    assert run.status is mjsched.RunStatus.TIMEOUT and "max_runtime" in run.error_message
    assert took < max_runtime + 2.0   # the Timeout is written at once, not after the kill
    pid = _read_pid(directory, "child.pid")
    wait_for(lambda: not process_alive(pid), timeout=isolation.GRACE + 2, message=f"child {pid} killed")
    wait_for(lambda: isolation.live_children() == {}, timeout=2, message="the child to be reaped")


def test_cooperative_child_stops_on_sigterm_before_the_kill(tmp_path: Any) -> None:
    context = _context("iso-polite", {"dir": str(tmp_path)})
    done: list[Any] = []
    thread = threading.Thread(target=lambda: done.append(isolation.run_in_process(
        isolated_drivers.PoliteDriver, context)))
    thread.start()
    child = _read_pid(tmp_path, "child.pid")     # the driver runs: cancel it now (a 1 s timer lost to
    started = time.monotonic()                  # a child that took 0.8 s to start on a loaded machine)
    context.cancel_event.set()
    thread.join(isolation.GRACE + 30)
    elapsed = time.monotonic() - started
    assert done == [mjsched.JobResult(False, "stopped on request", {"cancelled": True})]
    assert elapsed < isolation.GRACE - 1.0, elapsed   # it returned; nobody had to SIGKILL it
    assert not process_alive(child)


def test_sigterms_in_a_stream_cancel_the_child_and_never_hang_it(tmp_path: Any) -> None:
    """The parent signals the child and its group, an operator may add a kill of their own: SIGTERMs
    come close together. Here they stream in while the child's main thread runs Python code (where
    a handler runs between any two bytecodes, so one signal lands inside another's handler). The
    child's handler only hands them to a thread (mjsched/signal_relay.py); its old one, an
    Event.set() in the handler, hung the child when a SIGTERM came inside it."""
    for attempt in range(3):
        directory = tmp_path / str(attempt)
        directory.mkdir()
        context = _context("iso-busy", {"dir": str(directory), "seconds": 1.5})
        done: list[Any] = []
        thread = threading.Thread(target=lambda: done.append(isolation.run_in_process(
            isolated_drivers.BusyDriver, context, grace=60)), daemon=True)
        thread.start()
        child = _read_pid(directory, "child.pid")
        deadline = time.monotonic() + 20   # far inside the 60 s grace: nobody SIGKILLs a hung child for us
        while thread.is_alive() and time.monotonic() < deadline:
            try:                           # the parent's cancel_event stays clear: only the signals cancel
                for _ in range(8):         # back to back, as the parent's to the child and to its group
                    os.kill(child, signal.SIGTERM)
            except ProcessLookupError:
                break
            time.sleep(0.001)
        thread.join(5)
        if thread.is_alive():              # hung: end it, or the test process waits for it at exit
            os.kill(child, signal.SIGKILL)
        assert done == [mjsched.JobResult(False, "stopped on request", {"cancelled": True})], (attempt, done)


def test_cancel_kills_grandchildren_in_their_own_session(tmp_path: Any) -> None:
    context = _context("iso-grandchild", {"dir": str(tmp_path), "hang": True})
    done: list[Any] = []
    thread = threading.Thread(target=lambda: done.append(isolation.run_in_process(
        isolated_drivers.GrandchildDriver, context, grace=0.5)))
    thread.start()
    grandchild = _read_pid(tmp_path, "grandchild.pid")
    child = _read_pid(tmp_path, "child.pid")
    assert os.getsid(grandchild) != os.getsid(child)   # out of reach of the child's process group
    context.cancel_event.set()
    thread.join(10)
    assert done and done[0].success is False and done[0].details["cancelled"] is True and done[0].details["killed"]
    wait_for(lambda: not process_alive(child) and not process_alive(grandchild), timeout=3,
             message="child and grandchild killed")


def test_grandchild_left_behind_by_a_finished_run_is_killed(tmp_path: Any) -> None:
    result = isolation.run_in_process(isolated_drivers.GrandchildDriver, _context("iso-grandchild",
                                                                                   {"dir": str(tmp_path)}))
    assert result.success is True
    wait_for(lambda: not process_alive(result.details["grandchild"]), timeout=3, message="orphaned grandchild killed")


def test_daemon_that_escaped_the_tree_does_not_keep_the_run_open(tmp_path: Any) -> None:
    started = time.monotonic()
    result = isolation.run_in_process(isolated_drivers.DoubleForkDriver, _context("iso-double-fork", {}))
    assert result.success is True and time.monotonic() - started < 5
    wait_for(lambda: not process_alive(result.details["daemon"]), timeout=3,
             message="the escaped daemon killed (its group)")


def test_child_dies_with_its_engine(pg_dsn: str, make_engine: Any, tmp_path: Any) -> None:
    """kill -9 of the engine process: the child sees its line close and tears its tree down."""
    job_id = _job(make_engine(), "iso-grandchild", configuration={"dir": str(tmp_path), "hang": True})
    code = ("import sys, mjsched, tests.chaos.isolated_drivers; "
            "mjsched.SchedulingEngine(sys.argv[1], lease_timeout=10).execute_job(sys.argv[2])")
    engine_proc = subprocess.Popen([sys.executable, "-c", code, pg_dsn, job_id], cwd=os.getcwd())
    try:
        child = _read_pid(tmp_path, "child.pid", timeout=20)
        grandchild = _read_pid(tmp_path, "grandchild.pid")
        engine_proc.send_signal(signal.SIGKILL)
        engine_proc.wait(5)
        wait_for(lambda: not process_alive(child) and not process_alive(grandchild), timeout=isolation.GRACE + 3,
                 message="the orphaned child and grandchild to go")
    finally:
        if engine_proc.poll() is None:
            engine_proc.kill()


def test_driver_class_that_cannot_be_imported_by_path_fails_cleanly() -> None:
    class Local(mjsched.BaseScheduledJob):
        isolation = "process"

        def execute(self, context: Any) -> Any:
            return None

    mjsched.register_driver("iso-local")(Local)
    result, _ = run_driver(_context("iso-local", {}))
    assert result.success is False and "isolation=" in result.error_message
    assert "module-level class" in result.error_message


def test_driver_default_isolation_applies_unless_the_job_overrides_it(engine: Any) -> None:
    job_id = engine.create_job(name="by-default", driver="iso-echo-by-default", cron=YEARLY)
    assert engine.execute_job(job_id).details["pid"] != os.getpid()
    engine.update_job(job_id, isolation="thread")
    assert engine.execute_job(job_id).details["pid"] == os.getpid()


def _context(driver: str, configuration: dict[str, Any]) -> ExecutionContext:
    from datetime import datetime, timezone

    from mjsched.models import ConcurrencyMode, Isolation, Job, JobRun, JobStatus, MissedRunPolicy, RunStatus

    now = datetime.now(timezone.utc)
    job = Job(id="00000000-0000-4000-8000-000000000001", job_type_id="00000000-0000-4000-8000-000000000002",
              driver=driver, name=f"ctx-{driver}", description=None, cron_expression=YEARLY, timezone="UTC",
              start_at=None, end_at=None, status=JobStatus.ACTIVE, configuration=configuration, owner=None,
              concurrency_mode=ConcurrencyMode.SKIP, missed_run_policy=MissedRunPolicy.RUN_ONCE,
              run_immediately_if_never_run=False, max_runtime_seconds=None, isolation=Isolation.PROCESS,
              max_queued_runs=5, notify_on_success=False, notify_on_failure=True, notify_to=None, next_run_at=None,
              last_run_at=None, run_count=0, success_count=0, failure_count=0, last_duration_ms=None,
              total_duration_ms=0, lock_token=None, locked_at=None, locked_by_instance=None,
              expected_completion_at=None, created_at=now, updated_at=now)
    run = JobRun(id="00000000-0000-4000-8000-000000000003", scheduled_job_id=job.id, scheduled_for=None,
                 status=RunStatus.RUNNING, success=None, error_message=None, details=None, queued_at=None,
                 started_at=now, completed_at=None, duration_ms=None, executed_by_instance="test", lock_token=None,
                 lease_expires_at=None)
    return ExecutionContext(job=job, run=run, cancel_event=threading.Event(),
                            logger=logging.getLogger(f"mjsched.job.{driver}"))
