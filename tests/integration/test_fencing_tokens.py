"""Runs record the job's version they started with (issue 36 item 3), and every start of a job
takes the next fencing token (issue 37 item 5): claims of due ticks, queued runs started,
manual starts and the previous release's acquire + begin, across engines and take-overs.
check_fence passes the run that holds its lease and refuses the one taken over."""
from __future__ import annotations

import dataclasses
import uuid
from typing import Any, Callable

import psycopg2
import pytest

import mjsched
from tests.support import drivers  # noqa: F401 - registers the test drivers
from tests.support.pg import Sql

pytestmark = pytest.mark.postgres

NEVER = "0 0 1 1 *"
SEEN: list[tuple[str, int | None]] = []    # (run id, context.fencing_token) as the driver saw them


@mjsched.register_driver("test-fence-seen")
class FenceSeen(mjsched.BaseScheduledJob):
    high_frequency_by_design = True

    def execute(self, context: mjsched.ExecutionContext) -> mjsched.JobResult:
        SEEN.append((context.run.id, context.fencing_token))
        return mjsched.JobResult(True)


def run_row(sql: Sql, run_id: str) -> dict[str, Any]:
    return sql.rows("SELECT job_version, fencing_token, status FROM mjsched.scheduled_job_run WHERE id = %s",
                    (run_id,))[0]


def make_due(sql: Sql, job: str) -> None:
    sql.run("UPDATE mjsched.scheduled_job SET next_run_at = now() - interval '1 second' WHERE id = %s", (job,))


def test_every_start_records_the_job_version_it_ran_with(make_engine: Callable[..., Any], sql: Sql) -> None:
    engine = make_engine(instance_name="versions")
    job = engine.create_job("versioned", "test-ok", NEVER)
    first = engine.execute_job(job)                          # a manual start
    engine.update_job(job, description="edited once")
    make_due(sql, job)
    ticks = engine.run_due_jobs()                             # a claimed tick
    engine.update_job(job, description="edited twice", concurrency_mode="Queue")
    sql.run("INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, scheduled_for, status, queued_at) "
            "VALUES (%s, now() - interval '1 hour', 'Queued', now())", (job,))
    queued = engine.run_due_jobs()                            # a queued run started
    assert [r.job_version for r in (first, *ticks, *queued)] == [1, 2, 3]
    assert [run_row(sql, r.id)["job_version"] for r in (first, *ticks, *queued)] == [1, 2, 3]
    assert engine.backend.get_run(first.id).job_version == 1          # on JobRun as read back


def test_a_retry_records_the_version_at_its_start(make_engine: Callable[..., Any], sql: Sql) -> None:
    engine = make_engine(instance_name="retries")
    job = engine.create_job("retried", "test-raise", NEVER,
                            retry=mjsched.RetryPolicy(max_attempts=2, initial_delay=60.0, jitter=0.0))
    make_due(sql, job)
    [failed] = engine.run_due_jobs()
    engine.update_job(job, description="edited before the retry")
    sql.run("UPDATE mjsched.scheduled_job_run SET retry_at = now() - interval '1 second' "
            "WHERE scheduled_job_id = %s AND status = 'Queued'", (job,))
    [retry] = engine.run_due_jobs()
    assert (failed.attempt, retry.attempt) == (1, 2)
    assert (run_row(sql, failed.id)["job_version"], run_row(sql, retry.id)["job_version"]) == (1, 2)
    assert run_row(sql, retry.id)["fencing_token"] > run_row(sql, failed.id)["fencing_token"]


def test_fencing_tokens_grow_across_engines_and_take_overs(make_engine: Callable[..., Any], sql: Sql) -> None:
    SEEN.clear()
    e1 = make_engine(instance_name="fence-e1")
    e2 = make_engine(instance_name="fence-e2")
    job = e1.create_job("fenced", "test-fence-seen", NEVER)
    tokens: list[int] = []
    # 1. a manual start on e1; 2. a claimed tick on e2
    tokens.append(run_row(sql, e1.execute_job(job).id)["fencing_token"])
    make_due(sql, job)
    [tick] = e2.run_due_jobs()
    tokens.append(run_row(sql, tick.id)["fencing_token"])
    # 3. the previous release's acquire + begin (e1's backend), left to lapse ...
    token = str(uuid.uuid4())
    assert e1.backend.acquire_job_lock(job, token, "fence-e1", 30.0)
    held = e1.backend.begin_job_run(job, token, "fence-e1")
    tokens.append(run_row(sql, held)["fencing_token"])
    assert sql.one("SELECT fencing_token FROM mjsched.check_fence(%s, %s)", (held, token)) == tokens[-1]
    sql.run("UPDATE mjsched.scheduled_job SET expected_completion_at = now() - interval '1 second' WHERE id = %s",
            (job,))
    sql.run("UPDATE mjsched.scheduled_job_run SET lease_expires_at = now() - interval '1 second' WHERE id = %s",
            (held,))
    # 4. ... and taken over by a manual start on e2
    taker = e2.execute_job(job)
    tokens.append(run_row(sql, taker.id)["fencing_token"])
    assert run_row(sql, held)["status"] == "Abandoned"
    # 5. a claim of a tick after the take-over, on e1
    make_due(sql, job)
    [late] = e1.run_due_jobs()
    tokens.append(run_row(sql, late.id)["fencing_token"])
    assert all(isinstance(t, int) for t in tokens)
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens), tokens
    # what each driver was handed is its run's token
    assert dict(SEEN) == {r: run_row(sql, r)["fencing_token"] for r, _ in SEEN}
    assert len(SEEN) == 4     # every start but the previous release's acquire + begin (no driver)
    # the taken-over run fails its fence, naming why
    with pytest.raises(psycopg2.Error) as refused:
        sql.one("SELECT fencing_token FROM mjsched.check_fence(%s, %s)", (held, token))
    assert refused.value.pgcode == "MJF01" and "Abandoned" in str(refused.value)


def test_check_fence_refuses_a_lapsed_lease_and_an_unknown_run(make_engine: Callable[..., Any], sql: Sql) -> None:
    engine = make_engine(instance_name="fence-lapsed")
    job = engine.create_job("lapsing", "test-ok", NEVER)
    token = str(uuid.uuid4())
    assert engine.backend.acquire_job_lock(job, token, "fence-lapsed", 30.0)
    run = engine.backend.begin_job_run(job, token, "fence-lapsed")
    with pytest.raises(psycopg2.Error, match="taken over"):
        sql.one("SELECT fencing_token FROM mjsched.check_fence(%s, %s)", (run, str(uuid.uuid4())))
    sql.run("UPDATE mjsched.scheduled_job_run SET lease_expires_at = now() - interval '1 second' WHERE id = %s",
            (run,))
    with pytest.raises(psycopg2.Error, match="no longer holds its lease"):
        sql.one("SELECT fencing_token FROM mjsched.check_fence(%s, %s)", (run, token))
    with pytest.raises(psycopg2.Error, match="status gone"):
        sql.one("SELECT fencing_token FROM mjsched.check_fence(%s, %s)", (str(uuid.uuid4()), token))


def test_lost_reply_check_fence(make_engine: Callable[..., Any], sql: Sql) -> None:
    """check_fence changes nothing but a lock held until its caller's transaction ends: a call
    whose reply was lost is answered the same by a repeat while the lease holds, and a lost
    reply ends the job's transaction (rolled back: nothing written), never half of it."""
    engine = make_engine(instance_name="fence-replay")
    job = engine.create_job("replayed", "test-ok", NEVER)
    token = str(uuid.uuid4())
    assert engine.backend.acquire_job_lock(job, token, "fence-replay", 30.0)
    run = engine.backend.begin_job_run(job, token, "fence-replay")
    before = sql.rows("SELECT * FROM mjsched.scheduled_job_run WHERE id = %s", (run,))
    first = sql.one("SELECT fencing_token FROM mjsched.check_fence(%s, %s)", (run, token))
    assert sql.one("SELECT fencing_token FROM mjsched.check_fence(%s, %s)", (run, token)) == first
    assert sql.rows("SELECT * FROM mjsched.scheduled_job_run WHERE id = %s", (run,)) == before


def report_token(context: mjsched.ExecutionContext) -> dict[str, Any]:
    return {"seen": context.fencing_token}


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_a_python_job_sees_its_runs_token(make_engine: Callable[..., Any], isolation: str) -> None:
    """A process-isolated run's child has no database connection: the parent reads the token
    before it hands the run over."""
    engine = make_engine(instance_name=f"fence-{isolation}")
    job = engine.create_job(f"sees-{isolation}", "python", NEVER, isolation=isolation,
                            configuration={"callable": f"{__name__}:report_token"})
    runs = [engine.execute_job(job) for _ in range(2)]
    assert [r.details["seen"] for r in runs] == [r.fencing_token for r in runs]
    assert runs[0].fencing_token < runs[1].fencing_token


def test_the_sql_driver_commits_only_under_its_lease(make_engine: Callable[..., Any], sql: Sql, pg_dsn: str) -> None:
    """In-process: the same run, its statement committed while it holds its lease, rolled back
    (the run failed, naming the fence) once its lease lapsed; with fence false, committed."""
    import logging
    import threading

    from mjsched.drivers.sql import SqlJob

    engine = make_engine(instance_name="fence-sql")
    sql.run("CREATE TABLE public.fence_sql_target (token bigint)")
    statement = "INSERT INTO public.fence_sql_target VALUES (%(mjsched_fencing_token)s)"
    job_id = engine.create_job("sql-fenced", "sql", NEVER, configuration={"dsn": pg_dsn, "statement": statement,
                                                                          "parameters": {}})
    token = str(uuid.uuid4())
    assert engine.backend.acquire_job_lock(job_id, token, "fence-sql", 30.0)
    run_id = engine.backend.begin_job_run(job_id, token, "fence-sql")
    run = engine.backend.get_run(run_id)
    job = engine.get_job(job_id)

    def execute(**overrides: Any) -> mjsched.JobResult:
        configured = dataclasses.replace(job, configuration={**job.configuration, **overrides})
        context = mjsched.ExecutionContext(job=configured, run=dataclasses.replace(run, lock_token=token),
                                           cancel_event=threading.Event(), logger=logging.getLogger("t"))
        return SqlJob().execute(context)

    held = execute()
    assert held.success and held.details["fencing_token"] == run.fencing_token, held
    sql.run("UPDATE mjsched.scheduled_job_run SET lease_expires_at = now() - interval '1 second' WHERE id = %s",
            (run_id,))
    lapsed = execute()
    assert not lapsed.success and "mjsched fence" in lapsed.error_message, lapsed
    assert lapsed.details == {"sqlstate": "MJF01"}
    assert sql.one("SELECT count(*) FROM public.fence_sql_target") == 1           # the lapsed run wrote nothing
    assert execute(fence=False).success
    assert sql.one("SELECT count(*) FROM public.fence_sql_target") == 2
