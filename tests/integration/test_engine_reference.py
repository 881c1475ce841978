"""The reference engine's acceptance cases (T1–T19, H1–H9), translated to this engine.

Every test runs against a real PostgreSQL; hung jobs are drivers blocked on an Event
that the test opens at the end.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterator

import psycopg2.extensions
import pytest

import mjsched
from mjsched.backends.postgres import PostgresBackend
from tests.support import drivers
from tests.support.pg import wait_for

pytestmark = pytest.mark.postgres
NEVER = "0 0 1 1 *"  # due only when a test puts next_run_at in the past


@pytest.fixture(autouse=True)
def open_gates_afterwards() -> Iterator[None]:
    yield
    for g in list(drivers.GATES.values()):
        g.set()


def add_due(engine: mjsched.SchedulingEngine, sql: Any, name: str, driver: str = "test-block",
            **fields: Any) -> str:
    conf = fields.pop("configuration", {"gate": name})
    job_id = engine.create_job(name, driver, fields.pop("cron", NEVER), configuration=conf, **fields)
    sql.run("UPDATE mjsched.scheduled_job SET next_run_at = now() - interval '1 second' WHERE id = %s", (job_id,))
    return job_id


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def run_status(sql: Any, job_id: str) -> list[str]:
    return [r["status"] for r in sql.rows(
        "SELECT status FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s ORDER BY started_at", (job_id,))]


def test_t1_hung_job_does_not_stall_dispatch(make_engine: Callable[..., Any], sql: Any) -> None:
    engine = make_engine(max_concurrent_jobs=5)
    hung, fine = unique("hung"), unique("fine")
    add_due(engine, sql, hung)
    ok = add_due(engine, sql, fine, driver="test-ok")
    started = time.monotonic()
    result = engine.dispatch_due_jobs()
    assert time.monotonic() - started < 2.0
    assert (result.dispatched, result.locked_out, result.skipped_at_capacity) == (2, 0, 0)
    wait_for(lambda: run_status(sql, ok) == ["Completed"], message="the healthy job to complete")
    assert drivers.started(hung).wait(5)


def test_t2_t13_sweep_reclaims_an_expired_lease_and_abandons_the_run(make_engine: Callable[..., Any],
                                                                     sql: Any) -> None:
    engine = make_engine(lease_timeout=0.5)   # polled by hand: no heartbeat renews the lease
    name = unique("orphan")
    job = add_due(engine, sql, name)
    assert engine.dispatch_due_jobs().dispatched == 1
    assert drivers.started(name).wait(5)
    wait_for(lambda: sql.one("SELECT expected_completion_at < now() FROM mjsched.scheduled_job WHERE id=%s",
                             (job,)), message="the lease to lapse")
    result = engine.dispatch_due_jobs()
    assert result.swept == 1
    run = engine.list_runs(job_id=job)[0]
    assert run.status is mjsched.RunStatus.ABANDONED and run.success is False
    assert "abandoned" in (run.error_message or "").lower()
    assert engine._registry.live_count() == 0  # the slot was handed back at once


def test_t3_release_checks_the_token(make_engine: Callable[..., Any], sql: Any) -> None:
    engine = make_engine()
    job = add_due(engine, sql, unique("t3"))
    mine = str(uuid.uuid4())
    assert engine.backend.acquire_job_lock(job, mine, "me", 30)
    assert engine.backend.release_job_lock(job, str(uuid.uuid4())) is False
    assert sql.one("SELECT lock_token::text FROM mjsched.scheduled_job WHERE id=%s", (job,)) == mine


def test_t4_the_cap_is_hard_in_one_poll(make_engine: Callable[..., Any], sql: Any) -> None:
    engine = make_engine(max_concurrent_jobs=5)
    for i in range(20):
        add_due(engine, sql, unique(f"cap{i}"))
    result = engine.dispatch_due_jobs()
    assert (result.dispatched, result.skipped_at_capacity, result.locked_out) == (5, 15, 0)
    assert engine._registry.live_count() == 5
    assert sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE status = 'Running'") == 5


def test_t9_concurrent_polls_never_overshoot_the_cap(make_engine: Callable[..., Any], sql: Any) -> None:
    engine = make_engine(max_concurrent_jobs=1)
    for i in range(10):
        add_due(engine, sql, unique(f"t9-{i}"))
    barrier = threading.Barrier(8, timeout=10)
    results: list[mjsched.DispatchResult] = []

    def poll() -> None:
        barrier.wait()
        results.append(engine.dispatch_due_jobs())
    threads = [threading.Thread(target=poll) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    assert sum(r.dispatched for r in results) == 1
    assert sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE status = 'Running'") == 1


def test_t5_jobs_locked_elsewhere_use_no_slot(make_engine: Callable[..., Any], sql: Any) -> None:
    engine = make_engine(max_concurrent_jobs=100)
    jobs = [add_due(engine, sql, unique(f"t5-{i}")) for i in range(10)]
    for job in jobs[5:]:
        assert engine.backend.acquire_job_lock(job, str(uuid.uuid4()), "other-engine", 60)
    result = engine.dispatch_due_jobs()
    assert (result.dispatched, result.locked_out) == (5, 5)
    assert engine._registry.live_count() == 5


def test_t6_stop_with_wait_drains_in_flight_runs(make_engine: Callable[..., Any], sql: Any) -> None:
    engine = make_engine()
    name = unique("t6")
    job = add_due(engine, sql, name)
    engine.start_polling()
    assert drivers.started(name).wait(5)
    returned = threading.Event()
    stopper = threading.Thread(target=lambda: (engine.stop_polling(wait=True, max_wait=None), returned.set()))
    stopper.start()
    assert not returned.wait(0.3), "stop_polling(wait=True) returned while the run was still going"
    drivers.gate(name).set()
    assert returned.wait(10)
    assert run_status(sql, job) == ["Completed"]


def test_t7_bounded_wait_returns_on_time(make_engine: Callable[..., Any], sql: Any) -> None:
    engine = make_engine()
    name = unique("t7")
    add_due(engine, sql, name, configuration={"gate": name, "ignore_cancel": True})
    engine.start_polling()
    assert drivers.started(name).wait(5)
    started = time.monotonic()
    engine.stop_polling(wait=True, max_wait=0.3)
    assert 0.3 <= time.monotonic() - started < 1.5


def test_t8_stop_without_wait_returns_at_once(make_engine: Callable[..., Any], sql: Any) -> None:
    engine = make_engine()
    name = unique("t8")
    add_due(engine, sql, name, configuration={"gate": name, "ignore_cancel": True})
    engine.start_polling()
    assert drivers.started(name).wait(5)
    started = time.monotonic()
    engine.stop_polling(wait=False)
    assert time.monotonic() - started < 0.25
    assert not engine.is_polling


def test_t10_sweep_frees_a_saturated_cap(make_engine: Callable[..., Any], sql: Any) -> None:
    engine = make_engine(max_concurrent_jobs=2, lease_timeout=0.5)
    hung = [add_due(engine, sql, unique(f"t10-{i}"), configuration={"gate": f"t10g{i}", "ignore_cancel": True})
            for i in range(2)]
    assert engine.dispatch_due_jobs().dispatched == 2
    third = add_due(engine, sql, unique("t10-third"), driver="test-ok")
    assert engine.dispatch_due_jobs().skipped_at_capacity == 1
    wait_for(lambda: sql.one("SELECT bool_and(expected_completion_at < now()) FROM mjsched.scheduled_job "
                             "WHERE id = ANY(%s::uuid[])", (hung,)), message="both leases to lapse")
    result = engine.dispatch_due_jobs()
    assert (result.swept, result.dispatched) == (2, 1)
    wait_for(lambda: run_status(sql, third) == ["Completed"], message="the third job to run")


def test_t14_a_late_zombie_does_not_clobber_a_newer_run(make_engine: Callable[..., Any], sql: Any) -> None:
    zombie_engine = make_engine(lease_timeout=0.5, instance_name="zombie")
    name = unique("t14")
    job = add_due(zombie_engine, sql, name)
    assert zombie_engine.dispatch_due_jobs().dispatched == 1
    assert drivers.started(name).wait(5)
    wait_for(lambda: sql.one("SELECT expected_completion_at < now() FROM mjsched.scheduled_job WHERE id=%s",
                             (job,)), message="the zombie's lease to lapse")
    fresh = make_engine(lease_timeout=30, instance_name="fresh")
    sql.run("UPDATE mjsched.scheduled_job SET next_run_at = now() - interval '1 ms' WHERE id = %s", (job,))
    assert fresh.dispatch_due_jobs().dispatched == 1   # a newer tick, on the new engine
    fresh_run = sql.one("SELECT id::text FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s "
                        "AND status = 'Running'", (job,))
    drivers.gate(name).set()   # both runs finish; the zombie's completion must be refused
    wait_for(lambda: sql.one("SELECT status FROM mjsched.scheduled_job_run WHERE id = %s", (fresh_run,))
             == "Completed", message="the fresh run to complete")
    wait_for(lambda: zombie_engine._registry.snapshot() == [], message="the zombie to finish")
    statuses = sorted(run_status(sql, job))
    assert statuses == ["Abandoned", "Completed"]
    assert zombie_engine.stats["fenced_completions"] + zombie_engine.stats["leases_lost"] >= 1
    assert sql.one("SELECT run_count FROM mjsched.scheduled_job WHERE id=%s", (job,)) == 2  # 1 ok + 1 abandoned


def test_t15_the_lease_is_configurable_and_max_runtime_lengthens_it(make_engine: Callable[..., Any],
                                                                    sql: Any) -> None:
    engine = make_engine(lease_timeout=5)
    short = add_due(engine, sql, unique("t15a"))
    long = add_due(engine, sql, unique("t15b"), max_runtime=120)
    engine.dispatch_due_jobs()
    leases = {r["id"]: r["secs"] for r in sql.rows(
        "SELECT id::text, extract(epoch FROM expected_completion_at - locked_at) AS secs FROM mjsched.scheduled_job")}
    assert abs(float(leases[short]) - 5) < 0.01
    assert abs(float(leases[long]) - 120) < 0.01


def test_t16_jobs_added_or_edited_in_the_database_are_picked_up(make_engine: Callable[..., Any],
                                                                 sql: Any) -> None:
    engine = make_engine(max_poll_interval=30.0)   # no timer will save us: NOTIFY must
    engine.start_polling()
    type_id = engine.backend.ensure_job_type("test-ok")
    job = sql.one("""INSERT INTO mjsched.scheduled_job (job_type_id, name, cron_expression, status)
                     VALUES (%s, 'by-sql', '* * * * * *', 'Active') RETURNING id::text""", (type_id,))
    wait_for(lambda: "Completed" in run_status(sql, job), timeout=5, message="the SQL-inserted job to run")
    sql.run("UPDATE mjsched.scheduled_job SET cron_expression = '0 0 1 1 *' WHERE id = %s", (job,))
    wait_for(lambda: (sql.one("SELECT next_run_at FROM mjsched.scheduled_job WHERE id = %s", (job,)) or
                      datetime.now(timezone.utc)) > datetime.now(timezone.utc) + timedelta(days=1),
             timeout=5, message="the edited schedule to be recomputed")


def test_t17_a_driver_that_fails_to_construct_leaves_nothing_behind(make_engine: Callable[..., Any],
                                                                    sql: Any) -> None:
    engine = make_engine()
    with pytest.raises(mjsched.ConfigurationError, match="could not be constructed"):
        engine.create_job(unique("t17"), "test-broken-init", NEVER)   # caught up front when created by API
    type_id = engine.backend.ensure_job_type("test-broken-init")
    job = sql.one("""INSERT INTO mjsched.scheduled_job (job_type_id, name, cron_expression, status, next_run_at)
                     VALUES (%s, 't17', %s, 'Active', now() - interval '1 s') RETURNING id::text""",
                  (type_id, NEVER))
    assert engine.dispatch_due_jobs().dispatched == 1
    wait_for(lambda: run_status(sql, job) == ["Failed"], message="the run to fail")
    wait_for(lambda: engine._registry.snapshot() == [], message="the registry to empty")
    row = sql.rows("SELECT lock_token, next_run_at > now() AS advanced, failure_count FROM mjsched.scheduled_job "
                   "WHERE id=%s", (job,))[0]
    assert row == {"lock_token": None, "advanced": True, "failure_count": 1}
    assert "cannot construct" in engine.list_runs(job_id=job)[0].error_message


class CountingConnection(psycopg2.extensions.connection):
    statements: list[str] = []

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        cur = super().cursor(*args, **kwargs)
        original = cur.execute

        def execute(query: Any, params: Any = None) -> Any:
            CountingConnection.statements.append(str(query))
            return original(query, params)
        cur.execute = execute
        return cur


def test_t18_the_sweep_is_one_statement(make_engine: Callable[..., Any], sql: Any, pg_dsn: str) -> None:
    engine = make_engine(max_concurrent_jobs=5)
    for i in range(5):
        add_due(engine, sql, unique(f"t18-{i}"))
    assert engine.dispatch_due_jobs().dispatched == 5
    counting = PostgresBackend(pg_dsn, connection_factory=CountingConnection)
    try:
        counting.db_now()
        CountingConnection.statements.clear()
        counting.sweep_expired_leases(now=datetime.now(timezone.utc) + timedelta(hours=1))
        assert len(CountingConnection.statements) == 1
    finally:
        counting.close()
    assert sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE status = 'Abandoned'") == 5


def test_t19_permission_probe_warns_and_never_throws(make_engine: Callable[..., Any], sql: Any, pg_dsn: str,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    role = f"probe_{uuid.uuid4().hex[:8]}"
    sql.run(f"CREATE ROLE {role} LOGIN")
    try:
        sql.run(f"GRANT USAGE ON SCHEMA mjsched TO {role}")
        sql.run(f"GRANT SELECT ON ALL TABLES IN SCHEMA mjsched TO {role}")
        sql.run(f"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA mjsched TO {role}")
        sql.run("REVOKE EXECUTE ON FUNCTION mjsched.acquire_job_lock(uuid, uuid, varchar, double precision,"
                " boolean, timestamptz) FROM PUBLIC")
        sql.run(f"REVOKE EXECUTE ON FUNCTION mjsched.acquire_job_lock(uuid, uuid, varchar, double precision,"
                f" boolean, timestamptz) FROM {role}")
        limited = make_engine(dsn=pg_dsn.replace("postgres@", f"{role}@"))
        with caplog.at_level(logging.WARNING, logger="mjsched"):
            limited._housekeeping.probe_permissions()
        assert any("lacks EXECUTE" in r.getMessage() and "acquire_job_lock" in r.getMessage()
                   for r in caplog.records)
        caplog.clear()
        sql.run("ALTER FUNCTION mjsched.probe_permissions() RENAME TO probe_permissions_gone")
        with caplog.at_level(logging.WARNING, logger="mjsched"):
            limited._housekeeping.probe_permissions()  # must not raise
        assert any("permission probe failed" in r.getMessage() for r in caplog.records)
    finally:
        sql.run(f"DROP OWNED BY {role}")
        sql.run(f"DROP ROLE {role}")


# -- heartbeats -------------------------------------------------------------------------------

def test_h1_one_call_renews_every_lease(make_engine: Callable[..., Any], sql: Any, pg_dsn: str) -> None:
    counting = PostgresBackend(pg_dsn, connection_factory=CountingConnection)
    engine = make_engine(backend=counting, max_concurrent_jobs=3, lease_timeout=30)
    for i in range(3):
        add_due(engine, sql, unique(f"h1-{i}"))
    assert engine.dispatch_due_jobs().dispatched == 3
    before = sql.one("SELECT max(expected_completion_at) FROM mjsched.scheduled_job")
    CountingConnection.statements.clear()
    assert engine._keeper.renew() is True
    assert [s for s in CountingConnection.statements if "extend_job_leases" in s] == \
        CountingConnection.statements and len(CountingConnection.statements) == 1
    assert sql.one("SELECT min(expected_completion_at) FROM mjsched.scheduled_job") > before


def test_h2_leases_are_renewed_at_least_three_times_per_lease(make_engine: Callable[..., Any],
                                                              sql: Any) -> None:
    engine = make_engine(lease_timeout=1.2)
    name = unique("h2")
    job = add_due(engine, sql, name)
    engine.start_polling()
    assert drivers.started(name).wait(5)
    first = engine._keeper.renewals
    time.sleep(3.0)   # three leases' worth of wall time: the measured quantity here, not a synchronisation
    assert engine._keeper.renewals - first >= 7          # 4 per lease, allow jitter
    assert run_status(sql, job) == ["Running"]            # never lapsed, never swept
    drivers.gate(name).set()
    wait_for(lambda: run_status(sql, job) == ["Completed"], message="completion")


def test_h3_concurrent_runs_keep_their_own_leases(make_engine: Callable[..., Any], sql: Any) -> None:
    engine = make_engine(max_concurrent_jobs=3)
    name = unique("h3")
    job = add_due(engine, sql, name, concurrency_mode="Concurrent")
    engine.dispatch_due_jobs()
    sql.run("UPDATE mjsched.scheduled_job SET next_run_at = now() - interval '1 ms' WHERE id = %s", (job,))
    assert engine.dispatch_due_jobs().dispatched == 1   # overlaps the first run
    assert run_status(sql, job) == ["Running", "Running"]
    assert len(engine._keeper._registry.tokens_to_renew()) == 2
    assert engine._keeper.renew() and engine._registry.live_count() == 2


def test_h4_context_heartbeat_reports_whether_the_lease_holds(make_engine: Callable[..., Any],
                                                              sql: Any) -> None:
    engine = make_engine()
    name = unique("h4")
    job = add_due(engine, sql, name, driver="test-heartbeat", configuration={"gate": name})
    engine.dispatch_due_jobs()
    assert drivers.started(name).wait(5)
    # another holder takes the lock over (lease forced past expiry by the database clock)
    sql.run("UPDATE mjsched.scheduled_job SET expected_completion_at = now() - interval '1 s' WHERE id=%s", (job,))
    sql.run("UPDATE mjsched.scheduled_job_run SET lease_expires_at = now() - interval '1 s' WHERE scheduled_job_id=%s",
            (job,))
    assert engine.backend.acquire_job_lock(job, str(uuid.uuid4()), "thief", 30)
    drivers.gate(name).set()
    wait_for(lambda: engine._registry.snapshot() == [], message="the run to finish")
    details = sql.one("SELECT details FROM mjsched.scheduled_job_run WHERE scheduled_job_id=%s", (job,))
    assert details is None  # the run was abandoned by the takeover; its result was refused
    assert run_status(sql, job) == ["Abandoned"]


def test_h5_renewal_errors_are_logged_never_raised(make_engine: Callable[..., Any], sql: Any,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    engine = make_engine()
    add_due(engine, sql, unique("h5"))
    engine.dispatch_due_jobs()
    sql.run("ALTER FUNCTION mjsched.extend_job_leases(uuid[], double precision, varchar, timestamptz) "
            "RENAME TO extend_job_leases_gone")
    try:
        with caplog.at_level(logging.ERROR, logger="mjsched"):
            assert engine._keeper.renew() is False
        assert any("Lease renewal failed" in r.getMessage() for r in caplog.records)
    finally:
        sql.run("ALTER FUNCTION mjsched.extend_job_leases_gone(uuid[], double precision, varchar, timestamptz) "
                "RENAME TO extend_job_leases")


def test_h6_token_mismatch_is_logged_and_the_run_cancelled(make_engine: Callable[..., Any], sql: Any,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    engine = make_engine()
    name = unique("h6")
    job = add_due(engine, sql, name)
    engine.dispatch_due_jobs()
    assert drivers.started(name).wait(5)
    (entry,) = engine._registry.snapshot()
    sql.run("UPDATE mjsched.scheduled_job_run SET status = 'Abandoned', completed_at = now() "
            "WHERE scheduled_job_id = %s", (job,))
    sql.run("UPDATE mjsched.scheduled_job SET lock_token = gen_random_uuid() WHERE id = %s", (job,))
    with caplog.at_level(logging.WARNING, logger="mjsched"):
        assert engine._keeper.renew() is True
    assert any("slot has been handed off" in r.getMessage() for r in caplog.records)
    assert entry.cancel_event.is_set() and engine._registry.live_count() == 0


def test_max_runtime_times_out_a_hung_run_and_frees_its_slot(make_engine: Callable[..., Any], sql: Any) -> None:
    engine = make_engine(max_concurrent_jobs=1)
    name = unique("timeout")
    job = add_due(engine, sql, name, max_runtime=0.3, configuration={"gate": name, "ignore_cancel": True})
    engine.start_polling()
    wait_for(lambda: run_status(sql, job) == ["Timeout"], message="the run to time out")
    assert engine._registry.leaked == 1 and engine._registry.live_count() == 0
    ok = engine.create_job(unique("after"), "test-ok", "* * * * * *")
    wait_for(lambda: "Completed" in run_status(sql, ok), message="healthy work to run despite the leak")


def test_a_raising_driver_fails_the_run_and_still_notifies(make_engine: Callable[..., Any], sql: Any) -> None:
    notifier = drivers.RecordingNotifier()
    engine = make_engine(notifier=notifier)
    job = add_due(engine, sql, unique("raise"), driver="test-raise", configuration={})
    engine.dispatch_due_jobs()
    assert notifier.event.wait(5)
    _, run, note = notifier.sent[0]
    assert run.status is mjsched.RunStatus.FAILED and "driver exploded" in note.body
    assert run_status(sql, job) == ["Failed"]


def test_a_failing_notifier_never_fails_the_run(make_engine: Callable[..., Any], sql: Any) -> None:
    engine = make_engine(notifier=drivers.ExplodingNotifier())
    job = add_due(engine, sql, unique("notify"), driver="test-ok", configuration={}, notify_on_success=True)
    engine.dispatch_due_jobs()
    wait_for(lambda: run_status(sql, job) == ["Completed"], message="completion")
    wait_for(lambda: engine._registry.snapshot() == [], message="the notification attempt")
    assert run_status(sql, job) == ["Completed"]


def test_execute_job_runs_now_under_the_lock(make_engine: Callable[..., Any], sql: Any) -> None:
    engine = make_engine()
    job = engine.create_job(unique("manual"), "test-ok", NEVER)
    before = engine.get_job(job).next_run_at
    run = engine.execute_job(job)
    assert run.status is mjsched.RunStatus.COMPLETED and run.scheduled_for is None
    after = engine.get_job(job)
    assert after.lock_token is None and after.run_count == 1 and after.next_run_at == before
    assert engine.backend.acquire_job_lock(job, str(uuid.uuid4()), "other", 60)
    with pytest.raises(mjsched.LockNotAcquired):
        engine.execute_job(job)
    with pytest.raises(mjsched.JobNotFound):
        engine.execute_job(str(uuid.uuid4()))


def test_queue_mode_keeps_ticks_that_come_while_running(make_engine: Callable[..., Any], sql: Any) -> None:
    engine = make_engine(max_concurrent_jobs=2)
    name = unique("queue")
    job = engine.create_job(name, "test-block", "* * * * * *", configuration={"gate": name},
                            concurrency_mode="Queue", max_queued_runs=2)
    engine.start_polling()
    assert drivers.started(name).wait(5)
    wait_for(lambda: sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE scheduled_job_id=%s "
                             "AND status='Queued'", (job,)) == 2, timeout=6, message="two queued ticks")
    time.sleep(1.2)   # a third tick comes and goes: the queue is bounded at two
    assert sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE scheduled_job_id=%s AND status='Queued'",
                   (job,)) == 2
    drivers.gate(name).set()
    wait_for(lambda: sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE scheduled_job_id=%s "
                             "AND status='Completed'", (job,)) >= 3, timeout=6, message="the queue to drain")
    rows = sql.rows("SELECT scheduled_for, started_at FROM mjsched.scheduled_job_run WHERE scheduled_job_id=%s "
                    "AND status='Completed' ORDER BY started_at", (job,))
    assert [r["scheduled_for"] for r in rows] == sorted(r["scheduled_for"] for r in rows)   # FIFO


def test_skip_mode_drops_ticks_that_come_while_running(make_engine: Callable[..., Any], sql: Any) -> None:
    engine = make_engine()
    name = unique("skip")
    job = engine.create_job(name, "test-block", "* * * * * *", configuration={"gate": name})
    engine.start_polling()
    assert drivers.started(name).wait(5)
    time.sleep(2.2)   # two ticks pass while it runs
    assert run_status(sql, job) == ["Running"]
    drivers.gate(name).set()
    wait_for(lambda: run_status(sql, job)[:1] == ["Completed"], message="completion")
    assert "Queued" not in run_status(sql, job)


def test_lateness_of_a_per_second_job_stays_under_a_second(make_engine: Callable[..., Any], sql: Any) -> None:
    engine = make_engine()
    job = engine.create_job(unique("late"), "test-ok", "* * * * * *")
    engine.start_polling()
    wait_for(lambda: sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE scheduled_job_id=%s "
                             "AND status='Completed'", (job,)) >= 5, timeout=10, message="five runs")
    worst = sql.one("SELECT max(extract(epoch FROM started_at - scheduled_for)) FROM mjsched.scheduled_job_run "
                    "WHERE scheduled_job_id=%s", (job,))
    assert 0 <= float(worst) < 1.0
