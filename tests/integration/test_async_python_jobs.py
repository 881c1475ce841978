"""``async def`` python jobs on a real engine: they run, their value and their exception are
recorded, a timeout cancels their task; in thread and in process isolation."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import mjsched
from tests.support.pg import wait_for
from tests.support.startup import past_start

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(90)]

YEARLY = "0 0 1 1 *"


@pytest.fixture
def engine(make_engine: Any) -> Any:
    return make_engine(lease_timeout=10.0, heartbeat_interval=0.5)


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_async_job_runs_and_records_its_value(engine: Any, tmp_path: Path, isolation: str) -> None:
    marker = tmp_path / "ran"
    job_id = engine.create_job(name=f"async-{isolation}", driver="python", cron=YEARLY, isolation=isolation,
                               configuration={"callable": "tests.support.async_jobs:write_marker",
                                              "kwargs": {"path": str(marker), "text": "hello"}})
    run = engine.execute_job(job_id)
    assert run.status is mjsched.RunStatus.COMPLETED, run.error_message
    assert marker.read_text() == "hello"                 # the body ran
    assert run.details["wrote"] == "hello"                # and its return value is the result
    assert (run.details["pid"] == os.getpid()) is (isolation == "thread")


def test_async_job_claimed_by_a_poll_runs(engine: Any, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    job_id = engine.create_job(name="async-polled", driver="python", cron=YEARLY, run_immediately_if_never_run=True,
                               configuration={"callable": "tests.support.async_jobs:write_marker",
                                              "kwargs": {"path": str(marker), "text": "polled"}})
    runs = engine.run_due_jobs(timeout=20)
    assert [(r.scheduled_job_id, r.status) for r in runs] == [(job_id, mjsched.RunStatus.COMPLETED)]
    assert runs[0].details["wrote"] == "polled" and marker.read_text() == "polled"


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_async_job_that_raises_is_failed_with_the_exception(engine: Any, isolation: str) -> None:
    job_id = engine.create_job(name=f"async-raises-{isolation}", driver="python", cron=YEARLY, isolation=isolation,
                               configuration={"callable": "tests.support.async_jobs:fail_async",
                                              "kwargs": {"message": "no luck"}})
    run = engine.execute_job(job_id)
    assert run.status is mjsched.RunStatus.FAILED
    assert run.error_message == "RuntimeError: no luck" and run.details["exception_type"] == "RuntimeError"


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_async_job_past_max_runtime_is_timed_out_and_its_task_cancelled(engine: Any, tmp_path: Path,
                                                                        isolation: str) -> None:
    def attempt(max_runtime: float) -> tuple[tuple[Any, Path], bool]:
        marker = tmp_path / f"state-{max_runtime:g}"
        job_id = engine.create_job(name=f"async-hangs-{isolation}-{max_runtime:g}", driver="python", cron=YEARLY,
                                   isolation=isolation, max_runtime=max_runtime,
                                   configuration={"callable": "tests.support.async_jobs:sleep_then_mark",
                                                  "kwargs": {"path": str(marker), "seconds": 30}})
        return (engine.execute_job(job_id), marker), marker.exists()

    (run, marker), _ = past_start(attempt)   # a child that had not reached the coroutine has nothing to cancel
    assert run.status is mjsched.RunStatus.TIMEOUT and "max_runtime" in run.error_message
    # the coroutine itself was cancelled (not left sleeping on a leaked thread)
    wait_for(lambda: marker.read_text() == "cancelled", timeout=30, message="the coroutine to see its cancel")
    wait_for(lambda: engine.leaked == 0, timeout=10, message="no leaked thread")
