"""Retries through the engine, against the real PostgreSQL (issue 14 item 2): a daily job
that fails twice then succeeds runs three attempts of ONE tick with the backoff; attempts
run out; timeouts are retried; failure notifications wait for the final attempt; a
driver's default policy; and three engines racing per-second failing jobs in every
concurrency mode without breaking a rule.
"""
from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict
from typing import Any, Callable

import pytest

import mjsched
from mjsched.engine import retrying
from mjsched.engine.run import Run
from mjsched.models import RunStatus
from tests.support import drivers
from tests.support.pg import Sql, wait_for

pytestmark = pytest.mark.postgres

DAILY = "0 3 * * *"
_fails: dict[str, int] = defaultdict(int)
_lock = threading.Lock()


@mjsched.register_driver("test-flaky")
class Flaky(mjsched.BaseScheduledJob):
    """Fails its first ``fail`` executions (per job name), then succeeds; sleeps ``hold`` s."""

    high_frequency_by_design = True

    def execute(self, context: mjsched.ExecutionContext) -> mjsched.JobResult:
        conf = context.job.configuration
        time.sleep(float(conf.get("hold", 0)))
        with _lock:
            _fails[context.job.name] += 1
            n = _fails[context.job.name]
        if n <= int(conf.get("fail", 0)):
            return mjsched.JobResult(False, f"transient error {n}")
        return mjsched.JobResult(True, details={"execution": n})


@mjsched.register_driver("test-flaky-default")
class FlakyWithDefault(Flaky):
    retry = mjsched.RetryPolicy(max_attempts=2, initial_delay=0.2, factor=1.0, max_delay=1.0, jitter=0.0)


@mjsched.register_driver("test-hang")
class Hang(mjsched.BaseScheduledJob):
    def execute(self, context: mjsched.ExecutionContext) -> mjsched.JobResult:
        context.cancel_event.wait(30)
        return mjsched.JobResult(False, "cancelled")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def attempts(sql: Sql, job: str) -> list[dict[str, Any]]:
    return sql.rows("SELECT scheduled_for, attempt, status, queued_at, retry_at, started_at, completed_at, "
                    "error_message FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s "
                    "ORDER BY scheduled_for, attempt", (job,))


def finished(sql: Sql, job: str, n: int) -> Callable[[], bool]:
    return lambda: sum(1 for r in attempts(sql, job) if r["status"] not in ("Queued", "Running")) >= n


def test_a_daily_job_failing_twice_then_succeeding_runs_three_attempts_of_one_tick(
        make_engine: Callable[..., Any], sql: Sql) -> None:
    notifier = drivers.RecordingNotifier()
    engine = make_engine(notifier=notifier)
    policy = mjsched.RetryPolicy(max_attempts=3, initial_delay=0.4, factor=2.0, max_delay=10.0, jitter=0.0)
    job = engine.create_job(unique("flaky"), "test-flaky", DAILY, configuration={"fail": 2}, retry=policy,
                            run_immediately_if_never_run=True)
    first_next = engine.get_job(job).next_run_at
    engine.start_polling()
    wait_for(finished(sql, job, 3), timeout=20, message="three attempts")
    engine.stop_polling(wait=True, max_wait=10)
    rows = attempts(sql, job)
    assert [(r["attempt"], r["status"]) for r in rows] == [(1, "Failed"), (2, "Failed"), (3, "Completed")]
    assert len({r["scheduled_for"] for r in rows}) == 1 and rows[0]["scheduled_for"] == first_next
    for before, after, delay in ((rows[0], rows[1], 0.4), (rows[1], rows[2], 0.8)):
        assert abs((after["retry_at"] - before["completed_at"]).total_seconds() - delay) < 0.01
        waited = (after["started_at"] - before["completed_at"]).total_seconds()
        assert delay - 0.01 <= waited < delay + 1.5, waited
        print(f"attempt {after['attempt']}: due {delay:.2f} s after the failure, started after {waited:.3f} s")
    stats = engine.get_job(job)
    assert (stats.run_count, stats.success_count, stats.failure_count, stats.retry_count) == (3, 1, 2, 2)
    # the schedule moved once, past the tick, by its first attempt: the next tick is tomorrow's
    assert stats.next_run_at is not None and stats.next_run_at > first_next
    assert [r.attempt for r in engine.list_runs(job)] == [3, 2, 1]
    assert notifier.sent == []        # the final attempt succeeded: no failure was final


def test_attempts_run_out_and_the_failure_notifies_once(make_engine: Callable[..., Any], sql: Sql) -> None:
    notifier = drivers.RecordingNotifier()
    engine = make_engine(notifier=notifier)
    policy = mjsched.RetryPolicy(max_attempts=3, initial_delay=0.1, factor=1.0, max_delay=0.1, jitter=0.0)
    job = engine.create_job(unique("doomed"), "test-flaky", DAILY, configuration={"fail": 99}, retry=policy,
                            run_immediately_if_never_run=True)
    engine.start_polling()
    wait_for(finished(sql, job, 3), timeout=20, message="three attempts")
    wait_for(lambda: engine.parts.registry.snapshot() == [], timeout=10, message="the notification")
    engine.stop_polling(wait=True, max_wait=10)
    assert [(r["attempt"], r["status"]) for r in attempts(sql, job)] == [(1, "Failed"), (2, "Failed"), (3, "Failed")]
    assert len(notifier.sent) == 1
    _, run, note = notifier.sent[0]
    assert run.attempt == 3 and run.status is RunStatus.FAILED and "transient error 3" in note.body
    assert engine.get_job(job).retry_count == 2


def test_every_attempt_notifies_when_asked(make_engine: Callable[..., Any], sql: Sql) -> None:
    notifier = drivers.RecordingNotifier()
    engine = make_engine(notifier=notifier)
    policy = mjsched.RetryPolicy(max_attempts=2, initial_delay=0.1, factor=1.0, max_delay=0.1, jitter=0.0)
    job = engine.create_job(unique("loud"), "test-flaky", DAILY, configuration={"fail": 99}, retry=policy,
                            notify_final_attempt_only=False, run_immediately_if_never_run=True)
    engine.start_polling()
    wait_for(finished(sql, job, 2), timeout=20, message="two attempts")
    wait_for(lambda: len(notifier.sent) == 2, timeout=10, message="two notifications")
    engine.stop_polling(wait=True, max_wait=10)
    assert sorted(run.attempt for _, run, _ in notifier.sent) == [1, 2]


def test_a_timeout_is_retried(make_engine: Callable[..., Any], sql: Sql) -> None:
    engine = make_engine()
    policy = mjsched.RetryPolicy(max_attempts=2, initial_delay=0.2, factor=1.0, max_delay=0.2, jitter=0.0)
    job = engine.create_job(unique("slow"), "test-hang", DAILY, retry=policy, max_runtime=0.5,
                            run_immediately_if_never_run=True)
    engine.start_polling()
    wait_for(finished(sql, job, 2), timeout=20, message="two attempts")
    engine.stop_polling(wait=True, max_wait=10)
    assert [(r["attempt"], r["status"]) for r in attempts(sql, job)] == [(1, "Timeout"), (2, "Timeout")]


def test_the_drivers_default_applies_unless_the_job_has_its_own(make_engine: Callable[..., Any], sql: Sql) -> None:
    engine = make_engine()
    inherits = engine.create_job(unique("inherits"), "test-flaky-default", DAILY, configuration={"fail": 99},
                                 run_immediately_if_never_run=True)
    opts_out = engine.create_job(unique("opts-out"), "test-flaky-default", DAILY, configuration={"fail": 99},
                                 retry=mjsched.RetryPolicy(max_attempts=1), run_immediately_if_never_run=True)
    assert engine.get_job(inherits).retry is None
    assert engine.get_job(opts_out).retry == mjsched.RetryPolicy(max_attempts=1)
    engine.start_polling()
    wait_for(finished(sql, inherits, 2), timeout=20, message="the default's two attempts")
    wait_for(finished(sql, opts_out, 1), timeout=20, message="one attempt")
    engine.stop_polling(wait=True, max_wait=10)
    assert [r["attempt"] for r in attempts(sql, inherits)] == [1, 2]
    assert [r["attempt"] for r in attempts(sql, opts_out)] == [1]


def test_cancelled_abandoned_and_manual_runs_ask_for_no_retry(make_engine: Callable[..., Any]) -> None:
    engine = make_engine()
    policy = mjsched.RetryPolicy(max_attempts=5, initial_delay=1.0, jitter=0.0)
    job = engine.get_job(engine.create_job(unique("r"), "test-flaky", DAILY, retry=policy))
    tick = Run(engine.parts.run_services, job=job, run_id="r", token="t", scheduled_for=job.next_run_at)
    manual = Run(engine.parts.run_services, job=job, run_id="m", token="t", scheduled_for=None, manual=True)
    last = Run(engine.parts.run_services, job=job, run_id="l", token="t", scheduled_for=job.next_run_at, attempt=5)
    assert retrying.retry_in(tick, RunStatus.FAILED) == 1.0
    assert retrying.retry_in(tick, RunStatus.TIMEOUT) == 1.0
    for status in (RunStatus.CANCELLED, RunStatus.ABANDONED, RunStatus.COMPLETED, RunStatus.SKIPPED):
        assert retrying.retry_in(tick, status) is None
    assert retrying.retry_in(manual, RunStatus.FAILED) is None
    assert retrying.retry_in(last, RunStatus.FAILED) is None


def test_execute_job_is_not_retried(make_engine: Callable[..., Any], sql: Sql) -> None:
    engine = make_engine()
    policy = mjsched.RetryPolicy(max_attempts=3, initial_delay=0.0, jitter=0.0)
    job = engine.create_job(unique("by-hand"), "test-flaky", DAILY, configuration={"fail": 99}, retry=policy)
    run = engine.execute_job(job)
    assert run.status is RunStatus.FAILED and run.attempt == 1
    assert [r["status"] for r in attempts(sql, job)] == ["Failed"]


@pytest.mark.slow
def test_three_engines_race_retries_and_ticks_in_every_mode(make_engine: Callable[..., Any], sql: Sql) -> None:
    """Per-second jobs that always fail, retried after ~1 s (so retries and ticks come due
    together), run by three engines for 6 s. Then: attempts in order and never past
    max_attempts, each retry follows a Failed attempt of its tick, no two runs of a Skip or
    Queue job ever overlap, a Skipped retry says why, and nothing is left Running."""
    engines = [make_engine(instance_name=f"retry-race-{i}", max_concurrent_jobs=8) for i in range(3)]
    policy = mjsched.RetryPolicy(max_attempts=3, initial_delay=1.0, factor=1.0, max_delay=1.0, jitter=0.3)
    jobs = {}
    for mode in ("Skip", "Queue", "Concurrent"):
        for i in range(2):
            jobs[engines[0].create_job(unique(f"race-{mode}-{i}"), "test-flaky", "* * * * * *",
                                       configuration={"fail": 10_000, "hold": 0.3}, retry=policy,
                                       concurrency_mode=mode, max_queued_runs=2)] = mode
    for e in engines:
        e.start_polling()
    time.sleep(6.0)   # the load window itself, not a synchronisation: the checks below wait on rows
    for e in engines:
        e.stop_polling(wait=True, max_wait=10)
    retried: dict[str, int] = defaultdict(int)
    superseded: dict[str, int] = defaultdict(int)
    for job, mode in jobs.items():
        rows = [r for r in attempts(sql, job)]
        assert not [r for r in rows if r["status"] == "Running"], mode
        by_tick: dict[Any, list[dict[str, Any]]] = defaultdict(list)
        for r in rows:
            by_tick[r["scheduled_for"]].append(r)
        for tick, tries in by_tick.items():
            numbers = [r["attempt"] for r in tries]
            assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) <= 3, (mode, tick, numbers)
            for before, after in zip(tries, tries[1:]):
                assert before["status"] in ("Failed", "Timeout"), (mode, tick, before["status"])
                if after["status"] not in ("Queued", "Skipped"):
                    retried[mode] += 1
                    assert after["started_at"] >= before["completed_at"] + (after["retry_at"] - after["queued_at"])
            for r in tries:
                if r["status"] == "Skipped" and r["attempt"] > 1:
                    superseded[mode] += 1
                    assert "retry not run" in r["error_message"], r["error_message"]
        if mode in ("Skip", "Queue"):
            spans = sorted((r["started_at"], r["completed_at"]) for r in rows if r["started_at"] and
                           r["status"] not in ("Skipped",))
            for (s1, e1), (s2, _) in zip(spans, spans[1:]):
                assert s2 >= e1, f"{mode}: runs overlap ({s1}..{e1} and {s2})"
    print(f"retries run: {dict(retried)}; retries recorded Skipped: {dict(superseded)}")
    assert all(retried[m] > 0 for m in ("Queue", "Concurrent")), dict(retried)
