"""Self-fencing with causes it was not written for (issue 32).

Engine E0 runs one long process-isolated Skip job (its body ignores its cancel event and
writes its life to a trace, tests/chaos/exclusion.py); engine E1 stands by. Then, for
three leases, something no code path names keeps E0 from renewing:

* ``stalled_link``: E0 reaches PostgreSQL through a loopback proxy that stops forwarding
  (both sockets open, nothing closed) and then forwards again (``StallingProxy.thaw``);
* ``job_row_locked``: an outsider holds the job's row ``FOR UPDATE``;
* ``engine_row_locked``: an outsider holds E0's ``engine_instance`` row ``FOR UPDATE``;
* ``keeper_backend_stopped``: the server process of the connection E0's lease keeper
  renews on gets ``SIGSTOP`` (found in ``pg_stat_activity`` by its last statement, a
  renewal, and by E0's own client ports); the engine pools its connections, so each
  connection that carries one of E0's renewals during the pause is stopped once it is
  idle again -- only those, never E1's -- and all get ``SIGCONT`` at the end.

Counted from the trace: 0 overlapping executions. And the fleet is not stuck: E1 takes
the job over once E0's lease lapsed (during the pause, or after it for the locked job
row, which nobody can claim while it is held). For ``engine_row_locked`` the lease need
not lapse at all: a liveness write that cannot be made is skipped, so E0 may go on
renewing; there the job must be executing at the end, on E0 untouched or on E1.
Each case runs on a private PostgreSQL cluster (tests/chaos/cluster.py): a stopped
server process must not stall the shared server's other databases.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from typing import Any, Callable, Iterator, TypeVar

import psycopg2.extensions
import pytest

import mjsched
from mjsched import isolation
from tests.chaos.exclusion import OutsideLock, Span, client_ports, overlaps, spans
from tests.chaos.harness import EVERY_SECOND, Worker, report, stop_all
from tests.support.pg import Sql, wait_for
from tests.support.procs import process_alive
from tests.support.stall_proxy import StallingProxy

pytestmark = [pytest.mark.chaos, pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(150)]

LEASE = 2.0
PAUSE = 3 * LEASE            # how long each cause keeps E0 from renewing
SKIP_SECONDS = 60.0          # E0's run would outlive the pause many times over
TAKEOVER = LEASE + 8.0       # after the pause: a lapse, a sweep, the next tick, a claim, a child's start
T = TypeVar("T")
CAUSES = ("stalled_link", "job_row_locked", "engine_row_locked", "keeper_backend_stopped")


def _through(dsn: str, proxy: StallingProxy) -> str:
    params = psycopg2.extensions.parse_dsn(dsn)
    params.update(host="127.0.0.1", port=str(proxy.port))
    return psycopg2.extensions.make_dsn(**params)


@contextlib.contextmanager
def _stalled_link(proxy: StallingProxy) -> Iterator[dict[str, Any]]:
    proxy.stall()
    try:
        yield {"frozen_connections": proxy.frozen}
    finally:
        proxy.thaw()


@contextlib.contextmanager
def _row_locked(dsn: str, table: str, victim: dict[str, str]) -> Iterator[dict[str, Any]]:
    outsider = OutsideLock(dsn, table, "FOR UPDATE", victim)
    try:
        assert outsider.rows == 1, f"FOR UPDATE on {table}: {outsider.rows} rows locked"
        yield {"rows_locked": outsider.rows}
    finally:
        outsider.release()


@contextlib.contextmanager
def _keeper_backend_stopped(sql: Sql, engine_pid: int) -> Iterator[dict[str, Any]]:
    """SIGSTOP each backend of ``engine_pid`` running or last running a renewal, until exit. The
    fault begins (the context is entered) once one is stopped: the engine pools its connections,
    so the one a renewal used may carry a claim next, and a poll may miss it for a while."""
    stopped: list[int] = []
    done = threading.Event()
    failure: list[BaseException] = []
    watcher = Sql(sql.dsn)

    def stalk() -> None:
        try:
            while not done.wait(0.02):
                for row in watcher.rows("""SELECT pid FROM pg_stat_activity
                                            WHERE datname = current_database() AND state IN ('idle', 'active')
                                              AND client_port = ANY(%s) AND query ~* '(renew|extend_job_leases)'""",
                                        (sorted(client_ports(engine_pid)),)):
                    if row["pid"] not in stopped:
                        os.kill(row["pid"], signal.SIGSTOP)
                        stopped.append(row["pid"])
                        first_stopped.set()
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            failure.append(exc)

    first_stopped = threading.Event()
    thread = threading.Thread(target=stalk, name="stop-keeper-backend", daemon=True)
    thread.start()
    first_stopped.wait(10 * LEASE)      # bounded: the assertion below says when none was caught
    figures: dict[str, Any] = {"backends_stopped": stopped}
    try:
        yield figures
    finally:
        done.set()
        thread.join(5)
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        watcher.close()
    if failure and isinstance(failure[0], PermissionError):
        pytest.skip(f"cannot signal the server's processes here: {failure[0]}")
    assert not failure, failure
    assert stopped, "no backend of E0 carried a renewal during the pause"


def _within(predicate: Callable[[], T], timeout: float) -> T | None:
    """``predicate()``'s first truthy value within ``timeout`` seconds, else None (counted, not raised)."""
    try:
        return wait_for(predicate, timeout=timeout, interval=0.1)
    except AssertionError:
        return None


def _started_on(directory: str, instance: str, after: float) -> Span | None:
    return next((s for s in spans(directory, "long") if s.instance == instance and s.start > after), None)


@pytest.mark.parametrize("cause", CAUSES)
def test_an_engine_that_cannot_renew_stops_its_run_before_another_takes_it(
        cause: str, private_cluster: Any, private_dsn: str, workdir: str) -> None:
    sql = Sql(private_dsn)
    crud = mjsched.SchedulingEngine(private_dsn, pool_size=2)
    proxy = StallingProxy("127.0.0.1", private_cluster.port)
    options = dict(cap=4, lease=LEASE, max_poll=0.5, drain=2)
    workers: list[Worker] = []
    try:
        e0 = Worker(_through(private_dsn, proxy) if cause == "stalled_link" else private_dsn, "E0", workdir,
                    **options).wait_ready()
        workers.append(e0)
        job_id = crud.create_job(name="long", driver="python", cron=EVERY_SECOND, isolation="process",
                                 configuration={"callable": "tests.chaos.exclusion:spanned",
                                                "kwargs": {"dir": workdir, "key": "long", "seconds": SKIP_SECONDS}})
        first = wait_for(lambda: _started_on(workdir, "E0", 0.0), timeout=20, message=f"{cause}: E0 to start the job")
        workers.append(Worker(private_dsn, "E1", workdir, **options).wait_ready())
        run_id = sql.one("SELECT id::text FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s "
                         "AND status = 'Running'", (job_id,))
        victim = {"engine": "E0", "job_id": job_id, "run_id": run_id or ""}
        causes = {
            "stalled_link": lambda: _stalled_link(proxy),
            "job_row_locked": lambda: _row_locked(private_dsn, "scheduled_job", victim),
            "engine_row_locked": lambda: _row_locked(private_dsn, "engine_instance", victim),
            "keeper_backend_stopped": lambda: _keeper_backend_stopped(sql, e0.pid),
        }
        began = time.time()
        with causes[cause]() as figures:
            threading.Event().wait(PAUSE)      # the fault itself: E0 cannot renew for three leases
        ended = time.time()
        # the job runs again once the lease lapsed: on E1, or on E0 itself once its fence let it
        # claim again (either engine may win the claim after the fault ends; stuck is neither)
        takeover = _within(lambda: _started_on(workdir, "E1", began) or next(
            (s for s in spans(workdir, "long") if s.start > began and s.run_id != first.run_id), None), TAKEOVER)
        if takeover is not None:   # E0's run ends (fenced, or once E0 learns it lost): its trace is complete
            _within(lambda: not process_alive(first.pid), LEASE + isolation.GRACE + 10)
        still_running = process_alive(first.pid)
    finally:
        stop_all([w for w in workers if w.alive()])
        crud.close()
        proxy.close()
    wait_for(lambda: not any(process_alive(s.pid) for s in spans(workdir, "long")), timeout=isolation.GRACE + 10,
             message=f"{cause}: every child of the job to end after the engines stopped")
    trace = spans(workdir, "long")
    found = overlaps(trace)
    e0_run = next(s for s in trace if s.run_id == first.run_id)
    sql.close()
    report(f"self_fencing[{cause}]", lease_s=LEASE, pause_s=PAUSE, executions=len(trace), overlaps=len(found),
           e0_run_last_seen_after_s=round(e0_run.last - began, 2), e0_run_finished=e0_run.finished,
           e0_run_alive_at_end=still_running,
           taken_over_after_s=round(takeover.start - began, 2) if takeover else None,
           taken_over_by=takeover.instance if takeover else None,
           pause_ended_after_s=round(ended - began, 2), **figures)
    assert found == [], f"{cause}: executions overlap: {found}"
    if cause == "engine_row_locked":   # E0 may renew on (its liveness write skipped): not stuck either way
        assert takeover is not None or still_running, f"{cause}: the job is executing nowhere"
    else:
        assert takeover is not None, f"{cause}: no engine ran the job again: the fleet is stuck"
