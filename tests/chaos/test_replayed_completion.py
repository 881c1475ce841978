"""A completion whose reply is lost is retried; the retry must be acknowledged.

Found by chaos (5): when ``complete_runs`` commits but its reply is lost, the
gateway retries it, the run is no longer Running, and the procedure answers
``completed = 0``. The database is right (one Completed run, counted once), but the
engine takes the 0 for "fenced out": it counts a fenced completion, logs that the
lease was taken over, and sends no notification for a run that succeeded.
"""
from __future__ import annotations

from typing import Any

import pytest

import mjsched
from mjsched.backends.base import Completion
from tests.chaos.faults import FaultPlan

pytestmark = [pytest.mark.chaos, pytest.mark.postgres, pytest.mark.timeout(60)]



class Recorder(mjsched.Notifier):
    def __init__(self) -> None:
        self.sent: list[Any] = []

    def notify(self, job: Any, run: Any, notification: Any) -> None:
        self.sent.append((job.name, run.status, notification.subject))


def test_first_completion_lands_once(make_engine: Any, sql: Any) -> None:
    """What already holds: the replay changes nothing (no double count)."""
    engine = make_engine()
    job_id = engine.create_job(name="once", driver="python", cron="0 0 1 1 *", configuration={"callable": "os:getpid"})
    token = "6f1f4a7e-0000-4000-8000-000000000001"
    assert engine.backend.acquire_job_lock(job_id, token, "t", 30)
    run_id = engine.backend.begin_job_run(job_id, token, "t")
    item = Completion(run_id, token, "Completed", None, {"n": 1}, None)
    assert engine.backend.complete_runs([item]) == {run_id: True}
    engine.backend.complete_runs([item])
    job = engine.get_job(job_id)
    assert (job.run_count, job.success_count, job.lock_token) == (1, 1, None)
    assert sql.one("SELECT status FROM mjsched.scheduled_job_run WHERE id = %s", (run_id,)) == "Completed"


def test_replayed_completion_is_acknowledged(make_engine: Any) -> None:
    engine = make_engine()
    job_id = engine.create_job(name="replay", driver="python", cron="0 0 1 1 *",
                               configuration={"callable": "os:getpid"})
    token = "6f1f4a7e-0000-4000-8000-000000000002"
    assert engine.backend.acquire_job_lock(job_id, token, "t", 30)
    run_id = engine.backend.begin_job_run(job_id, token, "t")
    item = Completion(run_id, token, "Completed", None, None, None)
    assert engine.backend.complete_runs([item]) == {run_id: True}
    assert engine.backend.complete_runs([item]) == {run_id: True}


def test_lost_reply_of_a_completion_keeps_its_notification(make_engine: Any, sql: Any) -> None:
    plan = FaultPlan(force_after={"complete_runs": 1})
    recorder = Recorder()
    engine = make_engine(connection_factory=plan.connection_factory(), notifier=recorder)
    job_id = engine.create_job(name="notify-me", driver="python", cron="0 0 1 1 *", notify_on_success=True,
                               configuration={"callable": "os:getpid"})
    run = engine.execute_job(job_id)
    assert plan.snapshot().get("after:complete_runs") == 1    # the fault did happen
    assert run.status is mjsched.RunStatus.COMPLETED               # and the database is right
    assert sql.one("SELECT success_count FROM mjsched.scheduled_job WHERE id = %s", (job_id,)) == 1
    assert engine.stats["fenced_completions"] == 0
    assert recorder.sent == [("notify-me", mjsched.RunStatus.COMPLETED, "[mjsched] notify-me succeeded")]
