"""Chaos (6) and (7): hung jobs at the cap, and a graceful stop under load.

(6) As many hung jobs as the cap, each with max_runtime: they become Timeout, their
    slots are freed at once, healthy per-second jobs then run with lateness < 1 s;
    in thread isolation the ignoring threads are counted as leaked, in process
    isolation the children are killed (checked by pid) and nothing leaks.
(7) stop_polling(wait=True, max_wait=5) under load returns within 5.5 s; nothing is
    marked Completed that did not complete; heartbeats go on while draining (a
    concurrent sweep never finds a lapsed lease), and stop after the drain.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest

from mjsched import isolation
from tests.chaos import jobs as bodies
from tests.chaos.harness import create_counter_jobs, executions, report
from tests.support.pg import Sql, wait_for
from tests.support.procs import process_alive

pytestmark = [pytest.mark.chaos, pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(90)]

YEARLY = "0 0 1 1 *"


def _events(workdir: str, key: str, kind: str) -> list[list[str]]:
    try:
        with open(os.path.join(workdir, f"{key}.events")) as fh:
            return [line.split() for line in fh if line.startswith(kind + " ")]
    except FileNotFoundError:
        return []


def _once(engine: Any, name: str, callable_: str, workdir: str, **fields: Any) -> str:
    kwargs = {"dir": workdir, "key": name, **fields.pop("kwargs", {})}
    return engine.create_job(name=name, driver="python", cron=YEARLY, run_immediately_if_never_run=True,
                             configuration={"callable": callable_, "kwargs": kwargs}, **fields)


@pytest.fixture
def release() -> Any:
    bodies.RELEASE.clear()
    yield bodies.RELEASE
    bodies.RELEASE.set()   # end the hung threads of thread isolation


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_hung_jobs_at_the_cap_time_out(make_engine: Any, sql: Sql, workdir: str, release: Any, mode: str) -> None:
    cap, max_runtime = 3, 2.0
    engine = make_engine(max_concurrent_jobs=cap, lease_timeout=10.0, heartbeat_interval=0.5, max_poll_interval=0.5)
    engine.start_polling()
    hung = [_once(engine, f"hung{i}", "tests.chaos.jobs:hang", workdir, max_runtime=max_runtime, isolation=mode)
            for i in range(cap)]
    wait_for(lambda: all(_events(workdir, f"hung{i}", "start") for i in range(cap)), timeout=15,
             message="every hung job to start")
    pids = [int(_events(workdir, f"hung{i}", "start")[0][3]) for i in range(cap)]
    healthy = create_counter_jobs(engine, workdir, 3, prefix="ok")

    def timed_out() -> Any:
        rows = sql.rows("SELECT status, completed_at FROM mjsched.scheduled_job_run "
                        "WHERE scheduled_job_id = ANY(%s::uuid[])", (hung,))
        return len(rows) == cap and all(r["status"] == "Timeout" for r in rows) and max(r["completed_at"] for r in rows)

    timeout_at = wait_for(timed_out, timeout=max_runtime + 5, message="the hung runs to become Timeout")
    if mode == "process":
        wait_for(lambda: not any(process_alive(p) for p in pids), timeout=isolation.GRACE + 3,
                 message=f"isolated children {pids} to be killed")
        children_gone_s = round(time.time() - timeout_at.timestamp(), 2)
    time.sleep(4)
    leaked_while_running = engine.leaked
    engine.stop_polling(wait=True, max_wait=3)

    late = sql.rows("""SELECT extract(epoch FROM started_at - scheduled_for) AS late, status
                         FROM mjsched.scheduled_job_run
                        WHERE scheduled_job_id = ANY(%s::uuid[]) AND scheduled_for > %s""",
                    (list(healthy.values()), timeout_at))
    lateness = sorted(float(r["late"]) for r in late)
    figures: dict[str, Any] = dict(mode=mode, cap=cap, max_runtime_s=max_runtime, timeouts=engine.stats["timeouts"],
                                   leaked_while_running=leaked_while_running,
                                   healthy_runs_after_timeout=len(late),
                                   healthy_max_lateness_s=round(lateness[-1], 3) if lateness else None)
    if mode == "process":
        figures["children_killed_after_s"] = children_gone_s
        figures["live_children"] = len(isolation.live_children())
    report("hung_jobs", **figures)
    assert engine.stats["timeouts"] == cap
    assert len(late) >= 3 * 3 and all(r["status"] == "Completed" for r in late), late
    assert lateness[-1] < 1.0, lateness
    if mode == "thread":
        assert leaked_while_running == cap   # counted, and they hold no slot: the healthy jobs ran
    else:
        assert not any(process_alive(p) for p in pids) and isolation.live_children() == {}
        assert leaked_while_running == 0     # the worker threads came back once the children died


def test_graceful_stop_under_load(make_engine: Any, sql: Sql, workdir: str, release: Any) -> None:
    lease = 2.0
    engine = make_engine(max_concurrent_jobs=8, lease_timeout=lease, heartbeat_interval=0.25, max_poll_interval=0.5)
    engine.start_polling()
    ids = {
        "medium0": _once(engine, "medium0", "tests.chaos.jobs:long_job", workdir, kwargs={"seconds": 2.5}),
        "medium1": _once(engine, "medium1", "tests.chaos.jobs:long_job", workdir, kwargs={"seconds": 3.0}),
        "polite": _once(engine, "polite", "tests.chaos.jobs:long_job", workdir, kwargs={"seconds": 60}),
        "stubborn": _once(engine, "stubborn", "tests.chaos.jobs:long_job", workdir,
                          kwargs={"seconds": 60, "cooperative": False}),
    }
    counters = create_counter_jobs(engine, workdir, 4, prefix="busy")
    wait_for(lambda: all(_events(workdir, k, "start") for k in ids), timeout=15, message="the long jobs to start")
    wait_for(lambda: sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE status = 'Completed'") >= 4,
             timeout=10, message="some short runs to complete")

    monitor = Sql(sql.dsn)
    lapses: list[Any] = []
    samples = 0
    done = threading.Event()

    def watch() -> None:   # another engine's view: sweep, and look for lapsed leases
        nonlocal samples
        while not done.wait(0.1):
            swept = monitor.one("SELECT swept FROM mjsched.sweep_expired_leases()")
            lapsed = monitor.one("SELECT count(*) FROM mjsched.scheduled_job_run "
                                 "WHERE status = 'Running' AND lease_expires_at < now()")
            samples += 1
            if swept or lapsed:
                lapses.append((time.monotonic(), swept, lapsed))

    stop_db = sql.one("SELECT now()")
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    started = time.monotonic()
    engine.stop_polling(wait=True, max_wait=5)
    elapsed = time.monotonic() - started
    done.set()
    watcher.join(5)
    monitor.close()

    statuses = {k: sql.one("SELECT status FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s", (v,))
                for k, v in ids.items()}
    after = sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE started_at > %s", (stop_db,))
    wait_for(lambda: sql.one("SELECT status FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s",
                             (ids["polite"],)) == "Cancelled", timeout=5, message="the polite run to end Cancelled")
    lease_held = sql.one("SELECT lease_expires_at > now() FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s",
                         (ids["stubborn"],))
    # After the drain nothing renews the stubborn run: its lease lapses and another engine's sweep abandons it.
    wait_for(lambda: sql.one("SELECT swept FROM mjsched.sweep_expired_leases()") is not None and sql.one(
        "SELECT status FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s", (ids["stubborn"],)) == "Abandoned",
        timeout=lease + 3, message="the stubborn run's lease to lapse after the drain")
    release.set()
    time.sleep(0.3)
    completed = {r["id"] for r in sql.rows("SELECT id::text FROM mjsched.scheduled_job_run WHERE status = 'Completed'")}
    executed = {e.run_id for key in [*ids, *counters] for e in executions(workdir, key)}
    report("graceful_stop", max_wait_s=5, returned_after_s=round(elapsed, 2), statuses=statuses,
           lease_samples_during_drain=samples, lapses=len(lapses), runs_started_after_stop=after,
           completed=len(completed), completed_without_execution=len(completed - executed))
    assert elapsed <= 5.5, elapsed
    assert statuses["medium0"] == statuses["medium1"] == "Completed", statuses   # finished during the drain
    assert statuses["stubborn"] == "Running" and lease_held, statuses         # still ours when stop returned
    assert lapses == [] and samples >= 30, (lapses, samples)
    assert after == 0
    assert completed <= executed, completed - executed
    assert sql.one("SELECT status FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s",
                   (ids["stubborn"],)) == "Abandoned"   # its late return after release changed nothing
