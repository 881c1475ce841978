"""A Skip job never runs twice at once, whatever stops its engine's renewals (issue 32).

Two engines on one database; engine E0 runs a long shell job in Skip mode, E1 waits to take
it over. Overlaps are counted from the job's own side effects, not from mjsched's tables:
each run writes its shell's pid into a directory and, before that, counts the pids there
that are still alive; a fenced run's process group is dead, so it does not count.

- An outside lock on E0's own ``engine_instance`` row (an operator's open transaction):
  on 009e285 the renewal began with a waiting liveness UPDATE of that row, so E0's leases
  lapsed while its run went on and E1 started the job beside it. Now the liveness write is
  skipped when the row is held, and the run keeps its lease.
- A renewal that cannot complete, for a cause nobody listed (here: the renewal call stalls
  in the engine's own backend): E0 fences the run -- its process group is killed before the
  database could hand the job over -- and E1 takes the job once the lease lapses.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import psycopg2
import pytest

import mjsched
from tests.support.pg import Sql, wait_for

pytestmark = pytest.mark.postgres

LEASE = 2.0
EVERY_SECOND = "* * * * * *"

# Count the live pids already in the directory (an overlap each), then add our own, then run on.
TRACKED = ('for f in {d}/*.pid; do [ -e "$f" ] || continue; p=$(basename "$f" .pid); '
           'if kill -0 "$p" 2>/dev/null; then echo "$$ beside $p" >> {d}/overlaps; fi; done; '
           'echo started > {d}/$$.pid; exec sleep {seconds}')


def long_skip_job(engine: mjsched.SchedulingEngine, directory: Path, seconds: float = 60) -> str:
    return engine.create_job("long-skip", "shell", EVERY_SECOND, concurrency_mode="Skip",
                             configuration={"command": TRACKED.format(d=directory, seconds=seconds)})


def pids(directory: Path) -> list[int]:
    return sorted(int(p.stem) for p in directory.glob("*.pid"))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (killed, not yet reaped) holds nothing: it does not count
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
        return stat[stat.rfind(b")") + 2:].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


def overlaps(directory: Path) -> list[str]:
    path = directory / "overlaps"
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def track(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    for pid in pids(tmp_path):   # nothing outlives the test
        try:
            os.kill(pid, 9)
        except OSError:
            pass


class OutsideLock:
    """An open transaction on E0's registry row, as an operator's session would leave it."""

    def __init__(self, dsn: str, statement: str, instance: str) -> None:
        self.conn = psycopg2.connect(dsn)
        with self.conn.cursor() as cur:
            cur.execute(statement, (instance,))

    def release(self) -> None:
        self.conn.rollback()
        self.conn.close()


@pytest.mark.parametrize("statement", [
    "SELECT 1 FROM mjsched.engine_instance WHERE instance = %s FOR UPDATE",
    "SELECT 1 FROM mjsched.engine_instance WHERE instance = %s FOR SHARE",
    "UPDATE mjsched.engine_instance SET host = host WHERE instance = %s",
    "DELETE FROM mjsched.engine_instance WHERE instance = %s",
], ids=["for-update", "for-share", "update", "delete"])
def test_an_outside_lock_on_the_engines_own_row_never_runs_a_skip_job_twice(
        pg_dsn: str, make_engine: Callable[..., mjsched.SchedulingEngine], sql: Sql, track: Path,
        statement: str) -> None:
    e0 = make_engine(lease_timeout=LEASE, instance_name="e0", max_poll_interval=0.2)
    e1 = make_engine(lease_timeout=LEASE, instance_name="e1", max_poll_interval=0.2)
    job = long_skip_job(e0, track)
    e0.start_polling()
    first = wait_for(lambda: pids(track), timeout=10, message="E0 started the long job")[0]
    e1.start_polling()
    lock = OutsideLock(pg_dsn, statement, "e0")
    try:
        threading.Event().wait(LEASE * 3)    # the hold: three leases
    finally:
        lock.release()
    assert overlaps(track) == []
    assert alive(first), "E0's run was stopped: its renewals should have gone around the held row"
    holder = sql.one("SELECT locked_by_instance FROM mjsched.scheduled_job WHERE id = %s", (job,))
    assert holder == "e0"
    assert sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE status = 'Abandoned'") == 0


class StalledRenewals:
    """E0's renewals stall inside its backend until released: a cause the engine was not
    written for (a lock, a link, a disk), as far as the engine can tell."""

    def __init__(self, backend: Any) -> None:
        self.release = threading.Event()
        self.stalled = threading.Event()
        self._real = backend.renew_leases

        def renew_leases(*args: Any, **kwargs: Any) -> Any:
            self.stalled.set()
            self.release.wait(60)
            return self._real(*args, **kwargs)
        backend.renew_leases = renew_leases


def test_an_engine_that_cannot_renew_stops_its_run_before_the_lease_can_pass(
        make_engine: Callable[..., mjsched.SchedulingEngine], sql: Sql, track: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="mjsched")
    e0 = make_engine(lease_timeout=LEASE, instance_name="e0", max_poll_interval=0.2)
    job = long_skip_job(e0, track)
    e0.start_polling()
    first = wait_for(lambda: pids(track), timeout=10, message="E0 started the long job")[0]
    stall = StalledRenewals(e0.backend)
    try:
        assert stall.stalled.wait(LEASE), "the keeper renews within a lease"
        # E0 must kill its run before the database's lease (which only moves forward) lapses
        wait_for(lambda: not alive(first), timeout=LEASE * 2, message="E0 fenced its run")
        fenced_at = sql.one("SELECT clock_timestamp()")
        lease = sql.one("SELECT lease_expires_at FROM mjsched.scheduled_job_run "
                        "WHERE scheduled_job_id = %s AND status = 'Running'", (job,))
        assert lease is not None and fenced_at < lease, (fenced_at, lease)
        assert any(getattr(r, "action", None) == "lease_lost" and getattr(r, "reason", None) == "fenced"
                   for r in caplog.records)
        assert e0.stats["leases_fenced"] == 1
        # E1 takes the job once the lease lapses: the fleet is not stuck
        e1 = make_engine(lease_timeout=LEASE, instance_name="e1", max_poll_interval=0.2)
        e1.start_polling()
        wait_for(lambda: len(pids(track)) >= 2, timeout=LEASE * 4, message="E1 took the job over")
        assert overlaps(track) == []
        abandoned = sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE status = 'Abandoned' "
                            "AND executed_by_instance = 'e0'")
        assert abandoned == 1     # recorded by the takeover, not by E0 (its token was fenced)
    finally:
        stall.release.set()

