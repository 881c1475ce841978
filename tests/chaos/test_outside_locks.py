"""The outside-lock matrix (issue 32): no lock an outsider holds makes a Skip job run twice.

Generated, not listed: for every table of the ``mjsched`` schema (read from the catalog,
so a table added tomorrow gets its cells without an edit here) and every lock an outside
session can hold -- on the rows the engines use (``exclusion.ROW_LOCKS``: the four
``SELECT ... FOR`` strengths, an open ``UPDATE`` of a non-key column, an open ``DELETE``
rolled back at the end) or on the whole table (``exclusion.TABLE_LOCKS``: one mode per
class of what it blocks; the reasoning is written there) -- one cell holds that lock for
1.5 leases beside two engine processes running long process-isolated Skip jobs (each five
leases long or more, ignoring its cancel event) and short per-second jobs.

The rows a cell locks belong to a victim: a Skip job running at the cell's start, on
engine E (E's ``engine_instance`` row, the job's row, its Running run's row, its job
type's row -- every job's type here); a table not known to this file has all its rows
locked, and is judged as a table lock is.

Per cell, counted from the jobs' own traces (``tests/chaos/exclusion.py``, bump's log),
not from the run table:

* overlaps: 0 -- no execution of a job (long or short: all are Skip jobs) began before an
  earlier one's last sign of life;
* abandoned: 0 finished executions (the body wrote its end) recorded Abandoned -- except
  where a table lock refuses every completion's writes for longer than the lease
  (``Cell.blocks_completions``): there a run that finished cannot be recorded in time, and the
  count is printed but not failed;
* late: for a row lock, 0 ticks of the short jobs without a start within a second (their
  rows are not locked and no engine writes a job type or another engine's row, so nothing
  excuses them); a table lock stalls what touches the table -- every job, for the tables
  the engines write --, so there the fleet must instead recover: every short job runs
  again within ``RECOVERY`` seconds of the release.

The cells share one engine pair and run one after another; a cell ends only once every
short job ran after its release, its victim's job is at work again, no job runs twice and
no Running run's lease is left lapsed, so the next cell's counts are its own. The matrix is printed
with its counts (and in the terminal summary, tests/conftest.py).
``MJSCHED_MATRIX_CELLS=<regex>`` runs only the cells whose name ("table / lock") matches.
"""
from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.chaos.exclusion import (ROW_LOCKS, TABLE_LOCKS, VICTIM_ROWS, OutsideLock, Span, late_ticks, overlaps,
                                   schema_tables, spans)
from tests.chaos.harness import (EVERY_SECOND, Worker, create_counter_jobs, executions, report, start_workers,
                                 stop_all)
from tests.support.pg import Sql, wait_for

pytestmark = [pytest.mark.chaos, pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(600)]

LEASE = 2.0
HOLD = 1.5 * LEASE          # each lock outlives a lease
SKIP_SECONDS = {f"skip{i}": 5 * LEASE + i for i in range(4)}   # the long Skip jobs' run times
SHORT_JOBS = 4
LATE_LIMIT = 1.0            # a short job's tick is late without a start within this
RECOVERY = 2 * LEASE + 4.0  # after a release, every short job runs again within this


@dataclass
class Cell:
    table: str
    lock: str
    begun: float = 0.0
    released: float = 0.0
    ended: float = 0.0
    rows: int = 0
    refused: str | None = None
    victim: dict[str, str] = field(default_factory=dict)
    recovered_s: float = 0.0    # release -> every short job ran again
    executions: int = 0
    overlaps: list[tuple[Span, Span]] = field(default_factory=list)
    abandoned: list[str] = field(default_factory=list)   # finished executions recorded Abandoned
    late: int = 0

    @property
    def name(self) -> str:
        return f"{self.table} / {self.lock}"

    @property
    def rows_only(self) -> bool:
        """A row lock on rows this file knows: the short jobs' own rows stay free."""
        return self.lock in ROW_LOCKS and self.table in VICTIM_ROWS

    @property
    def blocks_completions(self) -> bool:
        """A table lock that refuses the engines' writes -- a completion's (its job and run rows)
        or a renewal's (those, and the engine registry's liveness write) -- for longer than the
        lease: a run that finished meanwhile may not be recorded before its lease lapses, and
        whoever takes the job records it Abandoned ("the lease expired before the run
        completed"). Nothing runs twice (counted as everywhere); docs/guide/protocol.md
        "Self-fencing" names this limit."""
        return (not self.rows_only and self.lock in ("SHARE", "EXCLUSIVE", "ACCESS EXCLUSIVE")
                and self.table in ("scheduled_job", "scheduled_job_run", "engine_instance"))

    def line(self) -> str:
        held = self.refused or ("table" if self.rows < 0 else f"{self.rows} row(s)" if self.rows else "-")
        return (f"{self.name:<45} {held:<12.40} executions={self.executions:<4} overlaps={len(self.overlaps)} "
                f"abandoned={len(self.abandoned)} late={self.late if self.rows_only else '-'} "
                f"recovered_s={self.recovered_s:.1f} victim_on={self.victim.get('engine', '?')}")


def _skip_jobs(crud: Any, workdir: str) -> dict[str, str]:
    """Long Skip jobs of different lengths, so their runs drift apart and some run is always young.
    They carry a tag with a cluster-wide limit that never binds (10 > 4) and an alert rule that
    never fires, so the claim's tag-limit check and the alert pass read rows an outsider can lock
    (``job_tag``, ``tag_limit``, ``job_alert_rule``), instead of tables this scenario leaves empty."""
    jobs = {key: crud.create_job(name=key, driver="python", cron=EVERY_SECOND, isolation="process",
                                 tags={"chaos"}, alert_too_long="1h",
                                 configuration={"callable": "tests.chaos.exclusion:spanned",
                                                "kwargs": {"dir": workdir, "key": key, "seconds": seconds}})
            for key, seconds in SKIP_SECONDS.items()}
    crud.set_tag_limit("chaos", 10)
    return jobs


def _victim(sql: Sql, skip: dict[str, str], left: float) -> dict[str, str] | None:
    """The Running Skip run with the most time left, if it has at least ``left`` seconds of it."""
    key_of = {job_id: key for key, job_id in skip.items()}
    rows = sql.rows("""SELECT id::text AS run_id, scheduled_job_id::text AS job_id, executed_by_instance AS engine,
                              extract(epoch FROM clock_timestamp() - started_at)::float AS age
                         FROM mjsched.scheduled_job_run
                        WHERE status = 'Running' AND scheduled_job_id = ANY(%s::uuid[])""", (list(skip.values()),))
    best = max(rows, key=lambda r: SKIP_SECONDS[key_of[r["job_id"]]] - r["age"], default=None)
    if best is None or SKIP_SECONDS[key_of[best["job_id"]]] - best["age"] < left:
        return None
    return {k: str(best[k]) for k in ("run_id", "job_id", "engine")}


def _live(workdir: str, key: str) -> list[Span]:
    """Executions of ``key`` still beating (a line within the last second)."""
    now = time.time()
    return [s for s in spans(workdir, key) if not s.finished and now - s.last < 1.0]


def _settled(sql: Sql, workdir: str, skip: dict[str, str], victim_key: str) -> bool:
    """No Skip job has two executions alive, the victim's job is at work again, and no Running
    run's lease has lapsed (what a sweep would take over next): the next cell starts from a
    quiet fleet, so what this cell caused is counted in this cell."""
    live = {key: _live(workdir, key) for key in skip}
    return all(len(v) <= 1 for v in live.values()) and len(live[victim_key]) == 1 and sql.one(
        "SELECT count(*) FROM mjsched.scheduled_job_run WHERE status = 'Running' "
        "AND lease_expires_at < clock_timestamp()") == 0


def _short_ran_since(workdir: str, short: dict[str, str], since: float) -> bool:
    return all(any(e.start > since for e in executions(workdir, key)) for key in short)


def _run_cell(cell: Cell, dsn: str, sql: Sql, workdir: str, skip: dict[str, str], short: dict[str, str],
              workers: list[Worker]) -> None:
    dead = [w.instance for w in workers if not w.alive()]
    assert not dead, f"cell {cell.name}: engine(s) {dead} exited: {[w.tail() for w in workers]}"
    left = HOLD + 0.5 if cell.lock in ROW_LOCKS else 0.0   # a row lock's victim runs through the hold
    cell.victim = wait_for(lambda: _victim(sql, skip, left), timeout=max(SKIP_SECONDS.values()) + 2 * LEASE + 5,
                           interval=0.1, message=f"cell {cell.name}: a Skip job running to be its victim")
    cell.begun = time.time()
    outsider = OutsideLock(dsn, cell.table, cell.lock, cell.victim)
    try:
        cell.rows, cell.refused = outsider.rows, outsider.refused
        threading.Event().wait(HOLD)       # the fault itself: the lock held for 1.5 leases
    finally:
        outsider.release()
        cell.released = time.time()
    wait_for(lambda: _short_ran_since(workdir, short, cell.released), timeout=RECOVERY, interval=0.1,
             message=f"cell {cell.name}: every short job to run again after the release (the fleet recovers)")
    cell.recovered_s = time.time() - cell.released
    victim_key = next(k for k, v in skip.items() if v == cell.victim["job_id"])
    wait_for(lambda: _settled(sql, workdir, skip, victim_key), timeout=max(SKIP_SECONDS.values()) + 2 * LEASE + 5,
             interval=0.1, message=f"cell {cell.name}: the victim's job at work again and no job running twice")
    print(f"[matrix] {time.strftime('%H:%M:%S')} {cell.name}: held {cell.refused or cell.rows}, "
          f"victim {cell.victim}, recovered in {cell.recovered_s:.1f}s", flush=True)
    assert cell.refused or cell.rows != 0, f"cell {cell.name}: the outsider locked no row"


def _count(cells: list[Cell], sql: Sql, workdir: str, skip: dict[str, str], short: dict[str, str]) -> None:
    """Each cell's counts over its window (its start to the next cell's), from the traces."""
    long_runs = {key: spans(workdir, key) for key in skip}
    short_runs = {key: [Span(key, e.run_id, e.pid, e.instance, e.start, e.end, True)   # Skip jobs too
                        for e in executions(workdir, key)] for key in short}
    rows = {r["id"]: r for r in sql.rows("SELECT id::text, status, error_message FROM mjsched.scheduled_job_run")}
    for cell, following in zip(cells, cells[1:] + [None], strict=True):
        cell.ended = following.begun if following else float("inf")
        inside = lambda t: cell.begun <= t < cell.ended   # noqa: E731 - one predicate, read below
        finished: list[tuple[str, str, float]] = []    # (job, run id, end)
        for key, runs in long_runs.items():
            cell.executions += sum(1 for s in runs if inside(s.start))
            cell.overlaps += [(a, b) for a, b in overlaps(runs) if inside(b.start)]
            finished += [(key, s.run_id, s.last) for s in runs if s.finished and inside(s.last)]
        for key, done in short_runs.items():
            cell.executions += sum(1 for e in done if inside(e.start))
            cell.overlaps += [(a, b) for a, b in overlaps(done) if inside(b.start)]
            finished += [(key, e.run_id, e.last) for e in done if inside(e.last)]
            if cell.rows_only:
                cell.late += late_ticks([e.start for e in done], cell.begun, cell.released, LATE_LIMIT)
        cell.abandoned = [f"{key} run {run_id} ended {end - cell.begun:+.1f}s after the lock "
                          f"(released {cell.released - cell.begun:.1f}s): {rows[run_id]['error_message']}"
                          for key, run_id, end in finished if rows.get(run_id, {}).get("status") == "Abandoned"]


def test_no_outside_lock_makes_a_skip_job_run_twice(pg_dsn: str, crud: Any, sql: Sql, workdir: str,
                                                    request: pytest.FixtureRequest) -> None:
    tables = schema_tables(pg_dsn)
    assert set(VICTIM_ROWS) <= set(tables), tables
    chosen = re.compile(os.environ.get("MJSCHED_MATRIX_CELLS", ""))     # a subset, to re-run one cell
    cells = [c for c in (Cell(table, lock) for table in tables for lock in (*ROW_LOCKS, *TABLE_LOCKS))
             if chosen.search(c.name)]
    assert cells, f"MJSCHED_MATRIX_CELLS={chosen.pattern!r} matches no cell"
    skip = _skip_jobs(crud, workdir)
    short = create_counter_jobs(crud, workdir, SHORT_JOBS, prefix="short")
    workers = start_workers(pg_dsn, workdir, 2, prefix="engine", cap=10, lease=LEASE, max_poll=0.5, drain=2)
    started = time.monotonic()
    try:
        for cell in cells:
            _run_cell(cell, pg_dsn, sql, workdir, skip, short, workers)
        last = cells[-1].released
        tail = Cell("(after the last cell)", "-", begun=time.time())   # what the last cell left behind
        # Every Skip job runs again after the last release: nothing was left stuck.
        wait_for(lambda: all(any(s.start > last for s in spans(workdir, k)) for k in skip),
                 timeout=max(SKIP_SECONDS.values()) + 2 * LEASE + 5, interval=0.2,
                 message="every Skip job to run after the matrix")
        # The completions of the finished executions land before the engines stop.
        wait_for(lambda: sql.one("""SELECT count(*) FROM mjsched.scheduled_job_run
                                     WHERE status = 'Running' AND id = ANY(%s::uuid[])""",
                                 ([s.run_id for k in skip for s in spans(workdir, k) if s.finished],)) == 0,
                 timeout=2 * LEASE + 5, interval=0.2, message="the finished executions' completions to land")
    finally:
        stop_all(workers)
    cells.append(tail)
    _count(cells, sql, workdir, skip, short)
    lines = [c.line() for c in cells]
    table = "\n".join(["outside-lock matrix (lease %.1fs, held %.1fs, 2 engines, %d Skip + %d per-second jobs)"
                       % (LEASE, HOLD, len(SKIP_SECONDS), SHORT_JOBS), *lines])
    print(table)
    request.node.user_properties.append(("chaos_table", table))
    bad = [c for c in cells if c.overlaps or (c.abandoned and not c.blocks_completions) or (c.rows_only and c.late)]
    report("outside_lock_matrix", cells=len(cells), failing=len(bad), seconds=round(time.monotonic() - started),
           executions=sum(c.executions for c in cells), overlaps=sum(len(c.overlaps) for c in cells),
           abandoned=sum(len(c.abandoned) for c in cells), late=sum(c.late for c in cells))
    assert not bad, "cells breaking exclusion or timeliness:\n" + "\n".join(
        c.line() + "".join(f"\n    overlap: {a} / {b}" for a, b in c.overlaps[:2])
        + "".join(f"\n    abandoned: {text}" for text in c.abandoned[:3]) for c in bad)
