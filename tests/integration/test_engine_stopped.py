"""An engine whose polling was stopped, or that was closed, says so when asked to poll by hand:
``dispatch_due_jobs()`` and ``run_due_jobs()`` raise ``EngineStopped`` instead of returning
nothing while due jobs wait."""
from __future__ import annotations

from typing import Any

import pytest

import mjsched

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]

YEARLY = "0 0 1 1 *"


def _due_job(engine: Any, name: str) -> str:
    return engine.create_job(name=name, driver="python", cron=YEARLY, run_immediately_if_never_run=True,
                             configuration={"callable": "os:getpid"})


@pytest.mark.parametrize("call", ["dispatch_due_jobs", "run_due_jobs"])
def test_polling_by_hand_after_stop_polling_raises(make_engine: Any, call: str) -> None:
    engine = make_engine()
    engine.start_polling()
    engine.stop_polling(wait=True, max_wait=10)
    job_id = _due_job(engine, f"due-after-stop-{call}")
    with pytest.raises(mjsched.EngineStopped) as info:
        getattr(engine, call)()
    assert isinstance(info.value, mjsched.SchedulerError)
    assert info.value.method == call and info.value.state == "stopped"
    assert f"{call}()" in str(info.value) and "start_polling()" in str(info.value)
    assert engine.list_runs(job_id) == []      # nothing was claimed behind the error


@pytest.mark.parametrize("call", ["dispatch_due_jobs", "run_due_jobs"])
def test_polling_by_hand_after_close_raises(make_engine: Any, call: str) -> None:
    engine = make_engine()
    engine.close()
    with pytest.raises(mjsched.EngineStopped) as info:
        getattr(engine, call)()
    assert info.value.state == "closed" and "closed" in str(info.value)


def test_polling_by_hand_without_ever_polling_still_works(make_engine: Any) -> None:
    engine = make_engine()
    job_id = _due_job(engine, "manual-only")
    engine.stop_polling()                     # never started: nothing to stop, nothing refused
    runs = engine.run_due_jobs(timeout=20)
    assert [(r.scheduled_job_id, r.status) for r in runs] == [(job_id, mjsched.RunStatus.COMPLETED)]


def test_a_restarted_engine_polls_by_hand_again(make_engine: Any) -> None:
    engine = make_engine()
    engine.start_polling()
    engine.stop_polling(wait=True, max_wait=10)
    engine.start_polling()
    assert isinstance(engine.dispatch_due_jobs(), mjsched.DispatchResult)
