"""The celery driver against a real worker (prefork, -c 2) on the real Redis, and RabbitMQ."""
from __future__ import annotations

import logging
import threading
import time
import uuid
from datetime import datetime, timezone
from typing import Any, Callable

import pytest

from mjsched.drivers.base import ExecutionContext
from mjsched.errors import ConfigurationError
from mjsched.models import RunStatus

from .conftest import AMQP_URL, Worker, worker_env

pytestmark = pytest.mark.celery

APP = "tests.celery.worker_app:app"
REDIS_BROKER = "redis://127.0.0.1:6379/15"
NEVER = "0 0 1 1 *"          # the runs here are manual


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout:g}s: {what}")


def job(engine: Any, **configuration: Any) -> str:
    configuration.setdefault("app", APP)
    return engine.create_job(f"celery-{uuid.uuid4().hex[:8]}", "celery", NEVER, configuration=configuration)


def test_send_mode_completes_once_the_broker_accepted_it(make_engine: Any, session_worker: Worker,
                                                         counters: Any) -> None:
    engine = make_engine()
    run = engine.execute_job(job(engine, task="t.add", args=[2, 3], mode="send"))
    assert run.status is RunStatus.COMPLETED, run.error_message
    task_id = run.details["task_id"]
    assert run.details["state"] == "SENT" and run.details["mode"] == "send"
    wait_for(lambda: counters.get(f"{_tag()}:executed:{task_id}") == b"1", 20, "the worker executed the task")


def test_wait_mode_mirrors_success_with_a_result_summary(make_engine: Any, session_worker: Worker) -> None:
    engine = make_engine()
    started = time.monotonic()
    run = engine.execute_job(job(engine, task="t.add", args=[2], kwargs={"y": 40}))
    assert run.status is RunStatus.COMPLETED, run.error_message
    assert run.details["state"] == "SUCCESS" and run.details["result"] == "42"
    assert run.details["worker"] == session_worker.name
    assert time.monotonic() - started < 15


def test_wait_mode_mirrors_a_remote_failure(make_engine: Any, session_worker: Worker) -> None:
    engine = make_engine()
    run = engine.execute_job(job(engine, task="t.boom"))
    assert run.status is RunStatus.FAILED
    assert "failed on the worker: ValueError: boom from the worker" in run.error_message
    assert "boom from the worker" in run.details["traceback_tail"]


def test_max_runtime_revokes_and_terminates_a_long_task(make_engine: Any, session_worker: Worker,
                                                        counters: Any) -> None:
    engine = make_engine()
    job_id = job(engine, task="t.sleep", args=[30])
    engine.update_job(job_id, max_runtime=3)
    started = time.monotonic()
    run = engine.execute_job(job_id)
    assert run.status is RunStatus.TIMEOUT, (run.status, run.error_message)
    assert time.monotonic() - started < 10
    import tests.celery.worker_app as worker_app

    task_id = _task_id_of_manual_run(job_id, run.id)
    assert counters.get(f"{_tag()}:executed:{task_id}") == b"1"    # it had started on the worker
    wait_for(lambda: worker_app.app.AsyncResult(task_id).state == "REVOKED", 15, "the task is REVOKED")
    # it would have finished at 30 s: it was terminated, not left to run
    assert counters.get(f"{_tag()}:finished:{task_id}") is None


def test_cancel_event_revokes_the_task_and_the_slot_is_free_at_once(make_engine: Any, session_worker: Worker,
                                                                    pg_dsn: str, counters: Any) -> None:
    """Shutdown or a cancel sets cancel_event: the driver revokes and returns within a poll."""
    engine = make_engine()
    job_id = job(engine, task="t.sleep", args=[30])
    result = _run_driver_directly(engine, job_id, cancel_after=2.0)
    assert not result.success and "revoked celery task t.sleep" in result.error_message
    assert result.details["revoked"] is True


def test_unknown_task_name_fails_the_run_instead_of_holding_the_slot(make_engine: Any,
                                                                      session_worker: Worker) -> None:
    engine = make_engine()
    started = time.monotonic()
    run = engine.execute_job(job(engine, task="t.no_such_task", unregistered_check=1))
    assert run.status is RunStatus.FAILED
    # Celery >= 5.3 workers store NotRegistered; older ones drop the message, and the driver asks the
    # workers (unregistered_check) instead of waiting for max_runtime.
    assert ("NotRegistered: 't.no_such_task'" in run.error_message
            or "'t.no_such_task' is not registered on any worker consuming queue" in run.error_message), \
        run.error_message
    assert time.monotonic() - started < 15


@pytest.mark.parametrize("broker", ["redis://127.0.0.1:1/0", "amqp://guest:guest@127.0.0.1:1//"])
def test_an_unreachable_broker_is_a_failed_run_within_a_bound(make_engine: Any, redis_up: None, broker: str) -> None:
    engine = make_engine()
    started = time.monotonic()
    run = engine.execute_job(job(engine, app=broker, task="t.add", args=[1, 1], mode="send", send_timeout=5))
    elapsed = time.monotonic() - started
    assert run.status is RunStatus.FAILED
    assert "task t.add not sent" in run.error_message and "127.0.0.1:1" in run.error_message
    assert "guest:guest" not in run.error_message
    assert elapsed < 12, elapsed


def test_an_unreachable_result_backend_is_a_failed_run_within_a_bound(make_engine: Any, redis_up: None) -> None:
    engine = make_engine()
    started = time.monotonic()
    run = engine.execute_job(job(engine, app=REDIS_BROKER, backend="redis://127.0.0.1:1/0", task="t.add",
                                 args=[1, 1], send_timeout=5))
    assert run.status is RunStatus.FAILED
    assert "not sent: its result backend redis://127.0.0.1:1/0" in run.error_message, run.error_message
    assert time.monotonic() - started < 10


def test_bad_app_paths_are_typed_errors(make_engine: Any, redis_up: None) -> None:
    engine = make_engine()
    with pytest.raises(ConfigurationError) as bad_form:
        job(engine, app="not an app path", task="t.add")
    assert bad_form.value.field == "configuration.app"
    with pytest.raises(ConfigurationError) as bad_args:
        job(engine, task="t.add", args={"x": 1})
    assert bad_args.value.field == "configuration.args"
    with pytest.raises(ConfigurationError) as bad_mode:
        job(engine, task="t.add", mode="fire-and-forget")
    assert bad_mode.value.field == "configuration.mode"
    with pytest.raises(ConfigurationError) as bad_priority:
        job(engine, task="t.add", priority=300)
    assert bad_priority.value.field == "configuration.priority"
    # A module this process cannot import: accepted (the CLI may be on another host) but execute_job
    # refuses it before any run is recorded, naming the module.
    job_id = job(engine, app="no_such_module_xyz.tasks:app", task="t.add", mode="send")
    with pytest.raises(ConfigurationError, match="cannot import module 'no_such_module_xyz.tasks'"):
        engine.execute_job(job_id)
    assert engine.list_runs(job_id) == []
    with pytest.raises(ConfigurationError, match="has no attribute 'nope'"):
        engine.execute_job(job(engine, app="tests.celery.worker_app:nope", task="t.add", mode="send"))


def test_wait_without_a_result_backend_is_refused_at_create_job(make_engine: Any, redis_up: None) -> None:
    engine = make_engine()
    with pytest.raises(ConfigurationError) as no_backend:
        job(engine, app="tests.celery.worker_app:app_without_backend", task="t.add")
    assert no_backend.value.field == "configuration.mode" and "no result backend" in str(no_backend.value)
    with pytest.raises(ConfigurationError) as url_without_backend:
        job(engine, app="redis://127.0.0.1:6379/15", task="t.add", mode="wait")
    assert "needs a result backend" in str(url_without_backend.value)
    job(engine, app="tests.celery.worker_app:app_without_backend", task="t.add", mode="send")   # fine


def test_the_task_id_is_derived_from_the_run() -> None:
    from mjsched.drivers.celery import task_id_for
    from mjsched.models import JobRun

    def run(run_id: str, tick: datetime | None) -> JobRun:
        return JobRun(run_id, "j", tick, RunStatus.RUNNING, None, None, None, None, None, None, None, None, None,
                      None)

    tick = datetime(2026, 12, 4, 6, 0, 1, tzinfo=timezone.utc)
    job_id = str(uuid.uuid4())
    first = task_id_for(job_id, run(str(uuid.uuid4()), tick))
    assert first == task_id_for(job_id, run(str(uuid.uuid4()), tick))        # same tick, another run row
    assert first != task_id_for(job_id, run(str(uuid.uuid4()), tick.replace(second=2)))
    assert first != task_id_for(str(uuid.uuid4()), run(str(uuid.uuid4()), tick))
    assert first != task_id_for(job_id, run(str(uuid.uuid4()), tick), attempt=2)
    manual = str(uuid.uuid4())
    assert task_id_for(job_id, run(manual, None)) == task_id_for(job_id, run(manual, None))
    assert uuid.UUID(first).version == 5


def test_a_resent_run_is_refused_by_the_duplicate_guard(make_engine: Any, session_worker: Worker,
                                                        counters: Any) -> None:
    """The same run sent twice (an engine that died after sending, say): one execution."""
    engine = make_engine()
    job_id = job(engine, task="t.tick", args=["guarded"], mode="send")
    context = _context(engine, job_id, tick=datetime(2026, 12, 4, 6, 0, 0, tzinfo=timezone.utc))
    from mjsched.drivers.celery import CeleryJob

    first = CeleryJob().execute(context)
    second = CeleryJob().execute(context)
    assert first.success and second.success
    task_id = first.details["task_id"]
    assert second.details["task_id"] == task_id
    wait_for(lambda: counters.get(f"{_tag()}:delivered:{task_id}") == b"2", 20, "both messages delivered")
    time.sleep(0.5)
    assert counters.get(f"{_tag()}:executed:{task_id}") == b"1"
    # The refusal of a duplicate whose first execution finished (or still runs) records nothing:
    # the first one's SUCCESS stands (a refusal is recorded only for an id nobody will finish).
    import tests.celery.worker_app as worker_app

    assert worker_app.app.AsyncResult(task_id).state == "SUCCESS"


def test_wait_mode_does_not_send_a_finished_run_again(make_engine: Any, session_worker: Worker,
                                                      counters: Any) -> None:
    engine = make_engine()
    job_id = job(engine, task="t.add", args=[1, 2])
    context = _context(engine, job_id, tick=datetime(2026, 12, 4, 6, 0, 0, tzinfo=timezone.utc))
    from mjsched.drivers.celery import CeleryJob

    first = CeleryJob().execute(context)
    second = CeleryJob().execute(context)
    assert first.success and second.success and second.details["result"] == "3"
    assert second.details["sent_again"] is False
    assert counters.get(f"{_tag()}:delivered:{first.details['task_id']}") == b"1"


def test_rabbitmq_broker_url_send_and_wait(make_engine: Any, rabbitmq_up: None, redis_up: None,
                                           start_worker: Callable[..., Worker]) -> None:
    queue = f"mjsched-amqp-{uuid.uuid4().hex[:8]}"
    start_worker("amqp", worker_env(MJSCHED_CELERY_BROKER=AMQP_URL, MJSCHED_CELERY_QUEUE=queue))
    engine = make_engine()
    common = {"app": AMQP_URL, "backend": "redis://127.0.0.1:6379/14", "queue": queue}
    waited = engine.execute_job(job(engine, task="t.add", args=[20, 22], **common))
    assert waited.status is RunStatus.COMPLETED, waited.error_message
    assert waited.details["result"] == "42"
    sent = engine.execute_job(job(engine, task="t.add", args=[1, 1], mode="send", **common))
    assert sent.status is RunStatus.COMPLETED and sent.details["state"] == "SENT"


# -- helpers ---------------------------------------------------------------------------------
def _tag() -> str:
    import os

    return os.environ["MJSCHED_CELERY_TAG"]


def _task_id_of_manual_run(job_id: str, run_id: str) -> str:
    from mjsched.drivers.celery import task_id_for
    from mjsched.models import JobRun

    return task_id_for(job_id, JobRun(run_id, job_id, None, RunStatus.RUNNING, None, None, None, None, None, None,
                                      None, None, None, None))


def _context(engine: Any, job_id: str, tick: datetime | None, cancel: threading.Event | None = None
             ) -> ExecutionContext:
    from mjsched.models import JobRun

    run = JobRun(str(uuid.uuid4()), job_id, tick, RunStatus.RUNNING, None, None, None, None, None, None, None, None,
                 None, None)
    return ExecutionContext(job=engine.get_job(job_id), run=run, cancel_event=cancel or threading.Event(),
                            logger=logging.getLogger("mjsched.test"))


def _run_driver_directly(engine: Any, job_id: str, cancel_after: float) -> Any:
    from mjsched.drivers.celery import CeleryJob

    cancel = threading.Event()
    context = _context(engine, job_id, tick=None, cancel=cancel)
    timer = threading.Timer(cancel_after, cancel.set)
    timer.start()
    started = time.monotonic()
    try:
        result = CeleryJob().execute(context)
    finally:
        timer.cancel()
    assert time.monotonic() - started < cancel_after + 3
    return result
