"""Tags, and pause or resume by tag (issue 37 item 1), against the real database.

A job carries a set of tags (job_tag, sql/*/010_tags.sql), written with the job and checked
before anything is written; pause_jobs(tag=...) pauses a whole group in one call, recording the
database login, the application's user, the reason and, optionally, the end of the window,
which the claims enforce (the first poll at or after it resumes the jobs); resume_jobs undoes it.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import pytest

from mjsched import ConfigurationError, JobStatus
from mjsched.errors import SchedulerError
from tests.support import drivers  # noqa: F401 - registers the test drivers

SHELL = {"command": ["true"]}


def job_count(db: Any) -> int:
    return int(db.one("SELECT count(*) FROM mjsched.scheduled_job"))


def make_jobs(engine: Any) -> dict[str, str]:
    return {
        "bill-a": engine.create_job("bill-a", "shell", "0 2 * * *", configuration=SHELL, tags={"billing", "nightly"}),
        "bill-b": engine.create_job("bill-b", "shell", "0 3 * * *", configuration=SHELL, tags=["billing"]),
        "report": engine.create_job("report", "shell", "0 4 * * *", configuration=SHELL, tags="reports, nightly"),
        "plain": engine.create_job("plain", "shell", "0 5 * * *", configuration=SHELL),
    }


def test_a_job_keeps_its_tags_and_list_jobs_filters_by_one(db: Any, make_engine: Callable[..., Any]) -> None:
    engine = make_engine()
    ids = make_jobs(engine)
    assert engine.get_job(ids["bill-a"]).tags == ("billing", "nightly")
    assert engine.get_job(ids["report"]).tags == ("nightly", "reports")
    assert engine.get_job(ids["plain"]).tags == ()
    assert [j.name for j in engine.list_jobs(tag="billing")] == ["bill-a", "bill-b"]
    assert [j.name for j in engine.list_jobs(tag="nightly")] == ["bill-a", "report"]
    assert engine.list_jobs(tag="nothing") == []
    assert [j.name for j in engine.list_jobs("Active", tag="reports")] == ["report"]
    changed = engine.update_job(ids["bill-a"], tags=["billing", "eu"])       # the whole set is replaced
    assert changed.tags == ("billing", "eu")
    assert [j.name for j in engine.list_jobs(tag="nightly")] == ["report"]
    assert engine.update_job(ids["bill-a"], description="x").tags == ("billing", "eu")   # untouched
    assert engine.update_job(ids["bill-a"], tags=()).tags == ()


@pytest.mark.parametrize("bad, why", [
    ("", "must not be empty"),
    ("Billing", "may hold only"),
    ("bill ing", "may hold only"),
    ("-x", "starts with a letter"),
    ("x" * 65, "at most 64"),
    (["ok", 7], "must be a string"),
    ([f"t{i}" for i in range(33)], "at most 32"),
    (12, "must be a set or list"),
])
def test_a_bad_tag_is_a_typed_error_naming_it_before_anything_is_written(
        db: Any, make_engine: Callable[..., Any], bad: Any, why: str) -> None:
    engine = make_engine()
    job_id = engine.create_job("kept", "shell", "0 2 * * *", configuration=SHELL, tags=["a"])
    with pytest.raises(ConfigurationError, match=why) as caught:
        engine.create_job("new", "shell", "0 2 * * *", configuration=SHELL,
                          tags=bad if isinstance(bad, (list, int)) else [bad])
    assert caught.value.field == "tags"
    assert job_count(db) == 1
    with pytest.raises(ConfigurationError, match=why):
        engine.update_job(job_id, tags=bad if isinstance(bad, (list, int)) else [bad])
    assert engine.get_job(job_id).tags == ("a",)
    if isinstance(bad, str):
        with pytest.raises(ConfigurationError, match=why) as caught:
            engine.pause_jobs(tag=bad)
        assert caught.value.field == "tag"


def test_the_procedures_refuse_a_bad_tag_themselves(db: Any, make_engine: Callable[..., Any]) -> None:
    """A client that skips the API (plain SQL, another language) meets the same rule."""
    engine = make_engine()
    job_id = engine.create_job("kept", "shell", "0 2 * * *", configuration=SHELL)
    with pytest.raises(SchedulerError, match="fields.tags"):
        engine.backend.update_job(job_id, {"tags": ["Not OK"]})
    with pytest.raises(SchedulerError, match="tag="):
        engine.backend.pause_jobs("Not OK", None, None, None)
    assert engine.get_job(job_id).tags == ()


def test_pause_by_tag_pauses_the_group_in_one_call_and_records_who_why_and_until(
        db: Any, make_engine: Callable[..., Any]) -> None:
    engine = make_engine()
    ids = make_jobs(engine)
    engine.pause_job(ids["bill-b"])                   # paused by hand before: keeps its own pause
    until = datetime(2099, 1, 1, tzinfo=timezone.utc)
    assert engine.pause_jobs(tag="billing", reason="ledger migration", until=until, user="alice") == 1
    a = engine.get_job(ids["bill-a"])
    assert a.status is JobStatus.PAUSED
    assert (a.pause_reason, a.paused_by_user, a.paused_until) == ("ledger migration", "alice", until)
    assert a.paused_by == db.one("SELECT session_user" if db.dialect == "postgres" else "SELECT ORIGINAL_LOGIN()")
    assert a.paused_at is not None
    b = engine.get_job(ids["bill-b"])
    assert b.status is JobStatus.PAUSED and b.paused_by is None
    assert engine.get_job(ids["report"]).status is JobStatus.ACTIVE
    assert engine.pause_jobs(tag="billing") == 0          # a replay: nothing Active is left to pause
    assert engine.resume_jobs(tag="billing") == 2         # however each was paused
    for name in ("bill-a", "bill-b"):
        job = engine.get_job(ids[name])
        assert job.status is JobStatus.ACTIVE and job.paused_by is None and job.pause_reason is None
    assert engine.resume_jobs(tag="billing") == 0


def test_a_pause_record_ends_with_any_status_written(db: Any, make_engine: Callable[..., Any]) -> None:
    """So a later pause by hand (no window) is never ended by the old window."""
    engine = make_engine()
    ids = make_jobs(engine)
    engine.pause_jobs(tag="reports", until=timedelta(hours=1))
    assert engine.get_job(ids["report"]).paused_until is not None
    engine.resume_job(ids["report"])
    engine.pause_job(ids["report"])
    job = engine.get_job(ids["report"])
    assert job.status is JobStatus.PAUSED and job.paused_until is None
    assert db.one("SELECT count(*) FROM mjsched.job_pause") == 0


def test_a_maintenance_window_ends_at_the_first_claim_after_it(db: Any, make_engine: Callable[..., Any]) -> None:
    engine = make_engine()
    ids = make_jobs(engine)
    assert engine.pause_jobs(tag="nightly", reason="db upgrade", until="1h") == 2
    until = engine.get_job(ids["report"]).paused_until
    now = engine.backend.db_now()
    assert timedelta(minutes=59) < until - now <= timedelta(hours=1)
    batch = engine.backend.claim_due_jobs(engine.instance_name, 0, 30.0)   # before the window ends
    assert batch.next_due_at is not None and batch.next_due_at <= until   # the poller wakes for it
    assert engine.get_job(ids["report"]).status is JobStatus.PAUSED
    claim_at(db, until + timedelta(seconds=1))
    for name in ("bill-a", "report"):
        job = engine.get_job(ids[name])
        assert job.status is JobStatus.ACTIVE and job.paused_until is None
    assert engine.get_job(ids["bill-b"]).status is JobStatus.ACTIVE   # never paused
    assert db.one("SELECT count(*) FROM mjsched.job_pause") == 0


def test_a_window_renewed_by_a_later_pause_is_not_ended_by_the_first(db: Any,
                                                                    make_engine: Callable[..., Any]) -> None:
    engine = make_engine()
    ids = make_jobs(engine)
    engine.pause_jobs(tag="reports", until="1h")
    engine.resume_jobs(tag="reports")
    engine.pause_jobs(tag="reports", until="3h")
    claim_at(db, engine.backend.db_now() + timedelta(hours=2))
    assert engine.get_job(ids["report"]).status is JobStatus.PAUSED
    claim_at(db, engine.backend.db_now() + timedelta(hours=3, seconds=1))
    assert engine.get_job(ids["report"]).status is JobStatus.ACTIVE


def test_a_resumed_job_gets_a_next_run_from_now(db: Any, make_engine: Callable[..., Any]) -> None:
    engine = make_engine()
    ids = make_jobs(engine)
    engine.pause_jobs(tag="billing")
    engine.resume_jobs(tag="billing")
    engine.dispatch_due_jobs()                 # the engine schedules jobs that have no next run
    job = engine.get_job(ids["bill-a"])
    assert job.next_run_at is not None and job.next_run_at > engine.backend.db_now()


def test_until_must_be_later_than_now(db: Any, make_engine: Callable[..., Any]) -> None:
    engine = make_engine()
    make_jobs(engine)
    with pytest.raises(ConfigurationError) as caught:
        engine.pause_jobs(tag="billing", until=datetime(2000, 1, 1, tzinfo=timezone.utc))
    assert "until" in str(caught.value)
    with pytest.raises(ConfigurationError) as caught:
        engine.pause_jobs(tag="billing", until=datetime(2099, 1, 1))          # naive
    assert caught.value.field == "until"
    assert all(j.status is JobStatus.ACTIVE for j in engine.list_jobs())


def test_sync_jobs_scoped_to_a_tag_leaves_other_jobs_alone(db: Any, make_engine: Callable[..., Any]) -> None:
    engine = make_engine()
    make_jobs(engine)
    declared = [{"name": "team-x", "driver": "shell", "cron": "0 1 * * *", "configuration": SHELL},
                {"name": "bill-a", "driver": "shell", "cron": "0 2 * * *", "configuration": SHELL,
                 "tags": ["nightly"]}]
    result = engine.sync_jobs(declared, remove_missing="delete", tag="billing")
    assert result.created == ["team-x"] and result.removed == ["bill-b"]
    assert engine.get_job("team-x").tags == ("billing",)
    assert engine.get_job("bill-a").tags == ("billing", "nightly")
    assert sorted(j.name for j in engine.list_jobs()) == ["bill-a", "plain", "report", "team-x"]
    again = engine.sync_jobs(declared, remove_missing="delete", tag="billing")
    assert (again.created, again.updated, again.removed) == ([], [], [])


def test_ensure_job_declares_tags(db: Any, make_engine: Callable[..., Any]) -> None:
    engine = make_engine()
    job = engine.ensure_job("t", "shell", "0 2 * * *", configuration=SHELL, tags={"b", "a"})
    assert job.tags == ("a", "b")
    assert engine.ensure_job("t", "shell", "0 2 * * *", configuration=SHELL, tags=["a", "b"]) == job
    assert engine.ensure_job("t", "shell", "0 2 * * *", configuration=SHELL).tags == ()   # reset when omitted


def claim_at(db: Any, when: datetime) -> None:
    """One claim (of no job) on the test clock: the schema owner may pass p_now."""
    if db.dialect == "postgres":
        db.rows("SELECT * FROM mjsched.claim_due_jobs('test', 0, 30, ?)", [when])
    else:
        db.rows("EXEC mjsched.claim_due_jobs @p_instance = N'test', @p_max_jobs = 0, @p_lease_seconds = 30, "
                "@p_now = ?", [when.isoformat()])
