"""`jobs why`: every reason code produced on purpose against a real PostgreSQL, one case each.

Each case arranges the database as the situation it names leaves it (plain SQL: the rows the
engines and procedures write), asks ``engine.why`` (the one read query, ``why_facts``, and the
pure ``mjsched.why.explain``), and checks that the code is there and that its sentence names the
facts behind it (the run, the engine, the instants). ``test_every_code_has_a_case`` fails for a
code of ``REASON_CODES`` no case produces. Engines are registry rows on another host (their
liveness is their last_seen_at; the pid probe is for this host only).
"""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import pytest

from mjsched.why import REASON_CODES, RESERVED_CODES, WhyReport

pytestmark = pytest.mark.postgres
UTC = timezone.utc
HOUR = timedelta(hours=1)


def t(value: datetime) -> str:
    """An instant as the sentences write it."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


class Arena:
    """One database, one engine to ask, and the rows a case arranges."""

    def __init__(self, sql: Any, engine: Any) -> None:
        self.sql, self.engine = sql, engine
        self.now: datetime = sql.one("SELECT now()")
        self.hour: datetime = self.now.replace(minute=0, second=0, microsecond=0)   # the last hourly tick

    def job(self, name: str = "nightly", *, driver: str = "shell", **columns: Any) -> str:
        job_id = self.engine.create_job(name, driver, cron="0 * * * *", configuration={"command": ["true"]})
        self.sql.run("UPDATE mjsched.scheduled_job SET created_at = %s WHERE id = %s",
                     (self.hour - timedelta(days=2), job_id))
        if columns:
            self.set(job_id, **columns)
        return job_id

    def set(self, job_id: str, **columns: Any) -> None:
        assignments = ", ".join(f"{k} = %({k})s" for k in columns)
        self.sql.run(f"UPDATE mjsched.scheduled_job SET {assignments} WHERE id = %(id)s", {**columns, "id": job_id})

    def run(self, job_id: str, scheduled_for: datetime | None, status: str, *, started: datetime | None = None,
            completed: datetime | None = None, engine: str = "e1", error: str | None = None,
            details: dict[str, Any] | None = None, attempt: int = 1, retry_at: datetime | None = None,
            queued_at: datetime | None = None, lease: datetime | None = None) -> str:
        run_id = str(uuid.uuid4())
        token = str(uuid.uuid4()) if status == "Running" else None
        self.sql.run("""INSERT INTO mjsched.scheduled_job_run (id, scheduled_job_id, scheduled_for, status, success,
                            error_message, details, queued_at, started_at, completed_at, executed_by_instance,
                            lock_token, lease_expires_at, attempt, retry_at)
                        VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)""",
                     (run_id, job_id, scheduled_for, status, status == "Completed" if completed else None, error,
                      json.dumps(details) if details else None, queued_at, started, completed,
                      None if status == "Queued" else engine, token,
                      (lease or self.now + 10 * HOUR) if status == "Running" else None, attempt, retry_at))
        return run_id

    def lock(self, job_id: str, engine: str, until: datetime, run_id: str | None = None) -> None:
        token = self.sql.one("SELECT lock_token FROM mjsched.scheduled_job_run WHERE id = %s", (run_id,)) \
            if run_id else str(uuid.uuid4())
        self.sql.run("""UPDATE mjsched.scheduled_job SET lock_token = %s, locked_at = %s, locked_by_instance = %s,
                               expected_completion_at = %s WHERE id = %s""",
                     (token, self.now - timedelta(minutes=5), engine, until, job_id))

    def engine_row(self, name: str = "e1", *, cap: int = 5, drivers: str | None = None, silent: float = 0.0,
                   stopped: bool = False) -> None:
        self.sql.run("""INSERT INTO mjsched.engine_instance (instance, host, pid, version, started_at, last_seen_at,
                            stopped_at, heartbeat_seconds, max_concurrent_jobs, allowed_drivers)
                        VALUES (%s, 'elsewhere', 4242, 'test', now() - interval '1 day',
                                now() - make_interval(secs => %s), CASE WHEN %s THEN now() END, 1, %s, %s)""",
                     (name, silent, stopped, cap, drivers))


@dataclass
class Case:
    code: str
    arrange: Callable[[Arena], Any]          # returns the job id, or (job id, at)
    names: Callable[[Arena, Any], list[str]] = field(default=lambda a, x: [])   # texts the sentence must hold
    blocking: bool | None = None

    def __str__(self) -> str:
        return self.code


def _due(a: Arena, **columns: Any) -> str:
    """A job whose next run (an hour's tick, past) is due, and a live engine."""
    a.engine_row()
    return a.job(next_run_at=a.hour, **columns)


def ran(a: Arena) -> Any:
    job = a.job(next_run_at=a.hour + HOUR)
    tick = a.hour - HOUR
    a.arena_run = a.run(job, tick, "Completed", started=tick, completed=tick + timedelta(seconds=3))  # type: ignore
    return job, tick + timedelta(minutes=20)


def running(a: Arena) -> Any:
    job = a.job(next_run_at=a.hour)
    a.arena_run = a.run(job, a.hour, "Running", started=a.hour, engine="e7")  # type: ignore
    return job


def queued(a: Arena) -> Any:
    job = a.job(concurrency_mode="Queue", next_run_at=a.hour - HOUR)
    a.arena_run = a.run(job, a.hour - HOUR, "Running", started=a.hour - HOUR, engine="e2")  # type: ignore
    a.run(job, a.hour, "Queued", queued_at=a.hour)
    return job, a.hour


def retry_pending(a: Arena) -> Any:
    job = a.job(next_run_at=a.hour + HOUR)
    a.run(job, a.hour, "Failed", started=a.hour, completed=a.hour + timedelta(seconds=1), error="boom")
    a.arena_retry = a.now + timedelta(minutes=10)  # type: ignore
    a.arena_run = a.run(job, a.hour, "Queued", attempt=2, queued_at=a.now, retry_at=a.arena_retry)  # type: ignore
    return job, a.hour


def skipped_missed(a: Arena) -> Any:
    job = a.job(missed_run_policy="Skip", next_run_at=a.hour + HOUR)
    tick = a.hour - 4 * HOUR
    a.arena_run = a.run(job, tick, "Skipped", started=a.hour, completed=a.hour, engine="e3",  # type: ignore
                        error="missed-run policy Skip: 4 tick(s) passed while no engine ran this job",
                        details={"missed": 4})
    return job, tick


def refused(a: Arena) -> Any:
    job = a.job(next_run_at=a.hour + HOUR)
    a.run(job, a.hour, "Skipped", started=a.hour, completed=a.hour, engine="e4",
          error="not run: UnknownDriver: no driver named 'shell' is registered; fix the job's driver or configuration")
    return job, a.hour


def set_aside(a: Arena) -> Any:
    a.engine_row()
    job = a.job()
    a.sql.run("UPDATE mjsched.scheduled_job SET cron_expression = '61 * * * *', next_run_at = NULL WHERE id = %s",
              (job,))
    return job


def not_started(a: Arena) -> Any:
    job = a.job(next_run_at=a.hour + HOUR)
    a.arena_run = a.run(job, a.hour, "Skipped", started=a.hour, completed=a.hour, engine="e5",  # type: ignore
                        error="not started: RuntimeError: the pool refused it")
    return job, a.hour


def retry_dropped(a: Arena) -> Any:
    job = a.job(next_run_at=a.hour + HOUR)
    a.run(job, a.hour - HOUR, "Failed", started=a.hour - HOUR, completed=a.hour - HOUR, error="boom")
    a.run(job, a.hour - HOUR, "Skipped", attempt=2, queued_at=a.hour - HOUR, completed=a.hour,
          error="retry not run: the next tick (x) came due first (concurrency_mode Skip)")
    return job, a.hour - HOUR


def driver_not_allowed(a: Arena) -> Any:
    a.engine_row("only-http", drivers="http,python")
    return a.job(next_run_at=a.hour)


def before_created(a: Arena) -> Any:
    job = a.job(next_run_at=a.hour + HOUR)
    return job, a.hour - timedelta(days=3)


def skipped_overlap(a: Arena) -> Any:
    job = a.job(next_run_at=a.hour + HOUR)
    tick = a.hour - HOUR
    a.arena_run = a.run(job, tick - HOUR, "Completed", started=tick - HOUR, completed=tick + timedelta(minutes=5),  # type: ignore
                        engine="e6")
    return job, tick


def queue_full(a: Arena) -> Any:
    job = a.job(concurrency_mode="Queue", max_queued_runs=1, next_run_at=a.hour + HOUR)
    tick = a.hour - HOUR
    a.arena_run = a.run(job, tick - 2 * HOUR, "Completed", started=tick - 2 * HOUR,  # type: ignore
                        completed=tick + timedelta(minutes=5))
    return job, tick


def coalesced(a: Arena) -> Any:
    job = a.job(next_run_at=a.hour + HOUR)
    tick = a.hour - HOUR
    a.arena_run = a.run(job, tick - 2 * HOUR, "Completed", started=tick + timedelta(minutes=30),  # type: ignore
                        completed=tick + timedelta(minutes=31), engine="e8")
    return job, tick


def history_purged(a: Arena) -> Any:
    job = a.job(next_run_at=a.hour + HOUR, run_count=40)
    a.run(job, a.hour, "Completed", started=a.hour, completed=a.hour)
    return job, a.hour - 5 * HOUR


def rescheduled(a: Arena) -> Any:
    job = a.job(next_run_at=a.hour + HOUR)
    return job, a.hour - HOUR


def paused(a: Arena) -> Any:
    a.engine_row()
    return a.job(status="Paused")


def disabled(a: Arena) -> Any:
    a.engine_row()
    return a.job(status="Disabled")


def pending(a: Arena) -> Any:
    a.engine_row()
    return a.job(status="Pending")


def expired(a: Arena) -> Any:
    a.engine_row()
    a.arena_end = a.hour - HOUR  # type: ignore
    return a.job(status="Expired", start_at=a.hour - 30 * HOUR, end_at=a.arena_end)


def before_window(a: Arena) -> Any:
    a.engine_row()
    a.arena_start = a.hour + 48 * HOUR  # type: ignore
    return a.job(start_at=a.arena_start, next_run_at=a.arena_start)


def after_window(a: Arena) -> Any:
    a.engine_row()
    a.arena_end = a.now - timedelta(minutes=1)  # type: ignore
    return a.job(start_at=a.hour - 30 * HOUR, end_at=a.arena_end, next_run_at=a.hour)


def unscheduled(a: Arena) -> Any:
    a.engine_row()
    job = a.job()
    a.sql.run("UPDATE mjsched.scheduled_job SET next_run_at = NULL WHERE id = %s", (job,))
    return job


def already_served(a: Arena) -> Any:
    job = _due(a)
    a.run(job, a.hour + HOUR, "Completed", started=a.now, completed=a.now)
    return job


def scheduled(a: Arena) -> Any:
    a.engine_row()
    return a.job(next_run_at=a.hour + HOUR)


def due(a: Arena) -> Any:
    return _due(a)


def locked(a: Arena) -> Any:
    job = _due(a)
    a.arena_run = a.run(job, None, "Running", started=a.now - timedelta(minutes=5))  # type: ignore  (a manual run)
    a.lock(job, "e1", a.now + timedelta(minutes=30), a.arena_run)  # type: ignore
    return job


def locked_by_gone_engine(a: Arena) -> Any:
    job = _due(a)
    a.engine_row("gone-9", silent=3600)
    a.arena_run = a.run(job, None, "Running", started=a.now - timedelta(minutes=5), engine="gone-9")  # type: ignore
    a.lock(job, "gone-9", a.now + timedelta(minutes=30), a.arena_run)  # type: ignore
    return job


def lease_lapsed(a: Arena) -> Any:
    job = _due(a)
    a.lock(job, "e1", a.now - timedelta(minutes=1))
    return job


def queue_ahead(a: Arena) -> Any:
    job = _due(a, concurrency_mode="Queue")
    a.run(job, a.hour - HOUR, "Queued", queued_at=a.hour - HOUR)
    return job


def tag_limit(a: Arena) -> Any:
    """A job of tag etl (limit 1) is Running: the asked job, due and of the same tag, waits for its slot."""
    a.engine_row()
    other = a.job("etl-busy", next_run_at=a.hour + HOUR)
    a.engine.update_job(other, tags=["etl"])
    a.run(other, a.hour, "Running", started=a.hour)
    a.engine.set_tag_limit("etl", 1)
    job = a.job(next_run_at=a.hour)
    a.engine.update_job(job, tags=["etl"])
    return job


def backlog(a: Arena) -> Any:
    a.engine_row(cap=1)
    a.job("earlier", next_run_at=a.hour - 2 * HOUR)
    return a.job(next_run_at=a.hour)


def no_engine(a: Arena) -> Any:
    a.engine_row("old-engine", stopped=True, silent=600)
    return a.job(next_run_at=a.hour)


def driver_partly_allowed(a: Arena) -> Any:
    a.engine_row("runs-all")
    a.engine_row("only-http", drivers="http")
    return a.job(next_run_at=a.hour)


def engines_full(a: Arena) -> Any:
    a.engine_row(cap=1)
    other = a.job("busy", next_run_at=a.hour + HOUR)
    a.run(other, a.hour, "Running", started=a.hour)
    return a.job(next_run_at=a.hour)


def will_skip_missed(a: Arena) -> Any:
    job = _due(a, missed_run_policy="Skip")
    a.set(job, next_run_at=a.hour - 3 * HOUR)
    return job


CASES = [
    Case("ran", ran, lambda a, j: [a.arena_run, "Completed", "on engine e1", t(a.hour - HOUR)], False),
    Case("running", running, lambda a, j: [a.arena_run, "e7", t(a.hour)], False),
    Case("queued", queued, lambda a, j: [a.arena_run, "e2", "Queue"], True),
    Case("retry_pending", retry_pending, lambda a, j: ["Attempt 2", t(a.arena_retry)], True),
    Case("skipped_missed", skipped_missed, lambda a, j: ["e3", "4 later tick", "missed-run policy Skip"], True),
    Case("refused", refused, lambda a, j: ["e4", "UnknownDriver", "no driver named 'shell'"], True),
    Case("set_aside", set_aside, lambda a, j: ["cannot be computed", "61"], True),
    Case("not_started", not_started, lambda a, j: ["e5", "the pool refused it"], True),
    Case("retry_dropped", retry_dropped, lambda a, j: ["Attempt 2", "came due first"], True),
    Case("driver_not_allowed", driver_not_allowed, lambda a, j: ["'shell'", "only-http: http,python"], True),
    Case("before_created", before_created, lambda a, j: ["older than the job", t(a.hour - timedelta(days=2))], True),
    Case("skipped_overlap", skipped_overlap, lambda a, j: [a.arena_run, "e6", "concurrency_mode Skip"], True),
    Case("queue_full", queue_full, lambda a, j: [a.arena_run, "max_queued_runs (1)"], True),
    Case("coalesced", coalesced, lambda a, j: [a.arena_run, "e8", t(a.hour - 3 * HOUR), "RunOnce"], True),
    Case("history_purged", history_purged, lambda a, j: [t(a.hour), "purged"], True),
    Case("rescheduled", rescheduled, lambda a, j: [t(a.hour - HOUR), t(a.hour + HOUR)], True),
    Case("paused", paused, lambda a, j: ["Paused"], True),
    Case("disabled", disabled, lambda a, j: ["Disabled"], True),
    Case("pending", pending, lambda a, j: ["Pending"], True),
    Case("expired", expired, lambda a, j: ["Expired", t(a.arena_end)], True),
    Case("before_window", before_window, lambda a, j: [t(a.arena_start)], True),
    Case("after_window", after_window, lambda a, j: [t(a.arena_end)], True),
    Case("unscheduled", unscheduled, lambda a, j: ["no next run yet"], False),
    Case("already_served", already_served, lambda a, j: [t(a.hour), t(a.hour + HOUR)], True),
    Case("scheduled", scheduled, lambda a, j: [t(a.hour + HOUR)], False),
    Case("due", due, lambda a, j: [t(a.hour), "next poll", "within 1 s"], False),
    Case("locked", locked, lambda a, j: ["e1", a.arena_run, "a manual run"], True),
    Case("locked_by_gone_engine", locked_by_gone_engine, lambda a, j: ["gone-9", "stale", a.arena_run], True),
    Case("lease_lapsed", lease_lapsed, lambda a, j: ["e1", "lapsed"], False),
    Case("queue_ahead", queue_ahead, lambda a, j: ["1 Queued tick", t(a.hour - HOUR)], True),
    Case("tag_limit", tag_limit, lambda a, j: ["etl", "1 of 1 Running"], True),
    Case("backlog", backlog, lambda a, j: ["1 due job", "1 free slot"], True),
    Case("no_engine", no_engine, lambda a, j: ["No engine is alive", "old-engine", "stopped"], True),
    Case("driver_partly_allowed", driver_partly_allowed, lambda a, j: ["only-http", "runs-all"], False),
    Case("engines_full", engines_full, lambda a, j: ["e1 1/1"], True),
    Case("will_skip_missed", will_skip_missed, lambda a, j: [t(a.hour - 3 * HOUR), "3 later tick"], True),
]


def ask(a: Arena, arranged: Any) -> WhyReport:
    job, at = arranged if isinstance(arranged, tuple) else (arranged, None)
    return a.engine.why(job, at=at)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_each_reason_is_produced_and_names_its_facts(case: Case, sql: Any, make_engine: Callable[..., Any]) -> None:
    a = Arena(sql, make_engine())
    arranged = case.arrange(a)
    report = ask(a, arranged)
    found = [r for r in report.reasons if r.code == case.code]
    assert found, f"{case.code} not in {report.codes}: " + " | ".join(r.sentence for r in report.reasons)
    reason = found[0]
    for needle in case.names(a, arranged):
        assert str(needle) in reason.sentence, (needle, reason.sentence)
    if case.blocking is not None:
        assert reason.blocking is case.blocking, reason
    if case.blocking:
        assert report.verdict == next(r.code for r in report.reasons if r.blocking)
    json.dumps(report.as_dict())   # JSON-ready


def test_every_code_has_a_case() -> None:
    assert sorted(c.code for c in CASES) == sorted(REASON_CODES)
    assert not set(RESERVED_CODES) & set(REASON_CODES)


def test_a_job_an_engine_claims_and_runs_says_ran(make_engine: Callable[..., Any]) -> None:
    """The whole path, not arranged rows: a real engine registers (with its allow-list), claims and
    runs the job; why then names the run, and the engine's report is in the registry."""
    engine = make_engine(allowed_drivers=["shell", "python"])
    job = engine.create_job("soon", "shell", every="1h", configuration={"command": ["true"]},
                            run_immediately_if_never_run=True)
    engine.start_polling()
    from tests.support.pg import wait_for

    runs = wait_for(lambda: [r for r in engine.list_runs(job) if r.status.value == "Completed"], timeout=20)
    report = engine.why(job, at=runs[0].scheduled_for)
    assert report.verdict == "ran" and runs[0].id in report.summary
    nxt = engine.why(job)
    assert nxt.verdict == "scheduled", nxt.codes
    me = [e for e in nxt.engines if e.instance == engine.instance_name]
    assert me and me[0].allowed_drivers == frozenset({"shell", "python"}) and me[0].live


def test_an_unknown_job_and_a_naive_instant_are_refused(make_engine: Callable[..., Any]) -> None:
    from mjsched import ConfigurationError, JobNotFound

    engine = make_engine()
    with pytest.raises(JobNotFound):
        engine.why("no-such-job")
    engine.create_job("x", "shell", cron="0 * * * *", configuration={"command": ["true"]})
    with pytest.raises(ConfigurationError, match="at"):
        engine.why("x", at=datetime(2030, 1, 1))
