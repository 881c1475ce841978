"""A worker killed mid-task, a restarting worker, another application's worker (issue 33).

Each test runs real prefork workers (-c 2) on Redis and on RabbitMQ and counts executions
from the tasks' own side effects (Redis counters written by ``worker_app``: ``executed``
when a task starts, ``finished`` when it returns).

Bound stated here and in docs/guide/celery.md: a ``wait`` run whose task was cut by a
SIGKILL of its worker's whole process group ends (Failed, with the reason) within
CUT_BOUND seconds of the kill, with the driver's defaults (unregistered_check 5 s,
lost_after 10 s), the worker restarted RESTART_AFTER seconds after the kill.
"""
from __future__ import annotations

import json
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import pytest

import mjsched
from mjsched.drivers.celery import task_id_for
from mjsched.models import RunStatus
from tests.support.pg import wait_for as bounded_wait

from .conftest import AMQP_URL, REDIS_URL, Worker, worker_env

BACKEND_URL = "redis://127.0.0.1:6379/14"      # worker_app's result backend

pytestmark = pytest.mark.celery

CUT_BOUND = 30.0         # seconds from the kill until every cut run has ended
RESTART_AFTER = 2.0      # the deploy-like gap between the kill and the restart
WORK = 3.0               # seconds each task runs: the kill lands mid-task
RETRY = mjsched.RetryPolicy(max_attempts=3, initial_delay=1.0, jitter=0.0)


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    return bounded_wait(predicate, timeout=timeout, interval=0.1, message=what)


def _env(broker: str, tag: str, request: pytest.FixtureRequest) -> dict[str, str]:
    if broker == "rabbitmq":
        request.getfixturevalue("rabbitmq_up")
    return worker_env(MJSCHED_CELERY_BROKER=REDIS_URL if broker == "redis" else AMQP_URL,
                      MJSCHED_CELERY_QUEUE=tag, MJSCHED_CELERY_TAG=tag)


def _app(broker: str, tag: str) -> dict[str, str]:
    """The job's app: the broker's URL (worker_app, imported in this process, is bound to the
    session's Redis) and worker_app's result backend; the task goes to the test's own queue."""
    return {"app": REDIS_URL if broker == "redis" else AMQP_URL, "backend": BACKEND_URL, "queue": tag}


@pytest.mark.chaos                                          # ~25-40 s each: CI's second step
@pytest.mark.parametrize("broker", ["redis", "rabbitmq"])
@pytest.mark.parametrize("task", ["t.sleep", "t.tick"])      # plain (acked on receipt) / guarded (acks_late)
def test_a_worker_killed_mid_task_costs_a_retry_not_the_job(broker: str, task: str, make_engine: Any,
                                                            counters: Any, redis_up: None, tmp_path: Path,
                                                            request: pytest.FixtureRequest) -> None:
    tag = f"mjsched-lost-{uuid.uuid4().hex[:8]}"
    env = _env(broker, tag, request)
    worker = Worker(f"w-{tag}", env, tmp_path)
    try:
        worker.wait_ready()
        engine = make_engine(max_concurrent_jobs=4, max_poll_interval=0.5)
        args: dict[str, Any] = {"args": [WORK]} if task == "t.sleep" else {"args": [tag], "kwargs": {"work": WORK}}
        job_ids = [engine.create_job(f"lost-{i}-{tag}", "celery", "* * * * * *", retry=RETRY,
                                     concurrency_mode="Queue", max_queued_runs=1,
                                     configuration={"task": task, **_app(broker, tag), **args})
                   for i in (1, 2)]
        engine.start_polling()

        def executing() -> list[Any]:
            """The Running runs whose task has started on the worker (and not finished)."""
            running = [r for r in engine.list_runs(status="Running", limit=50) if r.scheduled_job_id in job_ids]
            started = [r for r in running
                       if counters.get(f"{tag}:executed:{task_id_for(r.scheduled_job_id, r, r.attempt)}")
                       and not counters.get(f"{tag}:finished:{task_id_for(r.scheduled_job_id, r, r.attempt)}")]
            return started if {r.scheduled_job_id for r in started} == set(job_ids) else []

        cut = wait_for(executing, 30, "both jobs' tasks executing on the worker")
        worker.stop()                                   # SIGKILL of the whole process group, mid-task
        killed = time.monotonic()
        killed_at = datetime.now(timezone.utc)
        time.sleep(RESTART_AFTER)                       # the gap of a restart (scenario, not a sync)
        restarted = Worker(f"w-{tag}", env, tmp_path, life=2)
        try:
            restarted.wait_ready()

            def ended() -> list[Any]:
                runs = [engine.backend.get_run(r.id) for r in cut]
                return runs if all(r is not None and r.status is not RunStatus.RUNNING for r in runs) else []

            cut_ended = wait_for(ended, CUT_BOUND + 10, "the cut runs ended")
            cut_seconds = time.monotonic() - killed

            def later_ticks_completed() -> bool:
                runs = [r for j in job_ids for r in engine.list_runs(j, status="Completed", limit=100)]
                return all(sum(1 for r in runs if r.scheduled_job_id == j and r.scheduled_for
                               and r.scheduled_for > killed_at) >= 2 for j in job_ids)

            wait_for(later_ticks_completed, 40, "two later ticks of each job Completed")
            for job_id in job_ids:
                engine.pause_job(job_id)
            engine.stop_polling(wait=True, max_wait=30)
        finally:
            restarted.stop()
    finally:
        worker.stop()

    runs = [r for j in job_ids for r in engine.list_runs(j, limit=1000)]
    by_tick: dict[tuple[str, Any], list[Any]] = {}
    for run in runs:
        by_tick.setdefault((run.scheduled_job_id, run.scheduled_for), []).append(run)

    def count(kind: str, run: Any) -> int:
        return int(counters.get(f"{tag}:{kind}:{task_id_for(run.scheduled_job_id, run, run.attempt)}") or 0)

    for run in cut_ended:
        assert run.status is RunStatus.FAILED, (run.status, run.error_message)
        assert ("lost: none of the workers consuming queue" in run.error_message
                or "started once already" in run.error_message), run.error_message
    retried = [r for r in runs if r.attempt > 1 and any(r.scheduled_for == c.scheduled_for
                                                        and r.scheduled_job_id == c.scheduled_job_id
                                                        for c in cut_ended)]
    assert len([r for r in retried if r.status is RunStatus.COMPLETED]) == len(cut_ended), \
        [(r.attempt, r.status, r.error_message) for r in retried]
    assert all(count("executed", r) <= 1 for r in runs), "a task id executed twice"
    twice = [tick for tick, attempts in by_tick.items() if sum(count("finished", r) for r in attempts) > 1]
    assert twice == [], f"ticks whose task finished twice: {twice}"
    for run in runs:
        if run.status is RunStatus.COMPLETED:
            assert count("finished", run) == 1, (run.id, run.attempt)
    assert cut_seconds < CUT_BOUND, cut_seconds
    summary = {"broker": broker, "task": task, "cut_runs_ended_after_s": round(cut_seconds, 1),
               "runs": len(runs), "ticks": len(by_tick),
               "statuses": {s.value: sum(1 for r in runs if r.status is s) for s in RunStatus
                            if any(r.status is s for r in runs)},
               "executions_started": sum(count("executed", r) for r in runs),
               "executions_finished": sum(count("finished", r) for r in runs),
               "cut_reasons": [r.error_message[:60] for r in cut_ended], "retried_completed": len(retried)}
    print(json.dumps(summary))


@pytest.mark.parametrize("broker", ["redis", "rabbitmq"])
def test_another_apps_worker_does_not_fail_or_revoke_our_waiting_run(broker: str, make_engine: Any, counters: Any,
                                                                     redis_up: None, tmp_path: Path,
                                                                     request: pytest.FixtureRequest) -> None:
    """Ours is down (restarting) while another application's worker answers on the broker: the
    run waits (its task is unknown to that worker, which does not consume our queue) and
    completes once ours is back; nothing is revoked."""
    tag = f"mjsched-other-{uuid.uuid4().hex[:8]}"
    env = _env(broker, tag, request)
    other = Worker(f"other-{tag}", dict(env, MJSCHED_CELERY_QUEUE=f"{tag}-other", MJSCHED_OTHER_QUEUE=f"{tag}-other"),
                   tmp_path, app="tests.celery.other_app")
    ours: Worker | None = None
    try:
        other.wait_ready()
        engine = make_engine()
        job_id = engine.create_job(f"other-{tag}", "celery", "0 0 1 1 *", configuration={
            "task": "t.add", "args": [20, 22], "unregistered_check": 1, **_app(broker, tag)})
        outcome: dict[str, Any] = {}
        waiter = threading.Thread(target=lambda: outcome.update(run=engine.execute_job(job_id)), daemon=True)
        waiter.start()
        waiter.join(9.0)            # several questions to the workers (from 1 s on, every ~3 s)
        assert waiter.is_alive(), f"the run ended while our worker was down: {outcome['run'].error_message}"
        ours = Worker(f"ours-{tag}", env, tmp_path)
        ours.wait_ready()
        waiter.join(30.0)
        assert not waiter.is_alive(), "the run did not end once our worker was back"
    finally:
        other.stop()
        if ours is not None:
            ours.stop()
    run = outcome["run"]
    assert run.status is RunStatus.COMPLETED, run.error_message
    assert run.details["result"] == "42" and not run.details.get("revoked")
    assert counters.get(f"{tag}:executed:{run.details['task_id']}") == b"1"
