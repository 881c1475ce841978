"""``engine.run_due_jobs`` and ``mjsched run --once`` (issue 14 item 7): one pass over what is due
now, claiming again as slots free up, waiting for those runs; an exit code for scripts."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from typing import Any, Callable

import pytest

import mjsched
from mjsched.errors import ConfigurationError
from tests.support.pg import wait_for
from tests.support import drivers

pytestmark = pytest.mark.postgres
NEVER = "0 0 1 1 *"


@pytest.fixture(autouse=True)
def open_gates_afterwards() -> Any:
    yield
    for g in list(drivers.GATES.values()):
        g.set()


def due(engine: mjsched.SchedulingEngine, sql: Any, name: str, driver: str = "test-ok", **fields: Any) -> str:
    job = engine.create_job(name, driver, NEVER, configuration=fields.pop("configuration", {}), **fields)
    sql.run("UPDATE mjsched.scheduled_job SET next_run_at = now() - interval '1 second' WHERE id = %s", (job,))
    return job


def test_every_due_job_runs_once_even_beyond_the_cap_and_the_call_returns_them_finished(
        make_engine: Callable[..., Any], sql: Any) -> None:
    engine = make_engine(max_concurrent_jobs=2)
    jobs = {due(engine, sql, f"due-{i}") for i in range(5)}
    engine.create_job("later", "test-ok", NEVER)          # not due: not run
    runs = engine.run_due_jobs(timeout=30)
    assert sorted(r.scheduled_job_id for r in runs) == sorted(jobs)   # 5 due, cap 2: three passes
    assert {r.status for r in runs} == {mjsched.RunStatus.COMPLETED}
    assert engine.inflight == 0
    assert sql.one("SELECT count(*) FROM mjsched.scheduled_job_run") == 5
    assert engine.run_due_jobs(timeout=30) == []          # nothing is due any more


def test_a_failed_run_is_returned_failed(make_engine: Callable[..., Any], sql: Any) -> None:
    engine = make_engine()
    due(engine, sql, "fails", "test-raise")
    (run,) = engine.run_due_jobs(timeout=30)
    assert run.status is mjsched.RunStatus.FAILED and "driver exploded" in (run.error_message or "")


def test_the_timeout_bounds_the_wait_and_a_run_still_going_is_returned_running(
        make_engine: Callable[..., Any], sql: Any) -> None:
    engine = make_engine(max_concurrent_jobs=1)
    due(engine, sql, "slow", "test-block", configuration={"gate": "slow"})
    due(engine, sql, "waits-for-a-slot", "test-ok")
    (run,) = engine.run_due_jobs(timeout=0.5)        # the second never got a slot within the timeout
    assert run.status is mjsched.RunStatus.RUNNING
    drivers.gate("slow").set()
    # the run finishes on its own once the gate opens; close() right away could set its
    # cancel_event before the driver thread woke (seen once in CI: recorded Cancelled)
    wait_for(lambda: sql.one("SELECT status FROM mjsched.scheduled_job_run WHERE id = %s", (run.id,)) != "Running",
             timeout=10)
    engine.close()
    assert sql.one("SELECT status FROM mjsched.scheduled_job_run WHERE id = %s", (run.id,)) == "Completed"


def test_bad_timeouts_and_use_while_polling_are_refused(make_engine: Callable[..., Any], sql: Any) -> None:
    engine = make_engine()
    for bad in (-1, float("nan"), float("inf"), "5", True):
        with pytest.raises(ConfigurationError, match="timeout"):
            engine.run_due_jobs(timeout=bad)      # type: ignore[arg-type]
    engine.start_polling()
    with pytest.raises(ConfigurationError, match="run_due_jobs"):
        engine.run_due_jobs(timeout=1)


def test_two_scripts_at_once_run_each_due_job_once(make_engine: Callable[..., Any], sql: Any) -> None:
    first, second = make_engine(max_concurrent_jobs=3), make_engine(max_concurrent_jobs=3)
    jobs = {due(first, sql, f"shared-{i}") for i in range(8)}
    results: dict[str, list[mjsched.JobRun]] = {}
    barrier = threading.Barrier(2, timeout=10)

    def go(name: str, engine: mjsched.SchedulingEngine) -> None:
        barrier.wait()
        results[name] = engine.run_due_jobs(timeout=30)
    threads = [threading.Thread(target=go, args=(n, e)) for n, e in (("a", first), ("b", second))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    ran = [r.scheduled_job_id for runs in results.values() for r in runs]
    assert sorted(ran) == sorted(jobs)
    assert sql.one("SELECT count(*) FROM mjsched.scheduled_job_run") == 8


def cli(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MJSCHED_DSN": dsn}
    return subprocess.run([sys.executable, "-m", "mjsched", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def test_run_once_exits_0_when_all_completed_and_1_when_a_run_failed(make_engine: Callable[..., Any],
                                                                       sql: Any, pg_dsn: str) -> None:
    engine = make_engine()
    due(engine, sql, "fine", "shell", configuration={"command": ["true"]})
    done = cli(pg_dsn, "run", "--once", "--timeout", "60", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["ok"] is True and [r["status"] for r in out["runs"]] == ["Completed"]
    nothing = cli(pg_dsn, "run", "--once")
    assert nothing.returncode == 0 and "nothing was due" in nothing.stdout
    due(engine, sql, "broken", "shell", configuration={"command": ["false"]})
    failed = cli(pg_dsn, "run", "--once", "--timeout", "60")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "Failed" in failed.stdout and "broken" in failed.stdout
    misuse = cli(pg_dsn, "run", "--timeout", "5")
    assert misuse.returncode == 2 and "--once" in misuse.stderr


def test_queue_ticks_that_come_due_while_it_waits_are_kept_queued(
        make_engine: Callable[..., Any], sql: Any) -> None:
    """Issue 32, suspect 4 (confirmed): run_due_jobs enqueued Queue ticks only in its claim pass,
    so a Queue job whose run outlasted a tick behaved as Skip under a system-cron script. While
    it waits for its runs it now keeps each tick that comes due as a Queued run, as the poll
    loop does; the next pass runs them."""
    engine = make_engine()
    job = engine.create_job("queued-while-waiting", "test-block", every="1s", configuration={"gate": "qw"},
                            concurrency_mode="Queue", max_queued_runs=5, high_frequency_ok=True)
    sql.run("UPDATE mjsched.scheduled_job SET next_run_at = now() - interval '10 milliseconds' WHERE id = %s",
            (job,))
    done: list[Any] = []
    passing = threading.Thread(target=lambda: done.append(engine.run_due_jobs(timeout=30)), daemon=True)
    passing.start()
    try:
        assert drivers.started("qw").wait(10), "the due run never started"
        # two ticks of the job come due while run_due_jobs waits for its run
        wait_for(lambda: sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s "
                                 "AND status = 'Queued'", (job,)) >= 2,
                 timeout=10, message="ticks due during the run kept as Queued runs")
    finally:
        drivers.gate("qw").set()
        passing.join(30)
    assert not passing.is_alive() and len(done[0]) == 1
    started = sql.one("SELECT started_at FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s "
                      "AND status = 'Completed'", (job,))
    queued = [r["scheduled_for"] for r in sql.rows("SELECT scheduled_for FROM mjsched.scheduled_job_run WHERE "
                                                 "scheduled_job_id = %s AND status = 'Queued'", (job,))]
    assert queued and all(t > started for t in queued)    # only ticks that came due during the run
