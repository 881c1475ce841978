"""Half-open connections (issue 12 item 3): every database call is bounded in time.

Engine A reaches PostgreSQL through a loopback proxy (tests/support/stall_proxy.py)
that can freeze connections for good with both sockets open, as a NAT or a dead
route does: no error, no close, TCP keepalives answered, nothing forwarded. Engine
B, where present, connects directly. Leases are 3 s, so each test takes seconds.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any, Callable, Iterator

import psycopg2.extensions
import pytest

import mjsched
from tests.chaos.harness import EVERY_SECOND, report
from tests.support import drivers
from tests.support.pg import Sql, wait_for
from tests.support.stall_proxy import StallingProxy

pytestmark = pytest.mark.postgres

LEASE = 3.0


@pytest.fixture
def proxy(pg_dsn: str) -> Iterator[StallingProxy]:
    params = psycopg2.extensions.parse_dsn(pg_dsn)
    with StallingProxy(params.get("host", "127.0.0.1"), int(params.get("port", 5432))) as p:
        yield p


def through(pg_dsn: str, proxy: StallingProxy) -> str:
    params = psycopg2.extensions.parse_dsn(pg_dsn)
    params.update(host="127.0.0.1", port=str(proxy.port))
    return psycopg2.extensions.make_dsn(**params)


def runs_by(sql: Sql, instance: str, job: str) -> list[dict[str, Any]]:
    return sql.rows("SELECT status, started_at, scheduled_for FROM mjsched.scheduled_job_run "
                    "WHERE scheduled_job_id = %s AND executed_by_instance = %s ORDER BY started_at", (job, instance))


def test_a_completion_stuck_on_a_half_open_connection_lets_another_engine_take_the_job(
        pg_dsn: str, proxy: StallingProxy, make_engine: Callable[..., mjsched.SchedulingEngine], sql: Sql,
        caplog: pytest.LogCaptureFixture) -> None:
    """Only the connections carrying completions go half-open; A's lease keeper stays
    healthy. A's completions get no reply, so after half a lease A stops renewing those
    runs, the leases lapse, and B runs the next ticks. Bound: completion window (lease/2)
    + lease + 2.5 s (sweep at most 0.75 s, the next per-second tick, a claim).
    A's claims go half-open too once its runs have started: a healthy A may win the
    reclaim at the next tick (allowed, and its run then sticks the same way), which
    made B's first run a race, 8.98 s once in CI.
    On 1539633 A's keeper renewed the completing runs for ever: B never ran them."""
    caplog.set_level(logging.WARNING, logger="mjsched")
    crud = make_engine(pool_size=2)
    tag = uuid.uuid4().hex[:8]
    jobs = {crud.create_job(f"half-open-{i}", "test-block", EVERY_SECOND,
                            configuration={"gate": f"half-open-{tag}-{i}"}): f"half-open-{tag}-{i}"
            for i in range(6)}
    proxy.freeze_on(b"mjsched.complete_")
    a = make_engine(dsn=through(pg_dsn, proxy), instance_name="A", lease_timeout=LEASE,
                    max_concurrent_jobs=6, max_poll_interval=0.5)
    a.start_polling()
    for gate in jobs.values():
        assert drivers.started(gate).wait(15), f"A never started {gate}"
    proxy.freeze_on(b"mjsched.claim_due_jobs")   # from here B alone can take the lapsed leases
    b = make_engine(instance_name="B", lease_timeout=LEASE, max_concurrent_jobs=6, max_poll_interval=0.5)
    finished_at = sql.one("SELECT clock_timestamp()")
    for gate in jobs.values():
        drivers.gate(gate).set()             # A's runs return: their completions hit the frozen path
    b.start_polling()

    def b_ran_all() -> bool:
        return all(any(r["status"] == "Completed" for r in runs_by(sql, "B", job)) for job in jobs)
    wait_for(b_ran_all, timeout=LEASE / 2 + LEASE + 10, interval=0.1, message="B running every job")

    delays = sorted(round((runs_by(sql, "B", job)[0]["started_at"] - finished_at).total_seconds(), 2)
                    for job in jobs)
    report("half_open_completion", lease=LEASE, seconds_until_b_ran_each_job=delays,
           calls_abandoned=a.backend._watchdog.abandoned, frozen_connections=proxy.frozen)   # type: ignore[attr-defined]
    assert max(delays) <= LEASE / 2 + LEASE + 2.5, delays
    for job in jobs:   # A's stuck runs were taken over, never counted twice
        statuses = [r["status"] for r in runs_by(sql, "A", job)]
        assert statuses and set(statuses) <= {"Abandoned"}, statuses
    actions = {getattr(r, "action", None) for r in caplog.records}
    assert {"db_call_abandoned", "completion_stalled"} <= actions
    proxy.stop_freezing()    # A's late completions land (fenced) and its close() is quick


def test_a_poller_stuck_on_a_dead_route_recovers_when_connections_work_again(
        pg_dsn: str, proxy: StallingProxy, make_engine: Callable[..., mjsched.SchedulingEngine], sql: Sql,
        caplog: pytest.LogCaptureFixture) -> None:
    """Every connection of A goes half-open for 5 s (polls, claims, renewals and
    completions stuck mid-call), then new connections work again while the old ones
    stay frozen for good. A runs its per-second jobs again within call_timeout (2 s) +
    connect + one poll interval. On 1539633 the poller stayed in recv for ever."""
    caplog.set_level(logging.WARNING, logger="mjsched")
    crud = make_engine(pool_size=2)
    jobs = [crud.create_job(f"every-second-{i}", "test-ok", EVERY_SECOND) for i in range(3)]
    a = make_engine(dsn=through(pg_dsn, proxy), instance_name="A", lease_timeout=LEASE, max_poll_interval=0.5)
    a.start_polling()
    wait_for(lambda: all(runs_by(sql, "A", j) for j in jobs), timeout=10, message="A running every job")
    proxy.stall()
    threading.Event().wait(5.0)             # the outage itself: five seconds of a dead route
    resumed_at = sql.one("SELECT clock_timestamp()")
    proxy.resume()

    def ran_again() -> bool:
        return all(any(r["status"] == "Completed" and r["started_at"] > resumed_at for r in runs_by(sql, "A", j))
                   for j in jobs)
    started = time.monotonic()
    wait_for(ran_again, timeout=15, interval=0.1, message="A running its jobs after the outage")
    recovered_in = round(time.monotonic() - started, 2)
    report("half_open_poller", lease=LEASE, seconds_until_every_job_ran_again=recovered_in,
           failed_polls=a.parts.poller.failures, calls_abandoned=a.backend._watchdog.abandoned)   # type: ignore[attr-defined]
    assert a.is_polling and a.parts.poller.alive
    assert recovered_in <= 8.0
    assert "db_call_abandoned" in {getattr(r, "action", None) for r in caplog.records}
