"""Three engine processes hand per-second ticks to two Celery workers (issue 16).

The issue asks for 30 jobs for 60 s; CI runs 10 jobs for 16 s per broker (the whole celery
directory must stay under ~2 minutes on a shared 2-core machine). Engine 1 is killed with
SIGKILL mid-run, then worker 1 mid-task. Counted on the worker side (Redis counters written by
the task): every task id executed at most once, every tick recorded Completed executed exactly
once (unless the worker's kill fell between the duplicate guard's claim and the task's first
line: at most once, by design), nothing executed that no run stands for (a run the killed engine held may have sent its
task or not: at most once), and no gap in any job's ticks beyond the lease
(what the RunOnce missed-run policy allows after an engine dies holding a job).
"""
from __future__ import annotations

import json
import os
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

import pytest

from mjsched.contrib.celery import GUARD_PREFIX
from mjsched.drivers.celery import task_id_for
from mjsched.models import RunStatus

from tests.chaos.harness import Worker as Engine

from .conftest import AMQP_URL, REDIS_URL, Worker, worker_env

pytestmark = [pytest.mark.celery, pytest.mark.slow]

JOBS = int(os.environ.get("MJSCHED_CELERY_CLUSTER_JOBS", "10"))
SECONDS = float(os.environ.get("MJSCHED_CELERY_CLUSTER_SECONDS", "16"))
LEASE = 5.0
# seconds each task sleeps (a worker killed at random is likely mid-task), sized so that the two
# workers' four slots keep up (about 2 task-seconds a second): backlog is not what is measured
WORK = min(0.2, 2.0 / JOBS)
DRAIN = 10.0
# SIGTERM to exit: the drain, then close() (its 5 s grace, the listener's join), then the process's
# own 3 s for lingering threads, with room for a loaded machine. An overrun fails with every
# thread's stack (tests.chaos.harness.Worker.stop).
STOP_WITHIN = 45.0


def start_engine(name: str, dsn: str, workdir: Path, env: dict[str, str]) -> Engine:
    return Engine(dsn, name, str(workdir), env=env, cap=20, lease=LEASE, max_poll=0.5, drain=DRAIN)


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout:g}s: {what}")


@pytest.mark.parametrize("broker", ["redis", "rabbitmq"])
def test_three_engines_two_workers_every_tick_executed_once(broker: str, pg_dsn: str, make_engine: Any,
                                                            start_worker: Callable[..., Worker], counters: Any,
                                                            redis_up: None, tmp_path: Path,
                                                            request: pytest.FixtureRequest) -> None:
    if broker == "rabbitmq":
        request.getfixturevalue("rabbitmq_up")
    tag = f"mjsched-cluster-{uuid.uuid4().hex[:8]}"
    env = worker_env(MJSCHED_CELERY_BROKER=REDIS_URL if broker == "redis" else AMQP_URL,
                     MJSCHED_CELERY_QUEUE=tag, MJSCHED_CELERY_TAG=tag)
    workers = [start_worker(f"w{i}-{tag}", env) for i in (1, 2)]

    admin = make_engine()
    job_ids = [admin.create_job(f"tick-{i:02d}", "celery", "* * * * * *", configuration={
        "app": "tests.celery.worker_app:app", "task": "t.tick", "args": [f"tick-{i:02d}"],
        "kwargs": {"work": WORK}, "queue": tag, "mode": "wait" if i % 2 else "send"}) for i in range(JOBS)]
    # half the jobs wait for their task (~0.2 s a run): the engine killed below is likely mid-run

    engines = [start_engine(f"e{i}", pg_dsn, tmp_path, env) for i in (1, 2, 3)]
    try:
        wait_for(lambda: all((tmp_path / f"e{i}.ready").exists() for i in (1, 2, 3)), 60, "three engines polling")
        began = time.monotonic()
        time.sleep(SECONDS * 0.4)

        def e1_running() -> bool:
            return any(r.executed_by_instance == "e1" for r in admin.list_runs(status="Running", limit=100))

        deadline = time.monotonic() + 5                         # catch it holding a run (bounded)
        while not e1_running() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)                                         # its 'wait' runs have sent their tasks
        engines[0].kill9()                                      # an engine dies mid-run
        time.sleep(SECONDS * 0.2)
        workers[0].kill9()                                      # a worker dies mid-task
        time.sleep(max(0.0, SECONDS - (time.monotonic() - began)))
        for job_id in job_ids:                                  # no new ticks from here on
            admin.pause_job(job_id)
        for engine in engines[1:]:
            engine.terminate()
        for engine in engines[1:]:
            engine.stop(STOP_WITHIN)
    finally:
        for engine in engines:
            if engine.alive():
                engine.kill9()

    runs = [run for job_id in job_ids for run in admin.list_runs(job_id, limit=1000)]
    expected = {task_id_for(run.scheduled_job_id, run): run for run in runs}
    completed = {tid for tid, run in expected.items() if run.status is RunStatus.COMPLETED}
    assert len(completed) >= JOBS * SECONDS * 0.5, f"only {len(completed)} Completed ticks"
    assert all(expected[tid].details["task_id"] == tid for tid in completed)

    def executed() -> dict[str, int]:
        ids = [i.decode() for i in counters.smembers(f"{tag}:executed")]
        values = counters.mget([f"{tag}:executed:{i}" for i in ids]) if ids else []
        return {i: int(v) for i, v in zip(ids, values)}

    def cut_by_the_kill() -> set[str]:
        """Tasks the killed worker had claimed (the guard's key, owned by it) and never executed:
        killed between the guard's claim and the task's first line, which the at-most-once guard
        then refuses to run again (mjsched.contrib.celery). Twice in CI the assertion below,
        without these, found one such task missing."""
        missing = sorted(completed - set(executed()))
        owners = counters.mget([f"{GUARD_PREFIX}{tid}:0" for tid in missing]) if missing else []
        return {tid for tid, owner in zip(missing, owners) if owner is not None and owner.decode() == workers[0].name}

    # The surviving worker picks up what the killed one held after the visibility timeout (Redis) or
    # at once (RabbitMQ: the connection closed); bounded.
    wait_for(lambda: completed <= set(executed()) | cut_by_the_kill(), 40,
             "every Completed tick's task executed, or cut by the worker's kill (missing: %d)"
             % len(completed - set(executed()) - cut_by_the_kill()))
    assert len(cut_by_the_kill()) <= 2, "more tasks cut than the killed worker could run at once (-c 2)"
    time.sleep(1.0)
    counts = executed()
    delivered = {i: int(counters.get(f"{tag}:delivered:{i}") or 0) for i in counts}
    cut = [r for r in runs if r.executed_by_instance == "e1" and r.status is not RunStatus.COMPLETED]
    summary = {
        "killed_engine_runs_cut": len(cut),
        "runs_by_engine": {e: sum(1 for r in runs if r.executed_by_instance == e)
                           for e in sorted({str(r.executed_by_instance) for r in runs})},
        "broker": broker, "jobs": JOBS, "seconds": SECONDS, "runs": len(runs), "completed": len(completed),
        "statuses": {s.value: sum(1 for r in runs if r.status is s) for s in RunStatus if any(r.status is s for r in runs)},
        "executed": len(counts), "executions": sum(counts.values()),
        "duplicate_deliveries_refused": sum(delivered.values()) - sum(counts.values()),
        # started on the killed worker and never finished: the kill hit it mid-task
        "killed_mid_task": sum(1 for i in counts if counters.get(f"{tag}:finished:{i}") is None),
        "claimed_then_killed_before_running": len(cut_by_the_kill()),
    }
    print(json.dumps(summary))
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    assert {i for i, n in counts.items() if n > 1} == set(), "a task id executed more than once"
    assert set(counts) <= set(expected), "a task executed that no run stands for"
    for job_id in job_ids:
        # One run per tick; a tick is only left out while the job's previous run was still open (the
        # Skip policy: a 'wait' run holds its job; the killed engine's run holds it until its lease ends).
        mine = sorted((r for r in runs if r.scheduled_job_id == job_id and r.scheduled_for),
                      key=lambda r: r.scheduled_for)
        ticks = [r.scheduled_for for r in mine]
        assert len(ticks) == len(set(ticks)), f"job {job_id}: a tick has two runs"
        for a, b in zip(mine, mine[1:]):
            held = ((a.completed_at - a.scheduled_for).total_seconds() if a.completed_at else LEASE + 4)
            gap = (b.scheduled_for - a.scheduled_for).total_seconds()
            assert gap <= held + 3, f"job {job_id}: ticks lost after {a.scheduled_for} ({a.status.value}, " \
                                    f"open {held:.1f} s): next tick run {gap:g} s later"
