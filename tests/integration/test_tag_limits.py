"""A cluster-wide concurrency limit per tag (issue 37 item 2), against the real database.

set_tag_limit("reports", 2): the claims (claim_due_jobs, sql/*/010_tags.sql) never start a run
of a job carrying the tag while two such runs are Running, whichever engine claims and however
the claims interleave; the jobs held back are visible (waiting_for_tag, tags()), and jobs of
other tags are not held behind them.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable

import pytest

import mjsched
from mjsched import ConfigurationError
from tests.support import drivers  # noqa: F401 - registers the test drivers
from tests.support.pg import wait_for

TRACE_LOCK = threading.Lock()
TRACE: dict[str, Any] = {"now": 0, "max": 0, "starts": 0, "engines": set()}


@mjsched.register_driver("test-traced")
class Traced(mjsched.BaseScheduledJob):
    """Works ``seconds`` and traces, job-side, how many traced runs work at once."""

    def execute(self, context: mjsched.ExecutionContext) -> mjsched.JobResult:
        with TRACE_LOCK:
            TRACE["now"] += 1
            TRACE["starts"] += 1
            TRACE["max"] = max(TRACE["max"], TRACE["now"])
            TRACE["engines"].add(context.run.executed_by_instance)
        try:
            context.cancel_event.wait(float(context.job.configuration.get("seconds", 0.5)))
        finally:
            with TRACE_LOCK:
                TRACE["now"] -= 1
        return mjsched.JobResult(True)


def running_with_tag(db: Any, tag: str) -> int:
    return int(db.one("SELECT count(*) FROM mjsched.scheduled_job_run r JOIN mjsched.job_tag g "
                      "ON g.scheduled_job_id = r.scheduled_job_id WHERE r.status = 'Running' AND g.tag = ?", [tag]))


def make_due(db: Any, *names: str) -> None:
    """Due now, oldest first in the order given."""
    for i, name in enumerate(names):
        db.run(f"UPDATE mjsched.scheduled_job SET next_run_at = {db.ago(60 - i)} WHERE name = ?", [name])


def blocked(engine: Any, name: str, *tags: str) -> str:
    return engine.create_job(name, "test-block", "0 0 1 1 *", configuration={"gate": name}, tags=list(tags))


def test_the_limit_holds_back_runs_and_says_who_waits(db: Any, make_engine: Callable[..., Any]) -> None:
    engine = make_engine(max_concurrent_jobs=10)
    names = [f"report-{i}" for i in range(4)]
    for name in names:
        blocked(engine, name, "reports")
    engine.set_tag_limit("reports", 2, user="ops")
    make_due(db, *names)
    result = engine.dispatch_due_jobs()
    assert result.dispatched == 2 and running_with_tag(db, "reports") == 2
    waiting = engine.waiting_for_tag()
    assert [(w.name, w.tag, w.running, w.max_running) for w in waiting] == \
        [("report-2", "reports", 2, 2), ("report-3", "reports", 2, 2)]
    assert [w.tag for w in engine.waiting_for_tag("report-3")] == ["reports"]
    assert engine.waiting_for_tag("report-0") == []
    (info,) = engine.tags()
    assert (info.tag, info.jobs, info.max_running, info.running, info.waiting) == \
        ("reports", 4, 2, 2, ("report-2", "report-3"))
    assert info.set_by_user == "ops" and info.set_by
    assert engine.dispatch_due_jobs().dispatched == 0            # still full
    drivers.gate("report-0").set()                               # one finishes: one slot
    wait_for(lambda: running_with_tag(db, "reports") == 1, timeout=20)
    assert engine.dispatch_due_jobs().dispatched == 1
    assert running_with_tag(db, "reports") == 2
    engine.set_tag_limit("reports", None)                        # lifted
    assert engine.dispatch_due_jobs().dispatched == 1
    assert running_with_tag(db, "reports") == 3 and engine.tags()[0].max_running is None
    for name in names:
        drivers.gate(name).set()


def test_jobs_of_other_tags_are_not_held_behind_a_full_tag(db: Any, make_engine: Callable[..., Any]) -> None:
    engine = make_engine(max_concurrent_jobs=3)
    limited = [f"limited-{i}" for i in range(5)]
    for name in limited:
        blocked(engine, name, "reports")
    blocked(engine, "free", "billing")
    engine.set_tag_limit("reports", 1)
    make_due(db, *limited, "free")                    # the limited ones are the oldest due
    result = engine.dispatch_due_jobs()
    assert result.dispatched == 2
    running = {r["name"] for r in db.rows("SELECT j.name FROM mjsched.scheduled_job_run r JOIN mjsched.scheduled_job j "
                                          "ON j.id = r.scheduled_job_id WHERE r.status = 'Running'")}
    assert running == {"limited-0", "free"}
    for name in [*limited, "free"]:
        drivers.gate(name).set()


def test_a_limit_of_zero_holds_every_scheduled_run_but_not_a_manual_one(db: Any,
                                                                       make_engine: Callable[..., Any]) -> None:
    engine = make_engine()
    job = engine.create_job("manual", "test-ok", "0 0 1 1 *", tags=["frozen"])
    engine.set_tag_limit("frozen", 0)
    make_due(db, "manual")
    assert engine.dispatch_due_jobs().dispatched == 0
    assert [w.name for w in engine.waiting_for_tag()] == ["manual"]
    assert engine.execute_job(job).status.value == "Completed"   # an operator's run is not held back


def test_set_tag_limit_refuses_bad_input(db: Any, make_engine: Callable[..., Any]) -> None:
    engine = make_engine()
    for tag, limit, field in (("Bad Tag", 1, "tag"), ("ok", -1, "max_running"), ("ok", 1.5, "max_running"),
                              ("ok", 100_001, "max_running"), ("ok", True, "max_running")):
        with pytest.raises(ConfigurationError) as caught:
            engine.set_tag_limit(tag, limit)
        assert caught.value.field == field
    assert engine.tags() == []
    with pytest.raises(mjsched.SchedulerError, match="max_running"):
        engine.backend.set_tag_limit("ok", -1, None)          # the procedure checks it too


@pytest.mark.postgres
def test_three_engines_never_run_more_than_the_limit(pg_db: Any, make_engine: Callable[..., Any]) -> None:
    """3 engines, a limit of 2, 6 long jobs due every second: at most 2 run at any moment, sampled
    from the database and traced by the jobs themselves; every engine polls the whole time."""
    db = pg_db
    engines = [make_engine(dsn=db.dsn, max_concurrent_jobs=5, min_poll_interval=0.01, max_poll_interval=0.2)
               for _ in range(3)]
    engines[0].set_tag_limit("reports", 2)
    for i in range(6):
        engines[0].create_job(f"long-{i}", "test-traced", every="1s", configuration={"seconds": 0.4},
                              tags=["reports"], high_frequency_ok=True)
    with TRACE_LOCK:
        TRACE.update(now=0, max=0, starts=0, engines=set())
    samples: list[int] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append(running_with_tag(db, "reports"))
            done.wait(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    for engine in engines:
        engine.start_polling()
    try:
        wait_for(lambda: TRACE["starts"] >= 12, timeout=30)
    finally:
        for engine in engines:
            engine.stop_polling(wait=True, max_wait=10)
        done.set()
        sampler.join(5)
    assert TRACE["max"] <= 2, TRACE
    assert max(samples) <= 2 and max(samples) == 2, sorted(set(samples))
    per_engine = db.rows("SELECT executed_by_instance AS e, count(*) AS n FROM mjsched.scheduled_job_run "
                         "WHERE status = 'Completed' GROUP BY executed_by_instance")
    assert sum(int(r["n"]) for r in per_engine) >= 12


@pytest.mark.postgres
def test_an_outsider_holding_a_limit_row_holds_back_only_that_tags_jobs(pg_db: Any,
                                                                         make_engine: Callable[..., Any]) -> None:
    """An operator's open transaction that locked the 'reports' limit row (``SELECT ... FOR KEY
    SHARE``, as a foreign key check or a careless query would) stalls no claim: the claim skips
    the row instead of waiting on it, holds back the jobs of that tag (their limit cannot be
    checked), and starts the rest; once the outsider lets go, the held job starts."""
    import psycopg2

    db = pg_db
    engine = make_engine(dsn=db.dsn, max_concurrent_jobs=5)
    blocked(engine, "limited", "reports")
    blocked(engine, "free", "billing")
    engine.set_tag_limit("reports", 5)
    engine.set_tag_limit("billing", 5)
    make_due(db, "limited", "free")
    outsider = psycopg2.connect(db.dsn, application_name="mjsched-test-outsider")
    try:
        with outsider.cursor() as cur:
            cur.execute("SELECT 1 FROM mjsched.tag_limit WHERE tag = 'reports' FOR KEY SHARE")
            assert cur.rowcount == 1
        result = engine.dispatch_due_jobs()
        assert result.dispatched == 1
        assert {r["name"] for r in db.rows("SELECT j.name FROM mjsched.scheduled_job_run r JOIN mjsched.scheduled_job j "
                                           "ON j.id = r.scheduled_job_id WHERE r.status = 'Running'")} == {"free"}
    finally:
        outsider.rollback()
        outsider.close()
    assert engine.dispatch_due_jobs().dispatched == 1
    assert running_with_tag(db, "reports") == 1
    for name in ("limited", "free"):
        drivers.gate(name).set()
