"""The reference engine's acceptance cases (T1–T19, H1–H9), translated to this engine.

Part of the backend contract suite: a test that asks for ``db`` runs once per dialect
(PostgreSQL always, SQL Server when a server is given); the few that need
PostgreSQL's own machinery (NOTIFY, roles, renaming a function, counting psycopg2
statements) ask for ``pg_db``. Hung jobs are drivers blocked on an Event that the
test opens at the end.
"""
from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterator

import psycopg2.extensions
import pytest

import mjsched
from mjsched.backends.postgres import PostgresBackend
from tests.support import drivers, pg
from tests.support.db import Db
from tests.support.pg import wait_for

NEVER = "0 0 1 1 *"  # due only when a test puts next_run_at in the past


@pytest.fixture(autouse=True)
def open_gates_afterwards() -> Iterator[None]:
    yield
    for g in list(drivers.GATES.values()):
        g.set()


def add_due(engine: mjsched.SchedulingEngine, db: Db, name: str, driver: str = "test-block",
            **fields: Any) -> str:
    conf = fields.pop("configuration", {"gate": name})
    job_id = engine.create_job(name, driver, fields.pop("cron", NEVER), configuration=conf, **fields)
    db.make_due(job_id)
    return job_id


def heartbeat_dies(engine: mjsched.SchedulingEngine) -> None:
    """The engine stops renewing its leases (a frozen process, a long GC pause) while
    its runs go on: they become zombies once their lease lapses."""
    engine.parts.keeper.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_t1_hung_job_does_not_stall_dispatch(make_engine: Callable[..., Any], db: Db) -> None:
    engine = make_engine(max_concurrent_jobs=5)
    hung, fine = unique("hung"), unique("fine")
    add_due(engine, db, hung)
    ok = add_due(engine, db, fine, driver="test-ok")
    started = time.monotonic()
    result = engine.dispatch_due_jobs()
    assert time.monotonic() - started < 2.0
    assert (result.dispatched, result.locked_out, result.skipped_at_capacity) == (2, 0, 0)
    wait_for(lambda: db.run_statuses(ok) == ["Completed"], message="the healthy job to complete")
    assert drivers.started(hung).wait(5)


def test_t2_t13_sweep_reclaims_an_expired_lease_and_abandons_the_run(make_engine: Callable[..., Any],
                                                                     db: Db) -> None:
    engine = make_engine(lease_timeout=0.5)
    name = unique("orphan")
    job = add_due(engine, db, name)
    assert engine.dispatch_due_jobs().dispatched == 1
    assert drivers.started(name).wait(5)
    heartbeat_dies(engine)
    wait_for(lambda: db.lease_lapsed(job), message="the lease to lapse")
    result = engine.dispatch_due_jobs()
    assert result.swept == 1
    run = engine.list_runs(job_id=job)[0]
    assert run.status is mjsched.RunStatus.ABANDONED and run.success is False
    assert "abandoned" in (run.error_message or "").lower()
    assert engine.parts.registry.live_count() == 0  # the slot was handed back at once


def test_t3_release_checks_the_token(make_engine: Callable[..., Any], db: Db) -> None:
    engine = make_engine()
    job = add_due(engine, db, unique("t3"))
    mine = str(uuid.uuid4())
    assert engine.backend.acquire_job_lock(job, mine, "me", 30)
    assert engine.backend.release_job_lock(job, str(uuid.uuid4())) is False
    assert db.lock_token(job) == mine


def test_t4_the_cap_is_hard_in_one_poll(make_engine: Callable[..., Any], db: Db) -> None:
    engine = make_engine(max_concurrent_jobs=5)
    for i in range(20):
        add_due(engine, db, unique(f"cap{i}"))
    result = engine.dispatch_due_jobs()
    assert (result.dispatched, result.skipped_at_capacity, result.locked_out) == (5, 15, 0)
    assert engine.parts.registry.live_count() == 5
    assert db.count_runs("Running") == 5


def test_t9_concurrent_polls_never_overshoot_the_cap(make_engine: Callable[..., Any], db: Db) -> None:
    engine = make_engine(max_concurrent_jobs=1)
    for i in range(10):
        add_due(engine, db, unique(f"t9-{i}"))
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
    assert db.count_runs("Running") == 1


def test_t5_jobs_locked_elsewhere_use_no_slot(make_engine: Callable[..., Any], db: Db) -> None:
    engine = make_engine(max_concurrent_jobs=100)
    jobs = [add_due(engine, db, unique(f"t5-{i}")) for i in range(10)]
    for job in jobs[5:]:
        assert engine.backend.acquire_job_lock(job, str(uuid.uuid4()), "other-engine", 60)
    result = engine.dispatch_due_jobs()
    assert (result.dispatched, result.locked_out) == (5, 5)
    assert engine.parts.registry.live_count() == 5


def test_t6_stop_with_wait_drains_in_flight_runs(make_engine: Callable[..., Any], db: Db) -> None:
    engine = make_engine()
    name = unique("t6")
    job = add_due(engine, db, name)
    engine.start_polling()
    assert drivers.started(name).wait(5)
    returned = threading.Event()
    stopper = threading.Thread(target=lambda: (engine.stop_polling(wait=True, max_wait=None), returned.set()))
    stopper.start()
    assert not returned.wait(0.3), "stop_polling(wait=True) returned while the run was still going"
    drivers.gate(name).set()
    assert returned.wait(10)
    assert db.run_statuses(job) == ["Completed"]


def test_t7_bounded_wait_returns_on_time(make_engine: Callable[..., Any], db: Db) -> None:
    engine = make_engine()
    name = unique("t7")
    add_due(engine, db, name, configuration={"gate": name, "ignore_cancel": True})
    engine.start_polling()
    assert drivers.started(name).wait(5)
    started = time.monotonic()
    engine.stop_polling(wait=True, max_wait=0.3)
    assert 0.3 <= time.monotonic() - started < 1.5


def test_t8_stop_without_wait_returns_at_once(make_engine: Callable[..., Any], db: Db) -> None:
    engine = make_engine()
    name = unique("t8")
    add_due(engine, db, name, configuration={"gate": name, "ignore_cancel": True})
    engine.start_polling()
    assert drivers.started(name).wait(5)
    started = time.monotonic()
    engine.stop_polling(wait=False)
    assert time.monotonic() - started < 0.25
    assert not engine.is_polling


def test_t10_sweep_frees_a_saturated_cap(make_engine: Callable[..., Any], db: Db) -> None:
    engine = make_engine(max_concurrent_jobs=2, lease_timeout=0.5)
    hung = [add_due(engine, db, unique(f"t10-{i}"), configuration={"gate": f"t10g{i}", "ignore_cancel": True})
            for i in range(2)]
    assert engine.dispatch_due_jobs().dispatched == 2
    heartbeat_dies(engine)
    third = add_due(engine, db, unique("t10-third"), driver="test-ok")
    assert engine.dispatch_due_jobs().skipped_at_capacity == 1
    wait_for(lambda: db.lease_lapsed(*hung), message="both leases to lapse")
    result = engine.dispatch_due_jobs()
    assert (result.swept, result.dispatched) == (2, 1)
    wait_for(lambda: db.run_statuses(third) == ["Completed"], message="the third job to run")


def test_t14_a_late_zombie_does_not_clobber_a_newer_run(make_engine: Callable[..., Any], db: Db) -> None:
    zombie_engine = make_engine(lease_timeout=0.5, instance_name="zombie")
    name = unique("t14")
    job = add_due(zombie_engine, db, name)
    assert zombie_engine.dispatch_due_jobs().dispatched == 1
    assert drivers.started(name).wait(5)
    heartbeat_dies(zombie_engine)
    wait_for(lambda: db.lease_lapsed(job), message="the zombie's lease to lapse")
    fresh = make_engine(lease_timeout=30, instance_name="fresh")
    db.make_due(job, 0.001)
    assert fresh.dispatch_due_jobs().dispatched == 1   # a newer tick, on the new engine
    fresh_run = str(db.one("SELECT id FROM mjsched.scheduled_job_run WHERE scheduled_job_id = ? "
                           "AND status = 'Running'", (job,)))
    drivers.gate(name).set()   # both runs finish; the zombie's completion must be refused
    wait_for(lambda: db.run_status(fresh_run) == "Completed", message="the fresh run to complete")
    wait_for(lambda: zombie_engine.parts.registry.snapshot() == [], message="the zombie to finish")
    statuses = sorted(db.run_statuses(job))
    assert statuses == ["Abandoned", "Completed"]
    assert zombie_engine.stats["fenced_completions"] + zombie_engine.stats["leases_lost"] >= 1
    assert db.job_value(job, "run_count") == 2  # 1 ok + 1 abandoned


def test_t15_the_lease_is_configurable_and_max_runtime_lengthens_it(make_engine: Callable[..., Any],
                                                                    db: Db) -> None:
    engine = make_engine(lease_timeout=5)
    short = add_due(engine, db, unique("t15a"))
    long = add_due(engine, db, unique("t15b"), max_runtime=120)
    engine.dispatch_due_jobs()
    leases = {str(r["id"]): r["secs"] for r in db.rows(
        f"SELECT id, {db.seconds('expected_completion_at', 'locked_at')} AS secs FROM mjsched.scheduled_job")}
    assert abs(float(leases[short]) - 5) < 0.01
    assert abs(float(leases[long]) - 120) < 0.01


@pytest.mark.postgres
def test_t16_jobs_added_or_edited_in_the_database_are_picked_up(make_engine: Callable[..., Any],
                                                                 pg_db: Db) -> None:
    db = pg_db
    engine = make_engine(max_poll_interval=30.0)   # no timer will save us: NOTIFY must
    engine.start_polling()
    job = db.insert_job(engine.backend.ensure_job_type("test-ok"), "by-sql", "* * * * * *")
    wait_for(lambda: "Completed" in db.run_statuses(job), timeout=5, message="the SQL-inserted job to run")
    db.run("UPDATE mjsched.scheduled_job SET cron_expression = '0 0 1 1 *' WHERE id = ?", (job,))
    wait_for(lambda: (db.job_value(job, "next_run_at") or
                      datetime.now(timezone.utc)) > datetime.now(timezone.utc) + timedelta(days=1),
             timeout=5, message="the edited schedule to be recomputed")


def test_t17_a_driver_that_fails_to_construct_leaves_nothing_behind(make_engine: Callable[..., Any],
                                                                    db: Db) -> None:
    engine = make_engine()
    with pytest.raises(mjsched.ConfigurationError, match="could not be constructed"):
        engine.create_job(unique("t17"), "test-broken-init", NEVER)   # caught up front when created by API
    job = db.insert_job(engine.backend.ensure_job_type("test-broken-init"), "t17", NEVER, due=True)
    assert engine.dispatch_due_jobs().dispatched == 1
    wait_for(lambda: db.run_statuses(job) == ["Failed"], message="the run to fail")
    wait_for(lambda: engine.parts.registry.snapshot() == [], message="the registry to empty")
    row = db.rows(f"SELECT lock_token, CASE WHEN next_run_at > {db.now} THEN 1 ELSE 0 END AS advanced, "
                  "failure_count FROM mjsched.scheduled_job WHERE id = ?", (job,))[0]
    assert row == {"lock_token": None, "advanced": 1, "failure_count": 1}
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


@pytest.mark.postgres
def test_t18_the_sweep_is_one_statement(make_engine: Callable[..., Any], pg_db: Db, pg_dsn: str) -> None:
    db = pg_db
    engine = make_engine(max_concurrent_jobs=5)
    for i in range(5):
        add_due(engine, db, unique(f"t18-{i}"))
    assert engine.dispatch_due_jobs().dispatched == 5
    counting = PostgresBackend(pg_dsn, connection_factory=CountingConnection)
    try:
        counting.db_now()
        CountingConnection.statements.clear()
        counting.sweep_expired_leases(now=datetime.now(timezone.utc) + timedelta(hours=1))
        assert len(CountingConnection.statements) == 1
    finally:
        counting.close()
    assert db.count_runs("Abandoned") == 5


@pytest.mark.postgres
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
        limited = make_engine(dsn=pg.with_user(pg_dsn, role))
        with caplog.at_level(logging.WARNING, logger="mjsched"):
            limited.parts.housekeeping.probe_permissions()
        assert any("lacks EXECUTE" in r.getMessage() and "acquire_job_lock" in r.getMessage()
                   for r in caplog.records)
        caplog.clear()
        sql.run("ALTER FUNCTION mjsched.probe_permissions() RENAME TO probe_permissions_gone")
        with caplog.at_level(logging.WARNING, logger="mjsched"):
            limited.parts.housekeeping.probe_permissions()  # must not raise
        assert any("permission probe failed" in r.getMessage() for r in caplog.records)
    finally:
        sql.run(f"DROP OWNED BY {role}")
        sql.run(f"DROP ROLE {role}")


# -- heartbeats -------------------------------------------------------------------------------

@pytest.mark.postgres
def test_h1_one_call_renews_every_lease(make_engine: Callable[..., Any], pg_db: Db, pg_dsn: str) -> None:
    db = pg_db
    counting = PostgresBackend(pg_dsn, connection_factory=CountingConnection)
    engine = make_engine(backend=counting, max_concurrent_jobs=3, lease_timeout=30)
    for i in range(3):
        add_due(engine, db, unique(f"h1-{i}"))
    assert engine.dispatch_due_jobs().dispatched == 3
    before = db.one("SELECT max(expected_completion_at) FROM mjsched.scheduled_job")
    CountingConnection.statements.clear()
    assert engine.parts.keeper.renew() is True
    # one statement renewed the three leases; anything else here is another thread's (the
    # housekeeping purge and alert pass) or a new pooled connection's settings check
    leases = [s for s in CountingConnection.statements if re.search(r"renew|extend_job_leases|lease", s)]
    assert len(leases) == 1 and "renew_leases" in leases[0], leases
    assert db.one("SELECT min(expected_completion_at) FROM mjsched.scheduled_job") > before


def test_h2_leases_are_renewed_at_least_three_times_per_lease(make_engine: Callable[..., Any],
                                                              db: Db) -> None:
    engine = make_engine(lease_timeout=1.2)
    name = unique("h2")
    job = add_due(engine, db, name)
    engine.start_polling()
    assert drivers.started(name).wait(5)
    first = engine.parts.keeper.renewals
    time.sleep(3.0)   # three leases' worth of wall time: the measured quantity here, not a synchronisation
    assert engine.parts.keeper.renewals - first >= 7          # 4 per lease, allow jitter
    assert db.run_statuses(job) == ["Running"]            # never lapsed, never swept
    drivers.gate(name).set()
    wait_for(lambda: db.run_statuses(job) == ["Completed"], message="completion")


def test_h3_concurrent_runs_keep_their_own_leases(make_engine: Callable[..., Any], db: Db) -> None:
    engine = make_engine(max_concurrent_jobs=3)
    name = unique("h3")
    job = add_due(engine, db, name, concurrency_mode="Concurrent")
    engine.dispatch_due_jobs()
    db.make_due(job, 0.001)
    assert engine.dispatch_due_jobs().dispatched == 1   # overlaps the first run
    assert db.run_statuses(job) == ["Running", "Running"]
    assert len(engine.parts.registry.tokens_to_renew()) == 2
    assert engine.parts.keeper.renew() and engine.parts.registry.live_count() == 2


def test_h4_context_heartbeat_reports_whether_the_lease_holds(make_engine: Callable[..., Any],
                                                              db: Db) -> None:
    engine = make_engine()
    name = unique("h4")
    job = add_due(engine, db, name, driver="test-heartbeat", configuration={"gate": name})
    engine.dispatch_due_jobs()
    assert drivers.started(name).wait(5)
    # another holder takes the lock over (lease forced past expiry by the database clock)
    db.expire_lease(job)
    assert engine.backend.acquire_job_lock(job, str(uuid.uuid4()), "thief", 30)
    drivers.gate(name).set()
    wait_for(lambda: engine.parts.registry.snapshot() == [], message="the run to finish")
    details = db.one("SELECT details FROM mjsched.scheduled_job_run WHERE scheduled_job_id = ?", (job,))
    assert details is None  # the run was abandoned by the takeover; its result was refused
    assert db.run_statuses(job) == ["Abandoned"]


@pytest.mark.postgres
def test_h5_renewal_errors_are_logged_never_raised(make_engine: Callable[..., Any], pg_db: Db, sql: Any,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    db = pg_db
    engine = make_engine()
    add_due(engine, db, unique("h5"))
    engine.dispatch_due_jobs()
    sql.run("ALTER FUNCTION mjsched.renew_leases(uuid[], double precision, varchar, timestamptz) "
            "RENAME TO renew_leases_gone")
    try:
        with caplog.at_level(logging.ERROR, logger="mjsched"):
            assert engine.parts.keeper.renew() is False
        assert any("Lease renewal failed" in r.getMessage() for r in caplog.records)
    finally:
        sql.run("ALTER FUNCTION mjsched.renew_leases_gone(uuid[], double precision, varchar, timestamptz) "
                "RENAME TO renew_leases")


def test_h6_token_mismatch_is_logged_and_the_run_cancelled(make_engine: Callable[..., Any], db: Db,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    engine = make_engine()
    name = unique("h6")
    job = add_due(engine, db, name)
    engine.dispatch_due_jobs()
    assert drivers.started(name).wait(5)
    (entry,) = engine.parts.registry.snapshot()
    db.run(f"UPDATE mjsched.scheduled_job_run SET status = 'Abandoned', completed_at = {db.now} "
           "WHERE scheduled_job_id = ?", (job,))
    db.run("UPDATE mjsched.scheduled_job SET lock_token = ? WHERE id = ?", (str(uuid.uuid4()), job))
    with caplog.at_level(logging.WARNING, logger="mjsched"):
        assert engine.parts.keeper.renew() is True
    assert any("slot has been handed off" in r.getMessage() for r in caplog.records)
    assert entry.cancel_event.is_set() and engine.parts.registry.live_count() == 0


def test_max_runtime_times_out_a_hung_run_and_frees_its_slot(make_engine: Callable[..., Any], db: Db) -> None:
    engine = make_engine(max_concurrent_jobs=1)
    name = unique("timeout")
    job = add_due(engine, db, name, max_runtime=0.3, configuration={"gate": name, "ignore_cancel": True})
    engine.start_polling()
    wait_for(lambda: db.run_statuses(job) == ["Timeout"], message="the run to time out")
    assert engine.parts.registry.leaked == 1 and engine.parts.registry.live_count() == 0
    ok = engine.create_job(unique("after"), "test-ok", "* * * * * *")
    wait_for(lambda: "Completed" in db.run_statuses(ok), message="healthy work to run despite the leak")


def test_a_raising_driver_fails_the_run_and_still_notifies(make_engine: Callable[..., Any], db: Db) -> None:
    notifier = drivers.RecordingNotifier()
    engine = make_engine(notifier=notifier)
    job = add_due(engine, db, unique("raise"), driver="test-raise", configuration={})
    engine.dispatch_due_jobs()
    assert notifier.event.wait(5)
    _, run, note = notifier.sent[0]
    assert run.status is mjsched.RunStatus.FAILED and "driver exploded" in note.body
    assert db.run_statuses(job) == ["Failed"]


def test_a_failing_notifier_never_fails_the_run(make_engine: Callable[..., Any], db: Db) -> None:
    engine = make_engine(notifier=drivers.ExplodingNotifier())
    job = add_due(engine, db, unique("notify"), driver="test-ok", configuration={}, notify_on_success=True)
    engine.dispatch_due_jobs()
    wait_for(lambda: db.run_statuses(job) == ["Completed"], message="completion")
    wait_for(lambda: engine.parts.registry.snapshot() == [], message="the notification attempt")
    assert db.run_statuses(job) == ["Completed"]


def test_execute_job_runs_now_under_the_lock(make_engine: Callable[..., Any], db: Db) -> None:
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


def test_queue_mode_keeps_ticks_that_come_while_running(make_engine: Callable[..., Any], db: Db) -> None:
    engine = make_engine(max_concurrent_jobs=2)
    name = unique("queue")
    job = engine.create_job(name, "test-block", "* * * * * *", configuration={"gate": name},
                            concurrency_mode="Queue", max_queued_runs=2)
    engine.start_polling()
    assert drivers.started(name).wait(5)
    wait_for(lambda: db.count_runs("Queued", job) == 2, timeout=6, message="two queued ticks")
    time.sleep(1.2)   # a third tick comes and goes: the queue is bounded at two
    assert db.count_runs("Queued", job) == 2
    drivers.gate(name).set()
    wait_for(lambda: db.count_runs("Completed", job) >= 3, timeout=6, message="the queue to drain")
    rows = db.rows("SELECT scheduled_for, started_at FROM mjsched.scheduled_job_run WHERE scheduled_job_id = ? "
                   "AND status = 'Completed' ORDER BY started_at", (job,))
    assert [r["scheduled_for"] for r in rows] == sorted(r["scheduled_for"] for r in rows)   # FIFO


def test_skip_mode_drops_ticks_that_come_while_running(make_engine: Callable[..., Any], db: Db) -> None:
    engine = make_engine()
    name = unique("skip")
    job = engine.create_job(name, "test-block", "* * * * * *", configuration={"gate": name})
    engine.start_polling()
    assert drivers.started(name).wait(5)
    time.sleep(2.2)   # two ticks pass while it runs
    assert db.run_statuses(job) == ["Running"]
    drivers.gate(name).set()
    wait_for(lambda: db.run_statuses(job)[:1] == ["Completed"], message="completion")
    assert "Queued" not in db.run_statuses(job)


def test_lateness_of_a_per_second_job_stays_under_a_second(make_engine: Callable[..., Any], db: Db) -> None:
    engine = make_engine()
    job = engine.create_job(unique("late"), "test-ok", "* * * * * *")
    engine.start_polling()
    wait_for(lambda: db.count_runs("Completed", job) >= 5, timeout=10, message="five runs")
    worst = db.one(f"SELECT max({db.seconds('started_at', 'scheduled_for')}) FROM mjsched.scheduled_job_run "
                   "WHERE scheduled_job_id = ?", (job,))
    assert 0 <= float(worst) < 1.0
